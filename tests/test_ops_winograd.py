"""Winograd's F(2x2, 3x3) and F(4x4, 3x3) forwards of the compiled kernels, through the
convolution ops (pycaffe_lite.ops.conv) that choose them for 3x3, stride 1, dilation 1,
one-group layers.

Their transforms round in other places than the direct sum, so each is checked against the
exact result (the direct sum in float64 on the same values) within a stated bound on the
largest error, as a fraction of the output's largest magnitude: F(2x2) ``1e-5`` for float32
(``1e-13`` for float64), in practice a few ``1e-7``; F(4x4), whose transforms have larger
coefficients (up to 8 and 1/24), ``1e-4`` (``1e-12``), in practice a few ``1e-6``. The
matrix-product path must agree to the same bound."""


import numpy as np
import pytest

from pycaffe_lite.ops import conv
from pycaffe_lite.ops.cpu import _threads as cpu_threads
from pycaffe_lite.ops.cpu import convolution as cpu_conv
from pycaffe_lite.testing import check_layer
from helpers.kernel import conv_plan, needs_library, switch_reads


BOUND = {2: {np.float32: 1e-5, np.float64: 1e-13}, 4: {np.float32: 1e-4, np.float64: 1e-12}}

# num, in channels, out channels, height, width, pad (h, w)
SHAPES = [
    (1, 32, 32, 14, 14, (1, 1)),  # even output
    (2, 17, 5, 9, 7, (1, 1)),  # odd sizes: the last row and column of tiles half used
    (3, 4, 6, 5, 6, (0, 0)),  # no pad
    (1, 3, 8, 8, 11, (2, 3)),  # pads larger than the filter's reach, unequal
    (1, 2, 3, 3, 3, (0, 0)),  # a single output
    (2, 9, 4, 1, 12, (1, 1)),  # one input row
    (1, 70, 64, 30, 31, (1, 1)),  # many channels (a longer sum in the products)
    (1, 3, 2, 4, 2100, (1, 1)),  # more columns than one row of tiles holds: not taken
]


@pytest.fixture(params=[4, 2])
def always(request, monkeypatch):
    """Winograd F(tile x tile, 3x3) taken for every shape it can take (its rule's thresholds
    at their least, the other tile's out of reach); the tile is the fixture's value."""
    tile = request.param
    never = {"channels": 1 << 30, "side": 1 << 30, "tiles": 1 << 30}
    monkeypatch.setitem(conv._WINOGRAD_RULES, tile, {"channels": 1, "side": 1, "tiles": 0})
    monkeypatch.setitem(conv._WINOGRAD_RULES, 6 - tile, never)
    return tile


def geometry(shape, dtype, workspace=1 << 26):
    nb, ci, co, h, w, pad = shape
    out = (h + 2 * pad[0] - 2, w + 2 * pad[1] - 2)
    return conv_plan(kernel=(3, 3), pad=pad, in_channels=ci, out_channels=co, in_spatial=(h, w),
                     out_spatial=out, num=nb, itemsize=np.dtype(dtype).itemsize,
                     workspace_bytes=workspace), out


def direct(x, w, b, pad, out):
    """The convolution as a float64 sum over the 9 taps."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2))
    y = np.zeros((x.shape[0], w.shape[0]) + out)
    for i in range(3):
        for j in range(3):
            y += np.einsum("kc,nchw->nkhw", w[:, :, i, j].astype(np.float64),
                           xp[:, :, i:i + out[0], j:j + out[1]])
    return y + b.astype(np.float64)[:, None, None]


def data(shape, dtype, seed=0):
    nb, ci, co, h, w, _ = shape
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((nb, ci, h, w)).astype(dtype),
            (rng.standard_normal((co, ci, 3, 3)) / np.sqrt(9 * ci)).astype(dtype),
            rng.standard_normal(co).astype(dtype))


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("workspace", [1 << 26, 1])  # one chunk; one image per chunk
def test_within_the_bound_of_the_exact_result(shape, dtype, workspace, always, monkeypatch):
    calls = []
    fn = cpu_conv.winograd_forward
    monkeypatch.setattr(cpu_conv, "winograd_forward", lambda *a: calls.append(1) or fn(*a))
    geom, out = geometry(shape, dtype, workspace)
    x, w, b = data(shape, dtype)
    exact = direct(x, w, b, shape[5], out)
    y = np.full((shape[0], shape[2]) + out, np.nan, dtype)
    conv.forward(x, w, y, geom, bias=b)
    taken = out[1] <= cpu_conv.WINOGRAD_MAX_WIDTH
    assert geom.winograd == taken and geom.winograd_tile == (always if taken else 0)
    assert len(calls) == (-(-geom.geometry.num // geom.winograd_chunk) if taken else 0)
    bound = BOUND[always][dtype] * np.abs(exact).max()
    assert np.abs(y - exact).max() <= bound
    with_gemm = np.empty_like(y)
    conv.gemm_forward_and_weight(x, w, geom, output=with_gemm, bias=b)
    assert np.abs(y - with_gemm).max() <= bound
    without_bias = np.empty_like(y)
    conv.forward(x, w, without_bias, geom)
    assert np.abs(without_bias - (exact - b[:, None, None])).max() <= bound


@needs_library
def test_the_switch_turns_it_off(always, monkeypatch):
    calls = []
    fn = cpu_conv.winograd_forward
    monkeypatch.setattr(cpu_conv, "winograd_forward", lambda *a: calls.append(1) or fn(*a))
    shape = SHAPES[1]
    geom, out = geometry(shape, np.float32)
    x, w, b = data(shape, np.float32)
    y, with_gemm = (np.empty((shape[0], shape[2]) + out, np.float32) for _ in range(2))
    old = cpu_conv.set_winograd_enabled(False)
    try:
        conv.forward(x, w, y, geom, bias=b)
    finally:
        cpu_conv.set_winograd_enabled(old)
    assert not calls
    conv.gemm_forward_and_weight(x, w, geom, output=with_gemm, bias=b)
    np.testing.assert_array_equal(y, with_gemm)
    conv.forward(x, w, y, geom, bias=b)
    assert calls == [1]


def test_the_environment_switch():
    code = "from pycaffe_lite.ops.cpu import convolution as c; print(c.winograd_enabled())"
    assert switch_reads("PYCAFFE_LITE_WINOGRAD", code) == ["False", "True"]


def test_the_rule():
    def geom(kernel=(3, 3), stride=(1, 1), dilation=(1, 1), group=1, ci=64, co=64, size=56,
             num=1):
        k = len(kernel)
        return conv_plan(kernel=kernel, pad=(1,) * k, stride=stride, dilation=dilation,
                         group=group, in_channels=ci, out_channels=co, in_spatial=(size,) * k,
                         out_spatial=(size,) * k, num=num, workspace_bytes=1 << 28).winograd_tile

    assert geom() == 4  # ResNet-50's res2 3x3
    assert geom(stride=(2, 2)) == 0
    assert geom(dilation=(2, 2)) == 0
    assert geom(group=2) == 0
    assert geom(kernel=(5, 5)) == 0
    assert geom(kernel=(3, 3, 3), stride=(1,) * 3, dilation=(1,) * 3) == 0
    assert geom(ci=3, size=224) == 0  # VGG's conv1_1: too few channels
    assert geom(size=2) == 0  # too few tiles
    assert geom(ci=16, co=64, size=56) == 0  # SqueezeNet's fire2 expand3x3: too few
    assert geom(ci=64, co=192, size=56) == 4  # GoogLeNet's conv2
    assert geom(ci=128, co=128, size=28) == 2  # ResNet-50's res3: 196 tiles of 2x2
    assert geom(ci=128, co=128, size=14) == 0  # 49 tiles of 2x2: the GEMM
    assert geom(ci=512, co=512, size=14) == 0  # VGG's conv5
    assert geom(ci=512, co=512, size=14, num=8) == 2  # 8 images make 392 tiles of 2x2
    assert geom(ci=32, co=512, size=14, num=8) == 0  # too few channels for F(2x2)


@needs_library
def test_f4x4_against_f2x2_and_a_hand_computed_tile():
    """One 6x6 input block and a 3x3 filter: F(4x4) gives the 16 correlations, as does
    F(2x2) and a hand sum (float64, 1e-12)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 1, 6, 6))
    w = rng.standard_normal((1, 1, 3, 3))
    hand = np.array([[np.sum(x[0, 0, i:i + 3, j:j + 3] * w[0, 0]) for j in range(4)]
                     for i in range(4)])
    for tile in (2, 4):
        nt = cpu_conv.winograd_tiles(1, (4, 4), tile)[2]
        p = (tile + 2) ** 2
        y = np.empty((1, 1, 4, 4))
        cpu_conv.winograd_forward(x, w, None, y, (0, 0), (4, 4), np.empty(p), np.empty(p * nt),
                                  np.empty(p * nt), tile)
        np.testing.assert_allclose(y[0, 0], hand, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="2 or 4"):
        cpu_conv.winograd_forward(x, w, None, y, (0, 0), (4, 4), None, None, None, 3)


@needs_library
def test_threads_give_the_same_result(always, monkeypatch):
    shape = (2, 6, 5, 9, 8, (1, 1))
    results = []
    for n in (1, 3):
        monkeypatch.setitem(cpu_threads._state, "threads", n)
        monkeypatch.setattr(cpu_threads, "MIN_ELEMENTS_PER_THREAD", 1)
        geom, out = geometry(shape, np.float32)
        x, w, b = data(shape, np.float32, seed=2)
        y = np.empty((shape[0], shape[2]) + out, np.float32)
        conv.forward(x, w, y, geom, bias=b)
        results.append(y)
    np.testing.assert_array_equal(*results)


@needs_library
@pytest.mark.parametrize("kind,group,pad,channels", [
    ("Convolution", 1, 1, 2), ("Convolution", 2, 1, 4), ("Convolution", 1, 2, 2),
    ("Deconvolution", 2, 1, 4)])
def test_gradient_check_with_winograd(always, monkeypatch, kind, group, pad, channels):
    """Convolution (and Deconvolution, whose forward is the convolution's input gradient)
    with Winograd in the forward and in the input gradient: the numerical gradient check."""
    calls = []
    fn = cpu_conv.winograd_forward
    monkeypatch.setattr(cpu_conv, "winograd_forward", lambda *a: calls.append(1) or fn(*a))
    text = ('type: "%s" convolution_param { num_output: 4 kernel_size: 3 pad: %d group: %d '
            'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "uniform" } }'
            % (kind, pad, group))
    check_layer(text, [(2, channels, 5, 4)])
    assert calls


@needs_library
@pytest.mark.parametrize("group,pad", [(1, (1, 1)), (2, (1, 1)), (1, (0, 2)), (3, (2, 0))])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_grouped_forward_and_input_gradient_within_the_bound(always, group, pad, dtype,
                                                             monkeypatch):
    """Winograd group by group, for the forward and for the gradient with respect to the
    input (the output gradient convolved with the filters turned around, padded by 2 - pad):
    within the bound of the exact sums (float64 loops over the taps) and of the GEMM path."""
    calls = []
    fn = cpu_conv.winograd_forward
    monkeypatch.setattr(cpu_conv, "winograd_forward", lambda *a: calls.append(1) or fn(*a))
    nb, ci, co, h, w = 2, 6, 12, 9, 8
    geom = conv_plan(kernel=(3, 3), pad=pad, group=group, in_channels=ci, out_channels=co,
                     in_spatial=(h, w), out_spatial=(h + 2 * pad[0] - 2, w + 2 * pad[1] - 2),
                     num=nb, itemsize=np.dtype(dtype).itemsize)
    assert geom.winograd_tile == always and geom.winograd_back_tile == always
    out = geom.geometry.conv_out_spatial
    rng = np.random.default_rng(4)
    x = rng.standard_normal((nb, ci, h, w)).astype(dtype)
    wt = rng.standard_normal((co, ci // group, 3, 3)).astype(dtype)
    dy = rng.standard_normal((nb, co) + out).astype(dtype)
    xpad = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2))
    exact_y = np.zeros((nb, co) + out)
    exact_dx = np.zeros(xpad.shape)
    cg, kg = ci // group, co // group
    for g in range(group):
        src, dst = slice(g * cg, (g + 1) * cg), slice(g * kg, (g + 1) * kg)
        for i in range(3):
            for j in range(3):
                tap = wt[dst, :, i, j].astype(np.float64)
                window = (slice(None), src, slice(i, i + out[0]), slice(j, j + out[1]))
                exact_y[:, dst] += np.einsum("kc,nchw->nkhw", tap, xpad[window])
                exact_dx[window] += np.einsum("kc,nkhw->nchw", tap, dy[:, dst])
    exact_dx = exact_dx[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + w]
    y = np.empty((nb, co) + out, dtype)
    conv.forward(x, wt, y, geom)
    dx, dw, dw_gemm, dx_gemm = (np.empty_like(x), np.zeros_like(wt), np.zeros_like(wt),
                                np.empty_like(x))
    conv.backward(x, dy, wt, geom, dx=dx, dw=dw)
    assert len(calls) == 2
    conv.gemm_backward_and_weight(x, dy, wt, geom, input_diff=dx_gemm, weight_diff=dw_gemm)
    bound = BOUND[always][dtype]
    assert np.abs(y - exact_y).max() <= bound * np.abs(exact_y).max()
    assert np.abs(dx - exact_dx).max() <= bound * np.abs(exact_dx).max()
    assert np.abs(dx - dx_gemm).max() <= bound * np.abs(exact_dx).max()
    np.testing.assert_array_equal(dw, dw_gemm)  # the filter gradient stays the GEMM's
