import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_concat(arrays, axis):
    """Concatenate by copying element by element into the output."""
    shape = list(arrays[0].shape)
    shape[axis] = sum(a.shape[axis] for a in arrays)
    out = np.full(shape, np.nan)
    offset = 0
    for a in arrays:
        for idx in np.ndindex(*a.shape):
            dst = list(idx)
            dst[axis] += offset
            out[tuple(dst)] = a[idx]
        offset += a.shape[axis]
    return out


@pytest.mark.parametrize("params,shapes,axis", [
    ("", [(2, 3, 2), (2, 1, 2), (2, 2, 2)], 1),
    ("axis: 0", [(2, 3, 2), (1, 3, 2)], 0),
    ("axis: -1", [(2, 3, 1), (2, 3, 3)], 2),
    ("concat_dim: 0", [(1, 2, 2), (3, 2, 2)], 0),
    ("concat_dim: 2", [(2, 2, 1), (2, 2, 2)], 2),
])
def test_concat_forward_and_gradient(params, shapes, axis):
    text = 'type: "Concat" concat_param { %s }' % params
    layer, bottom, top = check_layer(text, shapes, reshape_batch=(axis != 0))
    np.testing.assert_array_equal(top[0].data, naive_concat([b.data for b in bottom], axis))


def test_concat_backward_only_where_asked():
    layer = make_layer('type: "Concat"')
    bottom, top = random_blobs([(2, 1, 3), (2, 2, 3)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = np.arange(18).reshape(2, 3, 3)
    bottom[0].diff[...] = -1
    bottom[1].diff[...] = -1
    layer.Backward(top, [False, True], bottom)
    assert (bottom[0].diff == -1).all()
    np.testing.assert_array_equal(bottom[1].diff, np.arange(18).reshape(2, 3, 3)[:, 1:])


def test_concat_single_bottom_shares():
    layer, bottom, top = check_layer('type: "Concat"', [(2, 3)])
    top[0].data[1, 1] = 5.0
    assert bottom[0].data[1, 1] == 5.0
    top[0].diff[0, 2] = 7.0
    assert bottom[0].diff[0, 2] == 7.0


def test_concat_errors():
    with pytest.raises(LayerError, match=r"same shape, except at concat_axis \(1\): bottom 2 "
                                         r"has shape \(3, 1, 2\), bottom 0 has shape \(2, 2, 2\)"):
        make_layer('type: "Concat"').SetUp(random_blobs([(2, 2, 2), (2, 1, 2), (3, 1, 2)]),
                                           empty_blobs(1))
    with pytest.raises(LayerError, match=r"same #axes: bottom 1 has shape \(2, 2\)"):
        make_layer('type: "Concat"').SetUp(random_blobs([(2, 2, 2), (2, 2)]), empty_blobs(1))
    with pytest.raises(LayerError, match="Either axis or concat_dim"):
        make_layer('type: "Concat" concat_param { axis: 1 concat_dim: 1 }').SetUp(
            random_blobs([(2, 2), (2, 2)]), empty_blobs(1))
    with pytest.raises(LayerError, match="concat_dim 3 out of range"):
        make_layer('type: "Concat" concat_param { concat_dim: 3 }').SetUp(
            random_blobs([(2, 2), (2, 2)]), empty_blobs(1))
    with pytest.raises(LayerError, match="axis -4 out of range"):
        make_layer('type: "Concat" concat_param { axis: -4 }').SetUp(
            random_blobs([(2, 2, 2), (2, 2, 2)]), empty_blobs(1))
