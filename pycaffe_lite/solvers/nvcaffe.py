"""NVCaffe's (NVIDIA/caffe 0.17) solver options, as its SGDSolver computes them.

The learning rate (:func:`pycaffe_lite.solvers.lr_policy.learning_rate`), every solver type::

    it < rampup_interval:  rampup_lr + (base_lr - rampup_lr) * (it / rampup_interval)^2
    else:                  the lr_policy's rate ("poly": (base_lr - min_lr) *
                           (1 - it / max_iter)^power + min_lr)
    then:                  at least min_lr

The momentum (``momentum_policy``; SGD only, the fork's other solvers read ``momentum``)::

    fixed  momentum
    poly   momentum + (max_momentum - momentum) * (it / max_iter)^momentum_power
    opt    (1 - sqrt(rate) / 2)^2, at most max_momentum where the file sets it

The weight decay (``weight_decay_policy``, every solver type)::

    fixed  weight_decay
    poly   weight_decay + (max_weight_decay - weight_decay) * (it / max_iter)^weight_decay_power

LARC (``larc: true``; SGD only), for each param, from its weights ``w`` and its gradient
``g`` (after ``iter_size``'s normalisation and gradient clipping, before the weight decay)::

    r = (1 - momentum) * larc_eta * ||w|| / ||g||    (1 where a norm is 0)
    larc_turbo:  c = 0.95 * c + 0.05 * (g . h) / (||g|| ||h||)   (h the momentum history,
                 c a running value per param, 0 at the start; the term is 0 where a norm is 0)
                 r -= 0.9 * c
    local rate = r where the param's lr_mult > 0 (the lr_mult itself is not applied), else
                 its lr_mult; then larc_policy "scale": rate * local rate, "clip":
                 min(rate, local rate)

Decoupled weight decay (``regularization_type: "WD"``), the fork's SGDWdUpdateAllAndClear::

    history = momentum * history + local_rate * g
    w      -= history + (decay * local_rate) * w

(the decay kept out of the history; ``decay`` as below). The fork's other solvers (Adam,
Nesterov, AdaGrad, RMSProp, AdaDelta) pass ``regularization_type == "L2"`` to their kernels,
so "WD" is L1 there (``g + decay * sign(w)``), and runs so here. (The fork's CPU mode stops
at "WD": its Regularize knows L2 and L1 only.)

The update itself is the fork's GPU kernel's: ``history = momentum * history + local_rate *
(g + decay * w)`` with ``decay`` the policy's weight decay times the param's decay_mult (the
fork's CPU mode adds the fixed ``weight_decay`` to ``g`` before LARC's norms; NVCaffe trains on
GPUs, so its GPU arithmetic is the one followed here, on the CPU and the GPU alike). The
running values ``c`` are not in a ``.solverstate`` (the fork's holds only the history): a
solver that restores one starts them from 0, as the fork's does.
"""

import math

from ..errors import CaffeError
from . import local_rates
from .lr_policy import f32
from .lr_policy import refuse as _refuse

MOMENTUM_POLICIES = ("fixed", "poly", "opt")
WEIGHT_DECAY_POLICIES = ("fixed", "poly")
LARC_POLICIES = ("scale", "clip")
#: larc_turbo: the running correlation's decay, and its weight taken off the rate
LARC_BETA = 0.95
LARC_TURBO = 0.9


def check(param, where, solver_type):
    """Refuse the NVCaffe options that ``solver_type`` ("SGD", "Adam", ...) does not read in
    the fork, and values the fork refuses or that cannot train (a CaffeError naming the file,
    the line and the field)."""
    policy = param.momentum_policy
    if policy not in MOMENTUM_POLICIES:
        _refuse(where, "momentum_policy", "unknown policy \"%s\"; NVCaffe's are %s"
                % (policy, ", ".join('"%s"' % p for p in MOMENTUM_POLICIES)))
    if policy != "fixed" and solver_type != "SGD":
        _refuse(where, "momentum_policy", "\"%s\" is read by NVCaffe's SGD solver only, and "
                "this solver is type: \"%s\" (its momentum stays fixed in the fork); use "
                "type: \"SGD\" or remove it" % (policy, solver_type))
    if policy == "poly" and param.max_iter <= 0:
        _refuse(where, "momentum_policy", "\"poly\" needs max_iter > 0 (got %d)"
                % param.max_iter)
    decay_policy = param.weight_decay_policy
    if decay_policy not in WEIGHT_DECAY_POLICIES:
        _refuse(where, "weight_decay_policy", "unknown policy \"%s\"; NVCaffe's are %s"
                % (decay_policy, ", ".join('"%s"' % p for p in WEIGHT_DECAY_POLICIES)))
    if decay_policy == "poly":
        if param.max_iter <= 0:
            _refuse(where, "weight_decay_policy", "\"poly\" needs max_iter > 0 (got %d)"
                    % param.max_iter)
        if param.max_weight_decay and param.regularization_type not in ("L2", "L1", "WD"):
            raise CaffeError("%s: unknown regularization_type \"%s\"; use \"L2\", \"L1\" "
                             "or \"WD\"" % (where, param.regularization_type))
    if not param.larc:
        return
    if solver_type != "SGD":
        _refuse(where, "larc", "LARC is read by NVCaffe's SGD solver only, and this solver "
                "is type: \"%s\" (the fork's %s update ignores it); use type: \"SGD\" or "
                "remove larc" % (solver_type, solver_type))
    if param.larc_policy not in LARC_POLICIES:
        _refuse(where, "larc_policy", "unknown LARC policy \"%s\"; NVCaffe's are \"scale\" "
                "and \"clip\"" % param.larc_policy)
    if not param.larc_eta > 0:
        _refuse(where, "larc_eta", "must be > 0 (got %g): LARC's rate is proportional to it"
                % param.larc_eta)


def why_eager(param):
    """Why a training iteration cannot be captured in a CUDA graph under these options ("" where
    it can): LARC's rates come from norms read on the host, and a decay that changes each
    iteration lives in the update's constant tables."""
    if param.larc:
        return "LARC computes each param's rate from its norms on the host"
    if param.weight_decay_policy == "poly":
        return "weight_decay_policy \"poly\" changes the update's decays every iteration"
    if param.regularization_type == "WD" and param.type == "SGD":
        return "regularization_type \"WD\" (decoupled weight decay) updates param by param"
    return ""


def _fraction(it, param, power):
    """``(it / max_iter)^power`` in float32, as the fork's float arithmetic."""
    return f32(f32(f32(it) / f32(param.max_iter)) ** power)


def momentum(param, it, rate):
    """The momentum at iteration ``it`` (``rate``: that iteration's learning rate)."""
    base = f32(param.momentum)
    policy = param.momentum_policy
    if policy == "poly":
        return f32(base + f32(f32(param.max_momentum - base) *
                              _fraction(it, param, param.momentum_power)))
    if policy == "opt":
        value = f32((1.0 - 0.5 * math.sqrt(rate)) * (1.0 - 0.5 * math.sqrt(rate)))
        if param.HasField("max_momentum"):
            value = min(f32(param.max_momentum), value)
        return value
    return base


def weight_decay(param, it):
    """The weight decay at iteration ``it`` (before each param's decay_mult)."""
    base = f32(param.weight_decay)
    if param.weight_decay_policy == "poly":
        return f32(base + f32(f32(param.max_weight_decay - base) *
                              _fraction(it, param, param.weight_decay_power)))
    return base


def larc_rates(solver, rate, moment):
    """Every param's rate under LARC for this iteration (``rate``: the learning rate,
    ``moment``: the momentum), updating the solver's running correlations (larc_turbo)."""
    param = solver.param
    eta = f32(param.larc_eta)
    rates = []
    for i, diff, scale, g_norm, w_norm in local_rates.norms(solver):
        local = 1.0
        if w_norm > 0 and g_norm > 0:
            local = f32(f32(f32(f32(1.0 - moment) * eta) * w_norm) / g_norm)
        if param.larc_turbo:
            history = solver.history[i].ravel()
            h_norm = f32(math.sqrt(local_rates.host(history.dot(history))))
            corr = 0.0
            if g_norm > 0 and h_norm > 0:
                corr = f32(f32(local_rates.host(diff.dot(history)) * scale) /
                           f32(g_norm * h_norm))
            solver.larc_corr[i] = f32(f32(LARC_BETA * solver.larc_corr[i]) +
                                      f32(f32(1.0 - LARC_BETA) * corr))
            local = f32(local - f32(LARC_TURBO * solver.larc_corr[i]))
        lr_mult = local_rates.instead_of_lr_mult(solver, i, local)
        if param.larc_policy == "clip":
            rates.append(min(f32(rate), lr_mult))
        else:
            rates.append(f32(rate * lr_mult))
    return rates
