import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def test_input_one_shape_for_all_tops():
    layer, bottom, top = check_layer(
        'type: "Input" input_param { shape { dim: 2 dim: 3 dim: 4 } }', [], num_top=2)
    assert [t.shape for t in top] == [(2, 3, 4), (2, 3, 4)]


def test_input_shape_per_top_and_data_untouched():
    layer = make_layer('type: "Input" input_param { shape { dim: 5 dim: 2 } shape { dim: 5 } }',
                       dtype=np.float32)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    assert top[0].shape == (5, 2) and top[1].shape == (5,)
    assert top[0].data.dtype == np.float32
    values = np.arange(10, dtype=np.float32).reshape(5, 2)
    top[0].data[...] = values
    top[1].data[...] = -1
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, values)
    np.testing.assert_array_equal(top[1].data, np.full(5, -1, np.float32))
    # a reshape by the caller is kept through forward
    top[0].reshape(7, 2)
    layer.Forward([], top)
    assert top[0].shape == (7, 2)


def test_input_without_shape_leaves_tops_alone():
    layer = make_layer('type: "Input"')
    top = empty_blobs(1)
    top[0].reshape(3, 1)
    layer.SetUp([], top)
    assert top[0].shape == (3, 1)


def test_input_errors():
    with pytest.raises(LayerError, match=r"once per top blob, or not at all: 3 tops vs\. 2 "
                                         r"shapes"):
        make_layer('type: "Input" input_param { shape { dim: 1 } shape { dim: 2 } }').SetUp(
            [], empty_blobs(3))
    with pytest.raises(LayerError, match="exactly 0 bottom blobs, got 1"):
        make_layer('type: "Input" input_param { shape { dim: 1 } }').SetUp(
            random_blobs([(1,)]), empty_blobs(1))
    with pytest.raises(LayerError, match=r"cannot shape top 0 as \(2, -3\)"):
        make_layer('type: "Input" input_param { shape { dim: 2 dim: -3 } }').SetUp(
            [], empty_blobs(1))
