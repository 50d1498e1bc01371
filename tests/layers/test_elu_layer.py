import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0, -0.3])
def test_elu_forward_gradient_and_in_place(alpha):
    text = 'type: "ELU" elu_param { alpha: %g }' % alpha
    x = np.random.default_rng(1).uniform(-2, 2, (2, 3, 4))
    layer, bottom, top = check_layer(text, [x], kink=0.0, kink_range=0.02, in_place=True)
    a = float(np.float32(alpha))  # elu_param.alpha is a float field
    expected = [[[v if v > 0 else a * (np.exp(v) - 1) for v in row] for row in m] for m in x]
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12, atol=1e-15)


def test_elu_default_alpha_is_one_float32():
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    layer = make_layer('type: "ELU"', dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, [np.exp(-1.0) - 1, 0.0, 2.0], rtol=1e-6)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.dtype == np.float32
    # x <= 0: alpha + y = e^x (so 1 at x = 0); x > 0: 1
    np.testing.assert_allclose(bottom[0].diff, [np.exp(-1.0), 1.0, 1.0], rtol=1e-6)


def test_elu_rejects_two_tops():
    layer = make_layer('type: "ELU"')
    with pytest.raises(LayerError, match="exactly 1 top blob, got 2"):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(2))
