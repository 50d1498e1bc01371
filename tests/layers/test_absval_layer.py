import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def test_absval_forward_gradient_and_in_place():
    layer, bottom, top = check_layer('type: "AbsVal"', [(2, 3, 4)], kink=0.0, kink_range=0.02,
                                     in_place=True)
    x = bottom[0].data
    np.testing.assert_array_equal(top[0].data, np.where(x < 0, -x, x))


@pytest.mark.parametrize("in_place", [False, True])
def test_absval_float32_backward_is_sign_times_dy(in_place):
    x = np.array([[-2.5, -0.0, 0.0, 1.5, 3.0]], np.float32)
    dy = np.array([[1.0, 2.0, 3.0, 4.0, -5.0]], np.float32)
    layer = make_layer('type: "AbsVal"', dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = bottom if in_place else empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data, [[2.5, 0.0, 0.0, 1.5, 3.0]])
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.dtype == np.float32
    # sign(x) * dy with sign(0) = 0; in place, the sign of the kept x (not of |x|)
    np.testing.assert_array_equal(bottom[0].diff, [[-1.0, 0.0, 0.0, 4.0, -5.0]])


def test_absval_in_place_backward_needs_forward_first():
    layer = make_layer('type: "AbsVal"')
    blob = random_blobs([(2, 3)])
    layer.SetUp(blob, blob)
    with pytest.raises(LayerError, match=r"AbsVal.*in-place backward .* needs an in-place "
                                         r"forward pass"):
        layer.Backward(blob, [True], blob)


def test_absval_rejects_two_bottoms():
    layer = make_layer('type: "AbsVal"')
    with pytest.raises(LayerError, match="exactly 1 bottom blob, got 2"):
        layer.SetUp(random_blobs([(2, 3), (2, 3)]), empty_blobs(1))
