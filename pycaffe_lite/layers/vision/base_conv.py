"""The shared base of Convolution and Deconvolution (Caffe's BaseConvolutionLayer).

It reads ``convolution_param`` (kernel, stride, pad, dilation, group, bias, axis), creates and
checks the weight and bias blobs, shapes the tops, and describes each batch to the convolution
ops of :mod:`pycaffe_lite.ops.conv` as a :class:`~pycaffe_lite.ops.conv.ConvPlan` over a
:class:`~pycaffe_lite.ops.conv.ConvGeometry` (``self.plan``, rebuilt by a reshape that changes
the bottom's shape). The subclasses call those ops with arrays and the plan
(``conv_ops.forward``, ``backward``, ``forward_and_weight``), which choose the implementation,
and add the bias with ``forward_bias(output, bias)`` / ``backward_bias(bias_diff,
output_diff)``.

"input" is always the im2col side (``conv_in_channels`` channels of spatial shape
``conv_input_spatial``) and "output" the matrix-product side (``conv_out_channels`` channels of
``conv_out_spatial``); arrays are ``(num, channels, *spatial)``. A Convolution reads its bottom
as input; a Deconvolution (``reverse_dimensions() -> True``) swaps the roles, as in Caffe.
"""

import numpy as np

from ...fillers import fill
from ...layer import Layer
from ...ops import conv as conv_ops
from ...ops.gpu import cudnn
from ...ops.im2col import prod
from ...proto import caffe_pb2
from ..neuron.inplace_utils import InPlaceInputs


class BaseConvolutionLayer(InPlaceInputs, Layer):
    """Shared machinery of Convolution and Deconvolution; not a layer type by itself.

    Bottoms: one or more blobs of identical shape ``(..., C, *spatial)`` (``axis`` is C).
    Tops: as many as bottoms; top i may be bottom i (in place) where the shape is kept.
    Params: ``convolution_param`` (see ConvolutionLayer); blobs: weights ``(conv_out_channels,
    conv_in_channels / group, *kernel)`` and, with ``bias_term``, bias ``(num_output,)``.
    """

    min_num_bottom_blobs = 1
    min_num_top_blobs = 1
    equal_num_bottom_top_blobs = True
    # Largest column buffer (bytes) of one chunk of images; at least one image per chunk.
    # 8 MB keeps LeNet's training in one chunk and its peak memory under 100 MB, and was as
    # fast as 64 MB on CaffeNet (large chunks gain nothing once N = P * B is a few thousand).
    workspace_bytes = 8 << 20
    _plan_key = None  # what self.plan was made for (see reshape)

    # ---- what subclasses define --------------------------------------------------------
    def reverse_dimensions(self):
        """True for Deconvolution: the top is the im2col side."""
        return False

    def compute_output_shape(self):
        """The top's spatial shape from ``self.input_spatial`` (the bottom's)."""
        raise NotImplementedError

    def choose_engine(self):
        """The engine (``cudnn.CAFFE`` or ``cudnn.CUDNN``), decided once in setup."""
        return cudnn.CAFFE

    # ---- setup -------------------------------------------------------------------------
    def _spatial_values(self, name, repeated, has_hw, h, w, default):
        """One value per spatial axis from ``name`` (repeated) or ``name_h``/``name_w``."""
        n = self.num_spatial_axes
        if has_hw:
            if n != 2:
                raise self.error("%s_h & %s_w can only be used for 2D convolution, the input "
                                 "has %d spatial axes" % (name, name, n))
            if len(repeated):
                raise self.error("either %s or %s_h/%s_w should be specified, not both "
                                 "(got %s: %s and %s_h/%s_w)"
                                 % (name, name, name, name, list(repeated), name, name))
            return (int(h), int(w))
        given = len(repeated)
        if given == 0 and default is not None:
            return (default,) * n
        if given != 1 and given != n:
            raise self.error("%s must be specified once, or once per spatial dimension "
                             "(%s specified %d times; %d spatial dims)" % (name, name, given, n))
        return tuple(int(repeated[0 if given == 1 else i]) for i in range(n))

    def setup(self, bottom, top):
        p = self.layer_param.convolution_param
        self.force_nd_im2col = p.force_nd_im2col
        x = bottom[0]
        try:
            self.channel_axis = x.canonical_axis_index(p.axis)
        except ValueError:
            raise self.error("axis %d is out of range for a bottom of shape %s"
                             % (p.axis, x.shape)) from None
        self.num_spatial_axes = x.num_axes - self.channel_axis - 1
        self.kernel_shape = self._spatial_values(
            "kernel_size", p.kernel_size, p.HasField("kernel_h") or p.HasField("kernel_w"),
            p.kernel_h, p.kernel_w, None)
        if any(k <= 0 for k in self.kernel_shape):
            raise self.error("filter dimensions must be nonzero, got kernel %s"
                             % (self.kernel_shape,))
        self.stride = self._spatial_values(
            "stride", p.stride, p.HasField("stride_h") or p.HasField("stride_w"),
            p.stride_h, p.stride_w, 1)
        if any(s <= 0 for s in self.stride):
            raise self.error("stride dimensions must be nonzero, got stride %s" % (self.stride,))
        self.pad = self._spatial_values(
            "pad", p.pad, p.HasField("pad_h") or p.HasField("pad_w"), p.pad_h, p.pad_w, 0)
        self.dilation = self._spatial_values("dilation", p.dilation, False, 0, 0, 1)
        if any(d <= 0 for d in self.dilation):
            raise self.error("dilation must be positive, got %s" % (self.dilation,))

        self.channels = x.shape[self.channel_axis]
        self.num_output = int(p.num_output)
        if self.num_output <= 0:
            raise self.error("num_output must be positive, got %d" % self.num_output)
        self.group = int(p.group)
        if self.group <= 0:
            raise self.error("group must be positive, got %d" % self.group)
        if self.channels % self.group:
            raise self.error("the number of input channels (%d) must be a multiple of group "
                             "(%d)" % (self.channels, self.group))
        if self.num_output % self.group:
            raise self.error("num_output (%d) must be a multiple of group (%d)"
                             % (self.num_output, self.group))
        if self.reverse_dimensions():
            self.conv_out_channels, self.conv_in_channels = self.channels, self.num_output
        else:
            self.conv_out_channels, self.conv_in_channels = self.num_output, self.channels

        weight_shape = (self.conv_out_channels, self.conv_in_channels // self.group) + \
            self.kernel_shape
        self.bias_term = p.bias_term
        bias_shape = (self.num_output,)
        if len(self.blobs):
            if len(self.blobs) != 1 + int(self.bias_term):
                raise self.error("incorrect number of weight blobs: expected %d (bias_term: "
                                 "%s), got %d" % (1 + int(self.bias_term), self.bias_term,
                                                  len(self.blobs)))
            if self.blobs[0].shape != weight_shape:
                raise self.error("incorrect weight shape: expected %s, got %s"
                                 % (weight_shape, self.blobs[0].shape))
            if self.bias_term and self.blobs[1].shape != bias_shape:
                raise self.error("incorrect bias shape: expected %s, got %s"
                                 % (bias_shape, self.blobs[1].shape))
        else:
            fill(self.blobs.add_blob(*weight_shape), p.weight_filler)
            if self.bias_term:
                fill(self.blobs.add_blob(*bias_shape), p.bias_filler)
        self.kernel_dim = prod(weight_shape[1:])
        self.engine = self.choose_engine()

    # ---- reshape -----------------------------------------------------------------------
    def reshape(self, bottom, top):
        x = bottom[0]
        first_spatial = self.channel_axis + 1
        if x.num_axes != first_spatial + self.num_spatial_axes:
            raise self.error("bottom num_axes may not change: set up with %d, got shape %s"
                             % (first_spatial + self.num_spatial_axes, x.shape))
        if x.shape[self.channel_axis] != self.channels:
            raise self.error("input size incompatible with convolution kernel: expected %d "
                             "channels on axis %d, got shape %s"
                             % (self.channels, self.channel_axis, x.shape))
        for i, b in enumerate(bottom[1:], 1):
            if b.shape != x.shape:
                raise self.error("all inputs must have the same shape: bottom 0 is %s, "
                                 "bottom %d is %s" % (x.shape, i, b.shape))
        self.num = prod(x.shape[:self.channel_axis])
        self.input_spatial = tuple(x.shape[first_spatial:])
        self.output_spatial = tuple(self.compute_output_shape())
        top_shape = tuple(x.shape[:self.channel_axis]) + (self.num_output,) + \
            self.output_spatial
        for t in top:
            t.reshape(top_shape)
        if self.reverse_dimensions():
            self.conv_input_spatial, self.conv_out_spatial = \
                self.output_spatial, self.input_spatial
        else:
            self.conv_input_spatial, self.conv_out_spatial = \
                self.input_spatial, self.output_spatial
        self.conv_out_spatial_dim = prod(self.conv_out_spatial)
        self.out_spatial_dim = prod(self.output_spatial)
        self.bottom_dim = self.channels * prod(self.input_spatial)
        self.top_dim = self.num_output * self.out_spatial_dim
        # the plan depends on nothing else that can change after setup: kept while the
        # bottom's shape is the same (Forward reshapes on every call)
        key = (x.shape, self.dtype.itemsize, self.workspace_bytes, self.engine)
        if key != self._plan_key:
            geometry = conv_ops.ConvGeometry(
                kernel=self.kernel_shape, pad=self.pad, stride=self.stride,
                dilation=self.dilation, group=self.group, in_channels=self.conv_in_channels,
                out_channels=self.conv_out_channels, in_spatial=self.conv_input_spatial,
                out_spatial=self.conv_out_spatial, num=self.num, force_nd=self.force_nd_im2col)
            self.plan = conv_ops.ConvPlan(geometry, self.dtype.itemsize, self.workspace_bytes,
                                          self.engine)
            if self.dtype == np.float16:  # NVCaffe's math types (a Net resolves them)
                lp = self.layer_param
                math = (lp.forward_math == caffe_pb2.FLOAT16, lp.backward_math ==
                        caffe_pb2.FLOAT16)
                # Deconvolution's forward is the convolution's backward and the reverse
                self.plan.half_forward, self.plan.half_backward = \
                    math[::-1] if self.reverse_dimensions() else math
            self._plan_key = key

    # ---- the bias ----------------------------------------------------------------------
    def forward_bias(self, output, bias):
        """``output += bias`` per output channel."""
        out = output.reshape(self.num, self.num_output, self.out_spatial_dim)
        out += bias.reshape(1, self.num_output, 1)

    def backward_bias(self, bias_diff, output_diff):
        """``bias_diff += output_diff`` summed over the batch and the spatial positions."""
        dy = output_diff.reshape(self.num, self.num_output, self.out_spatial_dim)
        bias_diff += dy.sum(axis=(0, 2))

