import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def _forward(text, a, b, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    bottom = random_blobs([np.asarray(a, float), np.asarray(b, float)], dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    weighted = layer.Forward(bottom, top)
    return layer, bottom, top, weighted


def test_hand_computed_loss_and_signed_gradients():
    a = [[1.0, 2.0, 3.0], [0.0, -1.0, 4.0]]
    b = [[1.0, 0.0, 2.0], [1.0, 1.0, 1.0]]
    # squared distances: 0 + 4 + 1 and 1 + 4 + 9 -> 19; / N=2 / 2
    layer, bottom, top, weighted = _forward('type: "EuclideanLoss" loss_weight: 2', a, b)
    assert top[0].data.shape == ()
    np.testing.assert_allclose(top[0].data, 19 / 4, rtol=1e-12)
    assert weighted == pytest.approx(19 / 2, rel=1e-12)
    layer.Backward(top, [True, True], bottom)
    delta = np.subtract(a, b)
    np.testing.assert_allclose(bottom[0].diff, 2 * delta / 2, rtol=1e-12)
    np.testing.assert_allclose(bottom[1].diff, -2 * delta / 2, rtol=1e-12)


def test_forward_matches_naive_loop_and_gradient():
    layer, bottom, top = check_layer('type: "EuclideanLoss"', [(3, 2, 4), (3, 2, 4)])
    a, b = bottom[0].data, bottom[1].data
    total = 0.0
    for i in range(3):
        for j in range(2):
            for k in range(4):
                total += (a[i, j, k] - b[i, j, k]) ** 2
    np.testing.assert_allclose(top[0].data, total / 3 / 2, rtol=1e-12)


def test_gradient_with_differently_shaped_bottoms():
    # same number of values per item, different shapes beyond the batch axis
    _, bottom, top = check_layer('type: "EuclideanLoss"', [(2, 6), (2, 2, 3)])
    diff = bottom[0].data - bottom[1].data.reshape(2, 6)
    np.testing.assert_allclose(top[0].data, (diff ** 2).sum() / 4, rtol=1e-12)


@pytest.mark.parametrize("which", [0, 1])
def test_gradient_each_bottom_alone(which):
    check_layer('type: "EuclideanLoss" loss_weight: 0.5', [(4, 3), (4, 3)], check_bottom=which)


def test_both_bottoms_allow_force_backward():
    layer = make_layer('type: "EuclideanLoss"')
    assert layer.allow_force_backward(0) and layer.allow_force_backward(1)


def test_float32_end_to_end():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 7)).astype(np.float32)
    b = rng.normal(size=(5, 7)).astype(np.float32)
    layer, bottom, top, _ = _forward('type: "EuclideanLoss"', a, b, dtype=np.float32)
    assert top[0].data.dtype == np.float32
    ref = ((a.astype(np.float64) - b) ** 2).sum() / 5 / 2
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-6)
    layer.Backward(top, [True, False], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, (a - b) / 5, rtol=1e-6)


def test_rejects_different_item_sizes():
    with pytest.raises(LayerError, match=r"same dimension: 3 values per item in bottom 0 "
                                         r"\(shape \(2, 3\)\) but 4 in bottom 1"):
        _forward('type: "EuclideanLoss"', np.zeros((2, 3)), np.zeros((2, 4)))


def test_rejects_different_batch_sizes():
    with pytest.raises(LayerError, match=r"same first dimension, got \(2, 3\) and \(3, 2\)"):
        _forward('type: "EuclideanLoss"', np.zeros((2, 3)), np.zeros((3, 2)))
