"""LRN: local response normalisation (Caffe's LRNLayer)."""

from ...layer import Layer
from ...ops.lrn import lrn_backward, lrn_forward
from ...proto import caffe_pb2
from ...registry import register_layer
from ..neuron.inplace_utils import InPlaceInputs

LRN = caffe_pb2.LRNParameter


@register_layer("LRN")
class LRNLayer(InPlaceInputs, Layer):
    """Local response normalisation, ``y = x * scale^-beta``.

    - ACROSS_CHANNELS: ``scale = k + alpha / size * sum(x^2)`` over ``size`` neighbouring
      channels centred on the channel (zero beyond the first and last channel);
    - WITHIN_CHANNEL: ``scale = 1 + alpha * mean(x^2)`` over a ``size x size`` spatial window
      centred on the position, the mean dividing by ``size^2`` everywhere (zero padding), as
      Caffe's split/square/AVE-pool/power/product composition computes it (``k`` unused).

    Bottoms: x ``(N, C, H, W)`` (exactly 4 axes).
    Tops: y, same shape (may be x: in place).
    Params: ``lrn_param { local_size (5, odd) alpha (1) beta (0.75)
    norm_region (ACROSS_CHANNELS) k (1) }``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.lrn_param
        self.size = int(p.local_size)
        if self.size % 2 != 1:
            raise self.error("LRN only supports odd values for local_size, got %d" % self.size)
        self.alpha, self.beta, self.k = p.alpha, p.beta, p.k
        self.region = p.norm_region
        if self.region not in (LRN.ACROSS_CHANNELS, LRN.WITHIN_CHANNEL):
            raise self.error("unknown norm_region %d; expected ACROSS_CHANNELS or "
                             "WITHIN_CHANNEL" % self.region)
        self.scale = None

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error("input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got shape %s" % (bottom[0].shape,))
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        self.scale = lrn_forward(self.forward_input(bottom, top), top[0].write_data(), self.size,
                                 self.alpha, self.beta, self.k,
                                 self.region == LRN.ACROSS_CHANNELS)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        lrn_backward(self.backward_input(bottom, top), top[0].read_data(),
                     self.backward_top_diff(top, bottom),
                     self.scale, bottom[0].write_diff(), self.size, self.alpha, self.beta,
                     self.region == LRN.ACROSS_CHANNELS)
