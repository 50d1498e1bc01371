"""Convolution as im2col and matrix products over whole batches, and the one place where its
implementation is chosen.

A layer (Convolution, Deconvolution) describes its geometry once per reshape with a
:class:`ConvGeometry` and calls :func:`forward`, :func:`backward` and
:func:`forward_and_weight` with arrays; these pick the implementation from the arrays and the
geometry, and the layer never learns which one ran:

- cuDNN, when the geometry's engine (chosen once in the layer's setup, see
  :func:`pycaffe_lite.ops.gpu.cudnn.choose_engine`) is CUDNN and cuDNN takes the arrays;
- on host arrays with the compiled kernels (:mod:`pycaffe_lite.ops.cpu.convolution`): the
  direct depthwise kernels when ``group == in_channels == out_channels`` (2-D; forward and
  gradients), and Winograd's F(4x4, 3x3) or F(2x2, 3x3) for the forward of 3x3, stride 1,
  dilation 1 convolutions where it pays (:func:`_winograd_pays`; group by group), and for
  their gradient with respect to the input (the same kind of convolution); both equal the
  matrix-product path to float rounding (Winograd within the bounds its tests state);
- else im2col + GEMM, whose column matrix is laid out for the arrays at hand:
  ``(B, P)`` "batch first" (Caffe's per-image layout with the images side by side) for device
  arrays and for host arrays with the compiled kernels, where the tops and bottoms move to and
  from the matrix products as runs of ``P`` values; ``(P, B)`` "batch last" for host arrays of
  several images when NumPy runs im2col/col2im, whose copies are then runs of ``out_w * B``
  values instead of ``out_w`` (about twice as fast for LeNet's training step).

"input" is always the im2col side (``in_channels`` channels of spatial shape ``in_spatial``)
and "output" the matrix-product side (``out_channels`` channels of ``out_spatial``); arrays are
``(num, channels, *spatial)``. A Convolution reads its bottom as input; a Deconvolution swaps
the roles, as in Caffe.

Batches are processed in chunks of images whose column buffer stays under
``workspace_bytes``; the buffers are kept between calls and shared by all convolutions of a
thread (layers run one at a time), so a deep net holds one workspace, not one per layer. Per
chunk there is one im2col (a loop over kernel offsets), one matrix product per group (a single
stacked ``matmul``) and one col2im. 1x1 kernels with stride 1 and no padding skip im2col: the
input is the column matrix, taken one image at a time in place.
"""

import threading

import numpy as np

from ..backend import get_array_module
from . import cpu as _cpu
from . import pointwise as _pointwise
from .cpu import convolution as _cpu_conv
from .gpu import cudnn as _cudnn
from .im2col import col2im, col2im_batch_last, im2col, im2col_batch_last, prod
from .relu import bias_relu

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


class ConvGeometry:
    """A convolution's shape on one batch: kernel, pad, stride, dilation (one value per spatial
    axis), ``group``, the channels and spatial shapes of the im2col side (``in_*``) and the
    product side (``out_*``), the batch size ``num``, and the ``engine`` (CAFFE or CUDNN, see
    :mod:`pycaffe_lite.ops.gpu.cudnn`). ``chunk``: images per chunk, from ``workspace_bytes``
    and the element size ``itemsize``."""

    def __init__(self, kernel, pad, stride, dilation, group, in_channels, out_channels,
                 in_spatial, out_spatial, num, itemsize, workspace_bytes, force_nd=False,
                 engine=_cudnn.CAFFE):
        self.kernel_shape = tuple(int(v) for v in kernel)
        self.pad = tuple(int(v) for v in pad)
        self.stride = tuple(int(v) for v in stride)
        self.dilation = tuple(int(v) for v in dilation)
        self.group = int(group)
        self.conv_in_channels = int(in_channels)
        self.conv_out_channels = int(out_channels)
        self.conv_input_spatial = tuple(int(v) for v in in_spatial)
        self.conv_out_spatial = tuple(int(v) for v in out_spatial)
        self.num = int(num)
        self.force_nd_im2col = bool(force_nd)
        self.engine = engine
        self.kernel_dim = self.conv_in_channels // self.group * prod(self.kernel_shape)
        self.conv_out_spatial_dim = prod(self.conv_out_spatial)
        self.is_1x1 = all(k == 1 and s == 1 and q == 0
                          for k, s, q in zip(self.kernel_shape, self.stride, self.pad))
        two_d = len(self.kernel_shape) == 2
        # one filter per channel: the direct depthwise kernels (host arrays)
        self.is_depthwise = two_d and self.group == self.conv_in_channels == \
            self.conv_out_channels
        per_image = max(self.kernel_dim * self.group, self.conv_out_channels) * \
            self.conv_out_spatial_dim * int(itemsize)
        self.chunk = int(max(1, min(self.num, workspace_bytes // max(per_image, 1))))
        if self.is_1x1:
            # The input is the column matrix: image by image, each product reads the bottom
            # and writes the top in place, where a batch would first move both between
            # layouts (2-4x slower for GoogLeNet's 1x1 layers at batch 4, never faster).
            self.chunk = 1
        # Winograd's F(4x4, 3x3) or F(2x2, 3x3) takes the forward where it pays (host
        # arrays), in chunks whose transforms ((tile + 2)^2 values per tile and channel of a
        # group, in and out) fit the workspace; winograd_tile: 4, 2 or 0 (im2col + GEMM).
        # The gradient with respect to the input is the same kind of convolution (the output
        # side's gradient with the filters turned around, padded by 2 - pad): winograd_back_*.
        self.winograd_tile = self.winograd_back_tile = 0
        if two_d and self.kernel_shape == (3, 3) and self.stride == (1, 1) and \
                self.dilation == (1, 1):
            g, cin, cout = self.group, self.conv_in_channels, self.conv_out_channels
            self.winograd_tile, self.winograd_chunk = _winograd_choice(
                cin // g, cout // g, self.conv_out_spatial, self.num, itemsize, workspace_bytes)
            if max(self.pad) <= 2:
                self.winograd_back_tile, self.winograd_back_chunk = _winograd_choice(
                    cout // g, cin // g, self.conv_input_spatial, self.num, itemsize,
                    workspace_bytes)
        self.winograd = self.winograd_tile > 0

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
        return arr.reshape(self.num, channels, prod(spatial))

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

    def _forward_and_weight(self, input, weights, output=None, grad_output=None,
                                weight_diff=None, bias=None, relu=False):
        """One im2col of ``input`` per chunk, used for ``output = W * col (+ bias)`` (when
        ``output`` is given; ``max(., 0)`` of it when ``relu``) and for ``weight_diff +=
        grad_output * col^T`` (when ``weight_diff`` is given; ``grad_output`` is then on the
        output side)."""
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
                    else:
                        moved = buf.reshape(g, mg, nb, npix).transpose(2, 0, 1, 3)
                        if bias is None:
                            res.reshape(nb, g, mg, npix)[...] = moved
                        else:  # the bias added on the way
                            xp.add(moved, bias.reshape(1, g, mg, 1),
                                   out=res.reshape(nb, g, mg, npix))
                    if relu:
                        bias_relu(res, res)
                    continue
                bias_relu(res, res, bias, relu)

    def _backward_and_weight(self, input, output_diff, weights, input_diff=None,
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


    # ---- the compiled kernels that are not im2col + GEMM ---------------------------------
    def _images(self, arr, channels, spatial):
        """``arr`` viewed as ``(num, channels, *spatial)``."""
        return arr.reshape((self.num, channels) + tuple(spatial))

    def _direct_args(self):
        return (self.kernel_shape, self.pad, self.stride, self.dilation, self.conv_out_spatial)

    def _depthwise(self, x=None, weights=None, y=None, dy=None, dx=None, dw=None, bias=None):
        """The depthwise kernels: ``y = conv(x) (+ bias)``, ``dw += dconv/dw (x, dy)`` and
        ``dx = dconv/dx (dy)``, for those given."""
        cin, cout = self.conv_in_channels, self.conv_out_channels
        ins, outs = self.conv_input_spatial, self.conv_out_spatial
        if bias is not None:
            bias = bias.reshape(-1)
        if y is not None:
            _cpu_conv.depthwise_forward(self._images(x, cin, ins), weights, bias,
                                        self._images(y, cout, outs), *self._direct_args())
        if dw is not None:
            _cpu_conv.depthwise_backward_weight(self._images(x, cin, ins),
                                                self._images(dy, cout, outs), dw,
                                                *self._direct_args())
        if dx is not None:
            _cpu_conv.depthwise_backward_data(self._images(dy, cout, outs), weights,
                                              self._images(dx, cin, ins), *self._direct_args())

    def _winograd_forward(self, x, weights, y, bias=None):
        """``y = conv(x) (+ bias)`` through Winograd's F(4x4, 3x3) or F(2x2, 3x3)
        (``winograd_tile``), a chunk of images at a time, its transforms in the shared
        workspace."""
        self._winograd(self._images(x, self.conv_in_channels, self.conv_input_spatial),
                       weights, bias, self._images(y, self.conv_out_channels,
                                                   self.conv_out_spatial),
                       self.pad, self.conv_out_spatial, self.winograd_tile,
                       self.winograd_chunk)

    def _winograd_backward_data(self, dy, weights, dx):
        """``dx`` = the gradient of the convolution with respect to its input, from ``dy``,
        through Winograd (``winograd_back_tile``): ``dy`` convolved with each group's filters
        transposed (input and output channels swapped) and turned by 180 degrees, padded by
        ``2 - pad``."""
        g, cin, cout = self.group, self.conv_in_channels, self.conv_out_channels
        turned = weights.reshape(g, cout // g, cin // g, 3, 3).transpose(0, 2, 1, 3, 4)
        turned = np.ascontiguousarray(turned[..., ::-1, ::-1]).reshape(cin, cout // g, 3, 3)
        self._winograd(self._images(dy, cout, self.conv_out_spatial), turned, None,
                       self._images(dx, cin, self.conv_input_spatial),
                       tuple(2 - p for p in self.pad), self.conv_input_spatial,
                       self.winograd_back_tile, self.winograd_back_chunk)

    def _winograd(self, images, weights, bias, out, pad, out_spatial, tile, chunk):
        nk, nc = out.shape[1], images.shape[1]
        g = self.group
        if bias is not None:
            bias = bias.reshape(-1)
        dtype = images.dtype
        products = (tile + 2) ** 2
        _, _, tiles = _cpu_conv.winograd_tiles(chunk, out_spatial, tile)
        u = self._buffer("winograd_u", products * (nk // g) * (nc // g), np, dtype)
        v = self._buffer("col", products * (nc // g) * tiles, np, dtype)
        m = self._buffer("gemm", products * (nk // g) * tiles, np, dtype)
        for start in range(0, self.num, chunk):
            stop = min(self.num, start + chunk)
            _cpu_conv.winograd_forward(images[start:stop], weights, bias, out[start:stop],
                                       pad, out_spatial, u, v, m, tile, g)


# Winograd against im2col + GEMM, measured on a quiet 2-core AVX2 machine, two threads, on
# the 3x3 layers of VGG-16, ResNet-50, GoogLeNet, SqueezeNet and CaffeNet
# (benchmarks/bench_kernels.py, batch 1, time / GEMM's time) and on whole nets. F(4x4, 3x3)
# (2.25 multiplications per output against 9): 0.58-0.79 on 56x56 to 224x224 maps; on 28x28
# maps F(2x2, 3x3) (4 per output) does as well or better (VGG's conv4: 0.77-0.79 against
# 0.92-0.98; ResNet-50's res3 and GoogLeNet's 3a/3b 0.74-0.79 both): F(4x4)'s filter
# transform (36 values per filter and input channel, made every call) weighs more there, and
# on 14x14 maps its partial tiles (16x16 of tiles) too. F(2x2) pays once a chunk has 196
# tiles (a 28x28 map, or batch 4 and up at 14x14: 0.61-0.77); at batch 1 on 14x14 maps it is
# at par with the GEMM (0.90-1.21), and on 7x7 maps 1.6-2.3x slower. Both need 64 input
# channels per group: with fewer (SqueezeNet's 16-48, VGG's conv1_1 with 3) the transforms
# outweigh the products (single layers 0.85-1.16, whole nets 5-8% slower).
_WINOGRAD_RULES = {4: {"channels": 64, "side": 48, "tiles": 36},
                   2: {"channels": 64, "side": 2, "tiles": 196}}


def _winograd_choice(in_channels, out_channels, out_spatial, num, itemsize, workspace_bytes):
    """``(tile, images per chunk)`` of the Winograd variant that pays for a 3x3, stride 1,
    dilation 1 convolution of ``in_channels`` to ``out_channels`` per group, ``(0, 0)`` when
    none does (the chunks' transforms fit ``workspace_bytes``)."""
    for tile in (4, 2):
        tiles = _cpu_conv.winograd_tiles(1, out_spatial, tile)[2]
        per_image = (tile + 2) ** 2 * (in_channels + out_channels) * tiles * int(itemsize)
        chunk = int(max(1, min(num, workspace_bytes // per_image)))
        if _winograd_pays(tile, in_channels, out_spatial, chunk):
            return tile, chunk
    return 0, 0


def _winograd_pays(tile, in_channels, out_spatial, images):
    """Whether Winograd's F(tile x tile, 3x3) is faster than im2col + GEMM for a chunk of
    ``images`` (the 3x3, stride 1, dilation 1 geometry being given; ``in_channels`` per
    group)."""
    rule = _WINOGRAD_RULES[tile]
    tiles = _cpu_conv.winograd_tiles(images, out_spatial, tile)[2]
    return in_channels >= rule["channels"] and min(out_spatial) >= rule["side"] and \
        tiles >= rule["tiles"] and out_spatial[1] <= _cpu_conv.WINOGRAD_MAX_WIDTH


# ---- the entry points ------------------------------------------------------------------------
def forward(x, weights, y, geom, bias=None, relu=False):
    """``y = W * im2col(x) (+ bias per output channel)`` for the whole batch (overwrites
    ``y``); then ``y = max(y, 0)`` when ``relu`` (a ReLU folded into the convolution, see
    :mod:`pycaffe_lite.net_fold`)."""
    if _cudnn.conv_takes(geom.engine, x, weights, y, bias):
        _cudnn.conv_forward(x, weights, bias, y, geom.pad, geom.stride, geom.dilation,
                            geom.group)
    elif geom.is_depthwise and _cpu.supported(x, weights, y, bias):
        geom._depthwise(x, weights, y=y, bias=bias)
    elif _pointwise.takes(geom, x, weights, y, bias):  # narrow 1x1 layers: ops/pointwise.py
        _pointwise.forward(x, weights, y, bias, relu)
        return
    elif geom.winograd and _cpu_conv.winograd_enabled() and _cpu.supported(x, weights, y,
                                                                          bias):
        geom._winograd_forward(x, weights, y, bias=bias)
    else:
        geom._forward_and_weight(x, weights, output=y, bias=bias, relu=relu)
        return
    if relu:
        bias_relu(y, y)


def backward(x, dy, weights, geom, dx=None, dw=None):
    """The gradients of :func:`forward` (sharing the relayout of ``dy``): ``dw += dy *
    im2col(x)^T`` when ``dw`` is given, ``dx = col2im(W^T * dy)`` when ``dx`` is given (``x``
    is needed only for ``dw``)."""
    if _cudnn.conv_takes(geom.engine, x, dy, weights, dx, dw):
        _cudnn.conv_backward(x, dy, weights, dx, dw, geom.pad, geom.stride, geom.dilation,
                             geom.group)
        return
    if geom.is_depthwise and _cpu.supported(x if dw is not None else None, dy, weights, dx,
                                            dw):
        geom._depthwise(x, weights, dy=dy, dx=dx, dw=dw)
        return
    if dx is not None and geom.winograd_back_tile and _cpu_conv.winograd_enabled() and \
            _cpu.supported(dy, weights, dx):
        geom._winograd_backward_data(dy, weights, dx)
        if dw is not None:
            geom._backward_and_weight(x, dy, weights, weight_diff=dw)
        return
    geom._backward_and_weight(x, dy, weights, input_diff=dx, weight_diff=dw)


def forward_and_weight(x, weights, geom, y=None, dy=None, dw=None, bias=None):
    """One im2col of ``x`` per chunk, used for ``y = W * col (+ bias)`` (when ``y`` is given)
    and for ``dw += dy * col^T`` (when ``dw`` is given; ``dy`` is then on the output side):
    Deconvolution's backward."""
    if geom.is_depthwise and _cpu.supported(x, weights if y is not None else None, y, dy, dw,
                                            bias):
        geom._depthwise(x, weights, y=y, dy=dy, dw=dw, bias=bias)
        return
    geom._forward_and_weight(x, weights, output=y, grad_output=dy, weight_diff=dw, bias=bias)
