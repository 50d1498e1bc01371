import numpy as np
import pytest

from pycaffe_lite.testing import check_layer


@pytest.mark.parametrize("slope", [0.0, 0.01, 0.3])
def test_relu_forward_and_gradient(slope):
    text = 'type: "ReLU" relu_param { negative_slope: %g }' % slope
    layer, bottom, top = check_layer(text, [(2, 3, 4, 5)], kink=0.0, kink_range=0.02,
                                     in_place=True)
    x = bottom[0].data
    np.testing.assert_allclose(top[0].data, np.where(x > 0, x, np.float32(slope) * x), rtol=1e-12)


@pytest.mark.parametrize("slope", [0.0, 0.2])
def test_relu_keeps_float32(slope):
    from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

    layer = make_layer('type: "ReLU" relu_param { negative_slope: %g }' % slope,
                       dtype=np.float32)
    bottom, top = random_blobs([(3, 4)], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = 1.5
    layer.Backward(top, [True], bottom)
    x = bottom[0].data
    s = np.float32(slope)
    np.testing.assert_array_equal(top[0].data, np.where(x > 0, x, s * x))
    np.testing.assert_array_equal(bottom[0].diff, np.where(x > 0, 1.5, np.float32(1.5) * s))
    assert top[0].data.dtype == np.float32 and bottom[0].diff.dtype == np.float32
