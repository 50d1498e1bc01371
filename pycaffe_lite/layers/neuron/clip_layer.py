"""Clip: y = min(max(x, min), max)."""

import math

from ...backend import get_array_module
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer


@register_layer("Clip")
class ClipLayer(BottomKeepingNeuronLayer):
    """Clamp every value to [min, max].

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (a copy of x is kept
    for the backward pass, which Caffe does not do).
    Params: ``clip_param { min max }``, both required (Caffe's schema marks them required: a
    net without them does not load there); min must not exceed max.

    Backward, as Caffe: the gradient passes where min <= x <= max (both ends inclusive) and is
    0 elsewhere: dx = dy * (min <= x <= max).
    """

    def setup(self, bottom, top):
        p = self.layer_param.clip_param
        missing = [name for name in ("min", "max") if not p.HasField(name)]
        if missing:
            raise self.error("clip_param needs both min and max (Caffe requires them), %s not "
                             "given" % " and ".join(missing))
        self.set_bounds(float(p.min), float(p.max), "clip_param.min", "clip_param.max")

    def set_bounds(self, low, high, low_name="min", high_name="max"):
        if math.isnan(low) or math.isnan(high) or low > high:
            raise self.error(f"{low_name} ({low:g}) must not be greater than {high_name} "
                             f"({high:g})")
        self.min = low
        self.max = high

    def passes(self, x):
        """Where the gradient passes through."""
        return (x >= self.min) & (x <= self.max)

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        xp.clip(x, self.min, self.max, out=top[0].write_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.backward_input(bottom, top)
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * self.passes(x)
