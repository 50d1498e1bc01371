"""2-D pooling kernels over ``(N, C, H, W)`` arrays, with Caffe's window rules.

Window ``(ph, pw)`` starts at ``(ph * stride_h - pad_h, pw * stride_w - pad_w)`` and spans the
kernel, clipped to the input. Every kernel here loops over the ``kh * kw`` kernel offsets only:
offset ``(i, j)`` of all windows at once is one strided slice of a (padded) copy of the input.
Selections (MAX, STOCHASTIC) are recorded as the kernel offset ``k = i * kw + j`` (``-1``: none)
in an ``int32`` array shaped like the output; :func:`max_pool_mask` turns them into Caffe's
``h * W + w`` indices.
"""

import numpy as np

from ..backend import get_array_module
from . import cpu as _cpu
from .gpu import cudnn as _cudnn
from .gpu import pooling as _gpu

FLT_MAX = float(np.finfo(np.float32).max)


def _floor(dtype):
    """Caffe's ``-FLT_MAX`` start value in ``dtype`` (float16's lowest finite value there)."""
    return np.dtype(dtype).type(-min(FLT_MAX, float(np.finfo(dtype).max)))


def pooled_size(size, kernel, pad, stride, ceil_mode=True):
    """Caffe's pooled length of one axis: ``ceil`` (or ``floor``) of ``(size + 2*pad -
    kernel) / stride`` plus one, minus one if padding makes the last window start in the
    padding."""
    span = size + 2 * pad - kernel
    pooled = (-(-span // stride) if ceil_mode else span // stride) + 1
    if pad and (pooled - 1) * stride >= size + pad:
        pooled -= 1
    return pooled


def _extent(pooled, kernel, stride):
    return (pooled - 1) * stride + kernel


def _source(x, kernel, pad, stride, pooled, fill):
    """An array holding ``x`` at offset ``pad`` and ``fill`` elsewhere, large enough for every
    window; ``x`` itself when no copy is needed."""
    xp = get_array_module(x)
    n, c, h, w = x.shape
    eh = _extent(pooled[0], kernel[0], stride[0])
    ew = _extent(pooled[1], kernel[1], stride[1])
    if pad == (0, 0) and eh <= h and ew <= w:
        return x
    buf = xp.full((n, c, eh, ew), fill, dtype=x.dtype)
    hh = max(0, min(h, eh - pad[0]))
    ww = max(0, min(w, ew - pad[1]))
    buf[:, :, pad[0]:pad[0] + hh, pad[1]:pad[1] + ww] = x[:, :, :hh, :ww]
    return buf


def _accumulator(bottom_diff, kernel, pad, stride, pooled):
    """A zeroed array covering every window, and the slices of it that are the bottom."""
    xp = get_array_module(bottom_diff)
    n, c, h, w = bottom_diff.shape
    eh = _extent(pooled[0], kernel[0], stride[0])
    ew = _extent(pooled[1], kernel[1], stride[1])
    if pad == (0, 0) and eh <= h and ew <= w:
        bottom_diff[...] = 0
        return bottom_diff, None
    full_h, full_w = max(eh, h + pad[0]), max(ew, w + pad[1])
    acc = xp.zeros((n, c, full_h, full_w), dtype=bottom_diff.dtype)
    return acc, (slice(None), slice(None), slice(pad[0], pad[0] + h), slice(pad[1], pad[1] + w))


def _offsets(kernel, stride, pooled):
    """``(k, slices)`` for every kernel offset, ``k = i * kw + j``, in row-major order."""
    for i in range(kernel[0]):
        rows = slice(i, i + stride[0] * (pooled[0] - 1) + 1, stride[0])
        for j in range(kernel[1]):
            cols = slice(j, j + stride[1] * (pooled[1] - 1) + 1, stride[1])
            yield i * kernel[1] + j, (slice(None), slice(None), rows, cols)


def pool_divisors(height, width, kernel, pad, stride, pooled, xp=np, dtype=np.float32):
    """AVE pooling's divisor per output position, ``(PH, PW)``: the window size clipped to the
    *padded* input (``end = min(start + kernel, size + pad)``), as Caffe divides. Windows
    that lie entirely outside the input (possible only with stride > kernel and no padding)
    get divisor 1, so their output is 0."""
    def axis(n, k, p, s, m):
        start = np.arange(m) * s - p
        empty = np.minimum(start + k, n) <= np.maximum(start, 0)
        return window_extents(m, k, s, p, -p, n + p), empty

    sh, eh = axis(height, kernel[0], pad[0], stride[0], pooled[0])
    sw, ew = axis(width, kernel[1], pad[1], stride[1], pooled[1])
    div = np.outer(sh, sw)
    div[eh[:, None] | ew[None, :]] = 1
    return xp.asarray(div.astype(dtype))


def window_extents(count, kernel, stride, pad, lo, hi):
    """Along one axis, the extent of each of ``count`` pooling windows (window ``o`` starts at
    ``o * stride - pad``) clipped to ``[lo, hi)``: Caffe's AVE divisor with ``[-pad, size +
    pad)``; the importers also clip to the input ``[0, size)`` or to another framework's
    padding to find how its average differs from Caffe's."""
    start = np.arange(count) * stride - pad
    return np.minimum(start + kernel, hi) - np.maximum(start, lo)


def empty_window(sizes, kernel, pad, stride, pooled):
    """The first axis (0: height, 1: width) on which one of Caffe's windows lies entirely
    outside the input (its MAX output is -FLT_MAX, its AVE output 0: with stride > kernel and
    no padding the rounded-up size adds such a window); None where every window overlaps it."""
    for axis, (n, k, p, s, m) in enumerate(zip(sizes, kernel, pad, stride, pooled)):
        start = (m - 1) * s - p
        if m and (start >= n or start + k <= 0):
            return axis
    return None


# ---- MAX ----------------------------------------------------------------------------------
def max_pool_forward(x, kernel, pad, stride, pooled, top, argmax):
    """Caffe's MAX pooling: ``top`` gets each window's maximum (the first one in row-major
    order on ties; ``-FLT_MAX`` for a window with no value above it, NaNs are skipped) and
    ``argmax`` the kernel offset where it was found (``-1`` when none)."""
    if _gpu.supported(x, top, argmax):  # CuPy arrays: the CUDA kernel (ops/gpu)
        return _gpu.max_pool_forward(x, kernel, pad, stride, pooled, top, argmax)
    if _cpu.supported(x, top, argmax):  # NumPy arrays, the C kernels built (ops/cpu)
        return _cpu.max_pool_forward(x, kernel, pad, stride, pooled, top, argmax)
    xp = get_array_module(x)
    src = _source(x, kernel, pad, stride, pooled, -np.inf)
    top[...] = _floor(top.dtype)
    argmax[...] = -1
    values = xp.empty(top.shape, dtype=top.dtype)
    better = xp.empty(top.shape, dtype=bool)
    step = xp.empty(argmax.shape, dtype=argmax.dtype)
    for k, window in _offsets(kernel, stride, pooled):
        values[...] = src[window]  # one contiguous copy, then branch-free updates
        xp.greater(values, top, out=better)
        xp.fmax(top, values, out=top)  # fmax ignores NaN, as Caffe's ``>`` test does
        # argmax = k where better: argmax += (k - argmax) * better
        xp.subtract(argmax.dtype.type(k), argmax, out=step)
        xp.multiply(step, better, out=step)
        argmax += step


def max_pool_mask(argmax, width, kernel, pad, stride, out=None):
    """Caffe's mask top: the flat index ``h * width + w`` into the bottom's plane of each
    window's maximum (``-1`` where none), from the kernel offsets of :func:`max_pool_forward`."""
    xp = get_array_module(argmax)
    ph, pw = argmax.shape[-2:]
    base = ((xp.arange(ph) * stride[0] - pad[0])[:, None] * width
            + (xp.arange(pw) * stride[1] - pad[1])[None, :])
    index = base + (argmax // kernel[1]) * width + argmax % kernel[1]
    index = xp.where(argmax >= 0, index, -1)
    if out is None:
        return index
    out[...] = index
    return out


def tiles_exactly(shape, kernel, pad, stride, pooled):
    """Whether the windows neither overlap nor leave gaps (stride == kernel, no padding,
    the pooled grid covering the input exactly): then each bottom element has one window."""
    return pad == (0, 0) and tuple(stride) == tuple(kernel) and \
        tuple(shape[-2:]) == (pooled[0] * kernel[0], pooled[1] * kernel[1])


def _route(top_diff, choice, kernel, pad, stride, pooled, bottom_diff):
    xp = get_array_module(top_diff)
    picked = xp.empty(choice.shape, dtype=bool)
    if tiles_exactly(bottom_diff.shape, tuple(kernel), tuple(pad), stride, pooled):
        # every bottom element belongs to one window: write, no accumulator, no zeroing
        for k, window in _offsets(kernel, stride, pooled):
            xp.equal(choice, k, out=picked)
            xp.multiply(top_diff, picked, out=bottom_diff[window])
        return
    acc, inner = _accumulator(bottom_diff, kernel, pad, stride, pooled)
    share = xp.empty(top_diff.shape, dtype=top_diff.dtype)
    for k, window in _offsets(kernel, stride, pooled):
        xp.equal(choice, k, out=picked)
        xp.multiply(top_diff, picked, out=share)
        acc[window] += share
    if inner is not None:
        bottom_diff[...] = acc[inner]


def max_pool_backward(top_diff, argmax, kernel, pad, stride, pooled, bottom_diff):
    """Route each top gradient to its window's maximum; ``bottom_diff`` is overwritten."""
    if _gpu.supported(top_diff, argmax, bottom_diff):  # CuPy arrays: the CUDA kernel
        return _gpu.max_pool_backward(top_diff, argmax, kernel, pad, stride, pooled, bottom_diff)
    if _cpu.supported(top_diff, argmax, bottom_diff):  # the C kernels built (ops/cpu)
        return _cpu.max_pool_backward(top_diff, argmax, kernel, pad, stride, pooled,
                                      bottom_diff)
    _route(top_diff, argmax, kernel, pad, stride, pooled, bottom_diff)


def max_pool_forward_values(x, kernel, pad, stride, pooled, top):
    """The values of :func:`max_pool_forward` without recording the choices, separably: the
    maximum over each window's columns for every row, then over its rows (``kh + kw`` passes
    instead of ``kh * kw``), then the ``-FLT_MAX`` floor (Caffe's start value, which also
    stands for windows of only NaN or -inf; ``fmax`` skips NaN as Caffe's ``>`` does). Pair it
    with :func:`max_pool_backward_values`."""
    xp = get_array_module(x)
    src = _source(x, kernel, pad, stride, pooled, -np.inf)
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, pooled
    cols = [src[:, :, :, j:j + sw * (pw - 1) + 1:sw] for j in range(kw)]
    if kw == 1:
        rowmax = cols[0]
    else:
        rowmax = xp.fmax(cols[0], cols[1])
        for v in cols[2:]:
            xp.fmax(rowmax, v, out=rowmax)
    rows = [rowmax[:, :, i:i + sh * (ph - 1) + 1:sh] for i in range(kh)]
    top[...] = rows[0]
    for v in rows[1:]:
        xp.fmax(top, v, out=top)
    xp.fmax(top, _floor(top.dtype), out=top)


def max_pool_backward_values(x, top, top_diff, kernel, pad, stride, pooled, bottom_diff):
    """Route each gradient to the first element (row-major) of its window equal to the
    window's maximum ``top`` from :func:`max_pool_forward_values` — the element Caffe's strict
    ``>`` scan picks; nothing where the maximum is the ``-FLT_MAX`` floor. Overwrites."""
    xp = get_array_module(x)
    src = _source(x, kernel, pad, stride, pooled, -np.inf)
    free = top > _floor(top.dtype)  # windows whose gradient is not yet routed
    hit = xp.empty(top.shape, dtype=bool)
    if tiles_exactly(bottom_diff.shape, tuple(kernel), tuple(pad), stride, pooled):
        for _, window in _offsets(kernel, stride, pooled):
            xp.equal(src[window], top, out=hit)
            hit &= free
            free ^= hit
            xp.multiply(top_diff, hit, out=bottom_diff[window])
        return
    acc, inner = _accumulator(bottom_diff, kernel, pad, stride, pooled)
    share = xp.empty(top_diff.shape, dtype=top_diff.dtype)
    for _, window in _offsets(kernel, stride, pooled):
        xp.equal(src[window], top, out=hit)
        hit &= free
        free ^= hit
        xp.multiply(top_diff, hit, out=share)
        acc[window] += share
    if inner is not None:
        bottom_diff[...] = acc[inner]


# ---- AVE ----------------------------------------------------------------------------------
def ave_pool_forward(x, kernel, pad, stride, pooled, top, divisors):
    """Caffe's AVE pooling: the sum of each window's in-image values over ``divisors``."""
    if _gpu.supported(x, top, divisors):  # CuPy arrays: the CUDA kernel (ops/gpu)
        return _gpu.ave_pool_forward(x, kernel, pad, stride, pooled, top, divisors)
    if _cpu.supported(x, top, divisors):  # NumPy arrays, the C kernels built (ops/cpu)
        return _cpu.ave_pool_forward(x, kernel, pad, stride, pooled, top, divisors)
    src = _source(x, kernel, pad, stride, pooled, 0)
    top[...] = 0
    for _, window in _offsets(kernel, stride, pooled):
        top += src[window]
    top /= divisors


def ave_pool_backward(top_diff, kernel, pad, stride, pooled, divisors, bottom_diff):
    """Spread ``top_diff / divisors`` over each window; ``bottom_diff`` is overwritten."""
    if _gpu.supported(top_diff, divisors, bottom_diff):  # CuPy arrays: the CUDA kernel
        return _gpu.ave_pool_backward(top_diff, kernel, pad, stride, pooled, divisors,
                                      bottom_diff)
    acc, inner = _accumulator(bottom_diff, kernel, pad, stride, pooled)
    share = top_diff / divisors
    for _, window in _offsets(kernel, stride, pooled):
        acc[window] += share
    if inner is not None:
        bottom_diff[...] = acc[inner]


# ---- STOCHASTIC (no padding) --------------------------------------------------------------
def stochastic_pool_forward_train(x, kernel, stride, pooled, uniform, top, choice):
    """Caffe's training-time stochastic pooling: in each window pick the first element (in
    row-major order) whose running sum reaches ``uniform * window sum`` (``uniform`` in
    [0, 1), one per output), i.e. sample with probability proportional to the (non-negative)
    values. ``top`` gets the picked value and ``choice`` its kernel offset (offset 0 if no
    element qualifies, which needs negative values)."""
    xp = get_array_module(x)
    src = _source(x, kernel, (0, 0), stride, pooled, 0)
    running = xp.zeros(top.shape, dtype=x.dtype)
    for _, window in _offsets(kernel, stride, pooled):
        running += src[window]
    threshold = uniform * running
    running[...] = 0
    found = xp.zeros(top.shape, dtype=bool)
    hit = xp.empty(top.shape, dtype=bool)
    values = xp.empty(top.shape, dtype=x.dtype)
    top[...] = 0
    choice[...] = 0
    # Positions beyond the input hold 0, so they never reach the threshold before the
    # in-image element preceding them does: the first hit is always inside the input.
    for k, window in _offsets(kernel, stride, pooled):
        values[...] = src[window]
        running += values
        xp.greater_equal(running, threshold, out=hit)
        hit &= ~found
        found |= hit
        top += values * hit
        choice += choice.dtype.type(k) * hit
    # no hit (possible only with negative sums): offset 0, like an all-zero window
    top += src[_first_window(stride, pooled)] * ~found


def _first_window(stride, pooled):
    return (slice(None), slice(None), slice(0, stride[0] * (pooled[0] - 1) + 1, stride[0]),
            slice(0, stride[1] * (pooled[1] - 1) + 1, stride[1]))


def stochastic_pool_forward_test(x, kernel, stride, pooled, top):
    """Caffe's test-time stochastic pooling: ``sum(v^2) / sum(v)`` per window (0 where the
    sum is not positive)."""
    xp = get_array_module(x)
    src = _source(x, kernel, (0, 0), stride, pooled, 0)
    total = xp.zeros(top.shape, dtype=x.dtype)
    squares = xp.zeros(top.shape, dtype=x.dtype)
    for _, window in _offsets(kernel, stride, pooled):
        v = src[window]
        total += v
        squares += v * v
    positive = total > 0
    top[...] = xp.where(positive, squares / xp.where(positive, total, 1), 0)


def stochastic_pool_backward(top_diff, choice, kernel, stride, pooled, bottom_diff):
    """Route each top gradient to the element sampled in the forward pass (overwrites)."""
    _route(top_diff, choice, kernel, (0, 0), stride, pooled, bottom_diff)


def stochastic_pool_test_backward(x, top, top_diff, kernel, stride, pooled, bottom_diff):
    """Gradient of the test-time formula ``y = sum(v^2) / sum(v)``: ``(2 v - y) / sum(v)``
    (0 where the sum is not positive). Overwrites ``bottom_diff``."""
    xp = get_array_module(x)
    src = _source(x, kernel, (0, 0), stride, pooled, 0)
    total = xp.zeros(top.shape, dtype=x.dtype)
    for _, window in _offsets(kernel, stride, pooled):
        total += src[window]
    positive = total > 0
    share = xp.where(positive, top_diff / xp.where(positive, total, 1), 0)
    acc, inner = _accumulator(bottom_diff, kernel, (0, 0), stride, pooled)
    for _, window in _offsets(kernel, stride, pooled):
        acc[window] += share * (2 * src[window] - top)
    if inner is not None:
        bottom_diff[...] = acc[inner]


# ---- what the Pooling layer calls: the implementation is chosen here ----------------------------
class PoolMemo:
    """What a pooling forward leaves for its backward; the layer keeps it without looking in.

    ``choice``: the kernel offset chosen per output (MAX on the kernels' paths, STOCHASTIC in
    TRAIN); ``values``: a private copy of MAX's output (on the host without the compiled
    kernels the backward finds each window's first maximum again, and an in-place consumer of
    the top must not change that); nothing for cuDNN, which reads the bottom and the top.
    """

    def __init__(self):
        self.choice = None
        self.values = None
        self.shape = None  # the top shape of the last forward that recorded something

    def choice_buffer(self, xp, shape):
        """The int32 choice array for a top of ``shape`` on ``xp`` (kept between calls)."""
        if self.choice is None or self.choice.shape != tuple(shape) or \
                get_array_module(self.choice) is not xp:
            self.choice = xp.empty(shape, dtype=np.int32)
        self.values = None
        self.shape = tuple(shape)
        return self.choice

    def ready(self, shape):
        """Whether a forward for a top of ``shape`` left what the backward needs."""
        return self.shape == tuple(shape)


def max_pool(x, kernel, pad, stride, pooled, top, memo, engine=_cudnn.CAFFE, mask=None):
    """MAX pooling's forward into ``top`` (and Caffe's mask top into ``mask`` when given),
    through cuDNN, the device or C kernels, or NumPy."""
    if mask is None and _cudnn.pool_takes(engine, x, kernel, stride, pooled, top):
        _cudnn.pool_forward(_cudnn.POOL_MAX, x, top, kernel, stride)
        memo.choice, memo.values, memo.shape = None, None, tuple(top.shape)
        return
    xp = get_array_module(x)
    if mask is None and xp is np and not _cpu.supported(x, top):
        # values only (separable, far fewer passes), and a private copy of the output
        max_pool_forward_values(x, kernel, pad, stride, pooled, top)
        if memo.values is None or memo.values.shape != top.shape:
            memo.values = np.empty_like(top)
        memo.values[...] = top
        memo.choice, memo.shape = None, tuple(top.shape)
        return
    max_pool_forward(x, kernel, pad, stride, pooled, top, memo.choice_buffer(xp, top.shape))
    if mask is not None:
        max_pool_mask(memo.choice, x.shape[3], kernel, pad, stride, out=mask)


def max_pool_values(x, kernel, pad, stride, pooled, top, memo, engine=_cudnn.CAFFE):
    """MAX pooling's forward into ``top`` without what a backward needs (the window choices
    or a copy of the output): for a net that never runs this layer's backward. ``memo`` is
    left empty, so a backward after it fails with the layer's "forward first" error."""
    memo.choice, memo.values, memo.shape = None, None, None
    if _cudnn.pool_takes(engine, x, kernel, stride, pooled, top):
        _cudnn.pool_forward(_cudnn.POOL_MAX, x, top, kernel, stride)
    elif _cpu.supported(x, top):
        _cpu.max_pool_forward(x, kernel, pad, stride, pooled, top, None)
    elif get_array_module(x) is np:
        max_pool_forward_values(x, kernel, pad, stride, pooled, top)
    else:  # device arrays: the kernel that records choices (then dropped)
        max_pool_forward(x, kernel, pad, stride, pooled, top,
                         get_array_module(x).empty(top.shape, dtype=np.int32))


def max_pool_grad(x, top, top_diff, kernel, pad, stride, pooled, memo, bottom_diff,
                  engine=_cudnn.CAFFE):
    """MAX pooling's backward (after :func:`max_pool` recorded ``memo``); ``bottom_diff`` is
    overwritten."""
    if memo.values is not None and get_array_module(top_diff) is np:
        max_pool_backward_values(x, memo.values, top_diff, kernel, pad, stride, pooled,
                                 bottom_diff)
    elif memo.choice is not None:
        max_pool_backward(top_diff, memo.choice, kernel, pad, stride, pooled, bottom_diff)
    else:
        _cudnn.pool_backward(_cudnn.POOL_MAX, x, top, top_diff, bottom_diff, kernel, stride)


def ave_pool(x, kernel, pad, stride, pooled, top, divisors, engine=_cudnn.CAFFE):
    """AVE pooling's forward through cuDNN, the device kernels or NumPy."""
    if _cudnn.pool_takes(engine, x, kernel, stride, pooled, top):
        _cudnn.pool_forward(_cudnn.POOL_AVE, x, top, kernel, stride)
    else:
        ave_pool_forward(x, kernel, pad, stride, pooled, top, divisors)


def ave_pool_grad(x, top, top_diff, kernel, pad, stride, pooled, divisors, bottom_diff,
                  engine=_cudnn.CAFFE):
    """AVE pooling's backward; ``bottom_diff`` is overwritten."""
    if _cudnn.pool_takes(engine, x, kernel, stride, pooled, top, top_diff, bottom_diff):
        _cudnn.pool_backward(_cudnn.POOL_AVE, x, top, top_diff, bottom_diff, kernel, stride)
    else:
        ave_pool_backward(top_diff, kernel, pad, stride, pooled, divisors, bottom_diff)
