import numpy as np
import pytest

from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
expit = _special.expit


def darknet_mish(x):
    """AlexeyAB's activate_array_mish: softplus with its threshold of 20."""
    sp = np.where(x > 20, x, np.where(x < -20, np.exp(x), np.log1p(np.exp(x))))
    return x * np.tanh(sp)


def test_mish_forward_gradient_and_in_place():
    x = np.random.default_rng(1).uniform(-4, 4, (2, 3, 4))
    layer, bottom, top = check_layer('type: "Mish"', [x], in_place=True)
    np.testing.assert_allclose(top[0].data, darknet_mish(x), rtol=1e-12, atol=1e-15)


def test_mish_float32_large_inputs():
    x = np.array([-500.0, -30, -20.5, -2.0, 0.0, 2.0, 20.5, 30, 500.0], np.float32)
    layer = make_layer('type: "Mish"', dtype=np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    with np.errstate(over="raise", invalid="raise"):
        layer.Forward(bottom, top)
        top[0].diff[...] = 1
        layer.Backward(top, [True], bottom)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(top[0].data, darknet_mish(x64), rtol=1e-6, atol=1e-30)
    t = np.tanh(np.logaddexp(0, x64))
    grad = t + x64 * (1 - t * t) * expit(x64)
    np.testing.assert_allclose(bottom[0].diff, grad, rtol=1e-5, atol=1e-30)
