import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def test_split_forward_and_gradient():
    layer, bottom, top = check_layer('type: "Split"', [(2, 3, 2)], num_top=3)
    for t in top:
        assert t.shape == (2, 3, 2)
        np.testing.assert_array_equal(t.data, bottom[0].data)
    # backward: the bottom diff is the sum of the tops' diffs (overwritten, not accumulated)
    rng = np.random.default_rng(1)
    diffs = [rng.normal(size=(2, 3, 2)) for _ in top]
    for t, d in zip(top, diffs):
        t.diff[...] = d
    bottom[0].diff[...] = 100.0
    layer.Backward(top, [True], bottom)
    expected = np.zeros((2, 3, 2))
    for d in diffs:
        expected = expected + d
    np.testing.assert_allclose(bottom[0].diff, expected, rtol=1e-12)


def test_split_single_top_gradient():
    check_layer('type: "Split"', [(3, 4)], num_top=1)


def test_split_tops_share_the_bottom_data_also_after_a_batch_change():
    layer = make_layer('type: "Split"', dtype=np.float32)
    bottom, top = random_blobs([(2, 3)], dtype=np.float32), empty_blobs(2, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[1].data[0, 0] = 42.0
    assert bottom[0].data[0, 0] == 42.0 and top[0].data[0, 0] == 42.0
    bottom[0].data[1, 2] = -7.0
    assert top[0].data[1, 2] == -7.0
    # diffs stay separate
    top[0].diff[...] = 1.0
    top[1].diff[...] = 2.0
    assert top[0].diff[0, 0] == 1.0
    bottom[0].reshape(5, 3)  # larger batch: the bottom gets new storage
    bottom[0].data[...] = np.arange(15, dtype=np.float32).reshape(5, 3)
    layer.Forward(bottom, top)
    assert top[0].shape == (5, 3) and top[1].shape == (5, 3)
    np.testing.assert_array_equal(top[1].data, bottom[0].data)
    top[0].data[4, 2] = 99.0
    assert bottom[0].data[4, 2] == 99.0


def test_split_in_place_is_an_error():
    layer = make_layer('type: "Split"')
    x = Blob((2, 3))
    with pytest.raises(LayerError, match="does not allow in-place computation.*top 1"):
        layer.SetUp([x], [Blob(), x])


def test_split_needs_one_bottom_and_a_top():
    with pytest.raises(LayerError, match="at least 1 top blob"):
        make_layer('type: "Split"').SetUp(random_blobs([(2, 3)]), [])
