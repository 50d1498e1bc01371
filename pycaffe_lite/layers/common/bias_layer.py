"""Bias: add a (learned or given) bias blob, broadcast along the bottom's other axes."""

from ...backend import get_array_module
from ...fillers import fill
from ...layer import Layer
from ...registry import register_layer
from .common_utils import broadcast_dims, broadcast_param_shape


@register_layer("Bias")
class BiasLayer(Layer):
    """y = x + b, where b covers the axes ``axis`` .. ``axis + b.num_axes - 1`` of x and is
    broadcast along the axes before and after.

    Bottoms: x, any shape; optionally b (the bias, instead of a learned blob) whose shape
    matches x's from ``axis`` on (a scalar b, with no axes, is added everywhere).
    Tops: y, x's shape; may be computed in place.
    Params: ``bias_param { axis (1), num_axes (1; -1 = all remaining axes; only used for the
    learned blob), filler (constant 0) }``; negative ``axis`` counts from the end.
    Blobs: with one bottom, the bias of shape ``x.shape[axis:axis + num_axes]``.
    """

    min_num_bottom_blobs = 1
    max_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.bias_param
        if len(bottom) == 1 and len(self.blobs) > 0:
            if len(self.blobs) != 1:
                raise self.error("expected 1 parameter blob (the bias), got %d"
                                 % len(self.blobs))
            return
        if len(bottom) > 1:
            if len(self.blobs) > 0:
                raise self.error("has %d parameter blob(s), but the bias is given by bottom 1"
                                 % len(self.blobs))
            return
        shape = broadcast_param_shape(self, bottom[0], p.axis, p.num_axes, "bias")
        fill(self.blobs.add_blob(*shape), p.filler)

    def reshape(self, bottom, top):
        x = bottom[0]
        bias = bottom[1] if len(bottom) > 1 else self.blobs[0]
        self.outer, self.dim, self.inner = broadcast_dims(
            self, x, self.layer_param.bias_param.axis, bias, "bias")
        if top[0] is not x:
            top[0].reshape(x.shape)

    def forward(self, bottom, top):
        b = (bottom[1] if len(bottom) > 1 else self.blobs[0]).read_data()
        x = bottom[0].read_data().reshape(self.outer, self.dim, self.inner)
        y = top[0].write_data().reshape(self.outer, self.dim, self.inner)
        get_array_module(y).add(x, b.reshape(1, self.dim, 1), out=y)

    def backward(self, top, propagate_down, bottom):
        dy = top[0].read_diff()
        if propagate_down[0] and bottom[0] is not top[0]:
            bottom[0].write_diff()[...] = dy
        as_param = len(bottom) == 1
        if (as_param and self.param_propagate_down[0]) or \
                (not as_param and propagate_down[1]):
            grad = dy.reshape(self.outer, self.dim, self.inner).sum(axis=(0, 2))
            target = self.blobs[0] if as_param else bottom[1]
            db = target.write_diff().reshape(self.dim)
            if as_param:
                db += grad
            else:
                db[...] = grad
