"""Sigmoid: 1 / (1 + exp(-x))."""

from ...backend import get_array_module
from ...layer import NeuronLayer
from ...registry import register_layer


@register_layer("Sigmoid")
class SigmoidLayer(NeuronLayer):
    """Logistic sigmoid, computed as ``0.5 * tanh(0.5 * x) + 0.5`` (no overflow for large |x|).

    Bottoms: x (any shape). Tops: y = sigmoid(x), same shape; may be computed in place.
    Params: none (``sigmoid_param { engine }`` is accepted and ignored).
    Backward reads the top data: dx = dy * y * (1 - y).
    """

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        y = top[0].write_data()
        xp = get_array_module(x)
        xp.multiply(x, 0.5, out=y)
        xp.tanh(y, out=y)
        y *= 0.5
        y += 0.5

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y = top[0].read_data()
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * y * (1 - y)
