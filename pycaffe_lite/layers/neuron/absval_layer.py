"""AbsVal: y = |x|."""

from ...backend import get_array_module
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer


@register_layer("AbsVal")
class AbsValLayer(BottomKeepingNeuronLayer):
    """Absolute value, element-wise.

    Bottoms: x (any shape). Tops: y = |x|, same shape.
    Params: none.
    Backward: dx = sign(x) * dy, with sign(0) = 0.

    Caffe refuses in-place use of this layer; here it is allowed and correct (a copy of x is kept
    for the backward pass when top and bottom are the same blob).
    """

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        xp.abs(x, out=top[0].write_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.backward_input(bottom, top)
        xp = get_array_module(x)
        dx = bottom[0].write_diff()
        dx[...] = xp.sign(x) * top[0].read_diff()
