"""The solver's half of NVCaffe's float16 training: float32 master weights and loss scaling.

A net whose float16 layers run in float16 (:mod:`pycaffe_lite.net_types`, GPU mode) keeps a
float32 master copy of each float16 learnable param. Each update (:func:`apply_update`)::

    master.diff = float32(float16 diff)              (exact)
    every param's diff *= 1 / scale                  (global_grad_scale; float32 params too)
    the solver's own update, on the masters          (clipping, iter_size, weight decay, the
                                                      rule, data -= diff: all in float32)
    float16 data = float16(master.data)

so the history and the rule's arithmetic are the float32 ones, and an update too small for a
float16 weight still accumulates in its master. NVCaffe divides the gradients by the scale
before its update too (with clipping on one GPU it leaves them scaled; here clipping always
sees the true gradients). With ``global_grad_scale_adaptive`` the next iteration's scale is
``global_grad_scale * 4 / m``, ``m`` the largest magnitude of the float16 params' gradients
(unscaled) in this update, as NVCaffe's; here the first iteration already uses
``global_grad_scale`` (NVCaffe starts from 1).

``solver_data_type`` (NVCaffe's type of master weights and history) may be FLOAT (or DOUBLE,
which runs as the net's own type): FLOAT16 masters would defeat their purpose and are refused.
"""

import logging

import numpy as np

from .. import backend, net_types
from ..errors import CaffeError
from ..proto import caffe_pb2
from .debug_info import fmt as _fmt

log = logging.getLogger("pycaffe_lite")


def check(param, where):
    """Refuse a ``solver_data_type`` that cannot hold master weights (a CaffeError naming the
    solver file)."""
    if param.solver_data_type not in (caffe_pb2.FLOAT, caffe_pb2.DOUBLE):
        raise CaffeError("%s: solver_data_type: %s cannot hold the master weights and history "
                         "(use FLOAT: float16 params keep a float32 master copy)"
                         % (where, caffe_pb2.Type.Name(param.solver_data_type)))


def apply_update(solver):
    """``solver.apply_update()``, on float32 master weights where the train net has float16
    params, with the gradients divided by the loss scale first."""
    net = solver.net
    types = net_types.of(net)
    if types is None:
        solver.apply_update()
        return
    scale = types.scale
    with net_types.master_weights(net) as swapped:
        for _, half, master in swapped:
            master.write_diff()[...] = half.read_diff()
        if scale != 1:
            inverse = np.float32(1.0 / scale)
            for blob in net.learnable_params:
                blob.scale_diff(inverse)
        # NVCaffe takes it after the iter_size normalization
        largest = _largest_gradient(swapped) / solver.param.iter_size if types.adaptive \
            else 0.0
        solver.apply_update()
    types.next_scale(largest)
    param = getattr(solver, "param", None)
    if param is not None and param.display and solver.iter % param.display == 0 and \
            (types.adaptive or scale != 1):
        log.info("Iteration %d, global_grad_scale = %s", solver.iter, _fmt(scale))


def _largest_gradient(swapped):
    """The largest magnitude of the float16 params' (unscaled) gradients, read back from the
    device as one value; a param whose gradient is not finite counts as 0 (NVCaffe's rule)."""
    if not swapped:
        return 0.0
    xp = backend.get_array_module(swapped[0][2].read_diff())
    peaks = xp.stack([abs(master.read_diff()).max() for _, _, master in swapped])
    return float(xp.where(xp.isfinite(peaks), peaks, 0).max())
