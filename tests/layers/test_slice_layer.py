import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_slice(x, axis, bounds):
    """Pieces [bounds[i], bounds[i+1]) of x along axis, copied element by element."""
    pieces = []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        shape = list(x.shape)
        shape[axis] = hi - lo
        out = np.empty(shape)
        for idx in np.ndindex(*shape):
            src = list(idx)
            src[axis] += lo
            out[idx] = x[tuple(src)]
        pieces.append(out)
    return pieces


@pytest.mark.parametrize("params,num_top,axis,bounds", [
    ("", 3, 1, [0, 2, 4, 6]),
    ("slice_point: 1 slice_point: 5", 3, 1, [0, 1, 5, 6]),
    ("axis: -1 slice_point: 3", 2, 2, [0, 3, 4]),
    ("axis: 0", 2, 0, [0, 2, 4]),
    ("slice_dim: 2 slice_point: 1", 2, 2, [0, 1, 4]),
])
def test_slice_forward_and_gradient(params, num_top, axis, bounds):
    text = 'type: "Slice" slice_param { %s }' % params
    layer, bottom, top = check_layer(text, [(4, 6, 4)], num_top=num_top,
                                     reshape_batch=(axis != 0))
    for t, piece in zip(top, naive_slice(bottom[0].data, axis, bounds)):
        np.testing.assert_array_equal(t.data, piece)


def test_slice_single_top_shares():
    layer, bottom, top = check_layer('type: "Slice"', [(2, 3)], num_top=1)
    top[0].data[1, 2] = 4.0
    assert bottom[0].data[1, 2] == 4.0
    top[0].diff[1, 2] = 6.0
    assert bottom[0].diff[1, 2] == 6.0


@pytest.mark.parametrize("params,num_top,message", [
    ("", 4, r"Number of top blobs \(4\) should evenly divide input slice axis \(6\)"),
    ("slice_point: 2", 3, r"got 1 slice_point value\(s\) for 3 tops"),
    ("slice_point: 3 slice_point: 2", 3, r"strictly increasing and > 0, got \[3, 2\]"),
    ("slice_point: 0", 2, r"strictly increasing and > 0, got \[0\]"),
    ("slice_point: 7", 2, r"slice_point 7 is beyond the size 6 of axis 1"),
    ("axis: 1 slice_dim: 1", 2, "Either axis or slice_dim"),
    ("slice_dim: 3", 2, "slice_dim 3 out of range"),
])
def test_slice_errors(params, num_top, message):
    layer = make_layer('type: "Slice" slice_param { %s }' % params)
    with pytest.raises(LayerError, match=message):
        layer.SetUp(random_blobs([(2, 6, 2)]), empty_blobs(num_top))
