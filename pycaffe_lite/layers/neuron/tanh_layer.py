"""TanH: the hyperbolic tangent."""

from ...backend import get_array_module
from ...layer import NeuronLayer
from ...registry import register_layer


@register_layer("TanH")
class TanHLayer(NeuronLayer):
    """Hyperbolic tangent, element-wise.

    Bottoms: x (any shape). Tops: y = tanh(x), same shape; may be computed in place.
    Params: none (``tanh_param { engine }`` is accepted and ignored).
    Backward reads the top data: dx = dy * (1 - y^2).
    """

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        xp.tanh(x, out=top[0].write_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y = top[0].read_data()
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * (1 - y * y)
