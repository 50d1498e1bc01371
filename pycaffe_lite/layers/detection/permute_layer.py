"""Permute: the SSD fork's axis reordering (weiliu89/caffe)."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer


@register_layer("Permute")
class PermuteLayer(Layer):
    """The bottom's axes in a new order (NumPy's ``transpose``).

    ``order`` names the new leading axes; the axes it leaves out follow in their original
    order (the fork's rule), so ``order: 0 order: 2 order: 3 order: 1`` turns NCHW into NHWC,
    as SSD does before flattening its heads' outputs.

    Bottoms: x (any number of axes). Tops: y, the permuted copy.
    Params: ``permute_param { order (repeated) }`` (the SSD fork's PermuteParameter).
    Backward: dy transposed back.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        n = bottom[0].num_axes
        order = [int(o) for o in self.layer_param.permute_param.order]
        for o in order:
            if o >= n:
                raise self.error("permute_param order %d is not an axis of the %d-axis input "
                                 "(shape %s)" % (o, n, bottom[0].shape))
        if len(set(order)) != len(order):
            raise self.error("permute_param order %s repeats an axis" % (order,))
        self.order = tuple(order + [i for i in range(n) if i not in order])
        self.inverse = tuple(self.order.index(i) for i in range(n))

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes != len(self.order):
            raise self.error("input has %d axes; the layer was set up for %d"
                             % (x.num_axes, len(self.order)))
        top[0].reshape(tuple(x.shape[i] for i in self.order))

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        top[0].write_data()[...] = x.transpose(self.order)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            dy = top[0].read_diff()
            xp = get_array_module(dy)
            bottom[0].write_diff()[...] = xp.ascontiguousarray(dy.transpose(self.inverse))
