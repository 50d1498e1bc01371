import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


@pytest.mark.parametrize("params,expected", [
    ("", (2, 60)),
    ("axis: 2", (2, 3, 20)),
    ("axis: 1 end_axis: 2", (2, 12, 5)),
    ("axis: 0 end_axis: -2", (24, 5)),
    ("axis: -2 end_axis: -1", (2, 3, 20)),
    ("axis: 3", (2, 3, 4, 5)),
    # BVLC's count(axis, end_axis + 1) of an empty range is 1: an axis inserted
    ("axis: 2 end_axis: 1", (2, 3, 1, 4, 5)),
])
def test_flatten_forward_and_gradient(params, expected):
    text = 'type: "Flatten" flatten_param { %s }' % params
    layer, bottom, top = check_layer(text, [(2, 3, 4, 5)])
    assert top[0].shape == expected
    # Row-major flattening keeps the element order: compare element by element.
    x = bottom[0].data
    flat = top[0].data.reshape(-1)
    for i, idx in enumerate(np.ndindex(*x.shape)):
        assert flat[i] == x[idx]


def test_flatten_shares_data_and_diff_also_after_a_batch_change():
    layer = make_layer('type: "Flatten"', dtype=np.float32)
    bottom, top = random_blobs([(2, 3, 2)], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].data[1, 5] = 42.0
    assert bottom[0].data[1, 2, 1] == 42.0
    top[0].diff[...] = np.arange(12).reshape(2, 6)
    layer.Backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.arange(12).reshape(2, 3, 2))
    bottom[0].reshape(4, 3, 2)
    layer.Forward(bottom, top)
    assert top[0].shape == (4, 6)
    top[0].data[3, 0] = -5.0
    assert bottom[0].data[3, 0, 0] == -5.0
    bottom[0].diff[3, 2, 1] = 8.0
    assert top[0].diff[3, 5] == 8.0


def test_flatten_errors():
    with pytest.raises(LayerError, match="does not allow in-place"):
        x = Blob((2, 3))
        make_layer('type: "Flatten"').SetUp([x], [x])
    with pytest.raises(LayerError, match="axis 5 / end_axis -1 out of range"):
        make_layer('type: "Flatten" flatten_param { axis: 5 }').SetUp(
            random_blobs([(2, 3)]), empty_blobs(1))
    with pytest.raises(LayerError, match="end_axis 0 .* comes before axis 2"):
        make_layer('type: "Flatten" flatten_param { axis: 2 end_axis: 0 }').SetUp(
            random_blobs([(2, 3, 4)]), empty_blobs(1))
