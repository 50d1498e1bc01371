"""The shared base of Convolution and Deconvolution (Caffe's BaseConvolutionLayer).

It reads ``convolution_param`` (kernel, stride, pad, dilation, group, bias, axis), creates and
checks the weight and bias blobs, shapes the tops, and provides the im2col + matrix-product
kernels on whole batches:

- ``forward_gemm(input, weights, output, bias=None)``: ``output = W * im2col(input)``
  (``+ bias`` per output channel when given);
- ``backward_gemm(output, weights, input)``: ``input = col2im(W^T * output)``;
- ``weight_gemm(input, output, weight_diff)``: ``weight_diff += output * im2col(input)^T``;
- ``forward_bias(output, bias)`` and ``backward_bias(bias_diff, output_diff)``;
- fused forms that share one im2col per chunk: ``backward_and_weight_gemm`` (Convolution's
  backward) and ``forward_and_weight_gemm`` (Deconvolution's backward).

"input" is always the im2col side (``conv_in_channels`` channels of spatial shape
``conv_input_spatial``) and "output" the matrix-product side (``conv_out_channels`` channels of
``conv_out_spatial``); arrays are ``(num, channels, *spatial)``. A Convolution reads its bottom
as input; a Deconvolution (``reverse_dimensions() -> True``) swaps the roles, as in Caffe.

Batches are processed in chunks of images whose column buffer stays under
``workspace_bytes``; the buffers are kept between calls and shared by all convolution layers
of a thread (layers run one at a time), so a deep net holds one workspace, not one per
layer. Per chunk there is one im2col (a loop over kernel offsets), one matrix product per
group (a single stacked ``matmul``) and one col2im. 1x1 kernels with stride 1 and no padding
skip im2col: the input is the column matrix, taken one image at a time in place.
"""

import threading

import numpy as np

from ...backend import get_array_module
from ...fillers import fill
from ...layer import Layer
from ...ops import cpu as _cpu
from ...ops.im2col import col2im, col2im_batch_last, im2col, im2col_batch_last

_shared = threading.local()


def _workspace():
    """This thread's reusable buffers, by name."""
    ws = getattr(_shared, "buffers", None)
    if ws is None:
        ws = _shared.buffers = {}
    return ws


# Moving the batch axis between first and last is a transposing copy; done a few channels
# at a time, the strided side of each block stays in cache (about 4x faster than one copy).
_BLOCK_ELEMENTS = 1 << 17


def _batch_to_first(dst, src, bias=None):
    """``dst (B, C, P) = src (C, P, B)`` moved axis by axis, in cache-sized channel blocks
    (``+ bias[c]`` when given)."""
    nc, npix, nb = src.shape
    step = max(1, _BLOCK_ELEMENTS // max(1, npix * nb))
    for c in range(0, nc, step):
        dst[:, c:c + step] = src[c:c + step].transpose(2, 0, 1)
    if bias is not None:
        dst += bias.reshape(1, nc, 1)


def _batch_to_last(dst, src):
    """``dst (C, P, B) = src (B, C, P)``, in cache-sized channel blocks."""
    nb, nc, npix = src.shape
    step = max(1, _BLOCK_ELEMENTS // max(1, npix * nb))
    for c in range(0, nc, step):
        dst[c:c + step] = src[:, c:c + step].transpose(1, 2, 0)


def _prod(values):
    n = 1
    for v in values:
        n *= int(v)
    return n


class BaseConvolutionLayer(Layer):
    """Shared machinery of Convolution and Deconvolution; not a layer type by itself.

    Bottoms: one or more blobs of identical shape ``(..., C, *spatial)`` (``axis`` is C).
    Tops: as many as bottoms.
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

    # ---- what subclasses define --------------------------------------------------------
    def reverse_dimensions(self):
        """True for Deconvolution: the top is the im2col side."""
        return False

    def compute_output_shape(self):
        """The top's spatial shape from ``self.input_spatial`` (the bottom's)."""
        raise NotImplementedError

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
        self.is_1x1 = all(k == 1 and s == 1 and q == 0
                          for k, s, q in zip(self.kernel_shape, self.stride, self.pad))

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
        self.kernel_dim = _prod(weight_shape[1:])

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
        self.num = _prod(x.shape[:self.channel_axis])
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
        self.conv_out_spatial_dim = _prod(self.conv_out_spatial)
        self.out_spatial_dim = _prod(self.output_spatial)
        self.bottom_dim = self.channels * _prod(self.input_spatial)
        self.top_dim = self.num_output * self.out_spatial_dim
        per_image = max(self.kernel_dim * self.group, self.conv_out_channels) * \
            self.conv_out_spatial_dim * self.dtype.itemsize
        self.chunk = int(max(1, min(self.num, self.workspace_bytes // max(per_image, 1))))
        if self.is_1x1:
            # The input is the column matrix: image by image, each product reads the bottom
            # and writes the top in place, where a batch would first move both between
            # layouts (2-4x slower for GoogLeNet's 1x1 layers at batch 4, never faster).
            self.chunk = 1

    # ---- buffers and layouts -----------------------------------------------------------
    def _buffer(self, name, size, xp, dtype):
        """A flat reusable array of at least ``size`` elements (first ``size`` returned)."""
        ws = _workspace()
        key = (name, xp.__name__, str(dtype))
        buf = ws.get(key)
        if buf is None or buf.size < size:
            buf = xp.empty(size, dtype=dtype)
            ws[key] = buf
        return buf[:size]

    def _batched(self, arr, channels, spatial):
        """``arr`` viewed as ``(num, channels, P)``."""
        return arr.reshape(self.num, channels, _prod(spatial))

    @staticmethod
    def _batch_last(xp, nb):
        """Column order of a chunk's matrices: ``(P, B)`` ("batch last") for host arrays of
        several images when the NumPy code runs im2col/col2im: its copies are then runs of
        ``out_w * B`` values instead of ``out_w``; ``(B, P)`` otherwise (the compiled host
        kernels and the device kernels), where the tops and bottoms move to and from the
        matrix products as runs of ``P`` values instead of transposes."""
        return nb > 1 and xp is np and not _cpu.kernels_enabled()

    def _columns(self, inp, xp):
        """The column matrix of an input chunk ``(B, Cin, P_in)``, as ``(G, Kd, B * P)``
        (columns in ``_batch_last`` order), built in the shared workspace."""
        nb = inp.shape[0]
        g, kd, npix = self.group, self.kernel_dim, self.conv_out_spatial_dim
        size = g * kd * nb * npix
        last = self._batch_last(xp, nb)
        if self.is_1x1:
            if nb == 1:
                return inp.reshape(g, kd, npix)
            col = self._buffer("col", size, xp, inp.dtype)
            if last:
                _batch_to_last(col.reshape(kd * g, npix, nb), inp)
            else:
                col.reshape(kd * g, nb, npix)[...] = inp.swapaxes(0, 1)
            return col.reshape(g, kd, nb * npix)
        col = self._buffer("col", size, xp, inp.dtype)
        images = inp.reshape((nb, self.conv_in_channels) + tuple(self.conv_input_spatial))
        if last:
            im2col_batch_last(images, self.kernel_shape, self.pad, self.stride, self.dilation,
                              out=col, out_spatial=self.conv_out_spatial)
        else:
            im2col(images, self.kernel_shape, self.pad, self.stride, self.dilation, out=col,
                   out_spatial=self.conv_out_spatial, force_nd=self.force_nd_im2col)
        return col.reshape(g, kd, nb * npix)

    def _uncolumns(self, col, inp, xp):
        """Write the column matrix ``(G, Kd, B * P)`` back into an input chunk (col2im)."""
        nb = inp.shape[0]
        last = self._batch_last(xp, nb)
        if self.is_1x1:
            if last:
                _batch_to_first(inp, col.reshape(self.conv_in_channels, -1, nb))
            else:
                inp[...] = col.reshape(self.conv_in_channels, nb, -1).swapaxes(0, 1)
            return
        images = inp.reshape((nb, self.conv_in_channels) + tuple(self.conv_input_spatial))
        fold = col2im_batch_last if last else col2im
        extra = {} if last else {"force_nd": self.force_nd_im2col}
        fold(col.reshape(self.group * self.kernel_dim, -1), images.shape, self.kernel_shape,
             self.pad, self.stride, self.dilation, out=images,
             out_spatial=self.conv_out_spatial, **extra)

    def _gemm_layout(self, out, xp, name="gemm"):
        """An output chunk ``(B, Cout, P)`` as ``(G, Mg, B * P)`` (a copy unless B == 1)."""
        nb, _, npix = out.shape
        g = self.group
        mg = self.conv_out_channels // g
        if nb == 1:
            return out.reshape(g, mg, npix)
        buf = self._buffer(name, g * mg * nb * npix, xp, out.dtype)
        if self._batch_last(xp, nb):
            _batch_to_last(buf.reshape(g * mg, npix, nb), out.reshape(nb, g * mg, npix))
        else:
            buf.reshape(g, mg, nb, npix)[...] = \
                out.reshape(nb, g, mg, npix).transpose(1, 2, 0, 3)
        return buf.reshape(g, mg, nb * npix)

    def _weights(self, weights):
        g = self.group
        return weights.reshape(g, self.conv_out_channels // g, self.kernel_dim)

    def _matmul(self, a, b, out):
        """``a @ b`` over the group axis, written into ``out``."""
        xp = get_array_module(a)
        if a.shape[0] == 1:
            xp.matmul(a[0], b[0], out=out[0])
        else:
            xp.matmul(a, b, out=out)

    def _accumulate_weight_grad(self, weight_diff, dy, col):
        """``weight_diff += dy * col^T`` per group, computed as ``(col * dy^T)^T``: OpenBLAS
        is markedly faster with the long reduction axis on that side for conv shapes."""
        xp = get_array_module(dy)
        g = self.group
        wd = weight_diff.reshape(g, self.conv_out_channels // g, self.kernel_dim)
        wd += xp.matmul(col, dy.transpose(0, 2, 1)).transpose(0, 2, 1)

    def _chunks(self):
        for start in range(0, self.num, self.chunk):
            yield start, min(self.num, start + self.chunk)

    # ---- batch kernels -----------------------------------------------------------------
    def forward_gemm(self, input, weights, output, bias=None):
        """``output = W * im2col(input) (+ bias)`` for the whole batch (overwrites
        ``output``)."""
        self.forward_and_weight_gemm(input, weights, output=output, bias=bias)

    def forward_and_weight_gemm(self, input, weights, output=None, grad_output=None,
                                weight_diff=None, bias=None):
        """One im2col of ``input`` per chunk, used for ``output = W * col (+ bias)`` (when
        ``output`` is given) and for ``weight_diff += grad_output * col^T`` (when
        ``weight_diff`` is given; ``grad_output`` is then on the output side)."""
        xp = get_array_module(input)
        inp = self._batched(input, self.conv_in_channels, self.conv_input_spatial)
        w = None if output is None else self._weights(weights)
        g, mg, npix = self.group, self.conv_out_channels // self.group, self.conv_out_spatial_dim
        res_all = None if output is None else \
            self._batched(output, self.conv_out_channels, self.conv_out_spatial)
        dy_all = None if weight_diff is None else \
            self._batched(grad_output, self.conv_out_channels, self.conv_out_spatial)
        for start, stop in self._chunks():
            nb = stop - start
            col = self._columns(inp[start:stop], xp)
            if weight_diff is not None:
                dy = self._gemm_layout(dy_all[start:stop], xp)
                self._accumulate_weight_grad(weight_diff, dy, col)
            if output is not None:
                res = res_all[start:stop]
                if nb == 1:
                    self._matmul(w, col, res.reshape(g, mg, npix))
                else:
                    buf = self._buffer("gemm", g * mg * nb * npix, xp, col.dtype)
                    buf = buf.reshape(g, mg, nb * npix)
                    self._matmul(w, col, buf)
                    if self._batch_last(xp, nb):
                        _batch_to_first(res.reshape(nb, g * mg, npix),
                                        buf.reshape(g * mg, npix, nb), bias)
                        continue
                    moved = buf.reshape(g, mg, nb, npix).transpose(2, 0, 1, 3)
                    if bias is None:
                        res.reshape(nb, g, mg, npix)[...] = moved
                    else:  # the bias added on the way
                        xp.add(moved, bias.reshape(1, g, mg, 1),
                               out=res.reshape(nb, g, mg, npix))
                    continue
                if bias is not None:
                    res.reshape(nb, self.num_output, npix)[...] += \
                        bias.reshape(1, self.num_output, 1)

    def backward_gemm(self, output, weights, input):
        """``input = col2im(W^T * output)`` for the whole batch (overwrites ``input``)."""
        self.backward_and_weight_gemm(None, output, weights, input_diff=input)

    def weight_gemm(self, input, output, weight_diff):
        """``weight_diff += output * im2col(input)^T`` summed over the batch."""
        self.forward_and_weight_gemm(input, None, grad_output=output, weight_diff=weight_diff)

    def backward_and_weight_gemm(self, input, output_diff, weights, input_diff=None,
                                 weight_diff=None):
        """Convolution's backward on a batch, sharing the relayout of ``output_diff``:
        ``weight_diff += output_diff * im2col(input)^T`` (when ``weight_diff`` is given) and
        ``input_diff = col2im(W^T * output_diff)`` (when ``input_diff`` is given)."""
        xp = get_array_module(output_diff)
        dy_all = self._batched(output_diff, self.conv_out_channels, self.conv_out_spatial)
        inp = None if weight_diff is None else \
            self._batched(input, self.conv_in_channels, self.conv_input_spatial)
        dx_all = None if input_diff is None else \
            self._batched(input_diff, self.conv_in_channels, self.conv_input_spatial)
        w = None if weights is None else self._weights(weights)
        g, kd = self.group, self.kernel_dim
        for start, stop in self._chunks():
            nb = stop - start
            dy = self._gemm_layout(dy_all[start:stop], xp)
            if weight_diff is not None:
                col = self._columns(inp[start:stop], xp)
                self._accumulate_weight_grad(weight_diff, dy, col)
            if input_diff is not None:
                dx = dx_all[start:stop]
                wt = w.transpose(0, 2, 1)
                if self.is_1x1 and nb == 1:
                    self._matmul(wt, dy, dx.reshape(g, kd, -1))
                    continue
                dcol = self._buffer("col", g * kd * nb * self.conv_out_spatial_dim, xp,
                                    dy.dtype).reshape(g, kd, -1)
                self._matmul(wt, dy, dcol)
                self._uncolumns(dcol, dx, xp)

    def forward_bias(self, output, bias):
        """``output += bias`` per output channel."""
        out = output.reshape(self.num, self.num_output, self.out_spatial_dim)
        out += bias.reshape(1, self.num_output, 1)

    def backward_bias(self, bias_diff, output_diff):
        """``bias_diff += output_diff`` summed over the batch and the spatial positions."""
        dy = output_diff.reshape(self.num, self.num_output, self.out_spatial_dim)
        bias_diff += dy.sum(axis=(0, 2))

