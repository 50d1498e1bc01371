"""Silence: consume blobs that nothing else uses, so that they are not reported as outputs."""

from ...layer import Layer
from ...registry import register_layer


@register_layer("Silence")
class SilenceLayer(Layer):
    """Take any number of bottoms and produce nothing.

    Bottoms: one or more blobs of any shape.
    Tops: none.
    Params: none. Backward writes zero gradients to the bottoms that need them.
    """

    min_num_bottom_blobs = 1
    exact_num_top_blobs = 0

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        for b, down in zip(bottom, propagate_down):
            if down:
                b.write_diff()[...] = 0
