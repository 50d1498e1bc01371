"""Reverse: the bottom reversed along one axis (CTPN's fork)."""

from ...layer import Layer
from ...registry import register_layer


@register_layer("Reverse")
class ReverseLayer(Layer):
    """``y = x`` with the order along ``axis`` reversed, as CTPN's Caffe (tianzhi0549/CTPN)
    defines it (its bidirectional LSTM runs one Lstm on the reversed sequence).

    Backward: the top gradient reversed along the same axis.
    Bottoms: x, any shape with at least one axis. Tops: y, x's shape (not in place).
    Params: ``reverse_param { axis (0; 0 <= axis < the number of axes) }``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        self.axis = int(self.layer_param.reverse_param.axis)

    def reshape(self, bottom, top):
        x = bottom[0]
        if top[0] is x:
            raise self.error("Reverse cannot run in place (its top must be a new blob)")
        if not 0 <= self.axis < x.num_axes:
            raise self.error("reverse_param axis %d is outside the bottom's %d axes (shape %s)"
                             % (self.axis, x.num_axes, x.shape))
        top[0].reshape(x.shape)

    def _flip(self, a):
        index = [slice(None)] * a.ndim
        index[self.axis] = slice(None, None, -1)
        return a[tuple(index)]

    def forward(self, bottom, top):
        top[0].write_data()[...] = self._flip(bottom[0].read_data())

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].write_diff()[...] = self._flip(top[0].read_diff())
