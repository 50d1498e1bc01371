"""Im2col: unfold image patches into channels (Caffe's Im2colLayer)."""

from ...backend import get_array_module
from ...errors import ShapeError
from ...layer import Layer
from ...ops.im2col import col2im, im2col, prod
from ...registry import register_layer


@register_layer("Im2col")
class Im2colLayer(Layer):
    """Rearrange every kernel-sized patch of the input into a column, as a convolution does
    before its matrix product.

    For an image ``x`` of ``C`` channels and a kernel of ``K = prod(kernel)`` offsets, output
    channel ``c * K + k`` (``k`` the row-major kernel offset) at output position ``p`` holds
    ``x[c, p * stride - pad + k_offset * dilation]`` (0 in the padding); each image's top is
    exactly Caffe's column buffer ``(C * K, prod(out_spatial))``. The output size per axis is
    ``(in + 2 * pad - (dilation * (k - 1) + 1)) // stride + 1``.

    Bottoms: x ``(..., C, *spatial)`` (``axis`` is the channel axis; the axes before it are
    the batch; at least one spatial axis).
    Tops: y ``(..., C * K, *out_spatial)``.
    Params: ``convolution_param { kernel_size | kernel_h, kernel_w  stride (1) | stride_h,
    stride_w  pad (0) | pad_h, pad_w  dilation (1)  axis (1)  force_nd_im2col (false) }``;
    ``kernel_size``/``stride``/``pad``/``dilation`` take one value for all spatial axes or one
    per axis, the ``_h``/``_w`` forms are 2-D only. ``num_output`` and the rest are ignored.
    Backward: col2im, each input position summing the gradients of every patch it appears in
    (the bottom diff is overwritten).
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def _spatial_values(self, p, name, hw, default):
        """One value per spatial axis from the repeated field ``name`` or from
        ``<hw>_h``/``<hw>_w`` (2-D only; ``hw`` None when there are no such fields)."""
        n = self.num_spatial_axes
        values = getattr(p, name)
        if hw is not None and (p.HasField(hw + "_h") or p.HasField(hw + "_w")):
            if n != 2:
                raise self.error("%s_h & %s_w can only be used for 2D convolution, the input "
                                 "has %d spatial axes" % (hw, hw, n))
            if len(values):
                raise self.error("either %s or %s_h/%s_w should be specified, not both (got "
                                 "%s: %s)" % (name, hw, hw, name, list(values)))
            return (int(getattr(p, hw + "_h")), int(getattr(p, hw + "_w")))
        if not len(values) and default is not None:
            return (default,) * n
        if len(values) not in (1, n):
            raise self.error("%s must be specified once, or once per spatial dimension (%s "
                             "specified %d times; %d spatial dims)" % (name, name, len(values), n))
        return tuple(int(values[0 if len(values) == 1 else i]) for i in range(n))

    def setup(self, bottom, top):
        p = self.layer_param.convolution_param
        x = bottom[0]
        try:
            self.channel_axis = x.canonical_axis_index(p.axis)
        except ShapeError:
            raise self.error("axis %d is out of range for a bottom of shape %s"
                             % (p.axis, x.shape)) from None
        self.num_spatial_axes = x.num_axes - self.channel_axis - 1
        if self.num_spatial_axes < 1:
            raise self.error("the input needs at least one spatial axis after the channel "
                             "axis %d, got shape %s" % (self.channel_axis, x.shape))
        self.force_nd_im2col = p.force_nd_im2col
        self.kernel_shape = self._spatial_values(p, "kernel_size", "kernel", None)
        if any(k <= 0 for k in self.kernel_shape):
            raise self.error("filter dimensions must be nonzero, got kernel %s"
                             % (self.kernel_shape,))
        self.stride = self._spatial_values(p, "stride", "stride", 1)
        if any(s <= 0 for s in self.stride):
            raise self.error("stride dimensions must be nonzero, got stride %s"
                             % (self.stride,))
        self.pad = self._spatial_values(p, "pad", "pad", 0)
        self.dilation = self._spatial_values(p, "dilation", None, 1)
        if any(d <= 0 for d in self.dilation):
            raise self.error("dilation must be positive, got %s" % (self.dilation,))

    def reshape(self, bottom, top):
        x = bottom[0]
        first = self.channel_axis + 1
        if x.num_axes != first + self.num_spatial_axes:
            raise self.error("bottom num_axes may not change: set up with %d, got shape %s"
                             % (first + self.num_spatial_axes, x.shape))
        if top[0] is x:
            raise self.error("Im2col cannot run in place (its top must be a new blob)")
        spatial = x.shape[first:]
        out = []
        for i, (n, k, p, s, d) in enumerate(zip(spatial, self.kernel_shape, self.pad,
                                                self.stride, self.dilation)):
            extent = d * (k - 1) + 1
            if n + 2 * p < extent:
                raise self.error("kernel extent %d (kernel %d, dilation %d) is larger than the "
                                 "padded input %d (size %d + 2 * pad %d) on spatial axis %d"
                                 % (extent, k, d, n + 2 * p, n, p, i))
            out.append((n + 2 * p - extent) // s + 1)
        self.num = prod(x.shape[:self.channel_axis])
        self.channels = x.shape[self.channel_axis]
        self.input_spatial = tuple(spatial)
        self.output_spatial = tuple(out)
        self.kernel_count = prod(self.kernel_shape)
        top[0].reshape(x.shape[:self.channel_axis] + (self.channels * self.kernel_count,)
                       + self.output_spatial)

    def _images(self, arr):
        return arr.reshape((self.num, self.channels) + self.input_spatial)

    def forward(self, bottom, top):
        x = self._images(bottom[0].read_data())
        y = top[0].write_data()
        rows, npix = self.channels * self.kernel_count, prod(self.output_spatial)
        if self.num == 0:
            return
        if self.num == 1:  # the column matrix is the top itself
            im2col(x, self.kernel_shape, self.pad, self.stride, self.dilation, out=y,
                   out_spatial=self.output_spatial, force_nd=self.force_nd_im2col)
            return
        # the batched columns are (C*K, N*P): image n's block goes to top[n]
        col = im2col(x, self.kernel_shape, self.pad, self.stride, self.dilation,
                     out_spatial=self.output_spatial, force_nd=self.force_nd_im2col)
        y.reshape(self.num, rows, npix)[...] = col.reshape(rows, self.num, npix).swapaxes(0, 1)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].read_diff()
        rows, npix = self.channels * self.kernel_count, prod(self.output_spatial)
        if self.num == 0:
            return
        if self.num == 1:
            col = dy
        else:
            xp = get_array_module(dy)
            col = xp.ascontiguousarray(dy.reshape(self.num, rows, npix).swapaxes(0, 1))
        dx = self._images(bottom[0].write_diff())
        col2im(col.reshape(rows, self.num * npix), dx.shape, self.kernel_shape, self.pad,
               self.stride, self.dilation, out=dx, out_spatial=self.output_spatial,
               force_nd=self.force_nd_im2col)
