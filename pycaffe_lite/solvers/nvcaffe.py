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

The update itself is the fork's GPU kernel's: ``history = momentum * history + local_rate *
(g + decay * w)`` with ``decay`` the policy's weight decay times the param's decay_mult (the
fork's CPU mode adds the fixed ``weight_decay``; NVCaffe trains on GPUs, so its GPU arithmetic
is the one followed here, on the CPU and the GPU alike).
"""

import math
import os
import re

from ..errors import CaffeError
from .lr_policy import f32

MOMENTUM_POLICIES = ("fixed", "poly", "opt")
WEIGHT_DECAY_POLICIES = ("fixed", "poly")


def _line_of(where, field):
    """``where`` with the line of the solver file that sets ``field`` (where it is a file)."""
    if not os.path.isfile(where):
        return where
    pattern = re.compile(r"^\s*%s\s*:" % re.escape(field))
    with open(where, errors="replace") as f:
        for number, line in enumerate(f, 1):
            if pattern.match(line.split("#", 1)[0]):
                return "%s:%d" % (where, number)
    return where


def _refuse(where, field, message):
    raise CaffeError("%s: %s: %s" % (_line_of(where, field), field, message))


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
        if param.max_weight_decay and param.regularization_type not in ("L2", "L1"):
            raise CaffeError("%s: unknown regularization_type \"%s\"; use \"L2\" or \"L1\""
                             % (where, param.regularization_type))


def why_eager(param):
    """Why a training iteration cannot be captured in a CUDA graph under these options ("" where
    it can): a decay that changes each iteration lives in the update's constant tables."""
    if param.weight_decay_policy == "poly":
        return "weight_decay_policy \"poly\" changes the update's decays every iteration"
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

