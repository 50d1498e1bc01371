"""RMSProp (``type: "RMSProp"``), as Caffe's RMSPropSolver::

    history = rms_decay * history + (1 - rms_decay) * diff^2
    diff = local_rate * diff / (sqrt(history) + delta)

Momentum is refused and 0 <= rms_decay < 1 is required, as in Caffe.
"""

from ..errors import CaffeError
from ..registry import SOLVERS
from .lr_policy import f32
from .sgd import SGDSolver, _check_no_momentum


class RMSPropSolver(SGDSolver):
    type = "RMSProp"

    def sanity_check(self):
        super().sanity_check()
        _check_no_momentum(self, "RMSProp")
        if not 0 <= self.param.rms_decay < 1:
            raise CaffeError("%s: rms_decay should lie between 0 and 1 (0 <= rms_decay < 1, "
                             "got %g)" % (self.where, self.param.rms_decay))

    fused_rule = "RMSProp"

    def fused_args(self, i, rate):
        rms_decay = f32(self.param.rms_decay)
        return self.local_rate(i, rate), [f32(self.param.delta), rms_decay,
                                          f32(1.0 - rms_decay)]

    def compute_update_value(self, i, rate):
        xp = self._state_xp
        delta = f32(self.param.delta)
        rms_decay = f32(self.param.rms_decay)
        local_rate = self.local_rate(i, rate)
        diff = self.net.learnable_params[i].write_diff()
        history = self.history[i]
        update = self._buffer(self._update_buf, i)
        xp.multiply(diff, diff, out=update)
        history *= rms_decay
        update *= f32(1.0 - rms_decay)
        history += update
        xp.sqrt(history, out=update)
        update += delta
        xp.divide(diff, update, out=update)
        xp.multiply(update, local_rate, out=diff)


SOLVERS.register("RMSProp", RMSPropSolver)
