"""AdaDelta (``type: "AdaDelta"``), as Caffe's AdaDeltaSolver, with ``momentum`` the decay::

    grad_history   = momentum * grad_history + (1 - momentum) * diff^2
    diff           = diff * sqrt((update_history + delta) / (grad_history + delta))
    update_history = momentum * update_history + (1 - momentum) * diff^2
    diff           = local_rate * diff

The state holds the gradient histories of every param, then their update histories (Caffe's
snapshot order).
"""

from ..registry import SOLVERS
from .lr_policy import f32
from .sgd import SGDSolver


class AdaDeltaSolver(SGDSolver):
    type = "AdaDelta"
    state_names = ("history", "update_history")

    fused_rule = "AdaDelta"

    def fused_args(self, i, rate):
        momentum = f32(self.param.momentum)
        return self.local_rate(i, rate), [f32(self.param.delta), momentum, f32(1.0 - momentum)]

    def compute_update_value(self, i, rate):
        xp = self._state_xp
        delta = f32(self.param.delta)
        momentum = f32(self.param.momentum)
        keep = f32(1.0 - momentum)
        local_rate = self.local_rate(i, rate)
        n = len(self.net.learnable_params)
        diff = self.net.learnable_params[i].write_diff()
        grad_history = self.history[i]
        update_history = self.history[n + i]
        update = self._buffer(self._update_buf, i)
        temp = self._buffer(self._temp, i)
        xp.multiply(diff, diff, out=update)
        grad_history *= momentum
        update *= keep
        grad_history += update
        xp.add(update_history, delta, out=update)
        xp.add(grad_history, delta, out=temp)
        xp.divide(update, temp, out=update)
        xp.sqrt(update, out=update)
        diff *= update
        xp.multiply(diff, diff, out=update)
        update_history *= momentum
        update *= keep
        update_history += update
        diff *= local_rate


SOLVERS.register("AdaDelta", AdaDeltaSolver)
