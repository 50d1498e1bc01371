"""Intel Caffe's int8 average pooling (MKL-DNN's i8i8 pooling: the integers' sum times the
float32 1/n, rounded to the nearest, ties to even) and Concat (its inputs reordered to the
least scale) against hand computations."""

import logging

import numpy as np
import pytest

from test_int8_sum import _conv, _fill, _int8, _net, _qp

f32 = np.float32


@pytest.mark.parametrize("pooling,shape", [
    ("kernel_size: 2 stride: 2", (2, 4, 5, 5)),   # ceil: the last windows hang over the edge
    ("global_pooling: true", (2, 4, 3, 3)),
])
def test_average_pooling_of_u8_values_rounds_the_mean(caplog, pooling, shape):
    body = (_conv("conv0", "d", "c0", _qp(40.0, 30.0, 100.0))
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + 'layer { name: "pool" type: "Pooling" bottom: "c0" top: "p" pooling_param { '
              'pool: AVE %s } }\n' % pooling)
    with caplog.at_level(logging.INFO):
        net = _net(body, shape=shape)
    assert "average pooling and Concat in int8 as Intel Caffe's engine rounds them (pool)" \
        in caplog.text
    rng = _fill(net, 11, 0.5)
    x = rng.uniform(0, 2.5, shape).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    q0 = np.clip(np.rint(np.maximum(_int8(net, "conv0", xq, 40.0, 30.0, 100.0), 0)), 0, 255)
    h = shape[2]
    if h == 5:  # windows [0, 2), [2, 4), [4, 5) on each axis
        edges = [(0, 2), (2, 4), (4, 5)]
    else:
        edges = [(0, 3)]
    expected = np.empty(q0.shape[:2] + (len(edges), len(edges)), f32)
    for i, (a, b) in enumerate(edges):
        for j, (c, d) in enumerate(edges):
            total = q0[:, :, a:b, c:d].sum(axis=(2, 3))
            n = (b - a) * (d - c)
            expected[:, :, i, j] = np.rint(total.astype(f32) * (f32(1) / f32(n)))
    np.testing.assert_array_equal(net.blobs["p"].data, expected / f32(30))
    # the float average of the same u8 values keeps the fractions the engine rounds away
    mean = np.empty_like(expected)
    for i, (a, b) in enumerate(edges):
        for j, (c, d) in enumerate(edges):
            mean[:, :, i, j] = q0[:, :, a:b, c:d].mean(axis=(2, 3))
    assert (mean != np.rint(mean)).any()


def test_a_padded_average_pooling_stays_float(caplog):
    body = (_conv("conv0", "d", "c0", _qp(40.0, 30.0, 100.0))
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + 'layer { name: "pool" type: "Pooling" bottom: "c0" top: "p" pooling_param { '
              'pool: AVE kernel_size: 3 stride: 1 pad: 1 } }\n')
    with caplog.at_level(logging.INFO):
        net = _net(body)
    assert "average pooling 'pool' reads int8 values but computes in float (padded" \
        in caplog.text
    rng = _fill(net, 11, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    c0 = net.blobs["c0"].data.astype(np.float64)
    # Caffe's padded average: the window's sum over the 9 positions of the padded plane
    padded = np.pad(c0, ((0, 0), (0, 0), (1, 1), (1, 1)))
    sums = sum(padded[:, :, i:i + 3, j:j + 3] for i in range(3) for j in range(3))
    np.testing.assert_allclose(net.blobs["p"].data, sums / 9, rtol=1e-5, atol=1e-7)


def test_a_concat_of_u8_values_at_two_scales_rounds_onto_the_least():
    """conv0 (u8 at 30) and conv0b (u8 at 20) concatenated: Intel Caffe's Concat writes u8 at
    20, conv0's integers reordered as round(q * (20 / 30)) in float32; conv1 reads them."""
    body = (_conv("conv0", "d", "c0", _qp(40.0, 30.0, 100.0), n=2)
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + _conv("conv0b", "d", "c0b", _qp(40.0, 20.0, 100.0), n=2)
            + 'layer { name: "relu0b" type: "ReLU" bottom: "c0b" top: "c0b" }\n'
            + 'layer { name: "cat" type: "Concat" bottom: "c0" bottom: "c0b" top: "cat" }\n')
    net = _net(body)
    rng = _fill(net, 11, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    q0 = np.clip(np.rint(np.maximum(_int8(net, "conv0", xq, 40.0, 30.0, 100.0), 0)), 0, 255)
    q0b = np.clip(np.rint(np.maximum(_int8(net, "conv0b", xq, 40.0, 20.0, 100.0), 0)), 0, 255)
    moved = np.rint(q0.astype(f32) * (f32(20) / f32(30)))
    expected = np.concatenate([moved, q0b], axis=1) / f32(20)
    np.testing.assert_array_equal(net.blobs["cat"].data, expected)
    assert (moved / f32(20) != q0 / f32(30)).any()  # the reorder's rounding shows


def test_force_u8_input_takes_the_input_as_u8_integers():
    """Intel Caffe's first_conv_force_u8.py folds scale_in into the data layer's scale and
    sets force_u8_input: the engine then quantizes the input at scale 1 (round, saturate to
    u8), and keeps scale_in in the bias and output scales."""
    body = _conv("conv0", "d", "c0", 'quantization_param { bw_layer_in: 8 bw_layer_out: 8 '
                 'bw_params: 8 scale_in: 40.0 scale_out: 30.0 scale_params: 100.0 '
                 'force_u8_input: true }')
    net = _net(body)
    rng = _fill(net, 11, 0.5)
    x = rng.uniform(-20, 300, (2, 4, 3, 3)).astype(f32)   # beyond [0, 255] on both sides
    net.forward(d=x)
    xq = np.clip(np.rint(x), 0, 255)
    expected = np.clip(np.rint(_int8(net, "conv0", xq, 40.0, 30.0, 100.0)), -128, 127)
    np.testing.assert_array_equal(net.blobs["c0"].data, expected / f32(30))
    assert (expected == 127).any() and (expected < 0).any()
