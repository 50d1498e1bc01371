"""SoftmaxWithLoss's gather and gradient as CUDA kernels (the softmax itself is CuPy's).

With ``prob`` viewed as ``(outer, C, inner)``, ``index`` the int64 class of each of the
``outer * inner`` positions and ``valid`` their bool mask, the NumPy layer computes

- forward: ``log_p = where(valid, log(max(prob[o, index, i], FLT_MIN)), 0)``, then
  ``loss = -log_p.sum() / normalizer``;
- backward: ``dx = (prob - onehot(index)) * valid * (top_diff / normalizer)``.

:func:`masked_log_prob` produces ``log_p`` (one thread per position) and :func:`backward`
writes ``dx`` (one thread per element; ``scale = top_diff / normalizer`` is read from device
memory, so nothing is copied to the host).
"""

from ._util import RawModuleCache, contiguous, cupy, fits, i32, on_gpu, kernel_dtype, launch

FLT_MIN = 1.1754943508222875e-38

_SOURCE = r"""
extern "C" __global__ void softmax_loss_log_prob(
    const T* prob, const long long* index, const bool* valid, T* log_p, int n, int channels,
    int inner, T floor_value) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int o = idx / inner;
    const int i = idx % inner;
    if (valid[idx]) {
      const T p = prob[(o * channels + (int)index[idx]) * inner + i];
      log_p[idx] = log(max(p, floor_value));
    } else {
      log_p[idx] = 0;
    }
  }
}

extern "C" __global__ void softmax_loss_backward(
    const T* prob, const long long* index, const bool* valid, const T* scale, T* dx, int n,
    int channels, int inner) {
  for (int idx = blockIdx.x * blockDim.x + threadIdx.x; idx < n;
       idx += blockDim.x * gridDim.x) {
    const int i = idx % inner;
    const int c = (idx / inner) % channels;
    const int o = idx / (inner * channels);
    const int pos = o * inner + i;
    T v = prob[idx] - (index[pos] == c ? T(1) : T(0));
    v *= valid[pos] ? T(1) : T(0);
    dx[idx] = v * scale[0];
  }
}
"""

_module = RawModuleCache(_SOURCE, ["softmax_loss_log_prob", "softmax_loss_backward"])


def supported(prob, index, valid):
    return on_gpu(prob, index, valid) and kernel_dtype(prob) is not None and \
        index.dtype.kind == "i" and index.dtype.itemsize == 8 and valid.dtype.kind == "b" \
        and fits(prob.size)


def masked_log_prob(prob, index, valid):
    """``where(valid, log(max(prob[o, index, i], FLT_MIN)), 0)`` of shape ``(outer, inner)``."""
    cp = cupy()
    outer, channels, inner = (int(v) for v in prob.shape)
    prob, index, valid = contiguous(prob), contiguous(index), contiguous(valid)
    log_p = cp.empty((outer, inner), dtype=prob.dtype)
    n = outer * inner
    launch(_module.function("softmax_loss_log_prob", kernel_dtype(prob)), n,
           (prob, index, valid, log_p, i32(n), i32(channels), i32(inner),
            prob.dtype.type(FLT_MIN)))
    return log_p


def backward(prob, index, valid, scale, dx):
    """``dx[...] = (prob - onehot(index)) * valid * scale`` (``scale``: a device scalar)."""
    outer, channels, inner = (int(v) for v in prob.shape)
    prob, index, valid = contiguous(prob), contiguous(index), contiguous(valid)
    scale = contiguous(cupy().asarray(scale, dtype=prob.dtype).reshape(1))
    out = contiguous(dx)
    n = prob.size
    launch(_module.function("softmax_loss_backward", kernel_dtype(prob)), n,
           (prob, index, valid, scale, out, i32(n), i32(channels), i32(inner)))
    if out is not dx:
        dx[...] = out
