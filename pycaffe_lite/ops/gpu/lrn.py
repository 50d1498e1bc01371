"""LRN forward and backward as CUDA kernels, for :class:`~pycaffe_lite.layers.vision.lrn_layer.
LRNLayer` on ``(N, C, H, W)`` CuPy arrays.

The NumPy layer computes (its ``_window_sum`` zero-pads and adds the window's terms in order):

- ACROSS_CHANNELS: ``scale = k + alpha / size * sum(x^2 over channels c - pre .. c + pre)``;
- WITHIN_CHANNEL: ``scale = 1 + alpha * sum(x^2 over the size x size window) / size^2``;
- ``y = x * scale^-beta``;
- ``dx = dy * scale^-beta - (2 alpha beta / n) * x * window_sum(dy * y / scale)`` with
  ``n = size`` (across) or ``size^2`` (within).

The kernels compute the same expressions, one thread per element, looping over its window
(rows then columns for WITHIN_CHANNEL: the same terms as NumPy's separable sums, so results
agree to rounding).
"""

from ._util import RawModuleCache, contiguous, cupy, fits, i32, on_gpu, kernel_dtype, launch

_SOURCE = r"""
__device__ __forceinline__ T window_sum(const T* a, int c, int h, int w, int channels,
                                        int height, int width, int size, int across) {
  const int pre = (size - 1) / 2;
  const int plane = height * width;
  T acc = 0;
  if (across) {
    const T* p = a + h * width + w;
    for (int i = 0; i < size; ++i) {
      const int cc = c - pre + i;
      if (cc >= 0 && cc < channels) acc += p[cc * plane];
    }
  } else {
    const T* p = a + c * plane;
    for (int i = 0; i < size; ++i) {
      const int hh = h - pre + i;
      if (hh < 0 || hh >= height) continue;
      for (int j = 0; j < size; ++j) {
        const int ww = w - pre + j;
        if (ww >= 0 && ww < width) acc += p[hh * width + ww];
      }
    }
  }
  return acc;
}

// squares[i] = x[i]^2 (the window sums read it)
extern "C" __global__ void lrn_square(const T* x, T* squares, int n) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    squares[idx] = x[idx] * x[idx];
  }
}

// scale = window_sum(x^2) / divisor * coeff + offset;  y = x * scale^(-beta)
extern "C" __global__ void lrn_forward(
    const T* x, const T* squares, T* scale, T* y, int n, int channels, int height, int width,
    int size, int across, T divisor, T coeff, T offset, T neg_beta) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int w = idx % width;
    const int h = (idx / width) % height;
    const int c = (idx / (width * height)) % channels;
    const int image = idx / (width * height * channels);
    const T* sq = squares + image * channels * height * width;
    const T s = window_sum(sq, c, h, w, channels, height, width, size, across) / divisor * coeff +
        offset;
    scale[idx] = s;
    y[idx] = x[idx] * pow(s, neg_beta);
  }
}

// ratio = dy * y / scale
extern "C" __global__ void lrn_ratio(const T* dy, const T* y, const T* scale, T* ratio, int n) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    ratio[idx] = dy[idx] * y[idx] / scale[idx];
  }
}

// dx = dy * scale^(-beta) - factor * x * window_sum(ratio)
extern "C" __global__ void lrn_backward(
    const T* x, const T* dy, const T* scale, const T* ratio, T* dx, int n, int channels,
    int height, int width, int size, int across, T neg_beta, T factor) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int w = idx % width;
    const int h = (idx / width) % height;
    const int c = (idx / (width * height)) % channels;
    const int image = idx / (width * height * channels);
    const T* r = ratio + image * channels * height * width;
    const T accum = window_sum(r, c, h, w, channels, height, width, size, across);
    dx[idx] = dy[idx] * pow(scale[idx], neg_beta) - factor * x[idx] * accum;
  }
}
"""

_module = RawModuleCache(_SOURCE, ["lrn_square", "lrn_forward", "lrn_ratio", "lrn_backward"])


def supported(*arrays):
    return on_gpu(*arrays) and all(a.ndim == 4 for a in arrays) and \
        kernel_dtype(*arrays) is not None and fits(*(a.size for a in arrays))


def lrn_forward(x, y, size, alpha, beta, k, across):
    """Writes ``y`` and returns the ``scale`` array (kept by the layer for backward).
    ``alpha``, ``beta``, ``k`` as the layer holds them (float32 proto values)."""
    cp = cupy()
    x = contiguous(x)
    dt = x.dtype.type
    n, c, h, w = (int(v) for v in x.shape)
    if across:  # NumPy: summed *= alpha / size; summed += k
        divisor, coeff, offset = dt(1), dt(alpha / size), dt(k)
    else:  # NumPy: summed /= size * size; summed *= alpha; summed += 1
        divisor, coeff, offset = dt(size * size), dt(alpha), dt(1)
    squares = cp.empty_like(x)
    scale = cp.empty_like(x)
    out = contiguous(y)
    total = x.size
    ctype = kernel_dtype(x)
    launch(_module.function("lrn_square", ctype), total, (x, squares, i32(total)))
    launch(_module.function("lrn_forward", ctype), total,
           (x, squares, scale, out, i32(total), i32(c), i32(h), i32(w), i32(size),
            i32(1 if across else 0), divisor, coeff, offset, dt(-beta)))
    if out is not y:
        y[...] = out
    return scale


def lrn_backward(x, y, dy, scale, dx, size, alpha, beta, across):
    """Writes ``dx`` (overwritten) from the forward's ``scale``."""
    cp = cupy()
    x, y, dy, scale = (contiguous(a) for a in (x, y, dy, scale))
    dt = x.dtype.type
    n_window = size if across else size * size
    ratio = cp.empty_like(x)
    out = contiguous(dx)
    total = x.size
    _, c, h, w = (int(v) for v in x.shape)
    ctype = kernel_dtype(x)
    launch(_module.function("lrn_ratio", ctype), total, (dy, y, scale, ratio, i32(total)))
    launch(_module.function("lrn_backward", ctype), total,
           (x, dy, scale, ratio, out, i32(total), i32(c), i32(h), i32(w), i32(size),
            i32(1 if across else 0), dt(-beta), dt(2.0 * alpha * beta / n_window)))
    if out is not dx:
        dx[...] = out
