"""Convolution: learnable filters correlated with the input (Caffe's ConvolutionLayer)."""

from ...ops import conv as conv_ops
from ...ops.gpu import cudnn
from ...registry import register_layer
from .base_conv import BaseConvolutionLayer


@register_layer("Convolution")
class ConvolutionLayer(BaseConvolutionLayer):
    """Cross-correlation of the input with ``num_output`` filters, plus a bias.

    ``y[n, m] = sum_c W[m, c] (*) x[n, g(m) * C/G + c] + b[m]``, over any number of spatial
    axes; the output size per axis is ``(in + 2*pad - (dilation*(k-1)+1)) // stride + 1``.

    Bottoms: one or more inputs of identical shape ``(..., C, *spatial)`` (``axis`` is the
    channel axis; the axes before it are the batch).
    Tops: one output per bottom, ``(..., num_output, *out_spatial)``.
    Params: ``convolution_param { num_output (required) kernel_size | kernel_h, kernel_w
    stride (1) | stride_h, stride_w  pad (0) | pad_h, pad_w  dilation (1)  group (1)
    bias_term (true)  weight_filler  bias_filler  axis (1)  force_nd_im2col (false) }``;
    ``kernel_size``/``stride``/``pad``/``dilation`` take one value for all spatial axes or one
    per axis, the ``_h``/``_w`` forms are 2-D only; ``engine`` (DEFAULT: cuDNN on the GPU when
    CuPy provides it, else CAFFE; see :mod:`pycaffe_lite.ops.gpu.cudnn`). Blobs: weights
    ``(num_output, C / group, *kernel)``, bias ``(num_output,)``.
    """

    def compute_output_shape(self):
        out = []
        for i, (n, k, p, s, d) in enumerate(zip(self.input_spatial, self.kernel_shape,
                                                self.pad, self.stride, self.dilation)):
            extent = d * (k - 1) + 1
            if n + 2 * p < extent:
                raise self.error(
                    "kernel extent %d (kernel %d, dilation %d) is larger than the padded input "
                    "%d (size %d + 2 * pad %d) on spatial axis %d"
                    % (extent, k, d, n + 2 * p, n, p, i))
            out.append((n + 2 * p - extent) // s + 1)
        return tuple(out)

    def choose_engine(self):
        why_not = cudnn.conv_why_not(self.num_spatial_axes, self.channel_axis)
        return cudnn.choose_engine(self.layer_param.convolution_param.engine, why_not,
                                   self.name)

    # forward() takes relu=True: a ReLU folded into this layer's output pass (net_fold)
    takes_relu = True

    def forward(self, bottom, top, relu=False):
        weights = self.blobs[0].read_data()
        for i, t in enumerate(top):
            x = self.forward_input(bottom, top, i)
            y = t.write_data()
            bias = self.blobs[1].read_data() if self.bias_term else None
            conv_ops.forward(x, weights, y, self.plan, bias=bias, relu=relu)

    def backward(self, top, propagate_down, bottom):
        weights = self.blobs[0].read_data()
        do_weights = self.param_propagate_down[0]
        do_bias = self.bias_term and self.param_propagate_down[1]
        for i, (down, b) in enumerate(zip(propagate_down, bottom)):
            dy = self.backward_top_diff(top, bottom, i)
            if do_bias:
                self.backward_bias(self.blobs[1].write_diff(), dy)
            if do_weights or down:
                x = self.backward_input(bottom, top, i) if do_weights else None
                conv_ops.backward(x, dy, weights, self.plan,
                                  dx=b.write_diff() if down else None,
                                  dw=self.blobs[0].write_diff() if do_weights else None)
