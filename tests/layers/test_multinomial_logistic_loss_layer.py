import math

import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def _forward(p, labels, dtype=np.float64):
    layer = make_layer('type: "MultinomialLogisticLoss"', dtype=dtype)
    bottom = random_blobs([np.asarray(p, float), np.asarray(labels, float)], dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    weighted = layer.Forward(bottom, top)
    return layer, bottom, top, weighted


def test_hand_computed_loss_and_gradient():
    p = np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3]])
    layer, bottom, top, weighted = _forward(p, [1, 2])
    expected = -(math.log(0.5) + math.log(0.3)) / 2
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)
    assert weighted == pytest.approx(expected, rel=1e-12)
    top[0].diff[...] = 3.0
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, [[0, -1.5 / 0.5, 0], [0, 0, -1.5 / 0.3]],
                               rtol=1e-12)


def test_probability_clamped_at_log_threshold_float32():
    p = np.array([[0.0, 1.0], [0.5, 0.5]], np.float32)
    layer, bottom, top, _ = _forward(p, [0, 1], dtype=np.float32)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, (-math.log(1e-20) - math.log(0.5)) / 2, rtol=1e-6)
    top[0].diff[...] = 1
    layer.Backward(top, [True, False], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, [[-0.5 / 1e-20, 0], [0, -0.5 / 0.5]], rtol=1e-6)


def test_labels_index_the_flattened_item():
    # (N, C, H, W) probabilities: Caffe indexes label into the C*H*W values of an item
    p = np.random.default_rng(0).uniform(0.1, 1, (2, 2, 1, 3))
    _, _, top, _ = _forward(p, np.array([5, 2]).reshape(2, 1, 1, 1))
    expected = -(math.log(p[0].reshape(-1)[5]) + math.log(p[1].reshape(-1)[2])) / 2
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)


def test_gradient():
    p = np.random.default_rng(9).uniform(0.2, 1.0, (4, 5))
    labels = np.array([0.0, 4.0, 2.0, 2.0])
    check_layer('type: "MultinomialLogisticLoss"', [p, labels], check_bottom=0)


def test_rejects_invalid_label():
    with pytest.raises(LayerError, match=r"MultinomialLogisticLoss.*label value 1.5 is not an "
                                         r"integer"):
        _forward(np.full((2, 3), 1 / 3), [0, 1.5])


def test_rejects_labels_with_channels():
    layer = make_layer('type: "MultinomialLogisticLoss"')
    with pytest.raises(LayerError, match=r"one label per item .* 2 labels for probabilities "
                                         r"of shape \(2, 3\), got labels of shape \(2, 3\)"):
        layer.SetUp(random_blobs([(2, 3), (2, 3)]), empty_blobs(1))


def test_no_gradient_to_labels():
    layer, bottom, top, _ = _forward(np.full((2, 3), 1 / 3), [0, 1])
    assert not layer.allow_force_backward(1)
    with pytest.raises(LayerError, match="cannot backpropagate to the labels"):
        layer.Backward(top, [True, True], bottom)
