"""SmoothL1Loss (Fast R-CNN fork, Intel Caffe) against a hand computation of the fork's
formula and numerical gradients."""

import numpy as np
import pytest

from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def fork_loss(a, b, sigma, inside=None, outside=None):
    """The fork's loss, value by value."""
    s2 = sigma * sigma
    total = 0.0
    for idx in np.ndindex(*a.shape):
        d = a[idx] - b[idx]
        if inside is not None:
            d *= inside[idx]
        e = 0.5 * s2 * d * d if abs(d) < 1.0 / s2 else abs(d) - 0.5 / s2
        if outside is not None:
            e *= outside[idx]
        total += e
    return total / a.shape[0]


def test_hand_computed_values_and_gradients():
    a = np.array([[0.2, -3.0], [1.5, 0.0]])
    b = np.array([[0.0, 0.0], [0.0, 0.1]])
    layer = make_layer('type: "SmoothL1Loss" smooth_l1_loss_param { sigma: 2 }',
                       dtype=np.float64)
    bottom = random_blobs([a, b], dtype=np.float64)
    top = empty_blobs(1, np.float64)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    # sigma^2 = 4, threshold 0.25: 0.5*4*0.04 + (3 - 0.125) + (1.5 - 0.125) + 0.5*4*0.01
    expected = (0.08 + 2.875 + 1.375 + 0.02) / 2
    assert float(top[0].data) == pytest.approx(expected, rel=1e-12)
    assert float(top[0].data) == pytest.approx(fork_loss(a, b, 2.0), rel=1e-12)
    layer.Backward(top, [True, True], bottom)
    grad = np.array([[4 * 0.2, -1.0], [1.0, 4 * -0.1]]) / 2
    np.testing.assert_allclose(bottom[0].diff, grad, rtol=1e-12)
    np.testing.assert_allclose(bottom[1].diff, -grad, rtol=1e-12)


def test_weights_match_the_formula_and_gradient():
    rng = np.random.default_rng(3)
    shapes = [(3, 4, 2, 2)] * 4
    values = [rng.uniform(-2, 2, shapes[0]), rng.uniform(-2, 2, shapes[0]),
              rng.uniform(0, 1.5, shapes[0]), rng.uniform(0, 1.5, shapes[0])]
    bottom = random_blobs(values, dtype=np.float64)
    layer, bottom, top = check_layer(
        'type: "SmoothL1Loss" smooth_l1_loss_param { sigma: 3 }', bottom, check_bottom=0,
        kink=0.0, kink_range=-1.0)
    a, b, inside, outside = (blob.data for blob in bottom)
    assert float(top[0].data) == pytest.approx(fork_loss(a, b, 3.0, inside, outside),
                                               rel=1e-10)
