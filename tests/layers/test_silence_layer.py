import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def test_silence_forward_and_gradient():
    layer, bottom, top = check_layer('type: "Silence"', [(2, 3), (4,)], num_top=0)
    assert top == []
    before = [b.data.copy() for b in bottom]
    layer.Forward(bottom, top)
    for b, d in zip(bottom, before):
        np.testing.assert_array_equal(b.data, d)
    for b in bottom:
        b.diff[...] = 7.0
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.zeros((2, 3)))
    np.testing.assert_array_equal(bottom[1].diff, np.full(4, 7.0))


def test_silence_blob_counts():
    with pytest.raises(LayerError, match="at least 1 bottom"):
        make_layer('type: "Silence"').SetUp([], [])
    with pytest.raises(LayerError, match="exactly 0 top blobs, got 1"):
        make_layer('type: "Silence"').SetUp(random_blobs([(2,)]), empty_blobs(1))
