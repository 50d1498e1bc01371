import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
expit = _special.expit


@pytest.mark.parametrize("beta", [1.0, 0.5, 2.5, -1.0])
def test_swish_forward_gradient_and_in_place(beta):
    text = 'type: "Swish" swish_param { beta: %g }' % beta
    x = np.random.default_rng(3).uniform(-3, 3, (2, 3, 4))
    layer, bottom, top = check_layer(text, [x], in_place=True)
    np.testing.assert_allclose(top[0].data, x * expit(beta * x), rtol=1e-12, atol=1e-15)


def test_swish_float32_large_inputs():
    x = np.array([-500.0, -2.0, 0.0, 2.0, 500.0], np.float32)
    layer = make_layer('type: "Swish"', dtype=np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    with np.errstate(over="raise", invalid="raise"):
        layer.Forward(bottom, top)
        top[0].diff[...] = 1
        layer.Backward(top, [True], bottom)
    x64 = x.astype(np.float64)
    s = expit(x64)
    assert top[0].data.dtype == np.float32 and bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(top[0].data, x64 * s, rtol=1e-6, atol=1e-30)
    # d/dx x*s(x) = s + x * s * (1 - s)
    np.testing.assert_allclose(bottom[0].diff, s + x64 * s * (1 - s), rtol=1e-5, atol=1e-30)


def test_swish_backward_needs_forward():
    layer = make_layer('type: "Swish"')
    bottom, top = random_blobs([(2, 3)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    with pytest.raises(LayerError, match=r"Swish.*backward needs a forward pass"):
        layer.Backward(top, [True], bottom)
