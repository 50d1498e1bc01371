"""Tile: repeat a blob a number of times along one axis."""

from ...errors import ShapeError
from ...layer import Layer
from ...registry import register_layer


@register_layer("Tile")
class TileLayer(Layer):
    """Repeat the bottom ``tiles`` times along ``axis`` (whole block repeated, as numpy.tile).

    Bottoms: x, with at least one axis. Tops: y, x's shape with ``axis`` multiplied by
    ``tiles``: ``y[..., t * d + i, ...] = x[..., i, ...]`` for ``d = x.shape[axis]``.
    Params: ``tile_param { axis (1; negative counts from the end), tiles (required, > 0) }``.
    Backward: the bottom's gradient is the sum of the top gradients of its copies.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.tile_param
        if not p.HasField("tiles"):
            raise self.error("Number of tiles must be specified (tile_param.tiles)")
        if p.tiles <= 0:
            raise self.error("tile_param.tiles must be > 0, got %d" % p.tiles)
        self.tiles = int(p.tiles)

    def reshape(self, bottom, top):
        x = bottom[0]
        axis = self.layer_param.tile_param.axis
        try:
            axis = x.canonical_axis_index(axis)
        except ShapeError:
            n = x.num_axes
            raise self.error("tile_param.axis %d is out of range for a bottom of shape %s "
                             "(expected an axis in [%d, %d))" % (axis, x.shape, -n, n)) from None
        shape = list(x.shape)
        shape[axis] *= self.tiles
        top[0].reshape(shape)
        self.outer = x.count_range(0, axis)
        self.inner = x.count_range(axis)

    def forward(self, bottom, top):
        x = bottom[0].read_data().reshape(self.outer, 1, self.inner)
        y = top[0].write_data().reshape(self.outer, self.tiles, self.inner)
        y[...] = x

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].read_diff().reshape(self.outer, self.tiles, self.inner)
        dx = bottom[0].write_diff().reshape(self.outer, self.inner)
        dy.sum(axis=1, out=dx)
