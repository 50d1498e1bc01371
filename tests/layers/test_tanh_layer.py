import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def _tanh_reference(x):
    e_pos, e_neg = np.exp(x), np.exp(-x)
    return (e_pos - e_neg) / (e_pos + e_neg)


def test_tanh_forward_matches_exponential_formula_and_gradient():
    layer, bottom, top = check_layer('type: "TanH"', [(2, 3, 4, 5)], in_place=True)
    np.testing.assert_allclose(top[0].data, _tanh_reference(bottom[0].data), rtol=1e-12,
                               atol=1e-15)


def test_tanh_gradient_on_wide_inputs():
    x = np.linspace(-3.0, 3.0, 24).reshape(4, 6)
    check_layer('type: "TanH"', [x], in_place=True)


def test_tanh_float32_backward_uses_top_data():
    layer = make_layer('type: "TanH"', dtype=np.float32)
    x = np.array([[-50.0, -0.5, 0.0, 0.25, 2.0, 50.0]], np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    y = _tanh_reference(x.astype(np.float64)[:, 1:-1])
    np.testing.assert_allclose(top[0].data[:, 1:-1], y, rtol=1e-6)
    np.testing.assert_array_equal(top[0].data[:, [0, -1]], [[-1.0, 1.0]])
    top[0].diff[...] = 3.0
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff[:, 1:-1], 3.0 * (1 - y * y), rtol=1e-5)
    np.testing.assert_array_equal(bottom[0].diff[:, [0, -1]], [[0.0, 0.0]])


def test_tanh_rejects_two_tops():
    layer = make_layer('type: "TanH"')
    with pytest.raises(LayerError, match="exactly 1 top blob, got 2"):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(2))
