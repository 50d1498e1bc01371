"""BatchReindex: select, reorder or repeat the items of a batch by index."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer


@register_layer("BatchReindex")
class BatchReindexLayer(Layer):
    """``y = x[indices]`` along the first axis.

    Bottoms: x of shape (N, ...); indices, a 1-axis blob of M values, each converted to an
    integer by truncation (as Caffe's cast) and required to lie in [0, N).
    Tops: y of shape (M, ...).
    Params: none.
    Backward: the gradient of x is the sum of the gradients of the items that copied it
    (zero for items not selected); no gradient flows to the indices.
    """

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        x, idx = bottom
        if idx.num_axes != 1:
            raise self.error("the indices (bottom 1) must have exactly 1 axis, got shape %s"
                             % (idx.shape,))
        if x.num_axes < 1:
            raise self.error("bottom 0 needs at least one axis, got a scalar")
        top[0].reshape((idx.shape[0],) + x.shape[1:])

    def _indices(self, bottom):
        n = bottom[0].shape[0]
        r = bottom[1].read_data()
        xp = get_array_module(r)
        bad = ~((r >= 0) & (r < n))
        if r.size and bool(bad.any()):
            pos = int(bad.argmax())
            raise self.error("index %r at position %d of bottom 1 is outside the batch of "
                             "bottom 0 (expected 0 <= index < %d)" % (float(r[pos]), pos, n))
        return r.astype(xp.intp)

    def forward(self, bottom, top):
        idx = self._indices(bottom)
        if top[0].count == 0:
            return
        x = bottom[0].read_data()
        xp = get_array_module(x)
        xp.take(x, idx, axis=0, out=top[0].write_data())

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1  # the indices have no gradient, even with force_backward

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("cannot backpropagate to the indices (bottom 1); set "
                             "propagate_down: false for it")
        if not propagate_down[0]:
            return
        idx = self._indices(bottom)
        dx = bottom[0].write_diff()
        dx[...] = 0
        if top[0].count:
            xp = get_array_module(dx)
            xp.add.at(dx, idx, top[0].read_diff())
