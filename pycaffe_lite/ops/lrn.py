"""Local response normalisation (Caffe's LRN) on ``(N, C, H, W)`` arrays.

``scale = k + alpha / n * sum(x^2 over the window)`` (ACROSS_CHANNELS: ``n = size`` channels;
WITHIN_CHANNEL: ``n = size^2`` positions, with ``k = 1``), ``y = x * scale^-beta``. Each
function picks its implementation from its arrays: the CUDA kernels of
:mod:`pycaffe_lite.ops.gpu.lrn` on CuPy arrays, the compiled channel sums of
:mod:`pycaffe_lite.ops.cpu` on host arrays (ACROSS_CHANNELS), else NumPy.
"""

import numpy as np

from ..backend import get_array_module
from . import cpu as _cpu
from .gpu import lrn as _gpu


def _window_sum(a, size, axis):
    """Sum of ``a`` over a centred window of ``size`` (odd) along ``axis``, zero-padded."""
    xp = get_array_module(a)
    pre = (size - 1) // 2
    n = a.shape[axis]
    padded_shape = list(a.shape)
    padded_shape[axis] = n + size - 1
    padded = xp.zeros(padded_shape, dtype=a.dtype)
    index = [slice(None)] * a.ndim
    index[axis] = slice(pre, pre + n)
    padded[tuple(index)] = a
    index[axis] = slice(0, n)
    out = padded[tuple(index)].copy()
    for i in range(1, size):
        index[axis] = slice(i, i + n)
        out += padded[tuple(index)]
    return out


def _window(a, size, across):
    if across:
        return _window_sum(a, size, 1)
    return _window_sum(_window_sum(a, size, 2), size, 3)


# beta computed through square roots (by both paths: the compiled forward does it in its pass)
_ROOT_BETA = 0.75


def _times_power(x, scale, beta, out):
    """``out = x * scale^-beta``. For ``beta = 0.75`` (Caffe's default, AlexNet's and
    GoogLeNet's) as ``x / (sqrt(scale) * sqrt(sqrt(scale)))``: two correctly rounded square
    roots instead of a general power (about 25x faster here, within 3 ulp of the exact
    value), computed the same way by the compiled forward."""
    xp = get_array_module(x)
    if beta == _ROOT_BETA:
        t = xp.sqrt(scale)
        t *= xp.sqrt(t)
        xp.divide(x, t, out=out)
    else:
        out[...] = x * scale ** x.dtype.type(-beta)
    return out


def lrn_forward(x, y, size, alpha, beta, k, across):
    """``y = x * scale^-beta``; returns ``scale`` (the backward needs it)."""
    if _gpu.supported(x):  # CuPy arrays: the CUDA kernels of ops/gpu/lrn.py
        return _gpu.lrn_forward(x, y, size, alpha, beta, k, across)
    dt = x.dtype.type
    if across and _cpu.supported(x, y):  # the compiled channel sums (ops/cpu)
        summed = np.empty_like(x)
        root = beta == _ROOT_BETA
        _cpu.lrn_scale(x, summed, size, dt(alpha / size), dt(k), top=y if root else None)
        if not root:
            _times_power(x, summed, beta, y)
        return summed
    if across:
        summed = _window(x * x, size, True)
        summed *= dt(alpha / size)
        summed += dt(k)
    else:
        summed = _window(x * x, size, False)
        summed /= dt(size * size)
        summed *= dt(alpha)
        summed += dt(1)
    _times_power(x, summed, beta, y)
    return summed


def lrn_backward(x, y, dy, scale, dx, size, alpha, beta, across):
    """The gradient of :func:`lrn_forward` into ``dx`` (overwritten)."""
    if _gpu.supported(x, y, dy, scale):  # CuPy arrays: the CUDA kernels
        _gpu.lrn_backward(x, y, dy, scale, dx, size, alpha, beta, across)
        return
    dt = x.dtype.type
    n = size if across else size * size
    if across and _cpu.supported(x, y, dy, scale):
        accum = np.empty_like(x)
        _cpu.lrn_accum(dy, y, scale, np.empty_like(x), accum, size)
    else:
        accum = _window(dy * y / scale, size, across)
    _times_power(dy, scale, beta, dx)
    dx -= dt(2.0 * alpha * beta / n) * x * accum
