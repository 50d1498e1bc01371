"""Per-param learning rates from the norms of each param's weights and gradient: the part that
NVCaffe's LARC (:mod:`pycaffe_lite.solvers.nvcaffe`) and Intel Caffe's LARS
(:mod:`pycaffe_lite.solvers.intel`) share.

Both forks take the norms at the same point of the update: the gradient after ``iter_size``'s
normalisation and gradient clipping, before the weight decay is added to it; and both put
their rate in place of a param's ``lr_mult`` where that is > 0 (not times it), so a frozen
param stays frozen. The norms are read on the host: in GPU mode those iterations run layer by
layer rather than in a CUDA graph.
"""

import math

import numpy as np

from .. import backend
from .lr_policy import f32


def host(value):
    """A float from a reduction's result (a NumPy scalar, or a 0-d device array)."""
    if isinstance(value, (float, np.generic)):
        return float(value)
    return float(backend.to_host(value))


def norms(solver):
    """For each learnable param of ``solver``'s net, ``(i, diff, scale, g_norm, w_norm)``: its
    accumulated gradient (flattened, not yet normalised), the normalisation ``scale`` (1 /
    iter_size), and in float32 the norm of the normalised gradient and of the weights."""
    scale = 1.0 if solver.param.iter_size == 1 else f32(1.0 / solver.param.iter_size)
    for i, blob in enumerate(solver.net.learnable_params):
        diff = blob.read_diff().ravel()
        g_norm = f32(math.sqrt(host(diff.dot(diff))) * scale)
        w_norm = f32(math.sqrt(blob.sumsq_data()))
        yield i, diff, scale, g_norm, w_norm


def instead_of_lr_mult(solver, i, local):
    """Param ``i``'s multiplier of the learning rate: ``local`` (the fork's rate from the
    norms) where its lr_mult is > 0, else its lr_mult."""
    lr_mult = f32(solver.net.params_lr[i])
    return local if lr_mult > 0 else lr_mult
