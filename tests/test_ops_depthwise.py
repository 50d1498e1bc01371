"""The direct depthwise convolution (group == channels == outputs) of the compiled kernels,
through the convolution ops (pycaffe_lite.ops.conv) that choose it.

The kernels sum in their own order, not BLAS's, so they are checked against the sums taken in
float64 on the same values, with the classical bound for a sum of ``n`` products rounded in
the element type: ``|got - exact| <= n * eps * sum |terms|`` (``n``: the taps per output for
the forward and the data gradient, the images times the output positions for the filter
gradient; ``eps``: the type's machine epsilon); and against the matrix-product path run with
the kernels off."""


import numpy as np
import pytest

from pycaffe_lite.ops import conv
from pycaffe_lite.ops.cpu import _threads as cpu_threads
from pycaffe_lite.ops.cpu import convolution as cpu_conv
from pycaffe_lite.testing import check_layer
from helpers.kernel import conv_plan, kernels, needs_library



# num, channels, height, width, kernel (h, w), pad (h, w), stride (h, w), dilation (h, w)
GEOMETRIES = [
    (1, 32, 14, 14, (3, 3), (1, 1), (1, 1), (1, 1)),  # MobileNet, stride 1
    (2, 8, 15, 13, (3, 3), (1, 1), (2, 2), (1, 1)),  # stride 2, odd sizes
    (3, 5, 9, 11, (5, 3), (2, 0), (1, 2), (1, 1)),  # rectangular kernel, mixed strides
    (2, 4, 12, 10, (3, 3), (2, 2), (1, 1), (2, 2)),  # dilation
    (1, 6, 7, 7, (7, 7), (3, 3), (1, 1), (1, 1)),  # kernel as large as the map
    (2, 3, 5, 6, (1, 1), (0, 0), (1, 1), (1, 1)),  # 1x1 (a per-channel scale)
    (1, 4, 300, 2, (3, 3), (1, 1), (1, 1), (1, 1)),  # rows longer than the kernel's block
    (2, 3, 4, 600, (1, 3), (0, 1), (1, 1), (1, 1)),  # columns beyond one block of sums
    (1, 2, 4, 4, (3, 3), (0, 0), (3, 3), (1, 1)),  # stride larger than the output
    # 3x3 at dilation 1 (the row-at-a-time path): its edges
    (1, 3, 10, 9, (3, 3), (0, 0), (1, 1), (1, 1)),  # no padding: all columns inside
    (1, 3, 6, 7, (3, 3), (2, 2), (1, 1), (1, 1)),  # two rows and columns outside
    (2, 3, 11, 12, (3, 3), (1, 1), (2, 1), (1, 1)),  # unequal strides
    (1, 2, 9, 1, (3, 3), (1, 1), (1, 1), (1, 1)),  # one column: no window inside
    (1, 2, 10, 10, (3, 3), (1, 1), (3, 3), (1, 1)),  # stride 3
    (1, 2, 2, 8, (3, 3), (1, 1), (2, 2), (1, 1)),  # two rows: first and last row outside
]


def out_size(size, k, p, s, d):
    return (size + 2 * p - (d * (k - 1) + 1)) // s + 1


def make_geometry(geometry, dtype):
    nb, c, h, w, k, p, s, d = geometry
    out = (out_size(h, k[0], p[0], s[0], d[0]), out_size(w, k[1], p[1], s[1], d[1]))
    geom = conv_plan(kernel=k, pad=p, stride=s, dilation=d, group=c, in_channels=c,
                     out_channels=c, in_spatial=(h, w), out_spatial=out, num=nb,
                     itemsize=np.dtype(dtype).itemsize)
    return geom, out


def windows(x, geometry, out):
    """``(N, C, kh, kw, OH, OW)``: the input value under each tap of each output (0 in the
    padding), in float64."""
    nb, c, h, w, k, p, s, d = geometry
    xp = np.zeros((nb, c, h + 2 * p[0], w + 2 * p[1]))
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    win = np.empty((nb, c, k[0], k[1]) + out)
    for i in range(k[0]):
        for j in range(k[1]):
            win[:, :, i, j] = xp[:, :, i * d[0]:i * d[0] + s[0] * (out[0] - 1) + 1:s[0],
                                 j * d[1]:j * d[1] + s[1] * (out[1] - 1) + 1:s[1]]
    return win


def unwindows(win, geometry):
    """The adjoint of :func:`windows`: the values per tap summed back onto the input."""
    nb, c, h, w, k, p, s, d = geometry
    out = win.shape[-2:]
    xp = np.zeros((nb, c, h + 2 * p[0], w + 2 * p[1]))
    for i in range(k[0]):
        for j in range(k[1]):
            xp[:, :, i * d[0]:i * d[0] + s[0] * (out[0] - 1) + 1:s[0],
               j * d[1]:j * d[1] + s[1] * (out[1] - 1) + 1:s[1]] += win[:, :, i, j]
    return xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w]


def assert_within(got, exact, magnitude, terms, dtype):
    bound = terms * np.finfo(dtype).eps * magnitude
    excess = np.abs(got.astype(np.float64) - exact) - bound
    assert excess.max() <= 0, "beyond the rounding bound by %g" % excess.max()


def arrays(geometry, dtype, seed=0):
    nb, c, h, w, k = geometry[:5]
    geom, out = make_geometry(geometry, dtype)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((nb, c, h, w)).astype(dtype)
    wts = rng.standard_normal((c, 1) + k).astype(dtype)
    bias = rng.standard_normal(c).astype(dtype)
    dy = rng.standard_normal((nb, c) + out).astype(dtype)
    return geom, out, x, wts, bias, dy


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_forward_and_gradients_within_the_rounding_bound(geometry, dtype, monkeypatch):
    calls = []
    for name in ("depthwise_forward", "depthwise_backward_data", "depthwise_backward_weight"):
        fn = getattr(cpu_conv, name)
        monkeypatch.setattr(cpu_conv, name,
                            lambda *a, _fn=fn, _name=name: calls.append(_name) or _fn(*a))
    geom, out, x, wts, bias, dy = arrays(geometry, dtype)
    taps = wts.shape[2] * wts.shape[3]
    win = windows(x.astype(np.float64), geometry, out)
    w64 = wts.astype(np.float64)[:, 0, :, :, None, None]

    y = np.full((x.shape[0], x.shape[1]) + out, np.nan, dtype)
    conv.forward(x, wts, y, geom, bias=bias)
    exact = (w64 * win).sum(axis=(2, 3)) + bias.astype(np.float64)[:, None, None]
    magnitude = (np.abs(w64 * win)).sum(axis=(2, 3)) + np.abs(bias)[:, None, None]
    assert_within(y, exact, magnitude, taps + 1, dtype)

    dx = np.full(x.shape, np.nan, dtype)
    dw = np.ones_like(wts)  # accumulated into
    conv.backward(x, dy, wts, geom, dx=dx, dw=dw)
    dy64 = dy.astype(np.float64)[:, :, None, None]
    exact = unwindows(w64 * dy64, geometry)
    magnitude = unwindows(np.abs(w64 * dy64), geometry)
    assert_within(dx, exact, magnitude, taps, dtype)
    terms = x.shape[0] * out[0] * out[1] + 1
    exact = 1 + (dy64 * win).sum(axis=(0, 4, 5))[:, None]
    magnitude = 1 + np.abs(dy64 * win).sum(axis=(0, 4, 5))[:, None]
    assert_within(dw, exact, magnitude, terms, dtype)
    assert calls == ["depthwise_forward", "depthwise_backward_weight",
                     "depthwise_backward_data"]


@needs_library
@pytest.mark.parametrize("geometry", GEOMETRIES[:4])
def test_equal_to_the_matrix_product_path(geometry):
    """The same results as im2col + GEMM with the kernels off (float64, to rounding), for
    forward, backward and Deconvolution's forward_and_weight, with and without bias."""
    results = []
    for flag in (False, True):
        geom, out, x, wts, bias, dy = arrays(geometry, np.float64, seed=3)
        with kernels(flag):
            y = np.empty_like(dy)
            conv.forward(x, wts, y, geom, bias=bias)
            y2 = np.empty_like(dy)
            conv.forward(x, wts, y2, geom)
            dx, dw = np.empty_like(x), np.zeros_like(wts)
            conv.backward(x, dy, wts, geom, dx=dx, dw=dw)
            dw_only = np.zeros_like(wts)
            conv.backward(x, dy, None, geom, dw=dw_only)
            y3, dw3 = np.empty_like(dy), np.zeros_like(wts)
            conv.forward_and_weight(x, wts, geom, y=y3, dy=dy, dw=dw3, bias=bias)
        results.append([y, y2, dx, dw, dw_only, y3, dw3])
    for a, b in zip(*results):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(results[1][3], results[1][4])


@needs_library
@pytest.mark.parametrize("threads", [2, 3, 7])
def test_threads_split_channels_and_planes_with_the_same_result(threads, monkeypatch):
    geometry = (3, 7, 9, 8, (3, 3), (1, 1), (1, 1), (1, 1))
    results = []
    for n in (1, threads):
        monkeypatch.setitem(cpu_threads._state, "threads", n)
        monkeypatch.setattr(cpu_threads, "MIN_ELEMENTS_PER_THREAD", 1)
        geom, out, x, wts, bias, dy = arrays(geometry, np.float32, seed=5)
        y, dx, dw = np.empty_like(dy), np.empty_like(x), np.zeros_like(wts)
        conv.forward(x, wts, y, geom, bias=bias)
        conv.backward(x, dy, wts, geom, dx=dx, dw=dw)
        results.append((y, dx, dw))
    for a, b in zip(*results):
        np.testing.assert_array_equal(a, b)


def test_the_geometry_says_when_the_depthwise_kernels_apply():
    geom, _ = make_geometry(GEOMETRIES[0], np.float32)
    assert geom.geometry.is_depthwise

    def geometry(kernel, group, out_channels):
        rank = len(kernel)
        return conv.ConvGeometry(kernel=kernel, pad=(1,) * rank, stride=(1,) * rank,
                                 dilation=(1,) * rank, group=group, in_channels=4,
                                 out_channels=out_channels, in_spatial=(5,) * rank,
                                 out_spatial=(5,) * rank, num=1)

    two_groups = geometry((3, 3), 2, 4)
    multiplier = geometry((3, 3), 4, 8)
    three_d = geometry((3, 3, 3), 4, 4)
    assert geometry((3, 3), 4, 4).is_depthwise
    assert not (two_groups.is_depthwise or multiplier.is_depthwise or three_d.is_depthwise)


@needs_library
@pytest.mark.parametrize("params", [
    "num_output: 3 group: 3 kernel_size: 3 pad: 1",
    "num_output: 3 group: 3 kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 1",
    "num_output: 3 group: 3 kernel_size: 3 pad: 2 dilation: 2 bias_term: false",
])
@pytest.mark.parametrize("type_", ["Convolution", "Deconvolution"])
def test_gradient_check_through_the_layer(type_, params, monkeypatch):
    calls = []
    fn = cpu_conv.depthwise_backward_weight
    monkeypatch.setattr(cpu_conv, "depthwise_backward_weight",
                        lambda *a: calls.append(1) or fn(*a))
    text = ('type: "%s" convolution_param { %s weight_filler { type: "gaussian" std: 0.5 } '
            'bias_filler { type: "uniform" } }' % (type_, params))
    check_layer(text, [(2, 3, 6, 5)])
    assert calls  # the gradient went through the depthwise kernels
