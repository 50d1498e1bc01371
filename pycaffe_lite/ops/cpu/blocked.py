"""Channel-blocked (NCHWc) kernels for float32 host arrays: direct convolution (dense, grouped,
depthwise, and plain NCHW input for a net's first layer) with the bias, a residual and ReLU
fused, MAX and AVE pooling, and the conversions to and from the layout (C in
blocked_impl.h and blocked_body.h).

A blocked array is float32, shaped ``(N, Cb, H, W, B)`` with ``Cb = ceil(C / B)``: channel
``c`` of pixel ``(h, w)`` at ``[n, c // B, h, w, c % B]``. ``B`` (:func:`block_size`) is 16
where the processor has AVX-512F, 8 with AVX2 + FMA, and the kernels are off (None) without
either, without the compiled library or with the kernels switched off
(``PYCAFFE_LITE_CPU_KERNELS=0``, :func:`pycaffe_lite.ops.cpu.set_kernels_enabled`).
``PYCAFFE_LITE_BLOCKED_ISA`` (``avx512`` or ``avx2``) or :func:`set_isa` asks for one
instruction set (a narrower one than the processor's, for tests and comparisons). The lanes
of channels ``>= C`` in the last block are written as 0 by every kernel and never read as
data.

Every output array may be a slice of blocks ``buf[:, cb0:cb1]`` of a larger C-contiguous
blocked array (a Concat's output written in place): each image's part is contiguous, and the
kernels take each array's image stride. The convolution sums in an order that depends only on
the output's position (see blocked_impl.h), so results do not depend on the thread count;
they equal a reference convolution to float rounding (fused multiply-adds).
"""

import logging
import os

import numpy as np

from ...switches import BLOCKED_ISAS as ISAS
from ._library import address as _address, load as _load
from ._threads import grain as _grain, split as _split

_ISA_BITS = {16: 2, 8: 1}
_isa = [None]


def _isa_from_environment():
    name = os.environ.get("PYCAFFE_LITE_BLOCKED_ISA", "").strip().lower() or None
    if name is not None and name not in ISAS:
        logging.getLogger("pycaffe_lite").warning(
            "PYCAFFE_LITE_BLOCKED_ISA=%r is none of %s; it is ignored (the widest kernels the "
            "processor runs are used)", name, ", ".join(ISAS))
        return None
    return name


_isa[0] = _isa_from_environment()


def set_isa(name):
    """Ask for the ``"avx512"`` (B = 16) or ``"avx2"`` (B = 8) kernels, or None for the
    widest the processor runs; one the processor lacks leaves :func:`block_size` None.
    Returns the previous setting. Any case is taken (``"AVX2"``), as the variable's is."""
    if isinstance(name, str):
        name = name.strip().lower()
    if name is not None and name not in ISAS:
        raise ValueError("the blocked kernels' instruction set is 'avx512', 'avx2' or None, "
                         "not %r" % (name,))
    old = _isa[0]
    _isa[0] = name
    return old


def block_size():
    """The block size B of the blocked kernels on this machine: 16 (AVX-512F), 8 (AVX2 + FMA)
    or None (no kernels: see the module's text)."""
    from . import kernels_enabled
    if not kernels_enabled():
        return None
    found = _load().pcl_blocked_isa()
    if _isa[0] is not None:
        b = ISAS[_isa[0]]
        return b if found & _ISA_BITS[b] else None
    for b in (16, 8):
        if found & _ISA_BITS[b]:
            return b
    return None


def _fn(name):
    return getattr(_load(), "pcl_%s_f32" % name)


# ---- checks ----------------------------------------------------------------------------------
def _float32(a, what):
    if type(a) is not np.ndarray or a.dtype != np.float32:
        raise ValueError("%s must be a float32 NumPy array, not %s" % (
            what, getattr(a, "dtype", type(a).__name__)))


def _image_stride(a, what):
    """The image stride (in elements) of an array whose every image is C-contiguous."""
    _float32(a, what)
    expect = 4
    for dim, stride in zip(reversed(a.shape[1:]), reversed(a.strides[1:])):
        if dim > 1 and stride != expect:
            raise ValueError("%s: each image must be contiguous (a C-contiguous array or a "
                             "slice of blocks of one), strides %s" % (what, a.strides))
        expect *= dim
    if a.shape[0] > 1 and (a.strides[0] % 4 or a.strides[0] < expect):
        raise ValueError("%s: images overlap or are misaligned (strides %s)"
                         % (what, a.strides))
    return a.strides[0] // 4 if a.shape[0] > 1 else expect // 4


def _check_blocked(a, B, what, ndim=5):
    _float32(a, what)
    if a.ndim != ndim or a.shape[-1] != B:
        raise ValueError("%s must be blocked (N, Cb, H, W, %d), not shaped %s"
                         % (what, B, a.shape))
    return _image_stride(a, what)


def _block_size_or_error(B=None):
    b = block_size()
    if b is None:
        raise ValueError("the blocked kernels are not available here (no compiled library, "
                         "kernels off, or no AVX2/FMA)")
    if B is not None and B != b:
        raise ValueError("block size %d does not match this machine's kernels (B = %d)"
                         % (B, b))
    return b


# ---- layout ----------------------------------------------------------------------------------
def blocked_shape(shape, B):
    """The blocked shape of an NCHW ``shape``."""
    n, c, h, w = (int(v) for v in shape)
    return (n, -(-c // B), h, w, B)


def to_blocked(x, B, out=None):
    """``x (N, C, H, W)`` float32 -> ``(N, ceil(C / B), H, W, B)`` (padding lanes 0), into
    ``out`` when given (a contiguous array or a slice of blocks of one)."""
    _block_size_or_error(B)
    _float32(x, "to_blocked's input")
    if x.ndim != 4:
        raise ValueError("to_blocked takes (N, C, H, W), not shape %s" % (x.shape,))
    x = np.ascontiguousarray(x)
    shape = blocked_shape(x.shape, B)
    if out is None:
        out = np.empty(shape, np.float32)
    if out.shape != shape:
        raise ValueError("to_blocked's output must be shaped %s, not %s" % (shape, out.shape))
    ys = _check_blocked(out, B, "to_blocked's output")
    n, c, h, w = x.shape
    _split(_fn("to_blocked"), n * shape[1], [_address(x), _address(out), c, h * w, B, ys],
           grain=_grain(h * w * B))
    return out


def from_blocked(xb, C, out=None):
    """The ``C`` real channels of a blocked ``xb (N, Cb, H, W, B)`` as ``(N, C, H, W)``."""
    if type(xb) is not np.ndarray or xb.ndim != 5:
        raise ValueError("from_blocked takes (N, Cb, H, W, B), not %s"
                         % (getattr(xb, "shape", type(xb).__name__),))
    B = xb.shape[4]
    _block_size_or_error(B)
    xs = _check_blocked(xb, B, "from_blocked's input")
    n, cb, h, w = xb.shape[:4]
    C = int(C)
    if not (cb - 1) * B < C <= cb * B:
        raise ValueError("from_blocked: %d channels do not fill %d blocks of %d" % (C, cb, B))
    shape = (n, C, h, w)
    if out is None:
        out = np.empty(shape, np.float32)
    _float32(out, "from_blocked's output")
    if out.shape != shape or not out.flags.c_contiguous:
        raise ValueError("from_blocked's output must be a C-contiguous %s array, not %s"
                         % (shape, out.shape))
    _split(_fn("from_blocked"), n * cb, [_address(xb), _address(out), C, h * w, B, xs],
           grain=_grain(h * w * B))
    return out


# ---- convolution -----------------------------------------------------------------------------
class PackedConv:
    """A convolution's weights packed once for the blocked kernels (see :func:`pack_conv`):
    ``weights`` (float32, ``[K / B][C / group][kh][kw][B]``, depthwise ``[C / B][kh][kw][B]``)
    and ``bias`` (``Kb * B``, zeros where there is none)."""

    def __init__(self, weights, bias, out_channels, in_channels, group, kernel, B,
                 input_blocked, depthwise):
        self.weights, self.bias = weights, bias
        self.out_channels, self.in_channels, self.group = out_channels, in_channels, group
        self.kernel, self.B = kernel, B
        self.input_blocked, self.depthwise = input_blocked, depthwise
        self.addresses = (_address(weights), _address(bias))

    def __repr__(self):
        return "PackedConv(%d -> %d, kernel %s, group %d, B %d%s)" % (
            self.in_channels, self.out_channels, self.kernel, self.group, self.B,
            ", NCHW input" if not self.input_blocked else "")


def pack_conv(weight, bias, group, B, input_blocked=True):
    """Pack ``weight (K, C / group, kh, kw)`` and ``bias (K,)`` or None for
    :func:`conv_forward` at block size ``B``. Supported: group 1; depthwise (group == C ==
    K); other groups whose channels per group, in and out, are multiples of B; with
    ``input_blocked=False`` (plain NCHW input), group 1 only. Raises ValueError naming the
    reason otherwise."""
    weight = np.asarray(weight)
    if weight.ndim != 4:
        raise ValueError("pack_conv takes weights (K, C / group, kh, kw), not shape %s"
                         % (weight.shape,))
    if B not in (8, 16):
        raise ValueError("block size must be 8 or 16, not %r" % (B,))
    k, cg, kh, kw = (int(v) for v in weight.shape)
    group = int(group)
    if group < 1 or k % group:
        raise ValueError("%d outputs do not split into %d groups" % (k, group))
    c = cg * group
    kb = -(-k // B)
    depthwise = group > 1 and group == c == k
    if not input_blocked and group != 1:
        raise ValueError("NCHW input is supported with group 1 only, not group %d" % group)
    if group > 1 and not depthwise and (cg % B or (k // group) % B):
        raise ValueError("group %d: %d input and %d output channels per group are not "
                         "multiples of the block size %d" % (group, cg, k // group, B))
    w = weight.astype(np.float32, copy=False)
    if depthwise:
        packed = np.zeros((kb * B, kh, kw), np.float32)
        packed[:k] = w[:, 0]
        packed = packed.reshape(kb, B, kh, kw).transpose(0, 2, 3, 1)
    else:
        packed = np.zeros((kb * B, cg, kh, kw), np.float32)
        packed[:k] = w
        packed = packed.reshape(kb, B, cg, kh, kw).transpose(0, 2, 3, 4, 1)
    b = np.zeros(kb * B, np.float32)
    if bias is not None:
        bias = np.asarray(bias, np.float32).reshape(-1)
        if bias.size != k:
            raise ValueError("bias has %d values for %d outputs" % (bias.size, k))
        b[:k] = bias
    return PackedConv(np.ascontiguousarray(packed), b, k, c, group, (kh, kw), B,
                      bool(input_blocked), depthwise)


# Output columns per work unit at most (runs of a long row, and of a 1x1 layer's flattened
# image), cut into equal runs.
SEGMENT = 96


# Floats of the C kernels' stack copy of one block of input for the tiles at the left and
# right edges (PCL_BLK_PATCH in blocked_impl.h), and the most pixels of a tile.
PATCH_FLOATS = 16384
TILE_MAX = 14


def _pair(v, what):
    try:
        a, b = (int(t) for t in v)
    except (TypeError, ValueError):
        raise ValueError("%s must be an (h, w) pair, not %r" % (what, v)) from None
    return a, b


def conv_forward(packed, x, y, pad, stride, dilation, relu=False, residual=None):
    """:func:`conv_call` run once (its text says what it computes)."""
    conv_call(packed, x, y, pad, stride, dilation, relu, residual)()
    return y


def conv_call(packed, x, y, pad, stride, dilation, relu=False, residual=None):
    """The convolution of :func:`conv_forward` checked once and bound to these arrays: a
    callable that runs it (again) on their current contents, for a caller that reuses its
    buffers (the arrays must stay alive and keep their shapes while it is used).

    ``y = conv(x) + bias (+ residual)``, then ``max(., 0)`` when ``relu``. ``x``: blocked
    ``(N, Cbi, H, W, B)`` (plain ``(N, C, H, W)`` when the weights were packed with
    ``input_blocked=False``); ``y`` and ``residual``: blocked ``(N, Cbo, OH, OW, B)``, each
    contiguous or a slice of blocks of a larger array; OH, OW from ``y``'s shape (Caffe's
    geometry). ``residual`` may be ``y`` itself (each output reads its residual just before
    it is written); ``y`` must not overlap ``x``."""
    B = _block_size_or_error(packed.B)
    ph, pw = _pair(pad, "pad")
    sh, sw = _pair(stride, "stride")
    dh, dw = _pair(dilation, "dilation")
    if min(sh, sw, dh, dw) < 1 or min(ph, pw) < 0:
        raise ValueError("stride and dilation must be >= 1 and pad >= 0, not %s %s %s"
                         % ((sh, sw), (dh, dw), (ph, pw)))
    kh, kw = packed.kernel
    K, C = packed.out_channels, packed.in_channels
    if packed.input_blocked:
        xs = _check_blocked(x, B, "the convolution's input")
        if x.shape[1] != -(-C // B):
            raise ValueError("the input has %d blocks, the weights want %d channels (%d "
                             "blocks)" % (x.shape[1], C, -(-C // B)))
    else:
        _float32(x, "the convolution's input")
        if x.ndim != 4 or x.shape[1] != C:
            raise ValueError("the NCHW input must be (N, %d, H, W), not shaped %s"
                             % (C, x.shape))
        xs = _image_stride(x, "the convolution's input")
    n, h, w = x.shape[0], x.shape[-3 if packed.input_blocked else 2], \
        x.shape[-2 if packed.input_blocked else 3]
    ys = _check_blocked(y, B, "the convolution's output")
    oh, ow = y.shape[2], y.shape[3]
    want = (n, -(-K // B),
            (h + 2 * ph - (dh * (kh - 1) + 1)) // sh + 1,
            (w + 2 * pw - (dw * (kw - 1) + 1)) // sw + 1, B)
    if y.shape != want or min(want[2], want[3]) < 1:
        raise ValueError("the convolution's output must be shaped %s, not %s"
                         % (want, y.shape))
    if np.may_share_memory(x, y):
        raise ValueError("the convolution's output must not overlap its input")
    rs = 0
    if residual is not None:
        rs = _check_blocked(residual, B, "the residual")
        if residual.shape != y.shape:
            raise ValueError("the residual must be shaped like the output %s, not %s"
                             % (y.shape, residual.shape))
    units_per_row = 1
    seglen = ow
    if (kh, kw, sh, sw, ph, pw) == (1, 1, 1, 1, 0, 0) and not packed.depthwise:
        # a 1x1 layer's image is one long row of pixels
        h, w, oh, ow = 1, h * w, 1, oh * ow
    if not packed.depthwise:
        units_per_row = -(-ow // SEGMENT)
        seglen = -(-ow // units_per_row)
        units_per_row = -(-ow // seglen)
    span = (TILE_MAX - 1) * sw + (kw - 1) * dw + 1
    if not packed.depthwise and kh * span * (B if packed.input_blocked else 1) > PATCH_FLOATS:
        raise ValueError("kernel %s with stride %d and dilation %d spans too many columns "
                         "for the blocked kernels" % ((kh, kw), sw, dw))
    cg = C // packed.group
    kg = K // packed.group
    units = n * want[1] * oh * units_per_row
    taps = (kh * kw) * (1 if packed.depthwise else cg)
    return _bound(_fn("blocked_conv"), units,
                  [_address(x), packed.addresses[0], packed.addresses[1],
                   None if residual is None else _address(residual), _address(y), B,
                   int(packed.depthwise), int(packed.input_blocked), K, cg, kg, h, w, kh, kw,
                   ph, pw, sh, sw, dh, dw, oh, ow, xs, ys, rs, int(bool(relu)), seglen],
                  _grain(taps * seglen * B // 8))


def _bound(fn, units, args, grain):
    def run():
        _split(fn, units, args, grain=grain)
    return run


# ---- pooling ---------------------------------------------------------------------------------
def pool_forward(x, y, method, kernel, pad, stride):
    """:func:`pool_call` run once (its text says what it computes)."""
    pool_call(x, y, method, kernel, pad, stride)()
    return y


def pool_call(x, y, method, kernel, pad, stride):
    """The pooling of :func:`pool_forward` checked once and bound to these arrays (as
    :func:`conv_call`).

    Caffe's MAX (``method`` "max") or AVE ("ave") pooling of a blocked ``x`` into a
    blocked ``y`` whose OH, OW the caller gives (Caffe's ceil rule); each window clipped to
    the image, AVE dividing by the window clipped to the padded image. Global pooling: kernel
    ``(H, W)``."""
    B = _block_size_or_error()
    if method not in ("max", "ave"):
        raise ValueError("pooling method is 'max' or 'ave', not %r" % (method,))
    kh, kw = _pair(kernel, "kernel")
    ph, pw = _pair(pad, "pad")
    sh, sw = _pair(stride, "stride")
    if min(kh, kw, sh, sw) < 1 or min(ph, pw) < 0 or ph >= kh or pw >= kw:
        raise ValueError("pooling needs kernel and stride >= 1 and 0 <= pad < kernel, not "
                         "kernel %s pad %s stride %s" % ((kh, kw), (ph, pw), (sh, sw)))
    xs = _check_blocked(x, B, "the pooling's input")
    ys = _check_blocked(y, B, "the pooling's output")
    n, cb, h, w = x.shape[:4]
    if y.shape[:2] != (n, cb):
        raise ValueError("the pooling's output must have %d images of %d blocks, not shape %s"
                         % (n, cb, y.shape))
    oh, ow = y.shape[2], y.shape[3]
    if oh < 1 or ow < 1 or (oh - 1) * sh >= h + ph or (ow - 1) * sw >= w + pw:
        raise ValueError("pooled output %s does not fit the input %s (kernel %s, pad %s, "
                         "stride %s)" % ((oh, ow), (h, w), (kh, kw), (ph, pw), (sh, sw)))
    return _bound(_fn("blocked_pool"), n * cb * oh,
                  [_address(x), _address(y), B, int(method == "ave"), cb, h, w, oh, ow, kh, kw,
                   ph, pw, sh, sw, xs, ys], _grain(ow * kh * kw * B))
