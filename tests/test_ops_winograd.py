"""Winograd's F(2x2, 3x3) forward of the compiled kernels, through the convolution ops
(pycaffe_lite.ops.conv) that choose it for 3x3, stride 1, dilation 1, one-group layers.

Its transforms round in other places than the direct sum, so it is checked against the exact
result (the direct sum in float64 on the same values) within a stated bound: the largest error
at most ``1e-5`` of the output's largest magnitude for float32 (``1e-13`` for float64); in
practice it is a few ``1e-7`` (float32). The matrix-product path (kernels off) must agree to
the same bound."""

import os
import subprocess
import sys

import numpy as np
import pytest

from pycaffe_lite.ops import conv, cpu
from pycaffe_lite.ops.cpu import convolution as cpu_conv
from pycaffe_lite.testing import check_layer
from kernel_helpers import needs_library


BOUND = {np.float32: 1e-5, np.float64: 1e-13}

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


@pytest.fixture
def always(monkeypatch):
    """Winograd taken for every shape it can take (the rule's thresholds at their least)."""
    monkeypatch.setattr(conv, "_WINOGRAD_MIN_CHANNELS", 1)
    monkeypatch.setattr(conv, "_WINOGRAD_MIN_TILES", 0)


def geometry(shape, dtype, workspace=1 << 26):
    nb, ci, co, h, w, pad = shape
    out = (h + 2 * pad[0] - 2, w + 2 * pad[1] - 2)
    return conv.ConvGeometry((3, 3), pad, (1, 1), (1, 1), 1, ci, co, (h, w), out, nb,
                             np.dtype(dtype).itemsize, workspace), out


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
    taken = out[1] <= 2 * cpu_conv.WINOGRAD_MAX_ROW_TILES
    assert geom.winograd == taken
    assert len(calls) == (-(-geom.num // geom.winograd_chunk) if taken else 0)
    assert np.abs(y - exact).max() <= BOUND[dtype] * np.abs(exact).max()
    with_gemm = np.empty_like(y)
    geom._forward_and_weight(x, w, output=with_gemm, bias=b)
    assert np.abs(y - with_gemm).max() <= BOUND[dtype] * np.abs(exact).max()
    without_bias = np.empty_like(y)
    conv.forward(x, w, without_bias, geom)
    assert np.abs(without_bias - (exact - b[:, None, None])).max() <= \
        BOUND[dtype] * np.abs(exact).max()


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
    geom._forward_and_weight(x, w, output=with_gemm, bias=b)
    np.testing.assert_array_equal(y, with_gemm)
    conv.forward(x, w, y, geom, bias=b)
    assert calls == [1]


def test_the_environment_switch():
    code = "from pycaffe_lite.ops.cpu import convolution as c; print(c.winograd_enabled())"
    for value, expect in (("0", "False"), ("1", "True")):
        env = dict(os.environ, PYCAFFE_LITE_WINOGRAD=value)
        got = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout.strip()
        assert got == expect


def test_the_rule():
    def geom(kernel=(3, 3), stride=(1, 1), dilation=(1, 1), group=1, ci=64, co=64, size=56,
             num=1):
        k = len(kernel)
        return conv.ConvGeometry(kernel, (1,) * k, stride, dilation, group, ci, co,
                                 (size,) * k, (size,) * k, num, 4, 1 << 28).winograd

    assert geom()  # ResNet-50's res2 3x3
    assert not geom(stride=(2, 2))
    assert not geom(dilation=(2, 2))
    assert not geom(group=2)
    assert not geom(kernel=(5, 5))
    assert not geom(kernel=(3, 3, 3), stride=(1,) * 3, dilation=(1,) * 3)
    assert not geom(ci=3)  # VGG's conv1_1: too few channels for the products to dominate
    assert not geom(size=2)  # too few tiles
    assert not geom(ci=32, co=128, size=28)  # SqueezeNet's fire4: too few input channels
    assert geom(ci=128, co=128, size=28)  # ResNet-50's res3: 196 tiles
    assert not geom(ci=128, co=128, size=14)  # 49 tiles: the GEMM is faster
    assert not geom(ci=512, co=512, size=14)  # VGG's conv5
    assert geom(ci=512, co=512, size=14, num=8)  # but 8 images make 392 tiles


@needs_library
def test_threads_give_the_same_result(always, monkeypatch):
    shape = (2, 6, 5, 9, 8, (1, 1))
    results = []
    for n in (1, 3):
        monkeypatch.setitem(cpu._state, "threads", n)
        monkeypatch.setattr(cpu, "_MIN_ELEMENTS_PER_THREAD", 1)
        geom, out = geometry(shape, np.float32)
        x, w, b = data(shape, np.float32, seed=2)
        y = np.empty((shape[0], shape[2]) + out, np.float32)
        conv.forward(x, w, y, geom, bias=b)
        results.append(y)
    np.testing.assert_array_equal(*results)


@needs_library
def test_gradient_check_with_winograd_in_the_forward(always, monkeypatch):
    """Convolution's forward through Winograd; the gradient check compares it with the
    matrix-product backward."""
    calls = []
    fn = cpu_conv.winograd_forward
    monkeypatch.setattr(cpu_conv, "winograd_forward", lambda *a: calls.append(1) or fn(*a))
    text = ('type: "Convolution" convolution_param { num_output: 3 kernel_size: 3 pad: 1 '
            'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "uniform" } }')
    check_layer(text, [(2, 2, 5, 4)])
    assert calls
