"""The direct 1x1 convolution of the compiled kernels (pycaffe_lite.ops.pointwise), which the
convolution ops choose for narrow 1x1, stride 1, unpadded, one-group layers.

It sums each output's products in increasing channel order (the matrix-product path sums in
BLAS's order), so it is checked against the exact result (float64 sums of the same values;
``math.fsum`` for the float64 kernel) within the classical bound ``(C + 1) * eps * (sum |w x|
+ |b|)`` per element, and against the matrix-product path within twice that."""

import math

import numpy as np
import pytest

from pycaffe_lite.ops import conv, cpu, pointwise
from pycaffe_lite.ops.cpu import _threads as cpu_threads
from pycaffe_lite.testing import check_layer
from helpers.kernel import conv_plan, needs_library, switch_reads

# num, in channels, out channels, height, width: full and partial pixel blocks, output
# channels in and out of the 4-wide tiles, one pixel, long sums
SHAPES = [(1, 16, 64, 12, 12), (2, 3, 5, 7, 9), (3, 17, 7, 5, 5), (1, 2, 1, 1, 1),
          (1, 128, 9, 6, 8), (2, 40, 12, 1, 50)]


@pytest.fixture(autouse=True)
def enabled():
    """The kernel is opt-in: on for these tests."""
    old = pointwise.set_enabled(True)
    yield
    pointwise.set_enabled(old)


def geometry(shape, dtype):
    """The plan of a 1x1 convolution of ``shape`` (nb, ci, co, h, w)."""
    nb, ci, co, h, w = shape
    return conv_plan(np.dtype(dtype).itemsize, kernel=(1, 1), pad=(0, 0), in_channels=ci,
                     out_channels=co, in_spatial=(h, w), out_spatial=(h, w), num=nb)


def data(shape, dtype, seed=0):
    nb, ci, co, h, w = shape
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((nb, ci, h, w)).astype(dtype),
            rng.standard_normal((co, ci, 1, 1)).astype(dtype),
            rng.standard_normal(co).astype(dtype))


def exact_and_bound(x, w, b, dtype):
    """The float64 sums of the products (exact to far below float32's rounding) and the
    per-element bound of a float sum in any order."""
    nb, ci = x.shape[:2]
    w2 = w.reshape(w.shape[0], ci).astype(np.float64)
    x3 = x.reshape(nb, ci, -1).astype(np.float64)
    exact = np.einsum("kc,ncp->nkp", w2, x3) + b.astype(np.float64)[:, None]
    size = np.einsum("kc,ncp->nkp", np.abs(w2), np.abs(x3)) + np.abs(b.astype(np.float64))[
        :, None]
    bound = (ci + 1) * np.finfo(dtype).eps * size
    return exact.reshape((nb, -1) + x.shape[2:]), bound.reshape((nb, -1) + x.shape[2:])


@needs_library
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("relu", [False, True])
def test_float32_within_the_bound_of_the_exact_result(shape, relu, monkeypatch):
    calls = []
    fn = pointwise.forward
    monkeypatch.setattr(pointwise, "forward", lambda *a: calls.append(1) or fn(*a))
    dtype = np.float32
    geom = geometry(shape, dtype)
    x, w, b = data(shape, dtype)
    exact, bound = exact_and_bound(x, w, b, dtype)
    if relu:
        exact = np.maximum(exact, 0)
    y = np.full((shape[0], shape[2]) + shape[3:], np.nan, dtype)
    conv.forward(x, w, y, geom, bias=b, relu=relu)
    assert calls == [1]
    assert (np.abs(y - exact) <= bound).all()
    if relu:
        assert (y >= 0).all()
    # the matrix-product path (the kernel off) agrees within twice the bound
    with_gemm = np.empty_like(y)
    conv.gemm_forward_and_weight(x, w, geom, output=with_gemm, bias=b, relu=relu)
    assert (np.abs(y - with_gemm) <= 2 * bound).all()
    without_bias = np.empty_like(y)
    conv.forward(x, w, without_bias, geom)
    exact_nb, bound_nb = exact_and_bound(x, w, np.zeros_like(b), dtype)
    assert (np.abs(without_bias - exact_nb) <= bound_nb).all()


@needs_library
def test_float64_against_exactly_rounded_sums():
    shape = (2, 13, 6, 5, 7)
    x, w, b = data(shape, np.float64, seed=1)
    y = np.empty((2, 6, 5, 7))
    pointwise.forward(x, w, y, b)
    eps = np.finfo(np.float64).eps
    for n in range(2):
        for k in range(6):
            for i in range(5):
                for j in range(7):
                    terms = [float(w[k, c, 0, 0]) * float(x[n, c, i, j]) for c in range(13)]
                    exact = math.fsum(terms + [float(b[k])])
                    bound = 14 * eps * (sum(abs(t) for t in terms) + abs(b[k]))
                    assert abs(y[n, k, i, j] - exact) <= bound


@needs_library
def test_relu_by_hand():
    """Two channels, one output channel: w = (1, -1), bias 0.5; ReLU keeps NaN as NumPy's
    maximum does and zeroes the negatives, in full vectors and in the last partial block."""
    npix = 30  # one full block of 24 float32 pixels and a partial one
    x = np.zeros((1, 2, 1, npix), np.float32)
    x[0, 0, 0, :] = np.arange(npix)
    x[0, 1, 0, :] = 10.0
    x[0, 0, 0, 3] = np.nan
    x[0, 0, 0, 27] = np.nan
    w = np.array([1.0, -1.0], np.float32).reshape(1, 2, 1, 1)
    b = np.array([0.5], np.float32)
    y = np.empty((1, 1, 1, npix), np.float32)
    pointwise.forward(x, w, y, b, relu=True)
    expect = np.maximum(np.arange(npix) - 10.0 + 0.5, 0).astype(np.float32)
    expect[[3, 27]] = np.nan
    np.testing.assert_array_equal(y.reshape(-1), expect)
    pointwise.forward(x, w, y, None, relu=False)
    expect = (np.arange(npix) - 10.0).astype(np.float32)
    expect[[3, 27]] = np.nan
    np.testing.assert_array_equal(y.reshape(-1), expect)


@needs_library
def test_threads_give_the_same_result(monkeypatch):
    shape = (2, 6, 9, 10, 11)
    x, w, b = data(shape, np.float32, seed=2)
    results = []
    for n in (1, 3):
        monkeypatch.setitem(cpu_threads._state, "threads", n)
        monkeypatch.setattr(pointwise, "_MIN_MACS_PER_THREAD", 1)
        y = np.empty((2, 9, 10, 11), np.float32)
        pointwise.forward(x, w, y, b, relu=True)
        results.append(y)
    np.testing.assert_array_equal(*results)


def test_the_rule():
    def geom(kernel=(1, 1), stride=(1, 1), pad=(0, 0), group=1, ci=64, co=64):
        return conv.ConvGeometry(kernel=kernel, pad=pad, stride=stride, dilation=(1, 1),
                                 group=group, in_channels=ci, out_channels=co,
                                 in_spatial=(14, 14), out_spatial=(14, 14), num=1)

    def takes(g, dtype=np.float32):
        x = np.zeros((1, g.conv_in_channels, 14, 14), dtype)
        w = np.zeros((g.conv_out_channels, g.conv_in_channels // g.group) + g.kernel_shape,
                     dtype)
        y = np.zeros((1, g.conv_out_channels, 14, 14), dtype)
        return pointwise.takes(g, x, w, y)

    assert takes(geom()) == cpu.kernels_enabled()
    assert not takes(geom(kernel=(3, 3), pad=(1, 1)))
    assert not takes(geom(stride=(2, 2)))
    assert not takes(geom(group=2))
    assert not takes(geom(ci=pointwise.MAX_IN_CHANNELS + 1))
    assert not takes(geom(ci=128, co=1024))  # more filter values than MAX_WEIGHTS
    old = pointwise.set_enabled(False)
    try:
        assert not takes(geom())
    finally:
        pointwise.set_enabled(old)


def test_the_environment_switch():
    code = "from pycaffe_lite.ops import pointwise as p; print(p.enabled())"
    assert switch_reads("PYCAFFE_LITE_POINTWISE", code) == ["False", "True"]


@needs_library
def test_gradient_check_of_a_1x1_convolution(monkeypatch):
    """A 1x1 Convolution whose forward runs the kernel: the numerical gradient check."""
    calls = []
    fn = pointwise.forward
    monkeypatch.setattr(pointwise, "forward", lambda *a: calls.append(1) or fn(*a))
    check_layer('type: "Convolution" convolution_param { num_output: 5 kernel_size: 1 '
                'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "uniform" } }',
                [(2, 3, 4, 5)])
    assert calls
