"""Adam (``type: "Adam"``), as Caffe's AdamSolver, with beta1 = momentum, beta2 = momentum2,
eps = delta and t = iter + 1::

    m    = beta1 * m + (1 - beta1) * diff
    v    = beta2 * v + (1 - beta2) * diff^2
    diff = local_rate * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(v) + eps)

The state holds every param's m, then every param's v (Caffe's snapshot order).
"""

from ..errors import CaffeError
from ..registry import SOLVERS
from .lr_policy import f32
from .sgd import SGDSolver, adam_correction


class AdamSolver(SGDSolver):
    type = "Adam"
    state_names = ("m", "v")

    fused_rule = "Adam"

    def sanity_check(self):
        super().sanity_check()
        for field in ("momentum", "momentum2"):  # beta1, beta2: the correction divides by 1 - beta
            value = getattr(self.param, field)
            if not 0 <= value < 1:
                raise CaffeError("%s: Adam's %s (beta%s) must lie in [0, 1), got %g"
                                 % (self.where, field, field[-1] if field[-1] == "2" else "1",
                                    value))

    def fused_args(self, i, rate):
        beta1, beta2 = f32(self.param.momentum), f32(self.param.momentum2)
        correction = adam_correction(beta1, beta2, self.iter + 1)
        return f32(self.local_rate(i, rate) * correction), \
            [beta1, f32(1.0 - beta1), beta2, f32(1.0 - beta2), f32(self.param.delta)]

    def compute_update_value(self, i, rate):
        xp = self._state_xp
        beta1 = f32(self.param.momentum)
        beta2 = f32(self.param.momentum2)
        eps = f32(self.param.delta)
        local_rate = self.local_rate(i, rate)
        correction = adam_correction(beta1, beta2, self.iter + 1)
        n = len(self.net.learnable_params)
        diff = self.net.learnable_params[i].write_diff()
        m = self.history[i]
        v = self.history[n + i]
        temp = self._buffer(self._temp, i)
        m *= beta1
        xp.multiply(diff, f32(1.0 - beta1), out=temp)
        m += temp
        xp.multiply(diff, diff, out=temp)
        v *= beta2
        temp *= f32(1.0 - beta2)
        v += temp
        xp.sqrt(v, out=temp)
        temp += eps
        xp.divide(m, temp, out=temp)
        xp.multiply(temp, f32(local_rate * correction), out=diff)


SOLVERS.register("Adam", AdamSolver)
