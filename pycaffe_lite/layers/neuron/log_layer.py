"""Log: y = log_base(shift + scale * x)."""

import math

from ...backend import get_array_module
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer


@register_layer("Log")
class LogLayer(BottomKeepingNeuronLayer):
    """Logarithm with an optional base, input scale and shift.

    Bottoms: x (any shape; shift + scale * x should be > 0). Tops: y, same shape; may be
    computed in place (a copy of x is kept for the backward pass, which Caffe does not do).
    Params: ``log_param { base (-1: e) scale (1) shift (0) }``; base must be -1 or > 0 and
    not 1.

    y = ln(shift + scale * x) / ln(base). Backward: dx = dy * scale / ln(base) /
    (shift + scale * x).
    """

    def setup(self, bottom, top):
        p = self.layer_param.log_param
        base = float(p.base)
        if base != -1 and not base > 0:
            raise self.error(f"log_param.base must be strictly positive (or -1 for e), got "
                             f"{base:g}")
        log_base = 1.0 if base == -1 else math.log(base)
        if not math.isfinite(log_base) or log_base == 0:
            raise self.error(f"log_param.base {base:g} gives log(base) = {log_base:g}; expected "
                             "a finite, non-zero value (base 1 has no logarithm)")
        self.base_scale = 1.0 / log_base
        self.input_scale = float(p.scale)
        self.input_shift = float(p.shift)
        self.backward_num_scale = self.input_scale / log_base

    def _argument(self, x):
        """shift + scale * x (a new array)."""
        arg = x * self.input_scale if self.input_scale != 1 else x.copy()
        if self.input_shift != 0:
            arg += self.input_shift
        return arg

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        y = top[0].write_data()
        if self.input_scale == 1 and self.input_shift == 0:
            xp.log(x, out=y)
        else:
            xp.log(self._argument(x), out=y)
        if self.base_scale != 1:
            y *= self.base_scale

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.backward_input(bottom, top)
        arg = self._argument(x)
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * self.backward_num_scale / arg
