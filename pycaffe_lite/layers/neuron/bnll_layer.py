"""BNLL: the binomial normal log likelihood, y = log(1 + exp(x)) (softplus)."""

from ...backend import get_array_module
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer

# Caffe's kBNLL_THRESHOLD: the backward pass clamps x at this value before exp().
BNLL_THRESHOLD = 50.0


@register_layer("BNLL")
class BNLLLayer(BottomKeepingNeuronLayer):
    """Softplus, computed without overflow.

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (a copy of x is kept
    for the backward pass, which Caffe does not do).
    Params: none.

    Forward: y = max(x, 0) + log(1 + exp(-|x|)) (Caffe's x > 0 ? x + log(1 + e^-x) :
    log(1 + e^x)). Backward: with e = exp(min(x, 50)), dx = dy * e / (e + 1).
    """

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        y = top[0].write_data()
        y[...] = xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.backward_input(bottom, top)
        xp = get_array_module(x)
        e = xp.exp(xp.minimum(x, BNLL_THRESHOLD))
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * e / (e + 1)
