import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def test_relu6_forward_gradient_and_in_place():
    # kept away from the kinks at 0 and 6
    x = np.array([-8.0, -3.0, -0.5, 0.4, 1.0, 2.5, 4.0, 5.5, 6.5, 7.0, 9.0, -1.5]).reshape(2, 6)
    layer, bottom, top = check_layer('type: "ReLU6"', [x], in_place=True)
    np.testing.assert_array_equal(top[0].data, [[min(max(v, 0.0), 6.0) for v in r] for r in x])


@pytest.mark.parametrize("in_place", [False, True])
def test_relu6_gradient_is_zero_at_both_kinks_float32(in_place):
    x = np.array([-1.0, 0.0, 3.0, 6.0, 7.0], np.float32)
    layer = make_layer('type: "ReLU6"', dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = bottom if in_place else empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data, [0.0, 0.0, 3.0, 6.0, 6.0])
    top[0].diff[...] = 2.0
    layer.Backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [0.0, 0.0, 2.0, 0.0, 0.0])


def test_relu6_refuses_negative_slope():
    layer = make_layer('type: "ReLU6" relu_param { negative_slope: 0.1 }')
    with pytest.raises(LayerError, match=r"ReLU6.*negative_slope 0.1, expected 0"):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))
