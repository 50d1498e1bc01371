"""Filter: keep the items of a batch whose selector value is non-zero."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer


@register_layer("Filter")
class FilterLayer(Layer):
    """Forward only the selected items of each bottom.

    Bottoms: x_1 ... x_K (K >= 1), each with N items along the first axis, then the selector:
    N values, shape (N,) or (N, 1, ...) (every axis but the first of size 1). Item n is kept
    when selector[n] is non-zero.
    Tops: y_1 ... y_K (one fewer than the bottoms): the kept items of each x_k, in order, shape
    (S, ...) with S the number of kept items. When nothing is selected the tops hold 0 items.
    As in Caffe, the tops have all N items after setup, until the first forward.
    Params: none.
    Backward: the top gradients go back to the kept items; the other items get zero
    gradient (all of them when nothing was selected). No gradient flows to the selector.
    """

    min_num_bottom_blobs = 2
    min_num_top_blobs = 1

    def setup(self, bottom, top):
        if len(top) != len(bottom) - 1:
            raise self.error("needs one top per filtered bottom (bottoms but the last, the "
                             "selector): got %d bottoms and %d tops, expected %d tops"
                             % (len(bottom), len(top), len(bottom) - 1))
        self.first_reshape = True

    def reshape(self, bottom, top):
        selector = bottom[-1]
        if selector.num_axes < 1:
            raise self.error("the selector (last bottom) needs at least one axis, got a scalar")
        if any(d != 1 for d in selector.shape[1:]):
            raise self.error("Selector blob dimensions must be singletons (1), except the "
                             "first: got shape %s" % (selector.shape,))
        n = selector.shape[0]
        for i, b in enumerate(bottom[:-1]):
            if b.num_axes < 1 or b.shape[0] != n:
                raise self.error("Each bottom should have the same 0th dimension as the "
                                 "selector blob: bottom %d has shape %s, the selector %s"
                                 % (i, b.shape, selector.shape))
        s = selector.read_data().reshape(-1)
        xp = get_array_module(s)
        self.indices = xp.nonzero(s)[0]
        kept = int(self.indices.size)
        if self.first_reshape:
            kept = n
            self.first_reshape = False
        for b, t in zip(bottom, top):
            t.reshape((kept,) + b.shape[1:])

    def forward(self, bottom, top):
        for b, t in zip(bottom, top):
            if t.count:
                xp = get_array_module(b.read_data())
                xp.take(b.read_data(), self.indices, axis=0, out=t.write_data())

    def allow_force_backward(self, bottom_index):
        # the selector (the last bottom) has no gradient, even with force_backward
        return bottom_index != len(self.layer_param.bottom) - 1

    def backward(self, top, propagate_down, bottom):
        if propagate_down[-1]:
            raise self.error("cannot backpropagate to the selector (the last bottom); set "
                             "propagate_down: false for it")
        for i, t in enumerate(top):
            if not propagate_down[i]:
                continue
            dx = bottom[i].write_diff()
            dx[...] = 0
            if self.indices.size:
                dx[self.indices] = t.read_diff()
