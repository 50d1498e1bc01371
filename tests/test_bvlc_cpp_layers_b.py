"""BVLC Caffe's C++ layer tests (crop ... tanh, and test_maxpool_dropout_layers.cpp): the cases
that tests/layers/ does not already hold, with BVLC's configurations and expected results.

Each test names the BVLC case it comes from; the expected values are worked out by hand here
(NumPy formulas), never taken from this engine.
"""

import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs


def forward(text, arrays, num_top=1, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    bottom, top = random_blobs(arrays, dtype=dtype), empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


# BVLC test_scale_layer.cpp TestForwardScale / TestForwardScaleAxis2 and
# test_bias_layer.cpp TestForwardBias / TestForwardBiasAxis2: a scalar second bottom. BVLC's
# scale_layer.cpp and bias_layer.cpp set the axis to 0 for a scalar, so an axis that is out of
# range for the data blob is accepted there too.
@pytest.mark.parametrize("axis", [1, 2, 9, -9])
@pytest.mark.parametrize("kind,op", [("Scale", np.multiply), ("Bias", np.add)])
def test_scalar_second_bottom_applies_everywhere_whatever_the_axis(kind, op, axis):
    rng = np.random.default_rng(1701)
    x, s = rng.uniform(size=(2, 3, 4, 5)), np.array(rng.uniform())
    text = 'type: "%s" %s_param { axis: %d }' % (kind, kind.lower(), axis)
    layer, bottom, top = forward(text, [x, s])
    np.testing.assert_allclose(top[0].data, op(x, float(s)), rtol=1e-12)
    g = rng.normal(size=x.shape)
    top[0].diff[...] = g
    layer.Backward(top, [True, True], bottom)
    np.testing.assert_allclose(bottom[0].diff, g * float(s) if kind == "Scale" else g,
                               rtol=1e-12)
    np.testing.assert_allclose(bottom[1].diff, (g * x).sum() if kind == "Scale" else g.sum(),
                               rtol=1e-12)


# BVLC test_tanh_layer.cpp TestTanHOverflow: inputs drawn with std 10000, where exp(x)
# overflows; the top must be +-1 (never NaN) and the gradient 0.
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tanh_of_huge_inputs_saturates(dtype):
    x = np.random.default_rng(1701).normal(scale=10000.0, size=(2, 3, 4, 5))
    x.flat[:2] = [1e-3, -0.5]  # two ordinary values among the huge ones
    layer, bottom, top = forward('type: "TanH"', [x], dtype=dtype)
    expected = np.sign(x)  # |x| > 20 for all the others: tanh is +-1 in float64
    expected.flat[:2] = [(np.exp(2e-3) - 1) / (np.exp(2e-3) + 1),
                         (np.exp(-1.0) - 1) / (np.exp(-1.0) + 1)]
    assert np.isfinite(top[0].data).all()
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-6)
    top[0].diff[...] = 1.0
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, 1 - expected ** 2, rtol=1e-5, atol=1e-30)


# BVLC test_maxpool_dropout_layers.cpp TestSetup, TestForward, TestBackward: 3x3 max pooling
# with stride 2 on a constant blob of ones, then Dropout in place on the pooled top.
def test_max_pooling_of_ties_then_dropout_in_place():
    backend.set_random_seed(1703)
    pool = make_layer('type: "Pooling" pooling_param { kernel_size: 3 stride: 2 }')
    bottom, top = random_blobs([np.ones((2, 3, 6, 5))]), empty_blobs(1)
    pool.SetUp(bottom, top)
    assert top[0].shape == (2, 3, 3, 2)  # ceil((6 - 3) / 2) + 1, ceil((5 - 3) / 2) + 1
    pool.Forward(bottom, top)
    assert top[0].data.sum() == top[0].count
    # every window ties: its whole gradient goes to one element, the window's first
    top[0].diff[...] = 1.0
    pool.Backward(top, [True], bottom)
    expected = np.zeros((2, 3, 6, 5))
    expected[:, :, 0:6:2, 0:4:2] = 1.0
    np.testing.assert_array_equal(bottom[0].diff, expected)

    dropout = make_layer('type: "Dropout"')  # ratio 0.5, TRAIN: kept values scaled by 2
    dropout.SetUp(top, top)
    dropout.Forward(top, top)
    kept = top[0].data != 0
    np.testing.assert_array_equal(top[0].data[kept], 2.0)
    assert 0 <= top[0].data.sum() <= 2.0 * top[0].count
    top[0].diff[...] = 1.0
    dropout.Backward(top, [True], top)
    pool.Backward(top, [True], bottom)
    expected[:, :, 0:6:2, 0:4:2] = 2.0 * kept
    np.testing.assert_array_equal(bottom[0].diff, expected)


# BVLC contrastive_loss_layer.cpp (TestForward's pairs): a pair is similar when
# static_cast<int>(y) is non-zero, so 0.5 and -0.7 mean dissimilar and 2 similar.
@pytest.mark.parametrize("legacy", [False, True])
def test_contrastive_similarity_is_the_truncated_label(legacy):
    a = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 0.2], [0.0, 0.0]]).reshape(4, 2, 1, 1)
    b = np.array([[0.3, 0.4], [0.0, 0.0], [0.0, 0.0], [0.6, 0.8]]).reshape(4, 2, 1, 1)
    y = np.array([0.5, 2.0, -0.7, 1.0])
    # d^2 = 0.25, 1, 0.04, 1 ; margin 1
    if legacy:
        dissimilar = [1 - 0.25, None, 1 - 0.04, None]
    else:
        dissimilar = [(1 - 0.5) ** 2, None, (1 - 0.2) ** 2, None]
    expected = (dissimilar[0] + 1.0 + dissimilar[2] + 1.0) / 4 / 2
    text = 'type: "ContrastiveLoss" contrastive_loss_param { legacy_version: %s }' % (
        "true" if legacy else "false")
    layer, bottom, top = forward(text, [a, b, y])
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)
    top[0].diff[...] = 1.0
    layer.Backward(top, [True, False, False], bottom)
    delta = (a - b).reshape(4, 2)
    if legacy:
        coeff = [-1.0, 1.0, -1.0, 1.0]
    else:
        coeff = [-0.5 / (0.5 + 1e-4), 1.0, -0.8 / (0.2 + 1e-4), 1.0]
    np.testing.assert_allclose(bottom[0].diff.reshape(4, 2),
                               np.array(coeff)[:, None] * delta / 4, rtol=1e-12)


# BVLC test_embed_layer.cpp TestSetUp / TestForwardWithBias: a (4, 1, 1, 1) bottom of indices
# gives a 5-axis top (4, 1, 1, 1, num_output).
def test_embed_of_a_4d_bottom_appends_the_output_axis():
    text = ('type: "Embed" embed_param { num_output: 10 input_dim: 5 bias_term: true '
            'weight_filler { type: "uniform" min: -10 max: 10 } '
            'bias_filler { type: "uniform" min: -10 max: 10 } }')
    layer, _, top = forward(text, [np.array([4.0, 2.0, 2.0, 3.0]).reshape(4, 1, 1, 1)])
    assert top[0].shape == (4, 1, 1, 1, 10)
    w, bias = layer.blobs[0].data, layer.blobs[1].data
    assert w.shape == (5, 10) and bias.shape == (10,)
    np.testing.assert_array_equal(top[0].data.reshape(4, 10), w[[4, 2, 2, 3]] + bias)


# BVLC test_reshape_layer.cpp TestForwardAfterReshape: the bottom, set up as (2, 3, 6, 5),
# becomes a flat (180,) blob; the top keeps the fixed shape and shares the new data.
def test_reshape_after_the_bottom_changes_rank():
    text = 'type: "Reshape" reshape_param { shape { dim: 6 dim: 2 dim: 3 dim: 5 } }'
    layer, bottom, top = forward(text, [(2, 3, 6, 5)])
    bottom[0].reshape((180,))
    bottom[0].data[...] = np.arange(180.0)
    layer.Forward(bottom, top)
    assert top[0].shape == (6, 2, 3, 5)
    np.testing.assert_array_equal(top[0].data, np.arange(180.0).reshape(6, 2, 3, 5))
