"""Parameter: expose a learnable blob as a top."""

from ...errors import ShapeError
from ...layer import Layer
from ...registry import register_layer


@register_layer("Parameter")
class ParameterLayer(Layer):
    """A learnable blob, output as the top (sharing its data and diff).

    Bottoms: none. Tops: the parameter itself, of shape ``parameter_param.shape``; the layers
    that consume it write its gradient straight into the parameter's diff.
    Params: ``parameter_param { shape { dim: ... } }`` (no dims: a scalar).
    Blobs: one, of that shape, initialised to zero (no filler), unless the layer comes with
    its blob (a saved net).
    """

    exact_num_bottom_blobs = 0
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        shape = tuple(self.layer_param.parameter_param.shape.dim)
        try:
            if len(self.blobs) == 0:
                self.blobs.add_blob(*shape)
            top[0].reshape(shape)
        except ShapeError as exc:
            raise self.error("bad parameter_param.shape %s: %s" % (shape, exc)) from None
        if len(self.blobs) != 1:
            raise self.error("expected 1 parameter blob, got %d" % len(self.blobs))
        if self.blobs[0].count != top[0].count:
            raise self.error("parameter blob of shape %s does not fit parameter_param.shape %s"
                             % (self.blobs[0].shape, shape))

    def reshape(self, bottom, top):
        top[0].reshape(self.layer_param.parameter_param.shape.dim)
        top[0].share_data(self.blobs[0])
        top[0].share_diff(self.blobs[0])

    def forward(self, bottom, top):
        """Nothing to compute: the top already shares the parameter's storage."""

    def backward(self, top, propagate_down, bottom):
        """Nothing to do: the top's diff is the parameter's diff."""
