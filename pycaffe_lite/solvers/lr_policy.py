"""Learning-rate policies, chosen by the solver's ``lr_policy`` string.

Caffe's policies, with ``it`` the iteration (the number of updates done so far)::

    fixed      base_lr
    step       base_lr * gamma ^ floor(it / stepsize)
    exp        base_lr * gamma ^ it
    inv        base_lr * (1 + gamma * it) ^ (-power)
    multistep  base_lr * gamma ^ (number of stepvalue entries reached so far)
    poly       base_lr * (1 - it / max_iter) ^ power
    sigmoid    base_lr / (1 + exp(-gamma * (it - stepsize)))

pycaffe-lite additions (SolverParameter fields from 1000 up):

    steps      Darknet's schedule: base_lr * product of scales[i] over every i with
               it >= steps[i]
    burn_in    a warm-up usable with every policy, as Darknet's: while it < burn_in the rate
               is base_lr * (it / burn_in) ^ burn_in_power (Darknet's default power: 4),
               and the policy takes over from iteration burn_in

NVCaffe's (its SolverParameter fields; see :mod:`pycaffe_lite.solvers.nvcaffe`):

    rampup_interval, rampup_lr   a warm-up: while it < rampup_interval the rate is
               rampup_lr + (base_lr - rampup_lr) * (it / rampup_interval) ^ 2 (the policy
               is not consulted), then the policy's
    min_lr     poly decays to it, (base_lr - min_lr) * (1 - it / max_iter) ^ power + min_lr,
               and every rate (ramp-up included) is at least min_lr

Intel Caffe's (its SolverParameter fields; see :mod:`pycaffe_lite.solvers.intel`):

    warmup_iter, warmup_start_lr   a linear warm-up: while it < warmup_iter the rate is
               (it * base_lr + (warmup_iter - it) * warmup_start_lr) / warmup_iter (the policy
               is not consulted), then the policy's
    multifixed stagelr[k] for the first k with it <= stageiter[k], the last stagelr after the
               last stageiter (base_lr is not read)

Each policy is registered in :data:`pycaffe_lite.registry.LR_POLICIES` as an object with
``check(param, where)`` (raise a :class:`~pycaffe_lite.errors.CaffeError` for settings it cannot
use) and ``rate(param, it, state)``; ``state.current_step`` is the counter Caffe keeps (and
snapshots) for the step-like policies. Rates are rounded to float32 where Caffe computes in
float, so the schedule matches Caffe's to the last bit in the common cases.
"""

import logging
import math
import os
import re

import numpy as np

from ..errors import CaffeError
from ..registry import LR_POLICIES

log = logging.getLogger("pycaffe_lite")


def f32(x):
    """``x`` rounded to float32 (returned as a Python float)."""
    return float(np.float32(x))


def line_of(where, field):
    """``where`` with the line of the solver file that sets ``field`` (where it is a file)."""
    if not os.path.isfile(where):
        return where
    pattern = re.compile(r"^\s*%s\s*:" % re.escape(field))
    with open(where, errors="replace") as f:
        for number, line in enumerate(f, 1):
            if pattern.match(line.split("#", 1)[0]):
                return "%s:%d" % (where, number)
    return where


def refuse(where, field, message):
    """Raise a CaffeError naming the solver file, the line that sets ``field``, and ``field``."""
    raise CaffeError("%s: %s: %s" % (line_of(where, field), field, message))


class LRPolicy:
    """Base of the registered policies."""

    name = None

    def check(self, param, where):
        """Raise a CaffeError when ``param`` cannot drive this policy."""

    def rate(self, param, it, state):
        raise NotImplementedError

    @staticmethod
    def _need(ok, where, message):
        if not ok:
            raise CaffeError("%s: %s" % (where, message))


def register(cls):
    LR_POLICIES.register(cls.name, cls())
    return cls


def _need_gamma(param, where, policy):
    LRPolicy._need(param.gamma >= 0, where, "lr_policy \"%s\" needs gamma >= 0 (got %g)"
                   % (policy, param.gamma))


@register
class Fixed(LRPolicy):
    name = "fixed"

    def rate(self, param, it, state):
        return f32(param.base_lr)


@register
class Step(LRPolicy):
    name = "step"

    def check(self, param, where):
        self._need(param.stepsize > 0, where, "lr_policy \"step\" needs stepsize > 0 (got %d); "
                   "set stepsize: N in the solver" % param.stepsize)
        _need_gamma(param, where, self.name)

    def rate(self, param, it, state):
        state.current_step = it // param.stepsize
        return f32(param.base_lr * float(param.gamma) ** state.current_step)


@register
class Exp(LRPolicy):
    name = "exp"

    def check(self, param, where):
        _need_gamma(param, where, self.name)

    def rate(self, param, it, state):
        return f32(param.base_lr * float(param.gamma) ** it)


@register
class Inv(LRPolicy):
    name = "inv"

    def check(self, param, where):
        _need_gamma(param, where, self.name)

    def rate(self, param, it, state):
        base = f32(1.0 + f32(param.gamma * f32(it)))
        return f32(param.base_lr * f32(base ** -param.power))


@register
class MultiStep(LRPolicy):
    name = "multistep"

    def check(self, param, where):
        _need_gamma(param, where, self.name)
        values = list(param.stepvalue)
        self._need(values == sorted(values), where, "lr_policy \"multistep\" needs increasing "
                   "stepvalue entries (got %s)" % values)

    def rate(self, param, it, state):
        # As Caffe: the step counter moves at most once per call, and is snapshotted.
        if state.current_step < len(param.stepvalue) and \
                it >= param.stepvalue[state.current_step]:
            state.current_step += 1
            log.info("MultiStep Status: Iteration %d, step = %d", it, state.current_step)
        return f32(param.base_lr * float(param.gamma) ** state.current_step)


@register
class Poly(LRPolicy):
    name = "poly"

    def check(self, param, where):
        self._need(param.max_iter > 0, where, "lr_policy \"poly\" needs max_iter > 0 (got %d)"
                   % param.max_iter)
        self._need(param.base_lr >= param.min_lr, where, "lr_policy \"poly\" decays from "
                   "base_lr to min_lr: base_lr (%g) must be >= min_lr (%g)"
                   % (param.base_lr, param.min_lr))

    def rate(self, param, it, state):
        frac = f32(1.0 - f32(f32(it) / f32(param.max_iter)))
        if frac < 0 and not float(param.power).is_integer():
            return f32(param.min_lr)  # past max_iter, a fractional power (Caffe's pow: NaN)
        # NVCaffe: (base_lr - min_lr) * (...)^power + min_lr; min_lr is 0 elsewhere
        return f32(f32(f32(param.base_lr - param.min_lr) * f32(frac ** param.power)) +
                   param.min_lr)


@register
class Sigmoid(LRPolicy):
    name = "sigmoid"

    def check(self, param, where):
        _need_gamma(param, where, self.name)
        self._need(param.stepsize > 0, where, "lr_policy \"sigmoid\" needs stepsize > 0 "
                   "(got %d)" % param.stepsize)

    def rate(self, param, it, state):
        z = f32(-param.gamma * f32(f32(it) - f32(param.stepsize)))
        try:
            e = f32(math.exp(z))
        except OverflowError:
            e = math.inf
        return f32(param.base_lr * f32(1.0 / f32(1.0 + e)))


@register
class Steps(LRPolicy):
    """Darknet's ``steps`` policy (a pycaffe-lite addition)."""

    name = "steps"

    def check(self, param, where):
        self._need(len(param.steps) == len(param.scales), where,
                   "lr_policy \"steps\" needs as many scales as steps (%d steps, %d scales)"
                   % (len(param.steps), len(param.scales)))
        values = list(param.steps)
        self._need(values == sorted(values), where, "lr_policy \"steps\" needs increasing "
                   "steps entries (got %s)" % values)

    def rate(self, param, it, state):
        rate = f32(param.base_lr)
        n = 0
        for step, scale in zip(param.steps, param.scales):
            if it < step:
                break
            rate = f32(rate * scale)
            n += 1
        state.current_step = n
        return rate


@register
class MultiFixed(LRPolicy):
    """Intel Caffe's ``multifixed``: a fixed rate per stage (``stagelr``), each stage up to and
    including its ``stageiter``."""

    name = "multifixed"

    def check(self, param, where):
        lrs, iters = list(param.stagelr), list(param.stageiter)
        if not lrs:
            refuse(where, "stagelr", "lr_policy \"multifixed\" needs at least one stage "
                   "(stagelr: RATE with stageiter: ITER)")
        if len(lrs) != len(iters):
            refuse(where, "stageiter", "lr_policy \"multifixed\" needs one stageiter per "
                   "stagelr (%d stagelr, %d stageiter)" % (len(lrs), len(iters)))
        if iters != sorted(iters):
            refuse(where, "stageiter", "lr_policy \"multifixed\" needs increasing stageiter "
                   "entries (got %s)" % iters)
        if not min(lrs) >= 0:
            refuse(where, "stagelr", "must be >= 0 (got %g): a negative learning rate climbs "
                   "the loss" % min(lrs))

    def rate(self, param, it, state):
        stage = 0
        while stage < len(param.stageiter) - 1 and it > param.stageiter[stage]:
            stage += 1
        state.current_step = stage
        return f32(param.stagelr[stage])


def _check_warmup(param, where):
    """Intel Caffe's warm-up: values that cannot train, and two warm-ups at once."""
    if param.warmup_iter < 0:
        refuse(where, "warmup_iter", "must be >= 0 (got %d)" % param.warmup_iter)
    if param.warmup_iter > 0:
        if not param.warmup_start_lr >= 0:
            refuse(where, "warmup_start_lr", "must be >= 0 (got %g): a negative learning rate "
                   "climbs the loss" % param.warmup_start_lr)
        for other in ("rampup_interval", "burn_in"):
            if getattr(param, other) > 0:
                refuse(where, "warmup_iter", "warmup_iter and %s are two warm-ups of the "
                       "learning rate; keep one" % other)


def get_policy(param, where="solver"):
    """The registered policy for ``param.lr_policy``, checked against ``param``."""
    name = param.lr_policy
    if not name:
        raise CaffeError("%s: lr_policy is not set; choose one of %s (e.g. lr_policy: "
                         "\"fixed\")" % (where, ", ".join('"%s"' % n for n in LR_POLICIES.names())))
    policy = LR_POLICIES.get(name, "lr_policy in %s" % where)
    policy.check(param, where)
    if param.burn_in < 0:
        raise CaffeError("%s: burn_in must be >= 0 (got %d)" % (where, param.burn_in))
    if not param.min_lr >= 0:
        raise CaffeError("%s: min_lr must be >= 0 (got %g)" % (where, param.min_lr))
    if param.rampup_interval < 0:
        raise CaffeError("%s: rampup_interval must be >= 0 (got %d)"
                         % (where, param.rampup_interval))
    if param.rampup_interval > 0 and param.burn_in > 0:
        raise CaffeError("%s: burn_in and rampup_interval are two warm-ups of the learning "
                         "rate; keep one" % where)
    _check_warmup(param, where)
    return policy


def learning_rate(param, it, state, policy=None):
    """The learning rate at iteration ``it``, warm-up and min_lr included."""
    policy = policy or get_policy(param)
    warmup = param.warmup_iter
    if it < warmup:  # Intel Caffe's warm-up: a straight line, the policy is not consulted
        rate = f32(f32(f32(f32(it) * param.base_lr) + f32(f32(warmup - it) *
                                                          param.warmup_start_lr)) / f32(warmup))
    elif it < param.rampup_interval:  # NVCaffe's ramp-up: the policy is not consulted
        alpha = f32(f32(it) / f32(param.rampup_interval))
        rate = f32(param.rampup_lr + f32(f32(f32(param.base_lr - param.rampup_lr) * alpha) *
                                         alpha))
    else:
        rate = policy.rate(param, it, state)  # also keeps the policy's step counter current
    if param.burn_in > 0 and it < param.burn_in:
        rate = f32(param.base_lr * f32(f32(f32(it) / f32(param.burn_in)) **
                                        param.burn_in_power))
    return max(rate, f32(param.min_lr))
