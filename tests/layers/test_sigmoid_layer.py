import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
expit = _special.expit


def test_sigmoid_forward_matches_expit_and_gradient():
    layer, bottom, top = check_layer('type: "Sigmoid"', [(2, 3, 4, 5)], in_place=True)
    x = bottom[0].data
    np.testing.assert_allclose(top[0].data, expit(x), rtol=1e-12, atol=1e-15)


def test_sigmoid_gradient_on_wide_inputs():
    x = np.linspace(-6.0, 6.0, 24).reshape(2, 3, 4)
    check_layer('type: "Sigmoid"', [x], in_place=True)


def test_sigmoid_float32_saturates_without_overflow():
    layer = make_layer('type: "Sigmoid"', dtype=np.float32)
    x = np.array([[-1000.0, -100.0, -1.0, 0.0, 1.0, 100.0, 1000.0]], np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    with np.errstate(all="raise"):
        layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, expit(x.astype(np.float64)), rtol=1e-6, atol=1e-7)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    y = expit(x.astype(np.float64))
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, y * (1 - y), rtol=1e-5, atol=1e-7)


def test_sigmoid_rejects_two_bottoms():
    layer = make_layer('type: "Sigmoid"')
    with pytest.raises(LayerError, match="exactly 1 bottom blob, got 2"):
        layer.SetUp(random_blobs([(2, 3), (2, 3)]), empty_blobs(1))
