import math

import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def _naive_loss(a, b, y, margin, legacy):
    total = 0.0
    for i in range(a.shape[0]):
        d2 = sum((float(u) - float(v)) ** 2 for u, v in zip(a[i].ravel(), b[i].ravel()))
        if int(y[i]) != 0:
            total += d2
        elif legacy:
            total += max(margin - d2, 0.0)
        else:
            total += max(margin - math.sqrt(d2), 0.0) ** 2
    return total / a.shape[0] / 2


def _pairs(seed, margin, legacy, n=6, c=3):
    """Pairs whose distance stays away from the hinge's kink (and from 0)."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (n, c))
    b = rng.uniform(-1, 1, (n, c))
    for i in range(n):
        while True:
            d2 = ((a[i] - b[i]) ** 2).sum()
            d = d2 if legacy else math.sqrt(d2)
            if abs(d - margin) > 0.1 and math.sqrt(d2) > 0.3:
                break
            b[i] = rng.uniform(-1, 1, c)
    y = np.array([1, 0, 0, 1, 0, 0], float)[:n]
    return a, b, y


@pytest.mark.parametrize("legacy", [False, True])
@pytest.mark.parametrize("margin", [1.0, 2.0])
def test_forward_and_gradient(legacy, margin):
    a, b, y = _pairs(int(margin * 10) + legacy, margin, legacy)
    text = ('type: "ContrastiveLoss" contrastive_loss_param { margin: %g legacy_version: %s }'
            % (margin, "true" if legacy else "false"))
    layer, bottom, top = check_layer(text, [a, b, y], check_bottom=[0, 1])
    np.testing.assert_allclose(top[0].data, _naive_loss(a, b, y, margin, legacy), rtol=1e-12)


def test_hand_computed_with_4d_features():
    a = np.array([[3.0, 0.0], [0.0, 0.0], [0.5, 0.0]]).reshape(3, 2, 1, 1)
    b = np.array([[0.0, 4.0], [0.3, 0.4], [0.0, 0.0]]).reshape(3, 2, 1, 1)
    y = np.array([1.0, 0.0, 0.0]).reshape(3, 1, 1, 1)
    layer = make_layer('type: "ContrastiveLoss"')  # margin 1, non-legacy
    bottom, top = random_blobs([a, b, y]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    # similar d^2 = 25; dissimilar d = 0.5 -> 0.25; dissimilar d = 0.5 -> 0.25
    np.testing.assert_allclose(top[0].data, (25 + 0.25 + 0.25) / 3 / 2, rtol=1e-12)
    top[0].diff[...] = 1
    layer.Backward(top, [True, True, False], bottom)
    coeff = -0.5 / (0.5 + 1e-4)  # -(margin - d) / (d + 1e-4), Caffe's epsilon
    expected_a = np.array([[3.0, -4.0], [-0.3 * coeff, -0.4 * coeff], [0.5 * coeff, 0.0]]) / 3
    np.testing.assert_allclose(bottom[0].diff.reshape(3, 2), expected_a, rtol=1e-12)
    np.testing.assert_allclose(bottom[1].diff.reshape(3, 2), -expected_a, rtol=1e-12)


def test_float32_and_inactive_hinge():
    a = np.array([[0.0, 0.0], [2.0, 0.0]], np.float32)
    b = np.array([[0.6, 0.8], [0.0, 0.0]], np.float32)
    y = np.array([0.0, 0.0], np.float32)  # d = 1 (at the margin) and d = 2: no loss
    layer = make_layer('type: "ContrastiveLoss" contrastive_loss_param { legacy_version: true '
                       'margin: 5 }', dtype=np.float32)
    bottom, top = random_blobs([a, b, y], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    # legacy: max(5 - d^2, 0) -> 4 and 1
    np.testing.assert_allclose(top[0].data, (4 + 1) / 2 / 2, rtol=1e-6)
    top[0].diff[...] = 1
    layer.Backward(top, [True, False, False], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, -(a - b) / 2, rtol=1e-6)


def test_force_backward_flags_and_no_gradient_to_similarity():
    layer = make_layer('type: "ContrastiveLoss"')
    bottom, top = random_blobs([(2, 3), (2, 3), np.array([1.0, 0.0])]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert [layer.allow_force_backward(i) for i in range(3)] == [True, True, False]
    with pytest.raises(LayerError, match="cannot backpropagate to the similarity labels"):
        layer.Backward(top, [True, True, True], bottom)


@pytest.mark.parametrize("shapes, message", [
    ([(2, 3, 2), (2, 3, 2), (2,)], r"bottom 0 \(a\) must have shape \(N, C\) or \(N, C, 1, 1\)"),
    ([(2, 3), (2, 4), (2,)], r"same number of channels, got shapes \(2, 3\) and \(2, 4\)"),
    ([(2, 3), (2, 3), (2, 2)], r"similarity bottom \(2\) must hold one value per pair"),
    ([(2, 3), (3, 3), (2,)], r"same first dimension"),
])
def test_rejects_bad_shapes(shapes, message):
    layer = make_layer('type: "ContrastiveLoss"')
    with pytest.raises(LayerError, match=r"ContrastiveLoss.*" + message):
        layer.SetUp(random_blobs(shapes), empty_blobs(1))
