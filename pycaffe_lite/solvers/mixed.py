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
``global_grad_scale`` (NVCaffe starts from 1). The scale then lives on the device
(:meth:`~pycaffe_lite.net_types.Types.next_scale`): computed there, read by the loss layers'
scaling and the update there, read on the host only for the display.

In GPU mode with CUDA graphs (:mod:`.train_graph`) the same update runs inside the captured
iteration (:func:`device_update_prepare`, :func:`device_update_run`): the same operations
on the same arrays (a fixed scale a constant of the graph, the adaptive one read from and
written into its device array), all of it changing nothing where the iteration's verdict on
the device says no (a failed check, a non-finite loss).

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
    param = getattr(solver, "param", None)
    shown = types.current_scale() if param is not None and param.display and \
        solver.iter % param.display == 0 and (types.adaptive or types.scale != 1) else None
    with net_types.master_weights(net) as swapped:
        for _, half, master in swapped:
            master.write_diff()[...] = half.read_diff()
        if types.adaptive or types.scale != 1:
            inverse = types.inverse_factor()
            for blob in net.learnable_params:
                blob.scale_diff(inverse)
        # NVCaffe takes it after the iter_size normalization
        largest = _largest_gradient([m.read_diff() for _, _, m in swapped],
                                    solver.param.iter_size) if types.adaptive else None
        solver.apply_update()
    types.next_scale(largest)
    if shown is not None:
        log.info("Iteration %d, global_grad_scale = %s", solver.iter, _fmt(shown))


def device_update_prepare(solver, rate):
    """The update of a net with float16 params as device work a CUDA graph can hold:
    ``(arrays, halves)``, ``arrays`` :meth:`SGDSolver.device_update_prepare`'s of the masters
    and the float32 params (taken while the masters hold the float16 params' places),
    ``halves`` ``[(float16 data, float16 diff, master data, master diff)]``; None where the
    update does not run on the device in one launch. The masters are made (or take values
    written since) first."""
    with net_types.master_weights(solver.net) as swapped:
        arrays = solver.device_update_prepare(rate)
        halves = [(half.read_data(), half.read_diff(), master.read_data(), master.read_diff())
                  for _, half, master in swapped]
    return None if arrays is None else (arrays, halves)


def device_update_run(solver, update, ok=None):
    """:func:`apply_update`'s arithmetic on :func:`device_update_prepare`'s arrays, reading
    nothing from the host (a fixed scale); with ``ok`` (a 0-d device boolean) the params,
    the masters and the history stay as they were where it is False."""
    (datas, diffs, state), halves = update
    xp = backend.get_array_module(datas[0])
    types = net_types.of(solver.net)
    for half_data, half_diff, master_data, master_diff in halves:
        # a float16 param the forward wrote (PSPNet's BN running statistics) gives its master
        # the new values first, as master_weights does on entering an eager update (which
        # params moved is not known inside a graph: every master takes its param's values
        # where they are not its own rounded, which leaves the others as they are)
        net_types.take_half(master_data, half_data, ok)
        master_diff[...] = half_diff
    if types.adaptive or types.scale != 1:
        inverse = types.inverse_factor()
        if ok is not None:
            inverse = xp.where(ok, inverse, np.float32(1))
        for diff in diffs:
            diff *= inverse
    largest = _largest_gradient([h[3] for h in halves], solver.param.iter_size) \
        if types.adaptive else None
    solver.device_update_run((datas, diffs, state), ok)
    for half_data, _, master_data, _ in halves:
        if ok is None:
            half_data[...] = master_data
        else:
            xp.copyto(half_data, master_data, casting="same_kind", where=ok)
    types.next_scale(largest, ok)


def _largest_gradient(diffs, iter_size):
    """The largest magnitude of the float16 params' (unscaled) gradients ``diffs`` (their
    masters'), over ``iter_size``: a float64 0-d device array (nothing is read on the host);
    a param whose gradient is not finite counts as 0 (NVCaffe's rule)."""
    if not diffs:
        return backend.xp().zeros((), dtype=np.float64)
    xp = backend.get_array_module(diffs[0])
    peaks = xp.stack([abs(diff).max() for diff in diffs])
    return xp.where(xp.isfinite(peaks), peaks, 0).max().astype(np.float64) / iter_size
