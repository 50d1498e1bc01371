"""Slice: cut a blob into pieces along one axis."""

from ...layer import Layer
from ...registry import register_layer
from .common_utils import check_axis_or_legacy, legacy_axis


@register_layer("Slice")
class SliceLayer(Layer):
    """Split the bottom along ``axis`` into one piece per top.

    Bottoms: x, any shape.
    Tops: y_1 ... y_K (K >= 1), x's shape except on the slice axis. With ``slice_point``
    (K - 1 strictly increasing positive indices) the pieces are [0, p_1), [p_1, p_2), ...,
    [p_{K-1}, end); without it the axis is split into K equal parts (it must divide evenly).
    With one top, y shares x's data and diff.
    Params: ``slice_param { axis (1), slice_point, slice_dim }`` (``slice_dim`` is the legacy,
    non-negative form of ``axis``; not both).
    """

    exact_num_bottom_blobs = 1
    min_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.slice_param
        check_axis_or_legacy(self, p, "slice_dim")
        self.slice_points = [int(s) for s in p.slice_point]

    def reshape(self, bottom, top):
        x = bottom[0]
        axis = legacy_axis(self, x, self.layer_param.slice_param, "slice_dim")
        self.axis = axis
        dim = x.shape[axis]
        k = len(top)
        points = self.slice_points
        if points:
            if len(points) != k - 1:
                raise self.error("got %d slice_point value(s) for %d tops; expected one fewer "
                                 "than the number of tops (%d)" % (len(points), k, k - 1))
            if k > dim:
                raise self.error("cannot slice axis %d of size %d (bottom shape %s) into %d tops"
                                 % (axis, dim, x.shape, k))
            sizes, prev = [], 0
            for p in points:
                if p <= prev:
                    raise self.error("slice_point values must be strictly increasing and > 0, "
                                     "got %s" % points)
                sizes.append(p - prev)
                prev = p
            if prev > dim:
                raise self.error("slice_point %d is beyond the size %d of axis %d (bottom shape "
                                 "%s)" % (prev, dim, axis, x.shape))
            sizes.append(dim - prev)
        else:
            if dim % k != 0:
                raise self.error("Number of top blobs (%d) should evenly divide input slice axis "
                                 "(%d) (axis %d of bottom shape %s); give slice_point to slice "
                                 "unevenly" % (k, dim, axis, x.shape))
            sizes = [dim // k] * k
        self.sizes = sizes
        for t, size in zip(top, sizes):
            t.reshape(x.shape[:axis] + (size,) + x.shape[axis + 1:])
        if k == 1:
            top[0].share_data(x)
            top[0].share_diff(x)

    def _slices(self):
        lead = (slice(None),) * self.axis
        offset = 0
        for size in self.sizes:
            yield lead + (slice(offset, offset + size),)
            offset += size

    def forward(self, bottom, top):
        if len(top) == 1:
            return
        x = bottom[0].read_data()
        for t, index in zip(top, self._slices()):
            t.write_data()[...] = x[index]

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0] or len(top) == 1:
            return
        dx = bottom[0].write_diff()
        for t, index in zip(top, self._slices()):
            dx[index] = t.read_diff()
