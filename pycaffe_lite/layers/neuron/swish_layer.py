"""Swish: y = x * sigmoid(beta * x)."""

from ...backend import get_array_module
from ...layer import NeuronLayer
from ...registry import register_layer
from .sigmoid_layer import sigmoid


@register_layer("Swish")
class SwishLayer(NeuronLayer):
    """Swish (SiLU when beta is 1).

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (backward reads the
    top and the sigmoid kept from the forward pass, never the bottom).
    Params: ``swish_param { beta (1) }``.

    s = sigmoid(beta * x): beta * x in the blob's type, then the Sigmoid layer's
    0.5 * tanh(0.5 * .) + 0.5 in double precision, rounded to the blob's type (as Caffe, whose
    Swish runs its Sigmoid on beta * x); y = x * s.
    Backward: dx = dy * (beta * y + s * (1 - beta * y)).
    """

    def setup(self, bottom, top):
        self.beta = float(self.layer_param.swish_param.beta)
        self.sigmoid = None

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        s = sigmoid(xp.multiply(x, x.dtype.type(self.beta)), xp.empty_like(x))
        self.sigmoid = s
        xp.multiply(x, s, out=top[0].write_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        s = self.sigmoid
        if s is None or s.shape != top[0].shape:
            raise self.error(f"backward needs a forward pass on a bottom of shape "
                             f"{bottom[0].shape} first")
        by = self.beta * top[0].read_data()
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * (by + s * (1 - by))
