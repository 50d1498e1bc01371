import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def _naive_hinge(x, labels, norm):
    n = x.shape[0]
    flat = x.reshape(n, -1)
    loss, grad = 0.0, np.zeros_like(flat)
    for i in range(n):
        for k in range(flat.shape[1]):
            d = 1.0 if k == labels[i] else -1.0
            m = max(0.0, 1.0 - d * flat[i, k])
            loss += m if norm == "L1" else m * m
            if m > 0:
                grad[i, k] = -d if norm == "L1" else -2 * d * m
    return loss / n, grad.reshape(x.shape) / n


def _forward(text, x, labels, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    bottom = random_blobs([np.asarray(x, float), np.asarray(labels, float)], dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_hinge_hand_computed(norm):
    x = np.array([[2.0, 0.5, -0.5], [0.2, -3.0, 0.0]])
    labels = [0, 2]
    # margins: item 0: [0 (1-2<0), 1.5, 0.5]; item 1: [1.2, 0, 1 (true class, 1-0)]
    m = np.array([0.0, 1.5, 0.5, 1.2, 0.0, 1.0])
    expected = (m.sum() if norm == "L1" else (m * m).sum()) / 2
    text = 'type: "HingeLoss" hinge_loss_param { norm: %s }' % norm
    layer, bottom, top = _forward(text, x, labels)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)
    top[0].diff[...] = 2.0
    layer.Backward(top, [True, False], bottom)
    _, grad = _naive_hinge(x, labels, norm)
    np.testing.assert_allclose(bottom[0].diff, 2.0 * grad, rtol=1e-12)


def test_default_norm_is_l1_float32():
    rng = np.random.default_rng(7)
    x = rng.normal(size=(4, 3, 1, 1)).astype(np.float32)
    labels = np.array([0, 2, 1, 1])
    layer, bottom, top = _forward('type: "HingeLoss"', x, labels, dtype=np.float32)
    loss, grad = _naive_hinge(x.astype(np.float64), labels, "L1")
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, loss, rtol=1e-6)
    layer.Backward(top, [True, False], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, grad, rtol=1e-6)


@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_hinge_gradient(norm):
    rng = np.random.default_rng(11)
    x = rng.uniform(-2, 2, size=(3, 5))
    x[np.abs(np.abs(x) - 1) < 0.05] = 0.3  # keep away from the kinks at +-1
    labels = np.array([4.0, 0.0, 2.0])
    text = 'type: "HingeLoss" hinge_loss_param { norm: %s }' % norm
    _, _, top = check_layer(text, [x, labels], check_bottom=0)
    np.testing.assert_allclose(top[0].data, _naive_hinge(x, labels.astype(int), norm)[0],
                               rtol=1e-12)


def test_hinge_rejects_out_of_range_label():
    with pytest.raises(LayerError, match=r"HingeLoss.*label value 3 is out of range: labels "
                                         r"must be integers in \[0, 3\)"):
        _forward('type: "HingeLoss"', np.zeros((2, 3)), [0, 3])


def test_hinge_needs_one_label_per_item():
    layer = make_layer('type: "HingeLoss"')
    with pytest.raises(LayerError, match=r"one label per item: 2 labels .* got 6"):
        layer.SetUp(random_blobs([(2, 3), (2, 3)]), empty_blobs(1))


def test_hinge_no_gradient_to_labels():
    layer, bottom, top = _forward('type: "HingeLoss"', np.zeros((2, 3)), [0, 1])
    with pytest.raises(LayerError, match="cannot backpropagate to the labels"):
        layer.Backward(top, [True, True], bottom)
