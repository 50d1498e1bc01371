"""Sigmoid: 1 / (1 + exp(-x))."""

import numpy as np

from ...backend import get_array_module
from ...layer import NeuronLayer
from ...registry import register_layer


@register_layer("Sigmoid")
class SigmoidLayer(NeuronLayer):
    """Logistic sigmoid, computed as ``0.5 * tanh(0.5 * x) + 0.5`` (no overflow for large |x|)
    in double precision and rounded to the blob's type, as Caffe's ``sigmoid()`` (its double
    constants promote the float arithmetic): a float32 top is the sigmoid rounded to float32,
    small values included (x = -20 gives 2.06e-9, not the 0 of a float32 tanh).

    Bottoms: x (any shape). Tops: y = sigmoid(x), same shape; may be computed in place.
    Params: none (``sigmoid_param { engine }`` is accepted and ignored).
    Backward reads the top data: dx = dy * y * (1 - y).
    """

    def forward(self, bottom, top):
        sigmoid(bottom[0].read_data(), top[0].write_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y = top[0].read_data()
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * y * (1 - y)


def sigmoid(x, out):
    """``out[...] = 0.5 * tanh(0.5 * x) + 0.5``, computed in float64 whatever x's type (a
    float64 temporary where x is float32 or float16); ``out`` may be ``x``. Returns ``out``."""
    xp = get_array_module(x)
    t = x.astype(np.float64) if x.dtype != np.float64 else xp.multiply(x, 1.0, out=out)
    t *= 0.5
    xp.tanh(t, out=t)
    t *= 0.5
    t += 0.5
    if t is not out:
        out[...] = t
    return out
