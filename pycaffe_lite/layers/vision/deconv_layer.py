"""Deconvolution: the transpose of a convolution (Caffe's DeconvolutionLayer)."""

from ...ops import conv as conv_ops
from ...ops.gpu import cudnn
from ...registry import register_layer
from .base_conv import BaseConvolutionLayer


@register_layer("Deconvolution")
class DeconvolutionLayer(BaseConvolutionLayer):
    """A convolution run backwards ("transposed convolution", "fractionally strided
    convolution"): each input pixel scatters a copy of its filter, scaled by its value, into
    the output, and overlapping copies add up.

    The forward pass is Convolution's backward-data pass with the roles of bottom and top
    swapped: ``y = col2im(W^T x) + b``, which makes it the adjoint of a Convolution with the
    same weights (``<conv(u), x> = <u, deconv(x)>`` without bias). Its backward pass is
    Convolution's forward: the bottom gradient is ``W * im2col(dy)`` and the weight gradient
    ``x * im2col(dy)^T``. The output size per spatial axis is
    ``stride * (in - 1) + dilation * (k - 1) + 1 - 2 * pad``.

    With ``group: C``, ``num_output: C``, kernel ``2f - f % 2``, stride ``f``, pad
    ``ceil((f - 1) / 2)`` and ``weight_filler { type: "bilinear" }`` (no bias) it is the
    classic fixed bilinear upsampling by a factor ``f`` of fully convolutional networks.

    Bottoms: one or more inputs of identical shape ``(..., C, *spatial)`` (``axis`` is the
    channel axis; the axes before it are the batch).
    Tops: one output per bottom, ``(..., num_output, *out_spatial)``.
    Params: ``convolution_param``, as for Convolution: ``num_output`` (required),
    ``kernel_size | kernel_h, kernel_w``, ``stride (1)``, ``pad (0)``, ``dilation (1)``,
    ``group (1)``, ``bias_term (true)``, ``weight_filler``, ``bias_filler``, ``axis (1)``,
    ``force_nd_im2col (false)``. Blobs: weights ``(C, num_output / group, *kernel)`` (Caffe's
    reversed order: input channels first) and bias ``(num_output,)``.
    """

    def reverse_dimensions(self):
        return True

    def choose_engine(self):
        why_not = cudnn.conv_why_not(self.num_spatial_axes, self.channel_axis)
        return cudnn.choose_engine(self.layer_param.convolution_param.engine, why_not,
                                   self.name)

    def compute_output_shape(self):
        out = []
        for i, (n, k, p, s, d) in enumerate(zip(self.input_spatial, self.kernel_shape,
                                                self.pad, self.stride, self.dilation)):
            extent = d * (k - 1) + 1
            size = s * (n - 1) + extent - 2 * p
            if size < 0:  # BVLC's Blob::Reshape refuses a negative size; 0 is an empty top
                raise self.error(
                    "the output size would be negative on spatial axis %d: stride %d * (input "
                    "%d - 1) + kernel extent %d (kernel %d, dilation %d) - 2 * pad %d = %d; "
                    "expected a size of at least 0 (reduce pad)" % (i, s, n, extent, k, d, p, size))
            out.append(size)
        return tuple(out)

    def forward(self, bottom, top):
        weights = self.blobs[0].read_data()
        for i, t in enumerate(top):
            x = self.forward_input(bottom, top, i)
            y = t.write_data()
            # the top is the im2col side: a convolution's input gradient
            conv_ops.backward(None, x, weights, self.plan, dx=y)
            if self.bias_term:
                self.forward_bias(y, self.blobs[1].read_data())

    def backward(self, top, propagate_down, bottom):
        weights = self.blobs[0].read_data()
        do_weights = self.param_propagate_down[0]
        do_bias = self.bias_term and self.param_propagate_down[1]
        for i, (down, b) in enumerate(zip(propagate_down, bottom)):
            dy = self.backward_top_diff(top, bottom, i)
            if do_bias:
                self.backward_bias(self.blobs[1].write_diff(), dy)
            if do_weights or down:
                # one im2col of the top diff serves both the weight and the bottom gradient
                conv_ops.forward_and_weight(
                    dy, weights, self.plan, y=b.write_diff() if down else None,
                    dy=self.backward_input(bottom, top, i) if do_weights else None,
                    dw=self.blobs[0].write_diff() if do_weights else None)
