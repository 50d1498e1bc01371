"""BVLC Caffe's own layer tests (src/caffe/test/test_*.cpp), part A: their cases that the
other layer tests here do not already cover, with BVLC's inputs and expected values as data
and an independent reference (a hand formula in NumPy) where BVLC computes one in C++.

Where a case's geometry can take another CPU path (the channel-blocked kernels of a folded
TEST net), it runs there too.
"""

import itertools

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.ops import cpu
from pycaffe_lite.ops.cpu import blocked
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def forward(text, arrays, dtype=np.float64, num_top=1):
    layer = make_layer(text, dtype)
    bottom = random_blobs(arrays, dtype=dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def ulps(a, b):
    """The largest distance in float32 units in the last place (gtest's EXPECT_FLOAT_EQ
    allows 4)."""
    a = np.asarray(a, np.float32).view(np.int32).astype(np.int64)
    b = np.asarray(b, np.float32).view(np.int32).astype(np.int64)
    return int(np.abs(a - b).max())


# ---- neuron layers -------------------------------------------------------------------------
def sigmoid64(v):
    return 1.0 / (1.0 + np.exp(-v))


# BVLC test_neuron_layer.cpp TestSigmoid, TestSwish, TestSwishWithBeta, TestSwishAsLinear:
# EXPECT_FLOAT_EQ against the double formula in float32 too (Caffe's sigmoid() computes
# 0.5 * tanh(0.5 * x) + 0.5 in double). Beside the Gaussian input, inputs down to -13, where
# a float32 tanh leaves little of the sigmoid (2.2e-6 from 1 - 0.9999955); in double the
# formula holds to float32 precision down to about -20.
@pytest.mark.parametrize("text,reference", [
    ('type: "Sigmoid"', sigmoid64),
    ('type: "Swish"', lambda v: v * sigmoid64(v)),
    ('type: "Swish" swish_param { beta: 1.5 }', lambda v: v * sigmoid64(np.float32(1.5) * v)),
    ('type: "Swish" swish_param { beta: 0.0 }', lambda v: v / 2),
])
def test_sigmoid_and_swish_float32_agree_with_the_double_formula(text, reference):
    gaussian = np.random.default_rng(1701).standard_normal((2, 3, 4, 5))
    wide = np.linspace(-13, 13, 53)
    for x in (gaussian, wide):
        x = x.astype(np.float32)
        _, _, top = forward(text, [x], np.float32)
        assert top[0].data.dtype == np.float32
        assert ulps(top[0].data, reference(x.astype(np.float64))) <= 4, text


# BVLC test_neuron_layer.cpp TestPReLUConsistencyReLU: PReLU's default slope 0.25 is ReLU
# with negative_slope 0.25, forward and backward, bit for bit.
def test_prelu_default_is_leaky_relu_quarter_bit_for_bit():
    rng = np.random.default_rng(1701)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    dy = rng.standard_normal(x.shape).astype(np.float32)
    diffs = []
    for text in ('type: "PReLU"', 'type: "ReLU" relu_param { negative_slope: 0.25 }'):
        layer, bottom, top = forward(text, [x], np.float32)
        np.testing.assert_array_equal(top[0].data, np.where(x > 0, x, x * np.float32(0.25)))
        top[0].diff[...] = dy
        layer.Backward(top, [True], bottom)
        diffs.append(bottom[0].diff.copy())
    np.testing.assert_array_equal(diffs[0], diffs[1])
    np.testing.assert_array_equal(diffs[0], np.where(x > 0, dy, dy * np.float32(0.25)))


# ---- pooling: BVLC's exact inputs and outputs, through the layer and a folded TEST net ----
SQUARE = [[1, 2, 5, 2, 3], [9, 4, 1, 4, 8], [1, 2, 5, 2, 3]]
RECT = [[35, 1, 6, 26, 19, 24], [3, 32, 7, 21, 23, 25], [31, 9, 2, 22, 27, 20],
        [8, 28, 33, 17, 10, 15], [30, 5, 34, 12, 14, 16], [4, 36, 29, 13, 18, 11]]
POOL_CASES = [
    # BVLC test_pooling_layer.cpp TestForwardMax / TestForwardMaxTopMask: TestForwardSquare
    ("pool: MAX kernel_size: 2", SQUARE,
     [[9, 5, 5, 8], [9, 5, 5, 8]], [[5, 2, 2, 9], [5, 12, 12, 9]]),
    # ... TestForwardRectHigh
    ("pool: MAX kernel_h: 3 kernel_w: 2", RECT,
     [[35, 32, 26, 27, 27], [32, 33, 33, 27, 27], [31, 34, 34, 27, 27], [36, 36, 34, 18, 18]],
     [[0, 7, 3, 16, 16], [7, 20, 20, 16, 16], [12, 26, 26, 16, 16], [31, 31, 26, 34, 34]]),
    # ... TestForwardRectWide
    ("pool: MAX kernel_h: 2 kernel_w: 3", RECT,
     [[35, 32, 26, 26], [32, 32, 27, 27], [33, 33, 33, 27], [34, 34, 34, 17], [36, 36, 34, 18]],
     [[0, 7, 3, 3], [7, 7, 16, 16], [20, 20, 20, 16], [26, 26, 26, 21], [31, 31, 26, 34]]),
    # TestForwardMaxPadded: the third window starts in the padding's last row
    ("pool: MAX kernel_size: 3 stride: 2 pad: 2", [[1, 2, 4], [2, 3, 2], [4, 2, 1]],
     [[1, 4, 4], [4, 4, 4], [4, 4, 1]], None),
    # TestForwardAve: a constant 2, the padding counted in the divisor
    ("pool: AVE kernel_size: 3 stride: 1 pad: 1", [[2, 2, 2]] * 3,
     [[8 / 9, 4 / 3, 8 / 9], [4 / 3, 2, 4 / 3], [8 / 9, 4 / 3, 8 / 9]], None),
]


def pooled_by_a_folded_net(tmp_path, params, x):
    """The pooling after an identity 1x1 convolution in a TEST net built with weights (folded:
    the channel-blocked path where the CPU offers it)."""
    n, c, h, w = x.shape
    proto = tmp_path / "pool.prototxt"
    proto.write_text(
        'layer { name: "data" type: "Input" top: "data" input_param { shape { dim: %d dim: %d '
        'dim: %d dim: %d } } }\n'
        'layer { name: "id" type: "Convolution" bottom: "data" top: "id" convolution_param { '
        'num_output: %d kernel_size: 1 bias_term: false } }\n'
        'layer { name: "pool" type: "Pooling" bottom: "id" top: "pool" pooling_param { %s } }\n'
        % (n, c, h, w, c, params))
    net = caffe.Net(str(proto), caffe.TEST)
    net.params["id"][0].data[...] = np.eye(c).reshape(c, c, 1, 1)
    weights = str(tmp_path / "pool.caffemodel")
    net.save(weights)
    net = caffe.Net(str(proto), caffe.TEST, weights=weights)
    net.forward(data=x.astype(np.float32))
    if blocked.block_size() is not None:
        assert 2 in net.folding.blocked.steps  # the pooling ran on the blocked layout
    return net.blobs["pool"].data


@pytest.mark.parametrize("params,plane,expected,mask", POOL_CASES)
def test_pooling_bvlc_cases(tmp_path, params, plane, expected, mask):
    plane, expected = np.array(plane, float), np.array(expected, float)
    x = np.tile(plane, (2, 2, 1, 1))  # BVLC's num 2, channels 2: the same plane in each
    # the compiled kernels and the NumPy code, one top (values only) and two (with the mask)
    for kernels, dtype in itertools.product((True, False), (np.float32, np.float64)):
        old = cpu.set_kernels_enabled(kernels)
        try:
            for num_top in ((1, 2) if mask else (1,)):
                _, _, top = forward('type: "Pooling" pooling_param { %s }' % params, [x],
                                    dtype, num_top)
                np.testing.assert_allclose(top[0].data,
                                           np.broadcast_to(expected, top[0].shape), rtol=1e-6)
                if num_top == 2:
                    np.testing.assert_array_equal(top[1].data,
                                                  np.broadcast_to(mask, top[1].shape))
        finally:
            cpu.set_kernels_enabled(old)
    # 16 channels: whole blocks of the blocked layout (8 or 16 per block)
    wide = np.tile(plane, (2, 16, 1, 1))
    np.testing.assert_allclose(pooled_by_a_folded_net(tmp_path, params, wide),
                               np.broadcast_to(expected, (2, 16) + expected.shape), rtol=1e-6)


# ---- convolution ---------------------------------------------------------------------------
# BVLC test_convolution_layer.cpp Test0DConvolution: axis 3 of a 2x3x6x4 bottom is the channel
# axis and no spatial axis is left: an inner product over the last axis, (N*C*H) rows of 4.
def test_zero_d_convolution_is_an_inner_product_over_the_last_axis():
    text = ('type: "Convolution" convolution_param { num_output: 3 axis: 3 '
            'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }')
    x = np.random.default_rng(1701).standard_normal((2, 3, 6, 4))
    for dtype in (np.float32, np.float64):
        layer, bottom, top = forward(text, [x], dtype)
        w, b = layer.blobs[0].data.astype(np.float64), layer.blobs[1].data.astype(np.float64)
        assert top[0].shape == (2, 3, 6, 3) and w.shape == (3, 4)
        np.testing.assert_allclose(top[0].data, x @ w.T + b, rtol=1e-5, atol=1e-5)
    check_layer(text, [x[:, :2, :3]])


def correlate3d(x, w, b, dilation):
    """Caffe's convolution (a cross-correlation), no padding, stride 1, one group."""
    k = w.shape[2:]
    out = [s - (dilation * (kk - 1) + 1) + 1 for s, kk in zip(x.shape[2:], k)]
    y = np.zeros((x.shape[0], w.shape[0]) + tuple(out)) + b.reshape(1, -1, 1, 1, 1)
    for i, j, m in itertools.product(*(range(kk) for kk in k)):
        d0, d1, d2 = i * dilation, j * dilation, m * dilation
        patch = x[:, :, d0:d0 + out[0], d1:d1 + out[1], d2:d2 + out[2]]
        y += np.einsum("ncxyz,oc->noxyz", patch, w[:, :, i, j, m])
    return y


# BVLC test_convolution_layer.cpp TestDilated3DConvolution: 2x3x6x7x8, kernel 3, dilation 2
def test_dilated_3d_convolution():
    text = ('type: "Convolution" convolution_param { num_output: 4 kernel_size: 3 dilation: 2 '
            'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }')
    rng = np.random.default_rng(1701)
    x1, x2 = rng.standard_normal((2, 2, 3, 6, 7, 8))
    for dtype in (np.float32, np.float64):
        layer, bottom, top = forward(text, [x1, x2], dtype, num_top=2)
        w, b = layer.blobs[0].data.astype(np.float64), layer.blobs[1].data.astype(np.float64)
        for x, t in zip((x1, x2), top):
            assert t.shape == (2, 4, 2, 3, 4)
            np.testing.assert_allclose(t.data, correlate3d(x, w, b, 2), atol=1e-4)


# ---- LRN -----------------------------------------------------------------------------------
# BVLC test_lrn_layer.cpp TestForwardAcrossChannelsLargeRegion: local_size 15 on 7 channels,
# every window holding all of them (clipped at both ends); alpha 1, beta 0.75, k 1.
def test_lrn_across_channels_window_wider_than_the_channels():
    x = np.random.default_rng(1701).standard_normal((2, 7, 3, 3))
    expected = x / (1 + (x ** 2).sum(axis=1, keepdims=True) / 15) ** 0.75
    for dtype in (np.float32, np.float64):
        _, _, top = forward('type: "LRN" lrn_param { local_size: 15 }', [x], dtype)
        np.testing.assert_allclose(top[0].data, expected, rtol=1e-5, atol=1e-6)
