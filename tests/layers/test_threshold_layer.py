import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


@pytest.mark.parametrize("threshold", [0.0, 0.3, -0.5])
def test_threshold_forward(threshold):
    text = 'type: "Threshold" threshold_param { threshold: %g }' % threshold
    layer, bottom, top = check_layer(text, [(2, 3, 4)], check_bottom=[])
    x = bottom[0].data
    expected = [[[1.0 if v > threshold else 0.0 for v in row] for row in m] for m in x]
    np.testing.assert_array_equal(top[0].data, expected)
    assert 0 < top[0].data.sum() < x.size


@pytest.mark.parametrize("in_place", [False, True])
def test_threshold_equal_value_gives_zero_float32(in_place):
    x = np.array([-1.0, 0.5, 0.50001, 2.0], np.float32)
    layer = make_layer('type: "Threshold" threshold_param { threshold: 0.5 }', dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = bottom if in_place else empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data, [0.0, 0.0, 1.0, 1.0])
    layer.Backward(top, [False], bottom)  # nothing asked, nothing done


def test_threshold_backward_is_refused():
    layer = make_layer('type: "Threshold"')
    bottom, top = random_blobs([(2, 3)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    with pytest.raises(LayerError, match=r"Threshold.*has no gradient.*propagate_down: false"):
        layer.Backward(top, [True], bottom)
