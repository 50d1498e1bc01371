import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_tile(x, axis, tiles):
    shape = list(x.shape)
    shape[axis] *= tiles
    out = np.full(shape, np.nan)
    for idx in np.ndindex(*shape):
        src = list(idx)
        src[axis] %= x.shape[axis]
        out[idx] = x[tuple(src)]
    return out


@pytest.mark.parametrize("params,axis,tiles", [
    ("tiles: 3", 1, 3),
    ("axis: 0 tiles: 2", 0, 2),
    ("axis: -1 tiles: 4", 2, 4),
    ("axis: 2 tiles: 1", 2, 1),
])
def test_tile_forward_and_gradient(params, axis, tiles):
    layer, bottom, top = check_layer('type: "Tile" tile_param { %s }' % params, [(2, 3, 2)])
    np.testing.assert_array_equal(top[0].data, naive_tile(bottom[0].data, axis, tiles))


def test_tile_backward_sums_copies_and_overwrites():
    layer = make_layer('type: "Tile" tile_param { tiles: 3 }')
    bottom, top = random_blobs([(2, 2)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = np.arange(12).reshape(2, 6)
    bottom[0].diff[...] = 100
    layer.Backward(top, [True], bottom)
    # item 0: copies [0 1][2 3][4 5] -> [6, 9]; item 1: [6 7][8 9][10 11] -> [24, 27]
    np.testing.assert_array_equal(bottom[0].diff, [[6, 9], [24, 27]])


def test_tile_errors():
    with pytest.raises(LayerError, match="Number of tiles must be specified"):
        make_layer('type: "Tile"').SetUp(random_blobs([(2, 3)]), empty_blobs(1))
    with pytest.raises(LayerError, match="tiles must be > 0, got 0"):
        make_layer('type: "Tile" tile_param { tiles: 0 }').SetUp(random_blobs([(2, 3)]),
                                                               empty_blobs(1))
    with pytest.raises(LayerError, match=r"axis 2 is out of range for a bottom of shape "
                                         r"\(2, 3\)"):
        make_layer('type: "Tile" tile_param { axis: 2 tiles: 2 }').SetUp(
            random_blobs([(2, 3)]), empty_blobs(1))
