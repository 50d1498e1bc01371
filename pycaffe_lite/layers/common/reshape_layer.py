"""Reshape: change a blob's shape without copying (0 copies a dimension, -1 infers one)."""

from ...registry import register_layer
from .common_utils import ViewLayer


@register_layer("Reshape")
class ReshapeLayer(ViewLayer):
    """Give the bottom a new shape; the top shares the bottom's data and diff.

    Bottoms: x, any shape.
    Tops: y with the same count, shaped by ``reshape_param``.
    Params: ``reshape_param { shape { dim ... }, axis (0), num_axes (-1) }``. The axes
    ``[axis, axis + num_axes)`` of x (all remaining with ``num_axes: -1``; a negative ``axis``
    counts from the end, -1 being the position after the last axis) are replaced by ``shape``;
    a dim of 0 copies the corresponding bottom dimension, a single dim of -1 is inferred from
    the count. In-place computation is not allowed.
    """

    def setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Reshape layer does not allow in-place computation")
        dims = [int(d) for d in self.layer_param.reshape_param.shape.dim]
        self.copy_axes = [i for i, d in enumerate(dims) if d == 0]
        inferred = [i for i, d in enumerate(dims) if d == -1]
        if len(inferred) > 1:
            raise self.error("new shape %s contains %d dims of -1; at most a single (1) value of "
                             "-1 may be specified" % (dims, len(inferred)))
        bad = [d for d in dims if d < -1]
        if bad:
            raise self.error("new shape %s has dim %d; dims must be > 0, 0 (copy) or -1 (infer)"
                             % (dims, bad[0]))
        self.inferred_axis = inferred[0] if inferred else -1
        self.constant_count = 1
        for d in dims:
            if d > 0:
                self.constant_count *= d
        self.dims = dims

    def reshape(self, bottom, top):
        x = bottom[0]
        p = self.layer_param.reshape_param
        n = x.num_axes
        start = p.axis if p.axis >= 0 else n + p.axis + 1
        if start < 0 or start > n:
            raise self.error("axis %d out of range for a %d-D bottom of shape %s (expected "
                             "%d <= axis <= %d)" % (p.axis, n, x.shape, -n - 1, n))
        if p.num_axes < -1:
            raise self.error("num_axes must be >= 0, or -1 for all, got %d" % p.num_axes)
        end = n if p.num_axes == -1 else start + p.num_axes
        if end > n:
            raise self.error("end_axis = axis + num_axes = %d + %d is out of range for a %d-D "
                             "bottom of shape %s" % (start, p.num_axes, n, x.shape))
        shape = list(x.shape[:start]) + list(self.dims) + list(x.shape[end:])
        for i in self.copy_axes:
            if start + i >= n:
                raise self.error("new shape %s contains a 0 at index %d, but there was no "
                                 "corresponding bottom axis to copy (bottom shape %s)"
                                 % (self.dims, i, x.shape))
            shape[start + i] = x.shape[start + i]
        if self.inferred_axis >= 0:
            explicit = self.constant_count * x.count_range(0, start) * x.count_range(end)
            for i in self.copy_axes:
                explicit *= shape[start + i]
            if explicit == 0 or x.count % explicit != 0:
                raise self.error("bottom count (%d) must be divisible by the product of the "
                                 "specified dimensions (%d) (bottom shape %s, new shape %s)"
                                 % (x.count, explicit, x.shape, self.dims))
            shape[start + self.inferred_axis] = x.count // explicit
        count = 1
        for d in shape:
            count *= d
        if count != x.count:
            raise self.error("output count must match input count: new shape %s has %d "
                             "elements, the bottom of shape %s has %d"
                             % (tuple(shape), count, x.shape, x.count))
        self.share_as_view(top[0], x, shape)
