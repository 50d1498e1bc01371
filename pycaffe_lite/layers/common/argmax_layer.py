"""ArgMax: the indices (and optionally values) of the top_k largest entries."""

from ...backend import get_array_module
from ...errors import ShapeError
from ...layer import Layer
from ...registry import register_layer


def top_k_along(x3, k):
    """Indices (along axis 1 of the 3-D array ``x3``) of the ``k`` largest values, largest
    first; equal values are ordered by decreasing index, as Caffe's partial sort of (value,
    index) pairs with std::greater orders them."""
    xp = get_array_module(x3)
    dim = x3.shape[1]
    flipped = x3[:, ::-1, :]
    if k == 1:
        # argmax returns the first maximum; in the flipped array that is the last one.
        return (dim - 1) - flipped.argmax(axis=1)[:, None, :]
    # A stable sort of -x keeps equal values in flipped order: highest index first.
    order = xp.argsort(-flipped, axis=1, kind="stable")[:, :k, :]
    return (dim - 1) - order


@register_layer("ArgMax")
class ArgMaxLayer(Layer):
    """Indices of the ``top_k`` largest values, per item or along one axis.

    Bottoms: x.
    Tops: without ``axis``: the values of each item (x[n] flattened) are ranked; the top has
    ``max(x.num_axes, 3)`` axes, shape (N, 1, top_k, 1, ...), holding the indices, or
    (N, 2, top_k, 1, ...) with ``out_max_val``: the indices, then the values. With ``axis``:
    x's shape with ``axis`` replaced by top_k, holding the indices, or with ``out_max_val``
    the values only. Indices are stored as floats. Ties rank the higher index first.
    Params: ``argmax_param { out_max_val (false), top_k (1; 1 <= top_k <= the ranked count),
    axis (optional; negative counts from the end) }``.
    No backward (the function is piecewise constant).
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.argmax_param
        self.out_max_val = p.out_max_val
        self.top_k = int(p.top_k)
        self.has_axis = p.HasField("axis")
        if self.top_k < 1:
            raise self.error("argmax_param.top_k must be >= 1, got %d" % self.top_k)
        x = bottom[0]
        if self.has_axis:
            try:
                self.axis = x.canonical_axis_index(p.axis)
            except ShapeError:
                n = x.num_axes
                raise self.error("argmax_param.axis %d is out of range for a bottom of shape %s "
                                 "(expected an axis in [%d, %d))"
                                 % (p.axis, x.shape, -n, n)) from None
            if self.top_k > x.shape[self.axis]:
                raise self.error("top_k (%d) must be <= the size of axis %d (%d) of the bottom "
                                 "of shape %s" % (self.top_k, self.axis, x.shape[self.axis],
                                                  x.shape))
        else:
            if x.num_axes < 1:
                raise self.error("the bottom needs at least one axis, got a scalar")
            if self.top_k > x.count_range(1):
                raise self.error("top_k (%d) must be <= the number of values per item (%d) of "
                                 "the bottom of shape %s"
                                 % (self.top_k, x.count_range(1), x.shape))

    def reshape(self, bottom, top):
        x = bottom[0]
        if self.has_axis:
            shape = list(x.shape)
            shape[self.axis] = self.top_k
            self.view = (x.count_range(0, self.axis), x.shape[self.axis],
                         x.count_range(self.axis + 1))
        else:
            shape = [1] * max(x.num_axes, 3)
            shape[0] = x.shape[0]
            shape[1] = 2 if self.out_max_val else 1
            shape[2] = self.top_k
            self.view = (x.shape[0], x.count_range(1), 1)
        top[0].reshape(shape)

    def forward(self, bottom, top):
        x3 = bottom[0].read_data().reshape(self.view)
        y = top[0].write_data()
        if y.size == 0:
            return
        xp = get_array_module(x3)
        idx = top_k_along(x3, self.top_k)
        if self.has_axis:
            y3 = y.reshape(self.view[0], self.top_k, self.view[2])
            if self.out_max_val:
                y3[...] = xp.take_along_axis(x3, idx, axis=1)
            else:
                y3[...] = idx
        else:
            y3 = y.reshape(self.view[0], -1, self.top_k)
            y3[:, 0, :] = idx[:, :, 0]
            if self.out_max_val:
                y3[:, 1, :] = xp.take_along_axis(x3, idx, axis=1)[:, :, 0]
