"""Power: y = (shift + scale * x) ^ power."""

import numpy as np

from ...backend import get_array_module
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer


@register_layer("Power")
class PowerLayer(BottomKeepingNeuronLayer):
    """Power of an affine function of the input.

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (a copy of x is kept
    for the backward pass, which Caffe does not do).
    Params: ``power_param { power (1) scale (1) shift (0) }``.

    Forward: when power * scale is 0 the input is ignored and y = 1 (power 0) or shift^power
    (scale 0); otherwise y = (shift + scale * x)^power.
    Backward, with Caffe's special cases: dx = 0 when power * scale is 0; dx = scale * dy when
    power is 1; dx = dy * 2 * scale * (shift + scale * x) when power is 2; otherwise
    dx = dy * power * scale * (shift + scale * x)^(power - 1). (Caffe evaluates the last form as
    power * scale * y / (shift + scale * x), which is the same value except where
    shift + scale * x is 0: Caffe's 0/0 gives NaN there, this gives the limit.)
    """

    def setup(self, bottom, top):
        p = self.layer_param.power_param
        self.power = float(p.power)
        self.scale = float(p.scale)
        self.shift = float(p.shift)
        self.diff_scale = self.power * self.scale

    def constant_value(self):
        """shift^power as C's pow() gives it (NaN for a negative shift and a fractional power,
        inf for 0 and a negative power) rather than Python's complex or exception."""
        with np.errstate(all="ignore"):
            return float(np.power(np.float64(self.shift), self.power))

    def _base(self, x):
        """shift + scale * x (a new array)."""
        base = x * self.scale if self.scale != 1 else x.copy()
        if self.shift != 0:
            base += self.shift
        return base

    def forward(self, bottom, top):
        y = top[0].write_data()
        if self.diff_scale == 0:
            y[...] = 1.0 if self.power == 0 else self.constant_value()
            return
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        base = self._base(x)
        if self.power == 1:
            y[...] = base
        else:
            xp.power(base, self.power, out=y)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].write_diff()
        if self.diff_scale == 0:
            dx[...] = 0
            return
        dy = top[0].read_diff()
        if self.power == 1:
            dx[...] = dy * self.diff_scale
            return
        x = self.backward_input(bottom, top)
        xp = get_array_module(x)
        base = self._base(x)
        if self.power == 2:
            dx[...] = dy * (self.diff_scale * base)
        else:
            dx[...] = dy * (self.diff_scale * xp.power(base, self.power - 1))
