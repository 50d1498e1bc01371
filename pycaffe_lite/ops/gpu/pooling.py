"""MAX and AVE pooling, forward and backward, as CUDA kernels over ``(N, C, H, W)``.

Exactly the NumPy functions of :mod:`pycaffe_lite.ops.pooling` (same arguments and outputs):

- window ``(ph, pw)`` starts at ``(ph * sh - pad_h, pw * sw - pad_w)``, spans the kernel and is
  clipped to the image;
- MAX forward: ``top`` = the window's maximum, scanning rows then columns and taking a value
  only when it is strictly greater (the first one on ties; NaN never is), starting from
  ``-FLT_MAX``; ``argmax`` = the kernel offset ``i * kw + j`` of that value relative to the
  unclipped window start, ``-1`` when nothing beat ``-FLT_MAX``;
- MAX backward: each bottom element sums the top gradients of the windows whose recorded
  offset is its own (``bottom_diff`` is overwritten);
- AVE forward: the sum of the in-image values (same order as NumPy) divided by ``divisors``
  (``(PH, PW)``, the caller's per-position window sizes);
- AVE backward: each bottom element sums ``top_diff / divisors`` over the windows that cover it.

One thread per output element (forward) or per bottom element (backward: a gather, no atomics).
"""

import numpy as np

from ._util import RawModuleCache, contiguous, fits, i32, on_gpu, kernel_dtype, launch, write_back

FLT_MAX = float(np.finfo(np.float32).max)

_SOURCE = r"""
extern "C" __global__ void max_pool_forward(
    const T* x, T* top, int* argmax, int n, int height, int width, int pooled_h, int pooled_w,
    int kh, int kw, int ph_, int pw_, int sh, int sw, T lowest) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int pw = idx % pooled_w;
    const int ph = (idx / pooled_w) % pooled_h;
    const int plane = idx / (pooled_w * pooled_h);
    const int h0 = ph * sh - ph_;
    const int w0 = pw * sw - pw_;
    const int hs = max(h0, 0), he = min(h0 + kh, height);
    const int ws = max(w0, 0), we = min(w0 + kw, width);
    const T* img = x + plane * height * width;
    T best = lowest;
    int where = -1;
    for (int h = hs; h < he; ++h) {
      for (int w = ws; w < we; ++w) {
        const T v = img[h * width + w];
        if (v > best) {
          best = v;
          where = (h - h0) * kw + (w - w0);
        }
      }
    }
    top[idx] = best;
    argmax[idx] = where;
  }
}

extern "C" __global__ void max_pool_backward(
    const T* top_diff, const int* argmax, T* bottom_diff, int n, int height, int width,
    int pooled_h, int pooled_w, int kh, int kw, int ph_, int pw_, int sh, int sw) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int w = idx % width;
    const int h = (idx / width) % height;
    const int plane = idx / (width * height);
    const int hp = h + ph_, wp = w + pw_;
    const int phs = (hp < kh) ? 0 : (hp - kh) / sh + 1;
    const int phe = min(hp / sh + 1, pooled_h);
    const int pws = (wp < kw) ? 0 : (wp - kw) / sw + 1;
    const int pwe = min(wp / sw + 1, pooled_w);
    const int offset = plane * pooled_h * pooled_w;
    T grad = 0;
    for (int ph = phs; ph < phe; ++ph) {
      for (int pw = pws; pw < pwe; ++pw) {
        const int k = (hp - ph * sh) * kw + (wp - pw * sw);
        const int p = offset + ph * pooled_w + pw;
        if (argmax[p] == k) grad += top_diff[p];
      }
    }
    bottom_diff[idx] = grad;
  }
}

extern "C" __global__ void ave_pool_forward(
    const T* x, const T* divisors, T* top, int n, int height, int width, int pooled_h,
    int pooled_w, int kh, int kw, int ph_, int pw_, int sh, int sw) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int pw = idx % pooled_w;
    const int ph = (idx / pooled_w) % pooled_h;
    const int plane = idx / (pooled_w * pooled_h);
    const int h0 = ph * sh - ph_;
    const int w0 = pw * sw - pw_;
    const int hs = max(h0, 0), he = min(h0 + kh, height);
    const int ws = max(w0, 0), we = min(w0 + kw, width);
    const T* img = x + plane * height * width;
    T sum = 0;
    for (int h = hs; h < he; ++h) {
      for (int w = ws; w < we; ++w) {
        sum += img[h * width + w];
      }
    }
    top[idx] = sum / divisors[ph * pooled_w + pw];
  }
}

extern "C" __global__ void ave_pool_backward(
    const T* top_diff, const T* divisors, T* bottom_diff, int n, int height, int width,
    int pooled_h, int pooled_w, int kh, int kw, int ph_, int pw_, int sh, int sw) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int w = idx % width;
    const int h = (idx / width) % height;
    const int plane = idx / (width * height);
    const int hp = h + ph_, wp = w + pw_;
    const int phs = (hp < kh) ? 0 : (hp - kh) / sh + 1;
    const int phe = min(hp / sh + 1, pooled_h);
    const int pws = (wp < kw) ? 0 : (wp - kw) / sw + 1;
    const int pwe = min(wp / sw + 1, pooled_w);
    const T* diff = top_diff + plane * pooled_h * pooled_w;
    T grad = 0;
    for (int ph = phs; ph < phe; ++ph) {
      for (int pw = pws; pw < pwe; ++pw) {
        const int p = ph * pooled_w + pw;
        grad += diff[p] / divisors[p];
      }
    }
    bottom_diff[idx] = grad;
  }
}
"""

_module = RawModuleCache(_SOURCE, ["max_pool_forward", "max_pool_backward", "ave_pool_forward",
                                   "ave_pool_backward"])


def supported(*arrays):
    """CuPy arrays, float32/float64 data (int32 argmax), sizes within 32-bit indexing."""
    if not on_gpu(*arrays):
        return False
    floats = [a for a in arrays if a is not None and a.dtype.kind == "f"]
    ints = [a for a in arrays if a is not None and a.dtype.kind != "f"]
    if any(a.dtype != np.int32 for a in ints) or kernel_dtype(*floats) is None:
        return False
    return all(a.ndim == 4 for a in arrays if a is not None and a.ndim != 2) and \
        fits(*(a.size for a in arrays if a is not None))


def _geometry(x_shape, kernel, pad, stride, pooled):
    n, c, h, w = (int(v) for v in x_shape)
    return [i32(v) for v in (h, w, pooled[0], pooled[1], kernel[0], kernel[1], pad[0], pad[1],
                             stride[0], stride[1])]


def max_pool_forward(x, kernel, pad, stride, pooled, top, argmax):
    """:func:`pycaffe_lite.ops.pooling.max_pool_forward` on CuPy arrays."""
    x = contiguous(x)
    out, idx = contiguous(top), contiguous(argmax)
    n = out.size
    fn = _module.function("max_pool_forward", kernel_dtype(x))
    launch(fn, n, (x, out, idx, i32(n), *_geometry(x.shape, kernel, pad, stride, pooled),
                   x.dtype.type(-FLT_MAX)))
    write_back(top, out)
    write_back(argmax, idx)


def max_pool_backward(top_diff, argmax, kernel, pad, stride, pooled, bottom_diff):
    """:func:`pycaffe_lite.ops.pooling.max_pool_backward` on CuPy arrays."""
    dy, idx = contiguous(top_diff), contiguous(argmax)
    out = contiguous(bottom_diff)
    n = out.size
    fn = _module.function("max_pool_backward", kernel_dtype(dy))
    launch(fn, n, (dy, idx, out, i32(n),
                   *_geometry(bottom_diff.shape, kernel, pad, stride, pooled)))
    write_back(bottom_diff, out)


def ave_pool_forward(x, kernel, pad, stride, pooled, top, divisors):
    """:func:`pycaffe_lite.ops.pooling.ave_pool_forward` on CuPy arrays."""
    x, div = contiguous(x), contiguous(divisors)
    out = contiguous(top)
    n = out.size
    fn = _module.function("ave_pool_forward", kernel_dtype(x))
    launch(fn, n, (x, div, out, i32(n), *_geometry(x.shape, kernel, pad, stride, pooled)))
    write_back(top, out)


def ave_pool_backward(top_diff, kernel, pad, stride, pooled, divisors, bottom_diff):
    """:func:`pycaffe_lite.ops.pooling.ave_pool_backward` on CuPy arrays."""
    dy, div = contiguous(top_diff), contiguous(divisors)
    out = contiguous(bottom_diff)
    n = out.size
    fn = _module.function("ave_pool_backward", kernel_dtype(dy))
    launch(fn, n, (dy, div, out, i32(n),
                   *_geometry(bottom_diff.shape, kernel, pad, stride, pooled)))
    write_back(bottom_diff, out)
