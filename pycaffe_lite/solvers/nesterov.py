"""Nesterov's accelerated gradient (``type: "Nesterov"``), as Caffe's NesterovSolver::

    history' = momentum * history + local_rate * diff
    diff     = (1 + momentum) * history' - momentum * history
"""

from ..registry import SOLVERS
from .lr_policy import f32
from .sgd import SGDSolver


class NesterovSolver(SGDSolver):
    type = "Nesterov"

    fused_rule = "Nesterov"

    def fused_args(self, i, rate):
        momentum = f32(self.param.momentum)
        return self.local_rate(i, rate), [momentum, f32(1.0 + momentum)]

    def compute_update_value(self, i, rate):
        xp = self._state_xp
        momentum = f32(self.param.momentum)
        local_rate = self.local_rate(i, rate)
        diff = self.net.learnable_params[i].write_diff()
        history = self.history[i]
        previous = self._buffer(self._update_buf, i)
        previous[...] = history
        history *= momentum
        diff *= local_rate
        history += diff
        xp.multiply(history, f32(1.0 + momentum), out=diff)
        previous *= momentum
        diff -= previous


SOLVERS.register("Nesterov", NesterovSolver)
