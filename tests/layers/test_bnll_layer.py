import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
expit = _special.expit


def test_bnll_forward_gradient_and_in_place():
    x = np.linspace(-4.0, 4.0, 24).reshape(2, 3, 4)
    layer, bottom, top = check_layer('type: "BNLL"', [x], in_place=True)
    # softplus by its definition, log(1 + e^x), fine in float64 for |x| <= 4
    np.testing.assert_allclose(top[0].data, np.log(1.0 + np.exp(x)), rtol=1e-12)


def test_bnll_float32_large_inputs_no_overflow():
    x = np.array([[-1000.0, -60.0, -1.0, 0.0, 1.0, 60.0, 1000.0]], np.float32)
    layer = make_layer('type: "BNLL"', dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    with np.errstate(over="raise", invalid="raise"):
        layer.Forward(bottom, top)
        top[0].diff[...] = 2.0
        layer.Backward(top, [True], bottom)
    assert top[0].data.dtype == np.float32 and bottom[0].diff.dtype == np.float32
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(top[0].data, np.logaddexp(0.0, x64), rtol=1e-6, atol=1e-30)
    # derivative sigmoid(x); exp is clamped at x = 50 (kBNLL_THRESHOLD), so x = 1000 gives
    # e^50 / (e^50 + 1) = 1 rather than inf / inf
    expected = 2.0 * expit(x64)
    np.testing.assert_allclose(bottom[0].diff, expected, rtol=1e-6, atol=1e-30)
    assert np.isfinite(bottom[0].diff).all()


def test_bnll_in_place_backward_uses_original_input():
    x = np.array([[-3.0, -0.5, 0.5, 3.0]])
    blob = random_blobs([x])[0]
    layer = make_layer('type: "BNLL"')
    layer.SetUp([blob], [blob])
    layer.Forward([blob], [blob])
    blob.diff[...] = 1.0
    layer.Backward([blob], [True], [blob])
    # sigmoid of x, not of the softplus written over it
    np.testing.assert_allclose(blob.diff, 1.0 / (1.0 + np.exp(-x)), rtol=1e-12)


def test_bnll_in_place_backward_without_forward_is_refused():
    layer = make_layer('type: "BNLL"')
    blob = random_blobs([(2, 3)])
    layer.SetUp(blob, blob)
    with pytest.raises(LayerError, match=r"BNLL.*needs an in-place forward pass"):
        layer.Backward(blob, [True], blob)
