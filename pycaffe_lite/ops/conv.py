"""Convolution as im2col and matrix products over whole batches, and the one place where its
implementation is chosen.

A layer (Convolution, Deconvolution) describes its batch once per reshape with a
:class:`ConvGeometry` (the shapes: data only) and a :class:`ConvPlan` over it (the choices made
from the shapes alone: engine, images per chunk, which Winograd variant pays), and calls
:func:`forward`, :func:`backward` and :func:`forward_and_weight` with arrays and the plan;
these pick the implementation from the arrays and the plan, and the layer never learns which
one ran:

- cuDNN, when the geometry's engine (chosen once in the layer's setup, see
  :func:`pycaffe_lite.ops.gpu.cudnn.choose_engine`) is CUDNN and cuDNN takes the arrays;
- on host arrays with the compiled kernels (:mod:`pycaffe_lite.ops.cpu.convolution`): the
  direct depthwise kernels when ``group == in_channels == out_channels`` (2-D; forward and
  gradients), and Winograd's F(4x4, 3x3) or F(2x2, 3x3) for the forward of 3x3, stride 1,
  dilation 1 convolutions where it pays (:func:`_winograd_pays`, recorded in the plan; group
  by group), and for
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
from .matmul import matmul
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
    """A convolution's shapes on one batch (data only): ``kernel``, ``pad``, ``stride``,
    ``dilation`` (one value per spatial axis), ``group``, the channels and spatial shape of the
    im2col side (``in_channels``, ``in_spatial``) and of the product side (``out_channels``,
    ``out_spatial``), the batch size ``num``, and ``force_nd`` (Caffe's force_nd_im2col).
    The attributes keep Caffe's names (``kernel_shape``, ``conv_in_channels``, ...), with the
    sizes derived from them."""

    def __init__(self, *, kernel, pad, stride, dilation, group, in_channels, out_channels,
                 in_spatial, out_spatial, num, force_nd=False):
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
        self.kernel_dim = self.conv_in_channels // self.group * prod(self.kernel_shape)
        self.conv_out_spatial_dim = prod(self.conv_out_spatial)
        self.is_1x1 = all(k == 1 and s == 1 and q == 0
                          for k, s, q in zip(self.kernel_shape, self.stride, self.pad))
        two_d = len(self.kernel_shape) == 2
        # one filter per channel: the direct depthwise kernels (host arrays)
        self.is_depthwise = two_d and self.group == self.conv_in_channels == \
            self.conv_out_channels
        # the shape Winograd's F(m x m, 3x3) computes
        self.is_3x3_unit_stride = two_d and self.kernel_shape == (3, 3) and \
            self.stride == (1, 1) and self.dilation == (1, 1)


class ConvPlan:
    """How a :class:`ConvGeometry` is computed, chosen from the shapes alone once per
    geometry: the ``engine`` (CAFFE or CUDNN, resolved by the layer's setup, see
    :mod:`pycaffe_lite.ops.gpu.cudnn`); ``chunk``, the images per im2col chunk, from
    ``workspace_bytes`` and the element size ``itemsize``; and the Winograd variant that pays
    on host arrays for the forward (``winograd_tile``: 4, 2 or 0 for im2col + GEMM, with
    ``winograd_chunk`` images per chunk) and for the gradient with respect to the input
    (``winograd_back_tile``, ``winograd_back_chunk``). What runs is decided per call from the
    arrays as well (device or host, the compiled kernels built and enabled)."""

    def __init__(self, geometry, itemsize, workspace_bytes, engine=_cudnn.CAFFE):
        g = self.geometry = geometry
        self.engine = engine
        # NVCaffe's math types FLOAT16 on float16 arrays: cuDNN accumulates in float16 in
        # what forward() (and forward_and_weight()) and backward() run
        self.half_forward = self.half_backward = False
        per_image = max(g.kernel_dim * g.group, g.conv_out_channels) * \
            g.conv_out_spatial_dim * int(itemsize)
        self.chunk = int(max(1, min(g.num, workspace_bytes // max(per_image, 1))))
        if g.is_1x1:
            # The input is the column matrix: image by image, each product reads the bottom
            # and writes the top in place, where a batch would first move both between
            # layouts (2-4x slower for GoogLeNet's 1x1 layers at batch 4, never faster).
            self.chunk = 1
        # Winograd's F(4x4, 3x3) or F(2x2, 3x3) takes the forward where it pays, in chunks
        # whose transforms ((tile + 2)^2 values per tile and channel of a group, in and out)
        # fit the workspace. The gradient with respect to the input is the same kind of
        # convolution (the output side's gradient with the filters turned around, padded by
        # 2 - pad).
        self.winograd_tile = self.winograd_chunk = 0
        self.winograd_back_tile = self.winograd_back_chunk = 0
        if g.is_3x3_unit_stride:
            cin, cout = g.conv_in_channels // g.group, g.conv_out_channels // g.group
            self.winograd_tile, self.winograd_chunk = _winograd_choice(
                cin, cout, g.conv_out_spatial, g.num, itemsize, workspace_bytes)
            if max(g.pad) <= 2:
                self.winograd_back_tile, self.winograd_back_chunk = _winograd_choice(
                    cout, cin, g.conv_input_spatial, g.num, itemsize, workspace_bytes)
        self.winograd = self.winograd_tile > 0


# ---- im2col + GEMM -----------------------------------------------------------------------
def _buffer(name, size, xp, dtype):
    """A flat reusable array of at least ``size`` elements (first ``size`` returned)."""
    ws = _workspace()
    key = (name, xp.__name__, str(dtype))
    buf = ws.get(key)
    if buf is None or buf.size < size:
        buf = xp.empty(size, dtype=dtype)
        ws[key] = buf
    return buf[:size]


def _batched(g, arr, channels, spatial):
    """``arr`` viewed as ``(num, channels, P)``."""
    return arr.reshape(g.num, channels, prod(spatial))


def _batch_last(xp, nb):
    """Column order of a chunk's matrices: ``(P, B)`` ("batch last") for host arrays of
    several images when the NumPy code runs im2col/col2im: its copies are then runs of
    ``out_w * B`` values instead of ``out_w``; ``(B, P)`` otherwise (the compiled host
    kernels and the device kernels), where the tops and bottoms move to and from the
    matrix products as runs of ``P`` values instead of transposes."""
    return nb > 1 and xp is np and not _cpu.kernels_enabled()


def _columns(g, inp, xp):
    """The column matrix of an input chunk ``(B, Cin, P_in)``, as ``(G, Kd, B * P)``
    (columns in ``_batch_last`` order), built in the shared workspace."""
    nb = inp.shape[0]
    groups, kd, npix = g.group, g.kernel_dim, g.conv_out_spatial_dim
    size = groups * kd * nb * npix
    last = _batch_last(xp, nb)
    if g.is_1x1:
        if nb == 1:
            return inp.reshape(groups, kd, npix)
        col = _buffer("col", size, xp, inp.dtype)
        if last:
            _batch_to_last(col.reshape(kd * groups, npix, nb), inp)
        else:
            col.reshape(kd * groups, nb, npix)[...] = inp.swapaxes(0, 1)
        return col.reshape(groups, kd, nb * npix)
    col = _buffer("col", size, xp, inp.dtype)
    images = inp.reshape((nb, g.conv_in_channels) + tuple(g.conv_input_spatial))
    if last:
        im2col_batch_last(images, g.kernel_shape, g.pad, g.stride, g.dilation,
                          out=col, out_spatial=g.conv_out_spatial)
    else:
        im2col(images, g.kernel_shape, g.pad, g.stride, g.dilation, out=col,
               out_spatial=g.conv_out_spatial, force_nd=g.force_nd_im2col)
    return col.reshape(groups, kd, nb * npix)


def _uncolumns(g, col, inp, xp):
    """Write the column matrix ``(G, Kd, B * P)`` back into an input chunk (col2im)."""
    nb = inp.shape[0]
    last = _batch_last(xp, nb)
    if g.is_1x1:
        if last:
            _batch_to_first(inp, col.reshape(g.conv_in_channels, -1, nb))
        else:
            inp[...] = col.reshape(g.conv_in_channels, nb, -1).swapaxes(0, 1)
        return
    images = inp.reshape((nb, g.conv_in_channels) + tuple(g.conv_input_spatial))
    fold = col2im_batch_last if last else col2im
    extra = {} if last else {"force_nd": g.force_nd_im2col}
    fold(col.reshape(g.group * g.kernel_dim, -1), images.shape, g.kernel_shape,
         g.pad, g.stride, g.dilation, out=images,
         out_spatial=g.conv_out_spatial, **extra)


def _gemm_layout(g, out, xp, name="gemm"):
    """An output chunk ``(B, Cout, P)`` as ``(G, Mg, B * P)`` (a copy unless B == 1)."""
    nb, _, npix = out.shape
    groups = g.group
    mg = g.conv_out_channels // groups
    if nb == 1:
        return out.reshape(groups, mg, npix)
    buf = _buffer(name, groups * mg * nb * npix, xp, out.dtype)
    if _batch_last(xp, nb):
        _batch_to_last(buf.reshape(groups * mg, npix, nb), out.reshape(nb, groups * mg, npix))
    else:
        buf.reshape(groups, mg, nb, npix)[...] = \
            out.reshape(nb, groups, mg, npix).transpose(1, 2, 0, 3)
    return buf.reshape(groups, mg, nb * npix)


def _weights(g, weights):
    return weights.reshape(g.group, g.conv_out_channels // g.group, g.kernel_dim)


def _matmul(a, b, out):
    """``a @ b`` over the group axis, written into ``out``."""
    if a.shape[0] == 1:
        a, b, out = a[0], b[0], out[0]
    matmul(a, b, out)


def _accumulate_weight_grad(g, weight_diff, dy, col):
    """``weight_diff += dy * col^T`` per group, computed as ``(col * dy^T)^T``: OpenBLAS
    is markedly faster with the long reduction axis on that side for conv shapes. On the host
    the product is shared by the kernel threads as the forward's are (:func:`matmul`), never
    left to OpenBLAS's own threads, which a busy machine stalls."""
    xp = get_array_module(dy)
    wd = weight_diff.reshape(g.group, g.conv_out_channels // g.group, g.kernel_dim)
    product = xp.empty((col.shape[0], col.shape[1], dy.shape[1]),
                       xp.result_type(col.dtype, dy.dtype))
    _matmul(col, dy.transpose(0, 2, 1), product)
    wd += product.transpose(0, 2, 1)


def _chunks(num, chunk):
    for start in range(0, num, chunk):
        yield start, min(num, start + chunk)


def gemm_forward_and_weight(input, weights, plan, output=None, grad_output=None,
                            weight_diff=None, bias=None, relu=False):
    """The im2col + GEMM path alone (what :func:`forward` and :func:`forward_and_weight` run
    when no other kernel takes the arrays): one im2col of ``input`` per chunk, used for
    ``output = W * col (+ bias)`` (when ``output`` is given; ``max(., 0)`` of it when
    ``relu``) and for ``weight_diff += grad_output * col^T`` (when ``weight_diff`` is given;
    ``grad_output`` is then on the output side)."""
    g = plan.geometry
    xp = get_array_module(input)
    inp = _batched(g, input, g.conv_in_channels, g.conv_input_spatial)
    w = None if output is None else _weights(g, weights)
    groups, mg, npix = g.group, g.conv_out_channels // g.group, g.conv_out_spatial_dim
    res_all = None if output is None else \
        _batched(g, output, g.conv_out_channels, g.conv_out_spatial)
    dy_all = None if weight_diff is None else \
        _batched(g, grad_output, g.conv_out_channels, g.conv_out_spatial)
    for start, stop in _chunks(g.num, plan.chunk):
        nb = stop - start
        col = _columns(g, inp[start:stop], xp)
        if weight_diff is not None:
            dy = _gemm_layout(g, dy_all[start:stop], xp)
            _accumulate_weight_grad(g, weight_diff, dy, col)
        if output is not None:
            res = res_all[start:stop]
            if nb == 1:
                _matmul(w, col, res.reshape(groups, mg, npix))
            else:
                buf = _buffer("gemm", groups * mg * nb * npix, xp, col.dtype)
                buf = buf.reshape(groups, mg, nb * npix)
                _matmul(w, col, buf)
                if _batch_last(xp, nb):
                    _batch_to_first(res.reshape(nb, groups * mg, npix),
                                    buf.reshape(groups * mg, npix, nb), bias)
                else:
                    moved = buf.reshape(groups, mg, nb, npix).transpose(2, 0, 1, 3)
                    if bias is None:
                        res.reshape(nb, groups, mg, npix)[...] = moved
                    else:  # the bias added on the way
                        xp.add(moved, bias.reshape(1, groups, mg, 1),
                               out=res.reshape(nb, groups, mg, npix))
                if relu:
                    bias_relu(res, res)
                continue
            bias_relu(res, res, bias, relu)


def gemm_backward_and_weight(input, output_diff, weights, plan, input_diff=None,
                             weight_diff=None):
    """The im2col + GEMM path of :func:`backward` alone, sharing the relayout of
    ``output_diff``: ``weight_diff += output_diff * im2col(input)^T`` (when ``weight_diff``
    is given) and ``input_diff = col2im(W^T * output_diff)`` (when ``input_diff`` is
    given)."""
    g = plan.geometry
    xp = get_array_module(output_diff)
    dy_all = _batched(g, output_diff, g.conv_out_channels, g.conv_out_spatial)
    inp = None if weight_diff is None else \
        _batched(g, input, g.conv_in_channels, g.conv_input_spatial)
    dx_all = None if input_diff is None else \
        _batched(g, input_diff, g.conv_in_channels, g.conv_input_spatial)
    w = None if weights is None else _weights(g, weights)
    groups, kd = g.group, g.kernel_dim
    for start, stop in _chunks(g.num, plan.chunk):
        nb = stop - start
        dy = _gemm_layout(g, dy_all[start:stop], xp)
        if weight_diff is not None:
            col = _columns(g, inp[start:stop], xp)
            _accumulate_weight_grad(g, weight_diff, dy, col)
        if input_diff is not None:
            dx = dx_all[start:stop]
            wt = w.transpose(0, 2, 1)
            if g.is_1x1 and nb == 1:
                _matmul(wt, dy, dx.reshape(groups, kd, -1))
                continue
            dcol = _buffer("col", groups * kd * nb * g.conv_out_spatial_dim, xp,
                           dy.dtype).reshape(groups, kd, -1)
            _matmul(wt, dy, dcol)
            _uncolumns(g, dcol, dx, xp)


# ---- the compiled kernels that are not im2col + GEMM ---------------------------------------
def _images(g, arr, channels, spatial):
    """``arr`` viewed as ``(num, channels, *spatial)``."""
    return arr.reshape((g.num, channels) + tuple(spatial))


def _direct_args(g):
    return (g.kernel_shape, g.pad, g.stride, g.dilation, g.conv_out_spatial)


def _depthwise(g, x=None, weights=None, y=None, dy=None, dx=None, dw=None, bias=None):
    """The depthwise kernels: ``y = conv(x) (+ bias)``, ``dw += dconv/dw (x, dy)`` and
    ``dx = dconv/dx (dy)``, for those given."""
    cin, cout = g.conv_in_channels, g.conv_out_channels
    ins, outs = g.conv_input_spatial, g.conv_out_spatial
    if bias is not None:
        bias = bias.reshape(-1)
    if y is not None:
        _cpu_conv.depthwise_forward(_images(g, x, cin, ins), weights, bias,
                                    _images(g, y, cout, outs), *_direct_args(g))
    if dw is not None:
        _cpu_conv.depthwise_backward_weight(_images(g, x, cin, ins),
                                            _images(g, dy, cout, outs), dw, *_direct_args(g))
    if dx is not None:
        _cpu_conv.depthwise_backward_data(_images(g, dy, cout, outs), weights,
                                          _images(g, dx, cin, ins), *_direct_args(g))


def _winograd_forward(plan, x, weights, y, bias=None):
    """``y = conv(x) (+ bias)`` through Winograd's F(4x4, 3x3) or F(2x2, 3x3)
    (``plan.winograd_tile``), a chunk of images at a time, its transforms in the shared
    workspace."""
    g = plan.geometry
    _winograd(g, _images(g, x, g.conv_in_channels, g.conv_input_spatial), weights, bias,
              _images(g, y, g.conv_out_channels, g.conv_out_spatial), g.pad,
              g.conv_out_spatial, plan.winograd_tile, plan.winograd_chunk)


def _winograd_backward_data(plan, dy, weights, dx):
    """``dx`` = the gradient of the convolution with respect to its input, from ``dy``,
    through Winograd (``plan.winograd_back_tile``): ``dy`` convolved with each group's
    filters transposed (input and output channels swapped) and turned by 180 degrees, padded
    by ``2 - pad``."""
    g = plan.geometry
    groups, cin, cout = g.group, g.conv_in_channels, g.conv_out_channels
    turned = weights.reshape(groups, cout // groups, cin // groups, 3, 3).transpose(0, 2, 1, 3, 4)
    turned = np.ascontiguousarray(turned[..., ::-1, ::-1]).reshape(cin, cout // groups, 3, 3)
    _winograd(g, _images(g, dy, cout, g.conv_out_spatial), turned, None,
              _images(g, dx, cin, g.conv_input_spatial), tuple(2 - p for p in g.pad),
              g.conv_input_spatial, plan.winograd_back_tile, plan.winograd_back_chunk)


def _winograd(g, images, weights, bias, out, pad, out_spatial, tile, chunk):
    nk, nc = out.shape[1], images.shape[1]
    groups = g.group
    if bias is not None:
        bias = bias.reshape(-1)
    dtype = images.dtype
    products = (tile + 2) ** 2
    _, _, tiles = _cpu_conv.winograd_tiles(chunk, out_spatial, tile)
    u = _buffer("winograd_u", products * (nk // groups) * (nc // groups), np, dtype)
    v = _buffer("col", products * (nc // groups) * tiles, np, dtype)
    m = _buffer("gemm", products * (nk // groups) * tiles, np, dtype)
    for start in range(0, g.num, chunk):
        stop = min(g.num, start + chunk)
        _cpu_conv.winograd_forward(images[start:stop], weights, bias, out[start:stop],
                                   pad, out_spatial, u, v, m, tile, groups)


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
def forward(x, weights, y, plan, bias=None, relu=False):
    """``y = W * im2col(x) (+ bias per output channel)`` for the whole batch (overwrites
    ``y``); then ``y = max(y, 0)`` when ``relu`` (a ReLU folded into the convolution, see
    :mod:`pycaffe_lite.net_fold`)."""
    g = plan.geometry
    if _cudnn.conv_takes(plan.engine, x, weights, y, bias) and \
            _cudnn.conv_forward(x, weights, bias, y, g.pad, g.stride, g.dilation, g.group,
                                relu=relu, half_math=plan.half_forward):
        return
    if g.is_depthwise and _cpu.supported(x, weights, y, bias):
        _depthwise(g, x, weights, y=y, bias=bias)
    elif _pointwise.takes(g, x, weights, y, bias):  # narrow 1x1 layers: ops/pointwise.py
        _pointwise.forward(x, weights, y, bias, relu)
        return
    elif plan.winograd and _cpu_conv.winograd_enabled() and _cpu.supported(x, weights, y,
                                                                          bias):
        _winograd_forward(plan, x, weights, y, bias=bias)
    else:
        gemm_forward_and_weight(x, weights, plan, output=y, bias=bias, relu=relu)
        return
    if relu:
        bias_relu(y, y)


def backward(x, dy, weights, plan, dx=None, dw=None):
    """The gradients of :func:`forward` (sharing the relayout of ``dy``): ``dw += dy *
    im2col(x)^T`` when ``dw`` is given, ``dx = col2im(W^T * dy)`` when ``dx`` is given (``x``
    is needed only for ``dw``)."""
    g = plan.geometry
    if _cudnn.conv_takes(plan.engine, x, dy, weights, dx, dw):
        dw_done, dx_done = _cudnn.conv_backward(x, dy, weights, dx, dw, g.pad, g.stride,
                                                g.dilation, g.group,
                                                half_math=plan.half_backward)
        dw = None if dw_done else dw
        dx = None if dx_done else dx
        if dw is None and dx is None:
            return
    if g.is_depthwise and _cpu.supported(x if dw is not None else None, dy, weights, dx, dw):
        _depthwise(g, x, weights, dy=dy, dx=dx, dw=dw)
        return
    if dx is not None and plan.winograd_back_tile and _cpu_conv.winograd_enabled() and \
            _cpu.supported(dy, weights, dx):
        _winograd_backward_data(plan, dy, weights, dx)
        if dw is not None:
            gemm_backward_and_weight(x, dy, weights, plan, weight_diff=dw)
        return
    gemm_backward_and_weight(x, dy, weights, plan, input_diff=dx, weight_diff=dw)


def forward_and_weight(x, weights, plan, y=None, dy=None, dw=None, bias=None):
    """One im2col of ``x`` per chunk, used for ``y = W * col (+ bias)`` (when ``y`` is given)
    and for ``dw += dy * col^T`` (when ``dw`` is given; ``dy`` is then on the output side):
    Deconvolution's backward."""
    g = plan.geometry
    if bias is None and _cudnn.conv_takes(plan.engine, x, weights, y, dy, dw):
        # Deconvolution's backward: the bottom gradient is a convolution of x, the weight
        # gradient a convolution's filter gradient with x on the image side
        if y is not None and not _cudnn.conv_forward(x, weights, None, y, g.pad, g.stride,
                                                     g.dilation, g.group,
                                                     half_math=plan.half_forward):
            return gemm_forward_and_weight(x, weights, plan, output=y, grad_output=dy,
                                           weight_diff=dw)
        if dw is not None and not _cudnn.conv_backward(x, dy, weights, None, dw, g.pad,
                                                       g.stride, g.dilation, g.group,
                                                       half_math=plan.half_forward)[0]:
            gemm_forward_and_weight(x, weights, plan, grad_output=dy, weight_diff=dw)
        return
    if g.is_depthwise and _cpu.supported(x, weights if y is not None else None, y, dy, dw,
                                         bias):
        _depthwise(g, x, weights, y=y, dy=dy, dw=dw, bias=bias)
        return
    gemm_forward_and_weight(x, weights, plan, output=y, grad_output=dy, weight_diff=dw,
                            bias=bias)
