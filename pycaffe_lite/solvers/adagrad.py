"""AdaGrad (``type: "AdaGrad"``), as Caffe's AdaGradSolver::

    history += diff^2
    diff = local_rate * diff / (sqrt(history) + delta)

Momentum is refused, as in Caffe.
"""

from ..registry import SOLVERS
from .lr_policy import f32
from .sgd import SGDSolver, _check_no_momentum


class AdaGradSolver(SGDSolver):
    type = "AdaGrad"

    def sanity_check(self):
        super().sanity_check()
        _check_no_momentum(self, "AdaGrad")

    fused_rule = "AdaGrad"

    def fused_args(self, i, rate):
        return self.local_rate(i, rate), [f32(self.param.delta)]

    def compute_update_value(self, i, rate):
        xp = self._state_xp
        delta = f32(self.param.delta)
        local_rate = self.local_rate(i, rate)
        diff = self.net.learnable_params[i].write_diff()
        history = self.history[i]
        update = self._buffer(self._update_buf, i)
        xp.multiply(diff, diff, out=update)
        history += update
        xp.sqrt(history, out=update)
        update += delta
        xp.divide(diff, update, out=update)
        xp.multiply(update, local_rate, out=diff)


SOLVERS.register("AdaGrad", AdaGradSolver)
