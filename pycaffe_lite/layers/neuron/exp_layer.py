"""Exp: y = base ^ (shift + scale * x)."""

import math

from ...backend import get_array_module
from ...layer import NeuronLayer
from ...registry import register_layer


@register_layer("Exp")
class ExpLayer(NeuronLayer):
    """Exponential with an optional base, input scale and shift.

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (backward reads only
    the top).
    Params: ``exp_param { base (-1: e) scale (1) shift (0) }``; base must be -1 or > 0.

    y = outer * exp(inner * x) with inner = ln(base) * scale and outer = base^shift (e^shift for
    base -1; 1 when shift is 0). Backward: dx = dy * y * inner.
    """

    def setup(self, bottom, top):
        p = self.layer_param.exp_param
        base, scale, shift = float(p.base), float(p.scale), float(p.shift)
        if base != -1 and not base > 0:
            raise self.error(f"exp_param.base must be strictly positive (or -1 for e), got "
                             f"{base:g}")
        log_base = 1.0 if base == -1 else math.log(base)
        if not math.isfinite(log_base):
            raise self.error(f"exp_param.base {base:g} gives log(base) = {log_base:g}; expected "
                             "a finite value")
        self.inner_scale = log_base * scale
        if shift == 0:
            self.outer_scale = 1.0
        else:
            self.outer_scale = math.exp(shift) if base == -1 else base ** shift

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        y = top[0].write_data()
        if self.inner_scale == 1:
            xp.exp(x, out=y)
        else:
            xp.multiply(x, self.inner_scale, out=y)
            xp.exp(y, out=y)
        if self.outer_scale != 1:
            y *= self.outer_scale

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_data() * top[0].read_diff()
        if self.inner_scale != 1:
            dx *= self.inner_scale
