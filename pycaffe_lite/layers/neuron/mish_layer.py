"""Mish: y = x * tanh(softplus(x)) (beyond BVLC Caffe; Darknet's ``activation=mish``)."""

from ...backend import get_array_module
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer


@register_layer("Mish")
class MishLayer(BottomKeepingNeuronLayer):
    """Mish, the activation of YOLOv4 (AlexeyAB's Darknet) and of the community Caffe forks'
    ``Mish`` layer type (which OpenCV's dnn module also reads).

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (a copy of x is kept
    for the backward pass).
    Params: none.

    Forward: ``sp = max(x, 0) + log(1 + exp(-|x|))`` (softplus without overflow),
    ``t = tanh(sp)``, ``y = x * t``. Darknet switches its softplus to ``x`` above 20 and to
    ``exp(x)`` below -20; both differ from the exact softplus by less than float32's
    resolution there, so the outputs agree to rounding.
    Backward: ``dx = dy * (t + x * (1 - t^2) * sigmoid(x))``, with ``sigmoid(x) =
    exp(x - sp)``.
    """

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        t = xp.tanh(xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x))))
        xp.multiply(x, t, out=top[0].write_data())

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = self.backward_input(bottom, top)
        xp = get_array_module(x)
        sp = xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))
        t = xp.tanh(sp)
        sig = xp.exp(x - sp)  # sigmoid(x), accurate for large negative x too
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff() * (t + x * (1 - t * t) * sig)
