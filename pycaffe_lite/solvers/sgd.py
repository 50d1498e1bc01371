"""Stochastic gradient descent with momentum, and the update steps every solver shares.

One iteration's update (Caffe's ``SGDSolver::ApplyUpdate``)::

    rate = lr_policy(iter)                  (with the optional warm-ups and min_lr)
    disabled_update (Intel Caffe): stop here
    clip_gradients: if ||all diffs||_2 > clip_gradients >= 0, scale every diff down to it
    LARC (NVCaffe, SGD) or LARS (Intel Caffe, SGD): every param's local rate from its norms
        (nvcaffe.larc_rates, intel.lars_rates)
    per learnable param:
        normalize:  diff /= iter_size
        regularize: diff += local_decay * data        (L2)
                    diff += local_decay * sign(data)  (L1)
                    with local_decay = weight_decay * decay_mult
                    (NVCaffe's "WD": L1 in its other solvers; in SGD, see below)
        compute_update_value(rate * lr_mult)          (the rule; SGD below)
    data -= diff

SGD: ``history = momentum * history + local_rate * diff; diff = history`` (NVCaffe's "WD":
``diff = history + local_rate * local_decay * data``, nothing added before). NVCaffe's
``momentum_policy`` and ``weight_decay_policy`` make momentum and weight_decay change with
the iteration, and LARC replaces ``rate * lr_mult`` (:mod:`pycaffe_lite.solvers.nvcaffe`), as
Intel Caffe's LARS does (:mod:`pycaffe_lite.solvers.intel`).

Everything runs in place on float32 arrays of the current mode (NumPy or CuPy): every param's
update and ``data -= diff`` in one compiled call where the host kernels take the arrays (SGD,
Nesterov, Adam), else (SGD) one fused kernel per param (:mod:`pycaffe_lite.ops.solver_update`),
else one vectorised operation at a time; the scratch buffers are allocated once, on first use.
"""

import logging
import math
import types

import numpy as np

from .. import backend
from ..errors import CaffeError
from ..ops import solver_update
from ..registry import SOLVERS
from . import intel, nvcaffe
from .lr_policy import f32, learning_rate
from .solver import Solver, _fmt

log = logging.getLogger("pycaffe_lite")

# The steps a fused kernel replaces (see SGDSolver.fused_rule).
_STEPS = ("normalize", "regularize", "compute_update_value", "local_rate", "fused_args",
          "fused_args_all")


class SGDSolver(Solver):
    """Caffe's SGDSolver (``type: "SGD"``)."""

    type = "SGD"
    state_names = ("history",)

    #: the rule's fused kernel (see :mod:`pycaffe_lite.ops.solver_update`; None: no kernel). A
    #: subclass that overrides one of ``_STEPS`` without declaring its own rule gets None: its
    #: update is its own, so the NumPy steps (with its overrides) run.
    fused_rule = "SGD"

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "fused_rule" not in cls.__dict__ and any(name in cls.__dict__ for name in _STEPS):
            cls.fused_rule = None

    # -- state -------------------------------------------------------------------------------
    def sanity_check(self):
        param = self.param
        if param.weight_decay and param.regularization_type not in ("L2", "L1", "WD"):
            raise CaffeError("%s: unknown regularization_type \"%s\"; use \"L2\", \"L1\" "
                             "or NVCaffe's \"WD\"" % (self.where, param.regularization_type))
        nvcaffe.check(param, self.where, self.type)
        intel.check(param, self.where, self.type)

    def presolve(self):
        xp = backend.xp()
        params = self.net.learnable_params
        self.history = [xp.zeros(p.shape, np.float32)
                        for _ in self.state_names for p in params]
        self._update_buf = [None] * len(params)
        self._temp = [None] * len(params)
        self._state_xp = xp
        self.device_tables = None
        self._tables_decay = None
        self.larc_corr = [0.0] * len(params)  # larc_turbo's running correlations
        self._local_rates = None  # LARC's or LARS's rates of this iteration's update

    def _buffer(self, buffers, i):
        buf = buffers[i]
        if buf is None:
            shape = self.net.learnable_params[i].shape
            buf = buffers[i] = self._state_xp.empty(shape, np.float32)
        return buf

    def _ensure_state_module(self):
        """Keep the state arrays where the current mode computes (after a mode switch)."""
        xp = backend.xp()
        if xp is self._state_xp:
            return
        move = backend.to_host if xp is np else xp.asarray
        self.history = [move(h) for h in self.history]
        self._update_buf = [None] * len(self._update_buf)
        self._temp = [None] * len(self._temp)
        self._state_xp = xp

    @property
    def lr(self):
        """The learning rate of the current iteration (``iter``: the next update's, or the one
        just applied while a display or callback of that iteration runs), as pycaffe's
        ``SGDSolver.lr``; reading it changes no solver state."""
        state = types.SimpleNamespace(current_step=self.current_step)
        return learning_rate(self.param, self.iter, state, self.policy)

    def momentum(self, rate):
        """The momentum of the current iteration (NVCaffe's momentum_policy; ``rate``: the
        iteration's learning rate)."""
        return nvcaffe.momentum(self.param, self.iter, rate)

    def decoupled_decay(self):
        """NVCaffe's ``regularization_type: "WD"`` on its SGD solver: the decay applied to the
        weights beside the update (``w -= history + local_rate * decay * w``), not added to
        the gradient (:meth:`compute_update_value`)."""
        return self.param.regularization_type == "WD" and self.type == "SGD"

    def l1_decay(self):
        """Whether the decay adds ``decay * sign(w)`` to the gradient: ``"L1"``, and ``"WD"``
        in NVCaffe's other solvers, whose kernels take every type but ``"L2"`` as L1."""
        kind = self.param.regularization_type
        return kind == "L1" or (kind == "WD" and self.type != "SGD")

    def weight_decay(self):
        """The weight decay of the current iteration (NVCaffe's weight_decay_policy), before
        each param's decay_mult."""
        return nvcaffe.weight_decay(self.param, self.iter)

    # -- the update ------------------------------------------------------------------------
    def apply_update(self):
        """Turn the accumulated gradients into the update and apply it (``data -= diff``)."""
        self._ensure_state_module()
        param = self.param
        rate = self.get_learning_rate()
        if param.display and self.iter % param.display == 0:
            log.info("Iteration %d, lr = %s", self.iter, _fmt(rate))
        if param.disabled_update:  # Intel Caffe: the rate logged, nothing updated
            return
        self.clip_gradients()
        # the norms before the update, the gradients normalised, not decayed
        if param.larc:
            self._local_rates = nvcaffe.larc_rates(self, rate, self.momentum(rate))
        elif param.local_lr_auto:
            self._local_rates = intel.lars_rates(self, rate)
        try:
            fused = not self.decoupled_decay()  # (the kernels add the decay to the gradient)
            if fused and (self._device_update(rate) or self._one_pass_update(rate)):
                return
            for i in range(len(self.net.learnable_params)):
                if fused and self._fused_update(i, rate):  # one kernel per param, where one
                    continue                               # takes them
                self.normalize(i)
                self.regularize(i)
                self.compute_update_value(i, rate)
            self.net.update()
        finally:
            self._local_rates = None

    # -- the update on the device (ops/gpu/solver_updates.py) ----------------------------------
    def device_update_prepare(self, rate):
        """Where every param's update runs on the device in one launch: its arrays
        ``(datas, diffs, state)``, this iteration's coefficients already copied into
        ``self.device_tables`` (rebuilt when an array moved or ``weight_decay`` changed); None
        elsewhere (host arrays, a rule of its own). The launch itself
        (:meth:`device_update_run`) reads nothing from the host: a CUDA graph can hold it."""
        rule = self.fused_rule
        params = self.net.learnable_params
        n = len(params)
        if rule not in solver_update.DEVICE_RULES or not n:
            return None
        datas = [p.write_data() for p in params]
        diffs = [p.write_diff() for p in params]
        state = [self.history[k * n:(k + 1) * n] for k in range(len(self.state_names))]
        if not solver_update.device_takes(rule, datas, diffs, state):
            return None
        tables = self.device_tables
        decay = self.weight_decay()  # the tables hold every param's decay
        if tables is None or tables.key != solver_update.device_tables_key(datas, diffs, state) \
                or self._tables_decay != decay:
            decays = [f32(decay * d) for d in self.net.params_weight_decay]
            self.device_tables = solver_update.device_tables(rule, datas, diffs, state, decays)
            self._tables_decay = decay
        self.device_update_upload(rate)
        return datas, diffs, state

    def device_update_upload(self, rate):
        """This iteration's coefficients (``norm``, the rule's, every param's rate) into the
        device table of the arrays :meth:`device_update_prepare` last took."""
        rates, coefficients = self.fused_args_all(rate)
        norm = 1 if self.param.iter_size == 1 else f32(1.0 / self.param.iter_size)
        solver_update.device_upload(self.device_tables, norm, coefficients, rates)

    def device_update_run(self, arrays, ok=None):
        """The launch of :meth:`device_update_prepare`'s update (``data -= diff`` included);
        with ``ok`` (a 0-d device boolean) nothing changes where it is False."""
        datas, diffs, state = arrays
        solver_update.device_update_all(self.fused_rule, self.device_tables, datas, diffs,
                                        state, self.l1_decay(), ok)

    def _device_update(self, rate):
        arrays = self.device_update_prepare(rate)
        if arrays is None:
            return False
        self.device_update_run(arrays)
        return True

    # -- the fused update (ops/solver_update.py) ---------------------------------------------
    def fused_args(self, i, rate):
        """``(rate, coefficients)`` of the rule's kernel, computed as the NumPy steps do.
        Param ``i`` counts only through its ``lr_mult`` (see :meth:`fused_args_all`)."""
        return self.local_rate(i, rate), [self.momentum(rate)]

    def fused_args_all(self, rate):
        """``(rates, coefficients)``: every param's kernel rate, and the coefficients (the
        same for all), :meth:`fused_args` computed once per distinct ``lr_mult`` (a net's
        hundreds of params have one or two)."""
        lrs = self.net.params_lr
        if self._local_rates is not None:  # a rate of each param's own
            coefficients = self.fused_args(0, rate)[1] if lrs else []
            return [self.local_rate(i, rate) for i in range(len(lrs))], coefficients
        first = {}
        for i, lr in enumerate(lrs):
            first.setdefault(lr, i)
        args = {lr: self.fused_args(i, rate) for lr, i in first.items()}
        coefficients = args[lrs[0]][1] if lrs else []
        return [args[lr][0] for lr in lrs], coefficients

    def _fused_update(self, i, rate):
        """normalize + regularize + compute_update_value of param ``i`` in one kernel; False
        when no kernel takes its arrays (the NumPy steps run instead)."""
        rule = self.fused_rule
        if rule is None:
            return False
        n = len(self.net.learnable_params)
        state = [self.history[k * n + i] for k in range(len(self.state_names))]
        param = self.param
        blob = self.net.learnable_params[i]
        data, diff = blob.read_data(), blob.write_diff()
        if not solver_update.takes(rule, data, diff, *state):
            return False
        norm = 1 if param.iter_size == 1 else f32(1.0 / param.iter_size)
        decay = f32(self.weight_decay() * self.net.params_weight_decay[i])
        kernel_rate, coefficients = self.fused_args(i, rate)
        solver_update.update(rule, data, diff, state, norm, decay,
                             self.l1_decay(), kernel_rate, coefficients)
        return True

    def _one_pass_update(self, rate):
        """Every param's fused update and ``data -= diff`` in one compiled call (one kernel
        for all the params, where :func:`solver_update.takes_all` says one takes their
        arrays); False where it does not (one kernel per param, or the NumPy steps, run)."""
        params = self.net.learnable_params
        n = len(params)
        if self.fused_rule not in solver_update.ONE_PASS_RULES or not n:
            return False
        state = [self.history[k * n:(k + 1) * n] for k in range(len(self.state_names))]
        datas = [p.write_data() for p in params]
        diffs = [p.write_diff() for p in params]
        if not solver_update.takes_all(self.fused_rule, datas, diffs, state):
            return False
        param = self.param
        norm = 1 if param.iter_size == 1 else f32(1.0 / param.iter_size)
        decay = self.weight_decay()
        decays = [f32(decay * d) for d in self.net.params_weight_decay]
        rates, coefficients = self.fused_args_all(rate)
        solver_update.update_all(self.fused_rule, datas, diffs, state, norm, decays,
                                 self.l1_decay(), rates, coefficients)
        return True

    def clip_gradients(self):
        clip = self.param.clip_gradients
        if clip < 0:
            return
        params = self.net.learnable_params
        sumsq = np.float32(0)
        for p in params:
            sumsq = np.float32(sumsq + np.float32(p.sumsq_diff()))
        l2norm = np.float32(np.sqrt(sumsq))
        if l2norm > np.float32(clip):
            factor = f32(np.float32(clip) / l2norm)
            log.info("Gradient clipping: scaling down gradients (L2 norm %s > %s) by scale "
                     "factor %s", _fmt(l2norm), _fmt(clip), _fmt(factor))
            for p in params:
                p.scale_diff(factor)

    def normalize(self, i):
        iter_size = self.param.iter_size
        if iter_size == 1:
            return
        diff = self.net.learnable_params[i].write_diff()
        diff *= f32(1.0 / iter_size)

    def regularize(self, i):
        local_decay = f32(self.weight_decay() * self.net.params_weight_decay[i])
        if not local_decay or self.decoupled_decay():  # (WD: in compute_update_value)
            return
        blob = self.net.learnable_params[i]
        xp = self._state_xp
        temp = self._buffer(self._temp, i)
        if self.l1_decay():  # else L2 (sanity_check)
            xp.sign(blob.read_data(), out=temp)
            temp *= local_decay
        else:
            xp.multiply(blob.read_data(), local_decay, out=temp)
        diff = blob.write_diff()
        diff += temp

    def local_rate(self, i, rate):
        if self._local_rates is not None:
            return self._local_rates[i]
        return f32(rate * self.net.params_lr[i])

    def compute_update_value(self, i, rate):
        momentum = self.momentum(rate)
        local_rate = self.local_rate(i, rate)
        diff = self.net.learnable_params[i].write_diff()
        history = self.history[i]
        history *= momentum
        diff *= local_rate
        history += diff
        diff[...] = history
        if self.decoupled_decay():  # NVCaffe's SGDWdUpdateAllAndClear
            wd = f32(f32(self.weight_decay() * self.net.params_weight_decay[i]) * local_rate)
            if wd:
                temp = self._buffer(self._temp, i)
                self._state_xp.multiply(self.net.learnable_params[i].read_data(), wd, out=temp)
                diff += temp


SOLVERS.register("SGD", SGDSolver)


def _check_no_momentum(solver, name):
    if solver.param.momentum != 0:
        raise CaffeError("%s: momentum cannot be used with %s (got momentum: %g); remove it"
                         % (solver.where, name, solver.param.momentum))


def adam_correction(beta1, beta2, t):
    """Adam's bias correction sqrt(1 - beta2^t) / (1 - beta1^t), as Caffe computes it."""
    return f32(math.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t))
