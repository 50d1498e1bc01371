"""Compiled convolution kernels for host arrays that are not im2col + GEMM: the direct depthwise
convolution and Winograd's F(2x2, 3x3) and F(4x4, 3x3). :mod:`pycaffe_lite.ops.conv` decides
when they run.

Unlike the other compiled kernels these do not repeat the NumPy code's order of operations
(the matrix-product path sums in BLAS's order, which has no loop form), so their results equal
it to float rounding only; the tests state the bounds:

- depthwise (``group == channels == outputs``, 2-D, any kernel, stride, pad, dilation): the
  forward and the data gradient sum ``kh * kw`` products per element, the filter gradient
  ``num * out_h * out_w`` per tap; each differs from the exact sum by at most the classical
  bound ``n * eps * sum |terms|`` (``eps`` the element type's machine epsilon);
- Winograd F(m x m, 3x3), m = 2 or 4 (3x3 filters, stride 1, dilation 1, any pad, group by
  group): each m x m block of outputs comes from an (m + 2)^2 block of input through the
  transforms ``Y = A^T [(G g G^T) . (B^T d B)] A``, summed over channels as (m + 2)^2 matrix
  products (BLAS): 2.25 (m = 2) or 4 (m = 4) times fewer multiplications than the direct
  form, for a transform error bounded by a small multiple of ``eps`` times the sum of
  ``|w| * |x|`` over the window, larger for F(4x4), whose transforms have coefficients up to
  8 and 1/24 (float32: within ``1e-5``, resp. ``1e-4``, of the output's scale on the shapes
  of tests/test_ops_winograd.py). The convolution's input gradient is the same kind of
  convolution and runs through it too. ``PYCAFFE_LITE_WINOGRAD=0`` or
  :func:`set_winograd_enabled` turns it off.
"""


from ._library import address as _address, function as _function
from . import host_matmul
from ._threads import grain as _grain, split as _split
from ...switches import flag as flag_value, switch

_winograd = [switch("PYCAFFE_LITE_WINOGRAD")]


def set_winograd_enabled(flag):
    """Use Winograd where it pays (True, the default) or never (False). Returns the previous
    setting."""
    old = _winograd[0]
    _winograd[0] = flag_value(flag, "set_winograd_enabled")
    return old


def winograd_enabled():
    """Whether Winograd may run (the compiled library is checked apart)."""
    return _winograd[0]


def _geometry(image_shape, kernel, pad, stride, dilation, out_spatial):
    h, w = (int(v) for v in image_shape[2:])
    return [h, w, kernel[0], kernel[1], pad[0], pad[1], stride[0], stride[1], dilation[0],
            dilation[1], out_spatial[0], out_spatial[1]]


# ---- depthwise -------------------------------------------------------------------------------
def depthwise_forward(x, weights, bias, y, kernel, pad, stride, dilation, out_spatial):
    """``y (N, C, OH, OW)`` (overwritten) = each channel of ``x (N, C, H, W)`` correlated with
    its filter ``weights (C, 1, kh, kw)`` (+ ``bias (C,)`` when given)."""
    nb, nc = x.shape[:2]
    taps = int(kernel[0]) * int(kernel[1])
    _split(_function("depthwise_forward", x.dtype), nb * nc,
           [_address(x), _address(weights), None if bias is None else _address(bias),
            _address(y), nc] + _geometry(x.shape, kernel, pad, stride, dilation, out_spatial),
           grain=_grain(taps * out_spatial[0] * out_spatial[1]))


def depthwise_backward_data(dy, weights, dx, kernel, pad, stride, dilation, out_spatial):
    """``dx (N, C, H, W)`` (overwritten): the gradient of :func:`depthwise_forward` with
    respect to ``x``, from ``dy (N, C, OH, OW)``."""
    nb, nc = dx.shape[:2]
    taps = int(kernel[0]) * int(kernel[1])
    _split(_function("depthwise_backward_data", dx.dtype), nb * nc,
           [_address(dy), _address(weights), _address(dx), nc] +
           _geometry(dx.shape, kernel, pad, stride, dilation, out_spatial),
           grain=_grain(taps * out_spatial[0] * out_spatial[1]))


def depthwise_backward_weight(x, dy, dw, kernel, pad, stride, dilation, out_spatial):
    """``dw (C, 1, kh, kw) +=`` the gradient of :func:`depthwise_forward` with respect to the
    filters, summed over the batch (threads split the channels)."""
    nb, nc = x.shape[:2]
    taps = int(kernel[0]) * int(kernel[1])
    _split(_function("depthwise_backward_weight", x.dtype), nc,
           [_address(x), _address(dy), _address(dw), nb, nc] +
           _geometry(x.shape, kernel, pad, stride, dilation, out_spatial),
           grain=_grain(nb * taps * out_spatial[0] * out_spatial[1]))


# ---- Winograd F(2x2, 3x3) and F(4x4, 3x3) ----------------------------------------------------
# The most tiles per row the F(2x2) transforms take (PCL_WINOGRAD_MAX_TW in conv_impl.h: their
# rows of work live on the stack); F(4x4) takes half as many (outputs up to 2048 wide both).
WINOGRAD_MAX_ROW_TILES = 1024
WINOGRAD_MAX_WIDTH = 2 * WINOGRAD_MAX_ROW_TILES


def winograd_tiles(num, out_spatial, tile=2):
    """The ``tile`` x ``tile`` output tiles of a batch: ``(rows, columns, total)``."""
    th = -(-int(out_spatial[0]) // tile)
    tw = -(-int(out_spatial[1]) // tile)
    return th, tw, int(num) * th * tw


def winograd_forward(x, weights, bias, y, pad, out_spatial, u, v, m, tile=2, group=1):
    """``y (N, K, OH, OW)`` (overwritten) = ``x (N, C, H, W)`` convolved with ``weights
    (K, C / group, 3, 3)`` at stride 1 with ``pad`` (+ ``bias (K,)`` when given), through
    Winograd's F(2x2, 3x3) (``tile`` 2) or F(4x4, 3x3) (``tile`` 4), one group after the
    other. ``u``, ``v``, ``m``: flat work buffers of at least ``P K C / group^2``,
    ``P C T / group`` and ``P K T / group`` elements (``P = (tile + 2)^2`` products; ``T``:
    :func:`winograd_tiles`)."""
    if tile not in (2, 4):
        raise ValueError("Winograd's tiles here are 2 or 4 outputs wide, not %r" % (tile,))
    nb, nc, h, w = (int(s) for s in x.shape)
    nk = int(weights.shape[0])
    cg, kg = nc // group, nk // group
    th, tw, nt = winograd_tiles(nb, out_spatial, tile)
    if int(out_spatial[1]) > WINOGRAD_MAX_WIDTH:
        raise ValueError("Winograd's transforms take outputs up to %d wide, not %d"
                         % (WINOGRAD_MAX_WIDTH, out_spatial[1]))
    products = (tile + 2) ** 2
    prefix = "winograd" if tile == 2 else "winograd4"
    oh, ow = int(out_spatial[0]), int(out_spatial[1])
    u, v, m = u[:products * kg * cg], v[:products * cg * nt], m[:products * kg * nt]
    size = x.dtype.itemsize
    for g in range(group):
        wg = weights[g * kg:(g + 1) * kg]
        bg = None if bias is None else _address(bias) + g * kg * size
        _split(_function(prefix + "_weights", x.dtype), kg,
               [_address(wg), _address(u), kg, cg], grain=_grain(products * cg))
        _split(_function(prefix + "_input", x.dtype), cg,
               [_address(x) + g * cg * h * w * size, _address(v), nb, cg, nc, h, w,
                int(pad[0]), int(pad[1]), th, tw], grain=_grain(products * nt))
        host_matmul(u.reshape(products, kg, cg), v.reshape(products, cg, nt),
                    m.reshape(products, kg, nt))
        _split(_function(prefix + "_output", x.dtype), kg,
               [_address(m), bg, _address(y) + g * kg * oh * ow * size, nb, kg, nk, oh, ow,
                th, tw], grain=_grain(products * nt))
