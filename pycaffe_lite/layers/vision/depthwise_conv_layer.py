"""ConvolutionDepthwise and DepthwiseConvolution: the MobileNet / ShuffleNet forks' depthwise
convolution types, which are Convolution with ``group`` equal to the channel count."""

from ...proto import caffe_pb2
from ...registry import register_layer
from .conv_layer import ConvolutionLayer


class _DepthwiseBase(ConvolutionLayer):
    """A Convolution whose ``group`` is the input's channel count, under a fork's type name.

    The fork's weights read unchanged: they are Convolution's with ``group = C``, shaped
    ``(num_output, 1, *kernel)``, with a bias ``(num_output,)`` when ``bias_term``.
    Subclasses say how ``num_output`` is found (:meth:`derive_num_output`).
    """

    def derive_num_output(self, given, channels):
        raise NotImplementedError

    def setup(self, bottom, top):
        p = self.layer_param.convolution_param
        x = bottom[0]
        try:
            channels = x.shape[x.canonical_axis_index(p.axis)]
        except ValueError:
            return super().setup(bottom, top)  # Convolution names the bad axis
        if p.HasField("group") and p.group != channels:
            raise self.error("a %s layer convolves each channel on its own: group must be the "
                             "number of input channels (%d) or unset, got group %d"
                             % (self.type, channels, p.group))
        given = int(p.num_output) if p.HasField("num_output") else None
        derived = caffe_pb2.LayerParameter()
        derived.CopyFrom(self.layer_param)
        derived.convolution_param.group = channels
        derived.convolution_param.num_output = self.derive_num_output(given, channels)
        original, self.layer_param = self.layer_param, derived
        try:
            super().setup(bottom, top)
        finally:
            self.layer_param = original


@register_layer("ConvolutionDepthwise")
class ConvolutionDepthwiseLayer(_DepthwiseBase):
    """Depthwise convolution of the ShuffleNet / MobileNet-v2 forks (their ``conv_dw_layer``,
    type ``ConvolutionDepthwise``): one filter per input channel; the output has as many
    channels as the input. ``num_output`` may be left out; given, it must equal the channel
    count (the fork's weights are ``(C, 1, *kernel)`` whatever it says).

    Bottoms, tops, params and blobs: as Convolution, with ``group = num_output = C``.
    """

    def derive_num_output(self, given, channels):
        if given is not None and given != channels:
            raise self.error("a ConvolutionDepthwise layer has one output channel per input "
                             "channel: num_output must be %d (the input's channels) or unset, "
                             "got %d" % (channels, given))
        return channels


@register_layer("DepthwiseConvolution")
class DepthwiseConvolutionLayer(_DepthwiseBase):
    """Depthwise convolution of the MobileNet forks (yonghenglh6/DepthwiseConvolution and its
    descendants, type ``DepthwiseConvolution``): a Convolution with ``group`` equal to the
    input's channels (``group`` may be left out). ``num_output`` is required and must be a
    multiple of the channel count (more than one filter per channel is a depth multiplier).

    Bottoms, tops, params and blobs: as Convolution, with ``group = C``.
    """

    def derive_num_output(self, given, channels):
        if given is None or given <= 0 or given % channels:
            raise self.error("a DepthwiseConvolution layer needs num_output, a positive "
                             "multiple of the input's %d channels; got %s"
                             % (channels, "none" if given is None else given))
        return given
