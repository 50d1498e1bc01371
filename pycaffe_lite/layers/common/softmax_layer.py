"""Softmax: exp(x) normalised to sum to 1 along one axis."""

from ...backend import get_array_module
from ...errors import ShapeError
from ...layer import Layer
from ...registry import register_layer


def softmax_axis(layer, blob, axis):
    """``axis`` made non-negative for ``blob``, or a LayerError naming it."""
    try:
        return blob.canonical_axis_index(axis)
    except ShapeError:
        n = blob.num_axes
        raise layer.error(f"softmax axis {axis} is out of range for a bottom of shape "
                          f"{blob.shape} ({n} axes); expected an axis in [{-n}, {n})") from None


def softmax_forward(x3, y3):
    """Softmax over axis 1 of the 3-D views ``x3`` (input) and ``y3`` (output, may be ``x3``)."""
    xp = get_array_module(x3)
    peak = x3.max(axis=1, keepdims=True)
    xp.subtract(x3, peak, out=y3)
    xp.exp(y3, out=y3)
    y3 /= y3.sum(axis=1, keepdims=True)


def softmax_backward(y3, dy3, dx3):
    """dx = (dy - sum(dy * y)) * y over axis 1 (``dx3`` may be ``dy3``)."""
    xp = get_array_module(y3)
    dot = (dy3 * y3).sum(axis=1, keepdims=True)
    xp.subtract(dy3, dot, out=dx3)
    dx3 *= y3


@register_layer("Softmax")
class SoftmaxLayer(Layer):
    """Softmax along one axis: ``y = exp(x - max x) / sum exp(x - max x)``.

    Bottoms: x (at least one axis). Tops: y, same shape; may be computed in place.
    Params: ``softmax_param { axis (1; negative counts from the end) engine (ignored) }``.
    The axis must have at least one element.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        x = bottom[0]
        axis = softmax_axis(self, x, self.layer_param.softmax_param.axis)
        channels = x.shape[axis]
        if channels < 1:
            raise self.error(f"softmax axis {axis} of bottom shape {x.shape} is empty; expected "
                             "at least one element")
        self.axis = axis
        self.view_shape = (x.count_range(0, axis), channels, x.count_range(axis + 1))
        top[0].reshape(x.shape)

    def forward(self, bottom, top):
        x3 = bottom[0].read_data().reshape(self.view_shape)
        y3 = top[0].write_data().reshape(self.view_shape)
        softmax_forward(x3, y3)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        y3 = top[0].read_data().reshape(self.view_shape)
        dy3 = top[0].read_diff().reshape(self.view_shape)
        dx3 = bottom[0].write_diff().reshape(self.view_shape)
        softmax_backward(y3, dy3, dx3)
