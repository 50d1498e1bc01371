"""Threshold: y = 1 where x > threshold, 0 elsewhere."""

from ...layer import NeuronLayer
from ...registry import register_layer


@register_layer("Threshold")
class ThresholdLayer(NeuronLayer):
    """Step function: y = (x > threshold), as 0/1 values of the blob's dtype.

    Bottoms: x (any shape). Tops: y, same shape; may be computed in place.
    Params: ``threshold_param { threshold (0) }``.
    No backward (the function is not differentiable; Caffe's backward is NOT_IMPLEMENTED):
    asking for a gradient to the bottom raises an error.
    """

    def setup(self, bottom, top):
        self.threshold = float(self.layer_param.threshold_param.threshold)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        y = top[0].write_data()
        y[...] = x > self.threshold

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error("Threshold has no gradient (a step function; Caffe's backward is "
                             "not implemented): set propagate_down: false for its bottom")
