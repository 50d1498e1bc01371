"""A training net's fused chains on device arrays: BatchNorm -> Scale -> ReLU and Eltwise SUM
-> ReLU, forward and backward (:mod:`pycaffe_lite.net_train_fuse` calls these in GPU mode).

On CuPy arrays with the kernels on, the CUDA kernels of :mod:`pycaffe_lite.ops.gpu.fused` run
(a few launches per chain, see there): float32 and float64 arrays, and float16 data (NVCaffe's
float16 layers: the Scale's params and diffs float16 too) with float32 per-channel statistics
(BatchNorm's blobs in a float16 net), computed in float. Otherwise the same math runs as
xp-generic array code (a simulated device, ``set_kernels_enabled(False)``, other mixes of
types, arrays too large for 32-bit indices), written as the layers compute it one after the
other, in their types (float16 arithmetic on float16 data; with global statistics the mean
and std in the stored sums' type, as BatchNorm takes them), so its values are theirs. Neither
reads a device value on the host.

BatchNorm arrays are ``(N, C, S)`` views; the per-channel arrays are ``(C,)``. ``gamma`` and
``beta`` (the Scale's blobs) may be None; so may the Scale's diffs where they are not learned.
"""

import numpy as np

from ..backend import get_array_module
from .gpu import _util
from .gpu import channels as _channels
from .gpu import fused as _gpu


class Workspace:
    """A chain's buffers kept across iterations (allocated again only when a shape, element
    type or array module changes): ``get(name, like, shape)`` an array of ``like``'s module and
    element type."""

    def __init__(self):
        self._arrays = {}

    def get(self, name, like, shape, dtype=None):
        xp = get_array_module(like)
        dtype = like.dtype if dtype is None else dtype
        a = self._arrays.get(name)
        if a is None or a.shape != tuple(shape) or a.dtype != dtype or \
                get_array_module(a) is not xp:
            a = self._arrays[name] = xp.empty(shape, dtype=dtype)
        return a


def _same_type(out, *arrays):
    """Whether an operation on ``arrays`` computes in ``out``'s element type (NumPy's and
    CuPy's promotion), so that writing it into ``out`` rounds nothing more."""
    return np.result_type(*(a.dtype for a in arrays)) == out.dtype


def _in_place(ufunc, a, b):
    """``ufunc(a, b)``, written into ``a`` (a temporary of the caller's own) where that is
    the result's type: the same values without another full-size array."""
    if _same_type(a, a, b):
        return ufunc(a, b, out=a)
    return ufunc(a, b)


def _kernels(storage, wide=()):
    """Whether the CUDA kernels take these arrays: ``storage`` (the data, the Scale's params
    and diffs) of one dtype, float16 included, and the per-channel ``wide`` ones in that
    variant's :data:`_util.WIDE_DTYPE` (float32 for float16 data), and that variant of the
    kernels compiled here."""
    arrays = [a for a in list(storage) + list(wide) if a is not None]
    if not _util.on_gpu(*arrays):
        return False
    ctype = _util.storage_and_wide(storage, wide)
    return ctype is not None and _util.fits(*(a.size for a in arrays)) and \
        all(a.flags.c_contiguous for a in arrays) and _gpu.compiles(ctype)


def _partials(work, x):
    outer, c, inner = x.shape
    size = c * _channels.splits_for(outer, c, inner)
    return (work.get("p1", x, (size,), "float64"), work.get("p2", x, (size,), "float64"))


def bn_forward(x, y, xhat, gamma, beta, running, global_stats, eps, fraction, relu, work):
    """BatchNorm (batch statistics, or the stored ones with ``global_stats``), Scale and ReLU
    forward: ``xhat = (x - mean) / std`` and ``y``; ``running`` = (mean_sum, var_sum, weight),
    BatchNorm's blobs, updated with Caffe's moving average in training. ``x`` and ``y`` may be
    one array. Returns ``std`` (a buffer of ``work``)."""
    outer, c, inner = x.shape
    m = outer * inner
    correction = m / (m - 1) if m > 1 else 1
    mean_sum, var_sum, weight = running
    kernels = _kernels((x, y, xhat, gamma, beta), running)
    # the statistics' type: the stored sums' with the kernels (float32 for float16 data) and
    # with global statistics (as BatchNorm computes them from its blobs), else the data's
    stat = mean_sum.dtype if kernels or global_stats else x.dtype
    mean = work.get("mean", x, (c,), stat)
    std = work.get("std", x, (c,), stat)
    if kernels:
        if global_stats:
            _gpu.global_statistics(mean_sum, var_sum, weight, eps, mean, std)
        else:
            p1, p2 = _partials(work, x)
            _gpu.batch_statistics(x, mean, work.get("var", x, (c,), stat), std, mean_sum,
                                  var_sum, weight, eps, fraction, correction, p1, p2)
        _gpu.chain_apply(x, mean, std, gamma, beta, relu, xhat, y)
        return std
    xp = get_array_module(x)
    if global_stats:
        s = weight[:1]
        factor = xp.where(s != 0, 1 / xp.where(s != 0, s, 1), 0).astype(s.dtype)
        mean[...] = mean_sum * factor
        var = var_sum * factor
    else:
        mean[...] = x.mean(axis=(0, 2))
        centred = x - mean[:, None]
        var = _in_place(xp.multiply, centred, centred).mean(axis=(0, 2))
        del centred  # full size: not kept while the rest runs
        weight *= fraction
        weight += 1
        mean_sum *= fraction
        mean_sum += mean
        var_sum *= fraction
        var_sum += correction * var
    std[...] = (var + eps) ** 0.5
    if _same_type(xhat, x, mean, std):  # xhat's own buffer holds the steps
        xp.subtract(x, mean[:, None], out=xhat)
        xhat /= std[:, None]
    else:
        xhat[...] = (x - mean[:, None]) / std[:, None]
    z = xhat
    if gamma is not None:
        z = z * gamma[:, None]
    if beta is not None:
        z = _in_place(xp.add, z, beta[:, None]) if z is not xhat else z + beta[:, None]
    if relu:
        xp.maximum(z, 0, out=y)
    else:
        y[...] = z
    return std


def bn_backward(dy, y, xhat, std, gamma, dgamma, dbeta, dx, dtop, global_stats, relu, work):
    """The chain's backward: ``dx`` BatchNorm's bottom gradient, ``dgamma``/``dbeta`` (when
    given) accumulated, and ``dtop`` (when given: BatchNorm not in place) the top's diff as
    the Scale's (or ReLU's) in-place backward leaves it. ``dy`` may be ``dx``'s array."""
    outer, c, inner = dy.shape
    if _kernels((dy, y, xhat, gamma, dgamma, dbeta, dx, dtop), (std,)):
        p1, p2 = _partials(work, dy)
        _gpu.chain_backward(dy, y, xhat, std, gamma, dgamma, dbeta, dx, dtop, global_stats,
                            relu, work.get("mean_dxh", dy, (c,), std.dtype),
                            work.get("mean_dxh_xhat", dy, (c,), std.dtype), p1, p2)
        return
    dz = dy * (y > 0) if relu else dy
    if dbeta is not None:
        dbeta += dz.sum(axis=(0, 2))
    if dgamma is not None:
        dgamma += (dz * xhat).sum(axis=(0, 2))
    dxh = dz * gamma[:, None] if gamma is not None else dz
    del dz  # a full-size temporary (with the ReLU) that nothing reads any more
    if dtop is not None:
        dtop[...] = dxh
    if global_stats:
        dx[...] = dxh / std[:, None]
        return
    mean_dxh = dxh.mean(axis=(0, 2))[:, None]
    mean_dxh_xhat = (dxh * xhat).mean(axis=(0, 2))[:, None]
    # (dxh - mean_dxh - mean_dxh_xhat * xhat) / std, each step in place on the first
    # difference where the types allow (the same operations, so the same values): two
    # full-size temporaries at a time instead of five
    t = dxh - mean_dxh
    del dxh
    t = _in_place(get_array_module(t).subtract, t, mean_dxh_xhat * xhat)
    if _same_type(dx, t, std):
        get_array_module(t).divide(t, std[:, None], out=dx)
    else:
        dx[...] = t / std[:, None]


def sum_forward(xs, coeffs, y, relu):
    """Eltwise SUM ``y = sum coeffs[i] * xs[i]`` in Caffe's order, then ``max(y, 0)`` with
    ``relu``. ``y`` is none of ``xs``."""
    if len(xs) <= _gpu.MAX_SUM_BOTTOMS and _kernels([y] + list(xs)):
        return _gpu.sum_forward(xs, coeffs, y, relu)
    xp = get_array_module(y)
    if coeffs[0] == 1:
        y[...] = xs[0]
    else:
        xp.multiply(xs[0], coeffs[0], out=y)
    for c, x in zip(coeffs[1:], xs[1:]):
        if c == 1:
            y += x
        else:
            y += c * x
    if relu:
        xp.maximum(y, 0, out=y)


def sum_backward(dy, y, coeffs, dxs, relu):
    """Eltwise SUM's backward (after the in-place ReLU's with ``relu``: ``dy`` then becomes
    ``dy * (y > 0)``, as that ReLU leaves the top's diff): ``dxs[i] = coeffs[i] * dz`` for each
    ``dxs[i]`` not None."""
    if len(dxs) <= _gpu.MAX_SUM_BOTTOMS and _kernels([dy, y] + list(dxs)):
        return _gpu.sum_backward(dy, y, coeffs, dxs, relu)
    if relu:
        get_array_module(dy).multiply(dy, y > 0, out=dy)
    for c, d in zip(coeffs, dxs):
        if d is not None:
            d[...] = dy if c == 1 else c * dy
