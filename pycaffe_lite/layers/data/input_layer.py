"""Input: tops that the caller fills (net inputs, e.g. for deployment)."""

from ...errors import ShapeError
from ...layer import Layer
from ...registry import register_layer


@register_layer("Input")
class InputLayer(Layer):
    """Provides the net's input blobs; their data is written by the caller, not the layer.

    Bottoms: none.
    Tops: one or more blobs, shaped at setup from ``input_param.shape``; forward leaves their
    data untouched and later reshapes by the caller are kept.
    Params: ``input_param { shape { dim ... } }``: given once (for every top), once per top,
    or not at all (the tops are then left as they are).
    """

    exact_num_bottom_blobs = 0
    min_num_top_blobs = 1

    def setup(self, bottom, top):
        shapes = self.layer_param.input_param.shape
        if len(shapes) not in (0, 1, len(top)):
            raise self.error("Must specify 'shape' once, once per top blob, or not at all: "
                             "%d tops vs. %d shapes" % (len(top), len(shapes)))
        for i, t in enumerate(top):
            if not shapes:
                break
            dims = tuple(shapes[0 if len(shapes) == 1 else i].dim)
            try:
                t.reshape(dims)
            except ShapeError as exc:
                raise self.error("cannot shape top %d as %s: %s" % (i, dims, exc)) from None

    def reshape(self, bottom, top):
        pass  # the caller owns the tops' shapes

    def forward(self, bottom, top):
        pass  # the caller owns the tops' data
