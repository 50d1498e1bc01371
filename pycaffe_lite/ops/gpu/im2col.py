"""im2col / col2im as CUDA kernels, for 2-D images (the common case of the conv layers).

Exactly :func:`pycaffe_lite.ops.im2col.im2col` / ``col2im`` (same arguments, same layout):
images ``(B, C, H, W)``, columns ``(C * K, B * P)`` with row ``c * K + i * KW + j`` for kernel
offset ``(i, j)`` and column ``b * P + oh * OW + ow``; a window reads the input at
``(oh * sh - ph + i * dh, ow * sw - pw + j * dw)``, zero outside the image. ``col2im`` is the
adjoint: each image element sums, in kernel-offset order, the columns that read it (the NumPy
version adds the same terms in the same order, so float results agree bit for bit).

One thread per output element: im2col loops over the ``K`` offsets of one (channel, image,
output position) and col2im over the ``K`` offsets that can reach one image element.
"""

from ._util import (RawModuleCache, contiguous, cupy, fits, i32, on_gpu, kernel_dtype, launch,
                    write_back)

_SOURCE = r"""
extern "C" __global__ void im2col_2d(
    const T* x, T* col, int n, int channels, int batch, int height, int width,
    int kh, int kw, int ph, int pw, int sh, int sw, int dh, int dw, int oh_, int ow_) {
  const int npix = oh_ * ow_;
  const int cols = batch * npix;
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int ow = idx % ow_;
    int t = idx / ow_;
    const int oh = t % oh_;
    t /= oh_;
    const int b = t % batch;
    const int c = t / batch;
    const T* img = x + (b * channels + c) * height * width;
    T* out = col + (c * kh * kw) * cols + b * npix + oh * ow_ + ow;
    const int h0 = oh * sh - ph;
    const int w0 = ow * sw - pw;
    for (int i = 0; i < kh; ++i) {
      const int h = h0 + i * dh;
      for (int j = 0; j < kw; ++j) {
        const int w = w0 + j * dw;
        *out = (h >= 0 && h < height && w >= 0 && w < width) ? img[h * width + w] : T(0);
        out += cols;
      }
    }
  }
}

extern "C" __global__ void col2im_2d(
    const T* col, T* x, int n, int channels, int batch, int height, int width,
    int kh, int kw, int ph, int pw, int sh, int sw, int dh, int dw, int oh_, int ow_) {
  const int npix = oh_ * ow_;
  const int cols = batch * npix;
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int w = idx % width;
    int t = idx / width;
    const int h = t % height;
    t /= height;
    const int c = t % channels;
    const int b = t / channels;
    const T* src = col + (c * kh * kw) * cols + b * npix;
    T val = 0;
    for (int i = 0; i < kh; ++i) {
      const int hn = h + ph - i * dh;  // = oh * sh for the windows reading (h, w) at row i
      if (hn < 0) break;
      if (hn % sh != 0) continue;
      const int oh = hn / sh;
      if (oh >= oh_) continue;
      for (int j = 0; j < kw; ++j) {
        const int wn = w + pw - j * dw;
        if (wn < 0) break;
        if (wn % sw != 0) continue;
        const int ow = wn / sw;
        if (ow >= ow_) continue;
        val += src[(i * kw + j) * cols + oh * ow_ + ow];
      }
    }
    x[idx] = val;
  }
}
"""

_module = RawModuleCache(_SOURCE, ["im2col_2d", "col2im_2d"])


def conv_output_shape(input_shape, kernel, pad, stride, dilation):
    """Caffe's output size per axis (as :func:`pycaffe_lite.ops.im2col.conv_output_shape`)."""
    return tuple((i + 2 * p - (d * (k - 1) + 1)) // s + 1
                 for i, k, p, s, d in zip(input_shape, kernel, pad, stride, dilation))


def _params(kernel, pad, stride, dilation):
    return [tuple(int(v) for v in a) for a in (kernel, pad, stride, dilation)]


def supported(image_shape, kernel, *arrays):
    """Whether the kernels handle this call: CuPy arrays of 2-D images, float32 or float64,
    sizes within 32-bit indexing. (Otherwise the xp-generic NumPy code runs on CuPy.)"""
    if len(image_shape) != 4 or len(kernel) != 2 or not on_gpu(*arrays):
        return False
    return kernel_dtype(*arrays) is not None and fits(*(a.size for a in arrays if a is not None))


def im2col(x, kernel, pad, stride, dilation, out=None, out_spatial=None, force_nd=False):
    """:func:`pycaffe_lite.ops.im2col.im2col` on a CuPy array (2-D; ``force_nd`` only picks a
    NumPy code path and is ignored). Returns the ``(C * K, B * P)`` columns."""
    kernel, pad, stride, dilation = _params(kernel, pad, stride, dilation)
    nb, nc, height, width = (int(v) for v in x.shape)
    if out_spatial is None:
        out_spatial = conv_output_shape((height, width), kernel, pad, stride, dilation)
    oh, ow = (int(v) for v in out_spatial)
    shape = (nc * kernel[0] * kernel[1], nb * oh * ow)
    cp = cupy()
    if out is None:
        out = cp.empty(shape, dtype=x.dtype)
    else:
        if out.size != shape[0] * shape[1]:
            raise ValueError("im2col output has shape %s, expected %s" % (out.shape, shape))
        if not out.flags.c_contiguous:
            raise ValueError("im2col output must be C-contiguous")
        out = out.reshape(shape)
    x = contiguous(x)
    fn = _module.function("im2col_2d", kernel_dtype(x))
    n = nc * nb * oh * ow
    launch(fn, n, (x, out, i32(n), i32(nc), i32(nb), i32(height), i32(width),
                   i32(kernel[0]), i32(kernel[1]), i32(pad[0]), i32(pad[1]), i32(stride[0]),
                   i32(stride[1]), i32(dilation[0]), i32(dilation[1]), i32(oh), i32(ow)))
    return out


def col2im(col, image_shape, kernel, pad, stride, dilation, out=None, out_spatial=None,
           force_nd=False):
    """:func:`pycaffe_lite.ops.im2col.col2im` on a CuPy array (2-D). ``out`` is overwritten
    and returned."""
    kernel, pad, stride, dilation = _params(kernel, pad, stride, dilation)
    nb, nc, height, width = (int(v) for v in image_shape)
    if out_spatial is None:
        out_spatial = conv_output_shape((height, width), kernel, pad, stride, dilation)
    oh, ow = (int(v) for v in out_spatial)
    expected = nc * kernel[0] * kernel[1] * nb * oh * ow
    if col.size != expected:
        raise ValueError("col2im input has shape %s, expected %s"
                         % (col.shape, (nc * kernel[0] * kernel[1], nb * oh * ow)))
    if not col.flags.c_contiguous:
        raise ValueError("col2im input must be C-contiguous")
    cp = cupy()
    if out is None:
        out = cp.empty((nb, nc, height, width), dtype=col.dtype)
    target = contiguous(out)
    fn = _module.function("col2im_2d", kernel_dtype(col))
    n = nb * nc * height * width
    launch(fn, n, (col, target, i32(n), i32(nc), i32(nb), i32(height), i32(width),
                   i32(kernel[0]), i32(kernel[1]), i32(pad[0]), i32(pad[1]), i32(stride[0]),
                   i32(stride[1]), i32(dilation[0]), i32(dilation[1]), i32(oh), i32(ow)))
    return write_back(out, target)
