"""Axpy: ``a * x + y`` with one scale per image and channel (the SENet fork)."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer


@register_layer("Axpy")
class AxpyLayer(Layer):
    """``top = a * x + y``, ``a`` holding one factor per image and channel, as the SENet fork
    of Caffe (hujie-frank/SENet's ``axpy_layer``) defines it: a squeeze-and-excitation scale
    and the residual sum in one layer.

    Backward: ``da[n, c] = sum over the spatial axes of dtop * x``, ``dx = a * dtop``,
    ``dy = dtop``. (The fork computes dx only when a needs a gradient; here each bottom gets
    its own gradient when asked.)

    Bottoms: a ``(N, C)`` or ``(N, C, 1, 1)`` (further axes of extent 1 are allowed);
    x ``(N, C, ...)``; y of x's shape.
    Tops: of x's shape; may be computed in place of y (not of a or x).
    Params: none.
    """

    exact_num_bottom_blobs = 3
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        a, x, y = bottom
        if x.num_axes < 2:
            raise self.error("x (bottom 1) must have at least 2 axes (num, channels, ...), got "
                             "shape %s" % (x.shape,))
        n, c = x.shape[:2]
        if a.num_axes < 2 or a.shape[:2] != (n, c) or any(d != 1 for d in a.shape[2:]):
            raise self.error("the scale a (bottom 0) must be N x C (or N x C x 1 x 1) with "
                             "N = %d, C = %d from x (bottom 1) of shape %s; got shape %s"
                             % (n, c, x.shape, a.shape))
        if y.shape != x.shape:
            raise self.error("y (bottom 2) must have the shape of x (bottom 1), %s; got %s"
                             % (x.shape, y.shape))
        if top[0] is a or top[0] is x:
            raise self.error("Axpy can run in place of y (bottom 2) only, not of a or x")
        top[0].reshape(x.shape)

    @staticmethod
    def _scale(a, x):
        """``a`` shaped to broadcast over ``x``."""
        return a.reshape(x.shape[:2] + (1,) * (x.ndim - 2))

    def forward(self, bottom, top):
        a, x, y = (b.read_data() for b in bottom)
        out = top[0].write_data()
        out[...] = self._scale(a, x) * x + y

    def backward(self, top, propagate_down, bottom):
        dtop = top[0].read_diff()
        if propagate_down[0]:
            x = bottom[1].read_data()
            xp = get_array_module(x)
            prod = (dtop * x).reshape(x.shape[:2] + (-1,))
            bottom[0].write_diff()[...] = xp.sum(prod, axis=2).reshape(bottom[0].shape)
        if propagate_down[1]:
            a = bottom[0].read_data()
            bottom[1].write_diff()[...] = self._scale(a, dtop) * dtop
        if propagate_down[2] and bottom[2] is not top[0]:
            bottom[2].write_diff()[...] = dtop
