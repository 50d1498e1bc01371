import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def reshape_text(dims, extra=""):
    return 'type: "Reshape" reshape_param { shape { %s } %s }' % (
        " ".join("dim: %d" % d for d in dims), extra)


# bottom (2, 3, 4, 5); the expected shapes are worked out by hand from Caffe's rules.
@pytest.mark.parametrize("dims,extra,expected,batch_free", [
    ((0, -1), "", (2, 60), True),
    ((2, 3, 20), "", (2, 3, 20), False),
    ((0, 0, 4, 5), "", (2, 3, 4, 5), True),
    ((-1, 5), "", (24, 5), True),
    ((6, 10), "axis: 1", (2, 6, 10), True),
    ((2, 2), "axis: 2 num_axes: 1", (2, 3, 2, 2, 5), True),
    ((1,), "axis: 0 num_axes: 0", (1, 2, 3, 4, 5), True),
    ((1,), "axis: -1 num_axes: 0", (2, 3, 4, 5, 1), True),
    ((1, 1), "axis: -3 num_axes: 0", (2, 3, 1, 1, 4, 5), True),
    ((-1,), "axis: 1 num_axes: 2", (2, 12, 5), True),
    ((0, -1), "axis: 1 num_axes: 2", (2, 3, 4, 5), True),
])
def test_reshape_forward_and_gradient(dims, extra, expected, batch_free):
    layer, bottom, top = check_layer(reshape_text(dims, extra), [(2, 3, 4, 5)],
                                     reshape_batch=batch_free)
    assert top[0].shape == expected
    np.testing.assert_array_equal(top[0].data.reshape(-1), bottom[0].data.reshape(-1))


def test_reshape_shares_data_and_diff_also_after_a_batch_change():
    layer = make_layer(reshape_text((0, -1, 2)), dtype=np.float32)
    bottom, top = random_blobs([(2, 3, 4)], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    assert top[0].shape == (2, 6, 2)
    top[0].data[1, 5, 1] = 42.0
    assert bottom[0].data[1, 2, 3] == 42.0
    top[0].diff[...] = 3.0
    layer.Backward(top, [True], bottom)
    assert (bottom[0].diff == 3.0).all()
    bottom[0].reshape(5, 3, 4)
    layer.Forward(bottom, top)
    assert top[0].shape == (5, 6, 2)
    bottom[0].data[4, 2, 3] = -1.5
    assert top[0].data[4, 5, 1] == -1.5
    top[0].diff[4, 5, 1] = 9.0
    assert bottom[0].diff[4, 2, 3] == 9.0


@pytest.mark.parametrize("dims,extra,message", [
    ((-1, -1), "", r"2 dims of -1; at most a single"),
    ((7, -1), "", r"bottom count \(24\) must be divisible by the product of the specified "
                  r"dimensions \(7\)"),
    ((5, 5), "", r"output count must match input count.*\(5, 5\) has 25 elements.*has 24"),
    ((0, 0, 0, 0), "", r"contains a 0 at index 3, but there was no corresponding bottom axis"),
    ((2,), "axis: 4", r"axis 4 out of range for a 3-D bottom"),
    ((2,), "axis: -5", r"axis -5 out of range"),
    ((2,), "axis: 2 num_axes: 2", r"end_axis = axis \+ num_axes = 2 \+ 2 is out of range"),
    ((2,), "num_axes: -2", r"num_axes must be >= 0, or -1 for all, got -2"),
    ((2, -3), "", r"has dim -3"),
])
def test_reshape_errors(dims, extra, message):
    layer = make_layer(reshape_text(dims, extra))
    with pytest.raises(LayerError, match=message):
        layer.SetUp(random_blobs([(2, 3, 4)]), empty_blobs(1))


def test_reshape_in_place_is_an_error():
    x = Blob((2, 3))
    with pytest.raises(LayerError, match="does not allow in-place"):
        make_layer(reshape_text((-1,))).SetUp([x], [x])
