"""ReLU6: min(max(x, 0), 6), the community forks' layer type (not in BVLC Caffe)."""

from ...registry import register_layer
from .clip_layer import ClipLayer


@register_layer("ReLU6")
class ReLU6Layer(ClipLayer):
    """ReLU clipped at 6: y = min(max(x, 0), 6).

    Not a BVLC Caffe type: it is the ``ReLU6`` layer of community forks (MobileNet ports),
    provided so that their prototxts load. It is a Clip with min 0 and max 6, except that,
    like ReLU, the gradient passes only strictly inside: dx = dy * (0 < x < 6).

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place (a copy of x is
    kept for the backward pass).
    Params: none. A ``relu_param`` is accepted for compatibility, but a non-zero
    ``negative_slope`` is refused (it would not be applied).
    """

    def setup(self, bottom, top):
        slope = float(self.layer_param.relu_param.negative_slope)
        if slope != 0:
            raise self.error(f"ReLU6 has no negative slope; got relu_param.negative_slope "
                             f"{slope:g}, expected 0 (use ReLU followed by Clip for a leaky "
                             "variant)")
        self.set_bounds(0.0, 6.0)

    def passes(self, x):
        return (x > self.min) & (x < self.max)
