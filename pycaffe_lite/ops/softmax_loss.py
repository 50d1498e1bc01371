"""The multinomial logistic loss of softmax probabilities (SoftmaxWithLoss's kernels).

``prob`` is ``(outer, channels, inner)``, ``index`` the true class per ``(outer, inner)``
position and ``valid`` the positions that count (not the ignore label). Each function picks
its implementation from its arrays: the CUDA kernels of :mod:`pycaffe_lite.ops.gpu.softmax_loss`
on CuPy arrays, else NumPy (the same expressions, on any array module).
"""

import numpy as np

from ..backend import get_array_module
from .gpu import softmax_loss as _gpu

FLT_MIN = float(np.finfo(np.float32).tiny)


def loss_sum(prob, index, valid, weight=None):
    """``-sum(log(max(prob[true class], FLT_MIN)))`` over the valid positions, each term
    times ``weight`` (an ``(outer, inner)`` array) when given."""
    if weight is None and _gpu.supported(prob, index, valid):  # CuPy: the CUDA kernel
        return -_gpu.masked_log_prob(prob, index, valid).sum()
    xp = get_array_module(prob)
    picked = xp.take_along_axis(prob, index[:, None, :], axis=1)[:, 0, :]
    log_p = xp.log(xp.maximum(picked, prob.dtype.type(FLT_MIN)))
    if weight is not None:
        log_p = log_p * weight
    return -xp.where(valid, log_p, 0).sum()


def loss_backward(prob, index, valid, scale, dx, weight=None):
    """``dx = (prob - onehot(index)) * valid * scale`` (``dx`` overwritten), times
    ``weight`` per position when given."""
    if weight is None and _gpu.supported(prob, index, valid):  # CuPy: the CUDA kernel
        _gpu.backward(prob, index, valid, scale, dx)
        return
    xp = get_array_module(prob)
    classes = xp.arange(prob.shape[1])[None, :, None]
    onehot = (classes == index[:, None, :]).astype(prob.dtype)
    xp.subtract(prob, onehot, out=dx)
    dx *= valid[:, None, :].astype(prob.dtype)
    if weight is not None:
        dx *= weight[:, None, :].astype(prob.dtype)
    dx *= scale
