"""BatchNorm with NVCaffe's scale_bias: five blobs, y = scale * x_hat + bias, NVCaffe's
moving statistics; against hand computations and numerical gradients."""

import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

SCALE_BIAS = ('type: "BatchNorm" batch_norm_param { scale_bias: true eps: 0.0001 '
              'moving_average_fraction: 0.9 }')


def test_five_blobs_with_nvcaffe_initial_values_and_learning_rates():
    layer = make_layer('type: "BatchNorm" batch_norm_param { scale_filler { type: "constant" '
                       'value: 0.5 } }')
    layer.SetUp(random_blobs([(2, 3, 2, 2)]), empty_blobs(1))
    assert [b.shape for b in layer.blobs] == [(3,), (3,), (1,), (3,), (3,)]
    np.testing.assert_array_equal(layer.blobs[2].data, [1])   # the variance correction
    np.testing.assert_array_equal(layer.blobs[3].data, [0.5] * 3)
    np.testing.assert_array_equal(layer.blobs[4].data, [0] * 3)  # no bias_filler: 0
    assert [p.lr_mult for p in layer.layer_param.param] == [0, 0, 0, 1, 1]
    assert layer.param_propagate_down == [False, False, False, True, True]


def test_global_forward_by_hand():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 2, 2))
    mean, var = np.array([0.5, -1.0, 2.0]), np.array([0.25, 4.0, 1e-6])
    scale, bias = np.array([2.0, -1.0, 0.5]), np.array([0.1, 0.2, -0.3])
    layer = make_layer(SCALE_BIAS.replace("eps: 0.0001", "eps: 1e-7"), np.float64,
                       caffe_pb2.TEST)
    bottom, top = random_blobs([x], dtype=np.float64), empty_blobs(1, np.float64)
    layer.SetUp(bottom, top)
    for blob, value in zip(layer.blobs, (mean, var, [1.0], scale, bias)):
        blob.data[...] = value
    layer.Forward(bottom, top)
    # NVCaffe raises eps to at least 1e-5
    expected = np.empty_like(x)
    for n, c, h, w in np.ndindex(*x.shape):
        expected[n, c, h, w] = (x[n, c, h, w] - mean[c]) / np.sqrt(var[c] + 1e-5) * scale[c] \
            + bias[c]
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)


def test_training_gradients_of_input_scale_and_bias():
    layer, bottom, top = check_layer(SCALE_BIAS + ' param { lr_mult: 0 } param { lr_mult: 0 }'
                                     ' param { lr_mult: 0 }', [(3, 2, 2, 3)],
                                     reshape_batch=False)
    x = bottom[0].data
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = x.var(axis=(0, 2, 3), keepdims=True)
    x_hat = (x - mean) / np.sqrt(var + 1e-4)
    np.testing.assert_allclose(
        top[0].data, x_hat * layer.blobs[3].data[:, None, None] +
        layer.blobs[4].data[:, None, None], rtol=1e-10)


def test_nvcaffe_moving_statistics():
    """The batch's statistics copied twice, then m = 0.9 m + 0.1 batch; blob 2 stays 1."""
    rng = np.random.default_rng(1)
    batches = [rng.standard_normal((4, 2, 3)) + k for k in range(3)]
    layer = make_layer(SCALE_BIAS, np.float64)
    top = empty_blobs(1, np.float64)
    layer.SetUp(random_blobs([batches[0]], dtype=np.float64), top)
    means, variances = [], []
    for b in batches:
        layer.Forward(random_blobs([b], dtype=np.float64), top)
        means.append(b.mean(axis=(0, 2)))
        variances.append(b.var(axis=(0, 2)))  # biased, as NVCaffe stores it
    f = float(np.float32(0.9))  # the schema's float
    np.testing.assert_allclose(layer.blobs[0].data, f * means[1] + (1 - f) * means[2],
                               rtol=1e-12)
    np.testing.assert_allclose(layer.blobs[1].data, f * variances[1] + (1 - f) * variances[2],
                               rtol=1e-12)
    np.testing.assert_array_equal(layer.blobs[2].data, [1])


def test_three_blobs_for_a_scale_bias_layer_is_an_error():
    layer = make_layer('name: "bn" ' + SCALE_BIAS + ' blobs { shape { dim: 2 } data: 0 '
                       'data: 0 } blobs { shape { dim: 2 } data: 1 data: 1 } '
                       'blobs { shape { dim: 1 } data: 1 }')
    with pytest.raises(LayerError, match="expected 5 parameter blobs"):
        layer.SetUp(random_blobs([(2, 2, 3)]), empty_blobs(1))


# ---- Intel Caffe's MKL batch norm ------------------------------------------------------------
def test_intel_caffe_engine_keeps_bvlcs_three_blobs():
    """Intel's optimized ResNet files: ``filler { value: 1 }`` with the default (CAFFE)
    engine, followed by a Scale layer: three blobs, BVLC's layer."""
    layer = make_layer('type: "BatchNorm" batch_norm_param { moving_average_fraction: 0.9 '
                       'filler { value: 1 } }')
    layer.SetUp(random_blobs([(2, 3, 2, 2)]), empty_blobs(1))
    assert len(layer.blobs) == 3


@pytest.mark.parametrize("extra,count", [('engine: "MKLDNN" batch_norm_param { }', 5),
                                         ('batch_norm_param { engine: MKL2017 '
                                          'bias_term: false }', 4),
                                         ('engine: "MKL2017" batch_norm_param { '
                                          'use_weight_bias: false }', 3)])
def test_intel_mkl_layer_blobs(extra, count):
    layer = make_layer('type: "BatchNorm" ' + extra)
    layer.SetUp(random_blobs([(2, 3, 2, 2)]), empty_blobs(1))
    assert len(layer.blobs) == count
    if count > 3:
        np.testing.assert_array_equal(layer.blobs[3].data, 1)  # filler default: 1
        np.testing.assert_array_equal(layer.blobs[2].data, 0)  # BVLC's scale factor
    assert [p.lr_mult for p in layer.layer_param.param][:3] == [0, 0, 0]


def test_intel_global_forward_with_relu_by_hand():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 3))
    layer = make_layer('type: "BatchNorm" engine: "MKLDNN" batch_norm_param { relu: true '
                       'use_global_stats: true eps: 0.001 }', np.float64)
    bottom, top = random_blobs([x], dtype=np.float64), empty_blobs(1, np.float64)
    layer.SetUp(bottom, top)
    sums, sq, factor = np.array([1.0, -2.0]), np.array([4.0, 0.5]), 2.0
    scale, bias = np.array([1.5, -0.5]), np.array([0.2, 0.1])
    for blob, value in zip(layer.blobs, (sums, sq, [factor], scale, bias)):
        blob.data[...] = value
    layer.Forward(bottom, top)
    expected = np.empty_like(x)
    for n, c, k in np.ndindex(*x.shape):
        v = (x[n, c, k] - sums[c] / factor) / np.sqrt(sq[c] / factor + float(np.float32(1e-3)))
        expected[n, c, k] = max(0.0, v * scale[c] + bias[c])
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)


def test_intel_training_gradients_with_relu():
    check_layer('type: "BatchNorm" engine: "MKLDNN" batch_norm_param { relu: true '
                'filler { type: "constant" value: 1.3 } bias_filler { type: "constant" '
                'value: 0.4 } }', [(3, 2, 4)], reshape_batch=False, kink=0.0,
                kink_range=1e-3)
