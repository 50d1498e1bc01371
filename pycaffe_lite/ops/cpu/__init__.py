"""Compiled host kernels for the CPU hot paths (optional; needs ``numba``).

``pip install 'pycaffe-lite[fast]'`` brings numba; then the host (NumPy) arrays of the hot
paths below go through loops compiled by numba instead of a sequence of NumPy slice
operations, and the results are the same: the same values, summed in the same order, so the
two paths agree bit for bit (tests/test_ops_cpu_kernels.py checks it on every shape family).
Without numba, or with ``PYCAFFE_LITE_CPU_KERNELS=0`` / :func:`set_kernels_enabled`, the
NumPy code runs, as on a machine where numba is not installed.

Why compiled code here: the NumPy forms of these kernels make ``kh * kw`` passes over the
data, each a strided copy of a few dozen elements at a time (LeNet's im2col is 25 copies of
runs of 8 to 24 values per image and channel); a loop that visits every element once is 3
to 10 times faster, and these kernels were about half of a LeNet training step.

- :func:`im2col_batch_last` / :func:`col2im_batch_last`: the convolution column matrix in the
  host layout of :mod:`pycaffe_lite.ops.im2col` (2-D);
- :func:`batch_to_first`: the convolution layers' relayout of ``(C, P, B)`` matrix products
  into ``(B, C, P)`` tops, with the bias added on the way;
- :func:`max_pool_forward` / :func:`max_pool_backward`: MAX pooling with the window choices
  of :mod:`pycaffe_lite.ops.pooling`;
- :func:`accumulate_matmul` (NumPy only, always on): ``c += a @ b`` in cache-sized blocks, for
  the fully connected layers' weight gradients.

Kernels release the GIL and split their work over ``threads()`` threads (by channel or
image), so a 2-core machine runs them on both cores. Each kernel is compiled on first use
(numba caches the machine code next to this file, or in ``NUMBA_CACHE_DIR``), once per dtype.
"""

import os
import threading

import numpy as np

_FLT_MAX = float(np.finfo(np.float32).max)
_enabled = [os.environ.get("PYCAFFE_LITE_CPU_KERNELS", "1") != "0"]
_state = {"kernels": None, "checked": False, "pool": None, "threads": None}
_lock = threading.Lock()


def numba_available():
    """Whether numba can be imported (checked once, without importing it at package import)."""
    if not _state["checked"]:
        import importlib.util
        _state["available"] = importlib.util.find_spec("numba") is not None
        _state["checked"] = True
    return _state["available"]


def set_kernels_enabled(flag):
    """Use the compiled kernels when numba is installed (True, the default) or the NumPy code
    (False). Returns the previous setting."""
    old = _enabled[0]
    _enabled[0] = bool(flag)
    return old


def kernels_enabled():
    """True when the compiled kernels are on and numba is installed."""
    return _enabled[0] and numba_available()


def supported(*arrays):
    """The kernels take these arrays: enabled, NumPy arrays, C-contiguous, and one float
    dtype (float32 or float64) among the float arrays (int32 for the others)."""
    if not kernels_enabled():
        return False
    dtype = None
    for a in arrays:
        if a is None:
            continue
        if type(a) is not np.ndarray or not a.flags.c_contiguous:
            return False
        if a.dtype.kind == "f":
            if a.dtype not in (np.float32, np.float64) or (dtype is not None and a.dtype != dtype):
                return False
            dtype = a.dtype
        elif a.dtype != np.int32:
            return False
    return dtype is not None


def threads():
    """How many threads the kernels use: ``PYCAFFE_LITE_CPU_THREADS``, else
    ``OMP_NUM_THREADS``, else the number of CPUs this process may run on."""
    n = _state["threads"]
    if n is None:
        value = os.environ.get("PYCAFFE_LITE_CPU_THREADS") or os.environ.get("OMP_NUM_THREADS")
        try:
            n = int(value) if value else len(os.sched_getaffinity(0))
        except (ValueError, AttributeError):
            n = os.cpu_count() or 1
        n = _state["threads"] = max(1, n)
    return n


def _kernels():
    k = _state["kernels"]
    if k is None:
        with _lock:
            if _state["kernels"] is None:
                from . import kernels  # imports numba: only when a kernel first runs
                _state["kernels"] = kernels
            k = _state["kernels"]
    return k


def _split(kernel, total, *args, grain=1):
    """Run ``kernel(*args, start, stop)`` over ``[0, total)`` split into contiguous ranges,
    one per thread (the calling thread takes the first). ``grain``: the least work worth a
    thread, in units of ``total``."""
    n = min(threads(), total // max(1, grain))
    if n <= 1:
        kernel(*args, 0, total)
        return
    pool = _state["pool"]
    if pool is None or pool._max_workers < n - 1:
        with _lock:
            pool = _state["pool"]
            if pool is None or pool._max_workers < n - 1:
                from concurrent.futures import ThreadPoolExecutor
                pool = _state["pool"] = ThreadPoolExecutor(
                    n - 1, thread_name_prefix="pycaffe-lite-kernel")
    bounds = [total * i // n for i in range(n + 1)]
    futures = [pool.submit(kernel, *args, bounds[i], bounds[i + 1]) for i in range(1, n)]
    kernel(*args, bounds[0], bounds[1])
    for f in futures:
        f.result()


# ---- convolution ----------------------------------------------------------------------------
def im2col_batch_last(x, kernel, pad, stride, dilation, out_spatial, out):
    """Columns ``out (C * kh * kw, OH * OW * B)`` of images ``x (B, C, H, W)``: element
    ``[(c, i, j), (oy, ox, b)] = x[b, c, oy * sh - ph + i * dh, ox * sw - pw + j * dw]``,
    zero outside the image."""
    k = _kernels()
    nb, nc, h, w = x.shape
    oh, ow = out_spatial
    cols = out.reshape(nc, kernel[0], kernel[1], oh, ow, nb)
    _split(k.im2col_batch_last, nc, x, cols, pad[0], pad[1], stride[0], stride[1],
           dilation[0], dilation[1], grain=_grain(cols[0].size))
    return out


def col2im_batch_last(col, image_shape, kernel, pad, stride, dilation, out_spatial, out):
    """The adjoint of :func:`im2col_batch_last` into ``out (B, C, H, W)`` (overwritten);
    overlapping windows are summed in kernel-offset order, as the NumPy code sums them."""
    k = _kernels()
    nb, nc, h, w = image_shape
    oh, ow = out_spatial
    cols = col.reshape(nc, kernel[0], kernel[1], oh, ow, nb)
    _split(k.col2im_batch_last, nc, cols, out, pad[0], pad[1], stride[0], stride[1],
           dilation[0], dilation[1], grain=_grain(cols[0].size))
    return out


def batch_to_first(dst, src, bias=None):
    """``dst (B, C, P) = src (C, P, B)`` (plus ``bias[c]`` when given)."""
    k = _kernels()
    nc = src.shape[0]
    b = np.zeros(0, src.dtype) if bias is None else bias.reshape(-1)
    _split(k.batch_to_first, nc, dst, src, b, grain=_grain(src[0].size))


# ---- MAX pooling ----------------------------------------------------------------------------
def max_pool_forward(x, kernel, pad, stride, pooled, top, argmax):
    """:func:`pycaffe_lite.ops.pooling.max_pool_forward` (first maximum in row-major order,
    NaN skipped, ``-FLT_MAX`` floor, kernel offset or -1 in ``argmax``)."""
    forward = _kernels().max_pool_kernels(*kernel)[0]
    n, c = x.shape[:2]
    planes = x.reshape(n * c, x.shape[2], x.shape[3])
    _split(forward, n * c, planes, top.reshape(n * c, pooled[0], pooled[1]),
           argmax.reshape(n * c, pooled[0], pooled[1]), top.dtype.type(-_FLT_MAX), pad[0],
           pad[1], stride[0], stride[1], grain=_grain(planes[0].size))


def max_pool_backward(top_diff, argmax, kernel, pad, stride, pooled, bottom_diff):
    """:func:`pycaffe_lite.ops.pooling.max_pool_backward` (overwrites ``bottom_diff``; a
    bottom element picked by several windows sums them in kernel-offset order)."""
    backward = _kernels().max_pool_kernels(*kernel)[1]
    n, c, h, w = bottom_diff.shape
    _split(backward, n * c, top_diff.reshape(n * c, pooled[0], pooled[1]),
           argmax.reshape(n * c, pooled[0], pooled[1]), bottom_diff.reshape(n * c, h, w),
           pad[0], pad[1], stride[0], stride[1], grain=_grain(h * w))


# A thread is worth starting for about this many elements of work (its start and join cost
# some tens of microseconds).
_MIN_ELEMENTS_PER_THREAD = 1 << 15


def _grain(elements_per_unit):
    """Units of work per thread so that each thread moves at least the minimum."""
    return max(1, _MIN_ELEMENTS_PER_THREAD // max(1, int(elements_per_unit)))


# ---- matrix products accumulated in place ---------------------------------------------------
# Rows of ``c`` per block of :func:`accumulate_matmul`: a block's product stays in cache until
# it is added.
_ACCUMULATE_BLOCK_BYTES = 1 << 20
_accumulate_buffers = threading.local()


def accumulate_matmul(c, a, b):
    """``c += a @ b`` for host matrices without a temporary the size of ``c``: the product is
    made a block of rows at a time into a small reused buffer and added while it is still in
    cache. A large fully connected layer's weight gradient (a product of rank ``batch``) is
    memory-bound: this halves its memory traffic and its page faults. Small products, and
    device arrays, take ``c += a @ b``."""
    rows = max(1, _ACCUMULATE_BLOCK_BYTES // max(1, c.shape[1] * c.itemsize))
    if type(c) is not np.ndarray or c.shape[0] <= 2 * rows:
        c += a @ b
        return c
    buf = getattr(_accumulate_buffers, "buf", None)
    if buf is None or buf.dtype != c.dtype or buf.size < rows * c.shape[1]:
        buf = _accumulate_buffers.buf = np.empty(rows * c.shape[1], c.dtype)
    for r in range(0, c.shape[0], rows):
        part = c[r:r + rows]
        product = buf[:part.size].reshape(part.shape)
        np.matmul(a[r:r + rows], b, out=product)
        part += product
    return c
