"""ReLU: max(x, 0) + negative_slope * min(x, 0)."""

from ...backend import get_array_module
from ...layer import NeuronLayer
from ...ops.relu import bias_relu, relu_grad
from ...registry import register_layer


@register_layer("ReLU")
class ReLULayer(NeuronLayer):
    """Rectified linear unit, leaky when ``negative_slope`` is set.

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place.
    Params: ``relu_param { negative_slope (0) }``.
    """

    def setup(self, bottom, top):
        self.negative_slope = self.layer_param.relu_param.negative_slope

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        y = top[0].write_data()
        xp = get_array_module(x)
        if self.negative_slope == 0:
            bias_relu(x, y)
        else:
            # the slope in the blobs' precision: no float64 temporaries
            y[...] = xp.where(x > 0, x, x * x.dtype.type(self.negative_slope))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # In place the bottom holds y, whose sign is x's for slope >= 0 (Caffe reads it too).
        x = bottom[0].read_data()
        dy = top[0].read_diff()
        dx = bottom[0].write_diff()
        xp = get_array_module(x)
        if self.negative_slope == 0:
            relu_grad(x, dy, dx)
        else:
            dx[...] = xp.where(x > 0, dy, dy * dy.dtype.type(self.negative_slope))
