"""Intel Caffe's (intel/caffe) solver options, as its SGDSolver and Solver compute them.

The learning rate (:func:`pycaffe_lite.solvers.lr_policy.learning_rate`), every solver type::

    it < warmup_iter:  (it * base_lr + (warmup_iter - it) * warmup_start_lr) / warmup_iter
                       (a straight line from warmup_start_lr towards base_lr; the lr_policy
                       is not consulted)
    else:              the lr_policy's rate; "multifixed": stagelr[k] for the first k with
                       it <= stageiter[k], the last stagelr after the last stageiter

LARS (``local_lr_auto: true``; SGD only), for each param, from its weights ``w`` and its
gradient ``g`` (after ``iter_size``'s normalisation and gradient clipping, before the weight
decay; :mod:`pycaffe_lite.solvers.local_rates`)::

    r = local_gw_ratio * ||w|| / (||g|| + weight_decay * ||w||)   (1 where a norm is 0;
        weight_decay the solver's, whatever the param's decay_mult)
    local rate = rate * r where the param's lr_mult > 0 (the lr_mult itself is not applied)

The update is Caffe's SGD: ``history = momentum * history + local_rate * (g + decay * w)``.
During the warm-up the fork's unfused SGD update (GPU mode, and CPU builds without
ENABLE_SGD_FUSION) also scales the momentum by the ratio of this iteration's rate to the
previous one's; the fused CPU update of its default builds (gcc >= 4.9, icc), which its
published solvers (``solver_mode: CPU``) train with, keeps ``momentum``. That one is followed
here, in CPU and GPU mode alike.

``disabled_update: true``: forward and backward run and the rate is logged, but no update:
the weights and the history stay (the fork's multinode training sets it on the solver whose
updates another part makes). ``test_offset``: the tests run where ``(it - test_offset)`` is a
multiple of ``test_interval``. ``engine``: every layer of the solver's nets that names no
engine takes it (it replaces the nets' own engine), as the net's engine here: CAFFE and CUDNN
choose the layer's engine, the MKL engines run as DEFAULT.
"""

import logging

from ..proto.fork_fields import INTEL_ENGINES
from . import local_rates
from .lr_policy import f32
from .lr_policy import refuse as _refuse

log = logging.getLogger("pycaffe_lite")


def check(param, where, solver_type):
    """Refuse the Intel Caffe options that ``solver_type`` does not read in the fork, and
    values that cannot train (a CaffeError naming the file, the line and the field)."""
    if param.engine:
        name = param.engine.split(":", 1)[0].strip().upper()
        if name not in INTEL_ENGINES:
            _refuse(where, "engine", "unknown engine \"%s\"; Intel Caffe's are %s"
                    % (param.engine, ", ".join('"%s"' % e for e in INTEL_ENGINES)))
    if not param.local_lr_auto:
        return
    if solver_type != "SGD":
        _refuse(where, "local_lr_auto", "LARS is read by Intel Caffe's SGD solver only, and "
                "this solver is type: \"%s\" (the fork's %s update ignores it); use type: "
                "\"SGD\" or remove local_lr_auto" % (solver_type, solver_type))
    if param.larc:
        _refuse(where, "local_lr_auto", "Intel Caffe's LARS and NVCaffe's larc are two "
                "per-param rates; keep one")
    if not param.local_gw_ratio > 0:
        _refuse(where, "local_gw_ratio", "must be > 0 (got %g): LARS's rate is proportional "
                "to it" % param.local_gw_ratio)


def why_eager(param):
    """Why a training iteration cannot be captured in a CUDA graph under these options ("" where
    it can)."""
    if param.local_lr_auto:
        return "LARS (local_lr_auto) computes each param's rate from its norms on the host"
    if param.disabled_update:
        return "disabled_update skips the update"
    return ""


def lars_rates(solver, rate):
    """Every param's rate under LARS for this iteration (``rate``: the learning rate)."""
    param = solver.param
    ratio, decay = f32(param.local_gw_ratio), f32(param.weight_decay)
    rates = []
    for i, _, _, g_norm, w_norm in local_rates.norms(solver):
        local = 1.0
        if w_norm > 0 and g_norm > 0:
            local = f32(f32(ratio * w_norm) / f32(g_norm + f32(decay * w_norm)))
        rates.append(f32(rate * local_rates.instead_of_lr_mult(solver, i, local)))
    return rates


def test_due(param, it):
    """Whether the test interval falls on iteration ``it`` (Intel Caffe's ``test_offset``
    shifts it; 0 as Caffe)."""
    return bool(param.test_interval) and (it - param.test_offset) % param.test_interval == 0


def apply_engine(param, net_param):
    """The solver's ``engine`` into ``net_param`` (the net's engine, which it replaces)."""
    if not param.engine:
        return
    log.info("Solver engine \"%s\" (Intel Caffe's): the layers of net %s that name no engine "
             "take it; CAFFE and CUDNN choose their engine, the MKL engines run as DEFAULT",
             param.engine, net_param.name or "(unnamed)")
    net_param.engine = param.engine
