import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer


def test_dummy_data_default_constant_zero():
    layer, bottom, top = check_layer(
        'type: "DummyData" dummy_data_param { shape { dim: 2 dim: 3 } }', [], num_top=2)
    assert [t.shape for t in top] == [(2, 3), (2, 3)]
    for t in top:
        np.testing.assert_array_equal(t.data, np.zeros((2, 3)))


def test_dummy_data_constant_filled_once_legacy_dims():
    text = ('type: "DummyData" dummy_data_param { num: 2 channels: 3 channels: 1 height: 4 '
            'width: 5 data_filler { type: "constant" value: 1.5 } }')
    layer, _, top = check_layer(text, [], num_top=2)
    assert top[0].shape == (2, 3, 4, 5) and top[1].shape == (2, 1, 4, 5)
    np.testing.assert_array_equal(top[0].data, np.full((2, 3, 4, 5), 1.5))
    # constant tops are not refilled by forward (Caffe's refill_)
    top[0].data[0, 0, 0, 0] = -9.0
    layer.Forward([], top)
    assert top[0].data[0, 0, 0, 0] == -9.0


def test_dummy_data_random_fillers_refill_every_forward():
    backend.set_random_seed(3)
    text = ('type: "DummyData" dummy_data_param { '
            'data_filler { type: "gaussian" std: 2 } data_filler { type: "constant" value: 4 } '
            'shape { dim: 100 dim: 50 } shape { dim: 3 } }')
    layer = make_layer(text, dtype=np.float32)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    assert top[0].shape == (100, 50) and top[1].shape == (3,)
    np.testing.assert_array_equal(top[1].data, np.full(3, 4.0, np.float32))
    layer.Forward([], top)
    first = top[0].data.copy()
    assert first.dtype == np.float32
    assert abs(first.mean()) < 0.1 and abs(first.std() - 2.0) < 0.1
    top[1].data[...] = 0
    layer.Forward([], top)
    assert not np.array_equal(top[0].data, first)
    assert abs(top[0].data.std() - 2.0) < 0.1
    np.testing.assert_array_equal(top[1].data, np.zeros(3, np.float32))


@pytest.mark.parametrize("params,num_top,message", [
    ('data_filler { } data_filler { } shape { dim: 1 }', 3,
     r"Number of data fillers must be 0, 1 or equal to the number of tops: 3; you "
     r"specified 2"),
    ('shape { dim: 1 } num: 1 channels: 1 height: 1 width: 1', 1,
     "Both shape and legacy fields"),
    ('num: 1 channels: 1 channels: 2 height: 1 width: 1', 3,
     r"Must specify 'channels' once, or once per top blob \(3\); specified 2"),
    ('', 1, r"Must specify 'shape' once, or once per top blob \(1\); specified 0"),
    ('shape { dim: 2 } data_filler { type: "nonesuch" }', 1,
     r"data_filler 0: unknown filler type 'nonesuch'"),
])
def test_dummy_data_errors(params, num_top, message):
    layer = make_layer('type: "DummyData" dummy_data_param { %s }' % params)
    with pytest.raises(LayerError, match=message):
        layer.SetUp([], empty_blobs(num_top))
