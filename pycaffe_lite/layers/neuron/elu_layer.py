"""ELU: the exponential linear unit."""

from ...backend import get_array_module
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer


@register_layer("ELU")
class ELULayer(BottomKeepingNeuronLayer):
    """Exponential linear unit: y = x for x > 0, alpha * (exp(x) - 1) otherwise.

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (a copy of x is kept,
    so the result is right for any alpha, including a negative one).
    Params: ``elu_param { alpha (1) }``.
    Backward (Caffe's form): dx = dy * ((x > 0) + (alpha + y) * (x <= 0)).
    """

    def setup(self, bottom, top):
        self.alpha = float(self.layer_param.elu_param.alpha)

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        y = top[0].write_data()
        y[...] = xp.maximum(x, 0) + self.alpha * (xp.exp(xp.minimum(x, 0)) - 1)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.backward_input(bottom, top)
        xp = get_array_module(x)
        y = top[0].read_data()
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * xp.where(x > 0, 1, self.alpha + y)
