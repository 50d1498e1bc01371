import re

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.net import Net
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_crop(x, ref_shape, axis, offsets):
    """Copy element by element: top index i reads bottom index i + offset (cropped axes)."""
    axis = axis % x.ndim
    if len(offsets) == 0:
        offsets = [0] * (x.ndim - axis)
    elif len(offsets) == 1:
        offsets = list(offsets) * (x.ndim - axis)
    full = [0] * axis + list(offsets)
    shape = list(x.shape[:axis]) + list(ref_shape[axis:x.ndim])
    out = np.full(shape, np.nan)
    for idx in np.ndindex(*shape):
        out[idx] = x[tuple(i + o for i, o in zip(idx, full))]
    return out


def crop_text(params=""):
    return 'type: "Crop" crop_param { %s }' % params


CASES = [
    # params, data shape, reference shape, axis, offsets
    ("", (2, 3, 6, 5), (1, 1, 4, 2), 2, []),                      # Caffe's default: H, W
    ("offset: 1", (2, 3, 6, 5), (2, 4, 4, 3), 2, [1]),
    ("offset: 2 offset: 1", (2, 3, 6, 5), (7, 7, 3, 4), 2, [2, 1]),
    ("axis: 1 offset: 1 offset: 0 offset: 2", (2, 4, 5, 5), (2, 2, 3, 3), 1, [1, 0, 2]),
    ("axis: -1 offset: 3", (2, 3, 4, 6), (2, 3, 4, 2), -1, [3]),
    ("axis: 0 offset: 1", (3, 3, 4, 4), (2, 2, 2, 2), 0, [1]),     # every axis cropped
    ("axis: 2 offset: 1 offset: 0 offset: 2", (2, 2, 4, 3, 5), (1, 1, 2, 3, 2), 2,
     [1, 0, 2]),                                                   # 5-D
]


@pytest.mark.parametrize("params,shape,ref,axis,offsets", CASES)
def test_crop_forward_and_gradient(params, shape, ref, axis, offsets):
    bottom = random_blobs([shape, ref], seed=3)
    expected = naive_crop(bottom[0].data, ref, axis, offsets)
    # bottom 1 only supplies a shape: it gets no gradient to check
    layer, bottom, top = check_layer(crop_text(params), bottom, check_bottom=[0],
                                     reshape_batch=(axis % len(shape) != 0))
    assert top[0].shape == expected.shape
    np.testing.assert_array_equal(top[0].data, expected)


def test_crop_hand_example():
    x = np.arange(2 * 1 * 4 * 5, dtype=np.float32).reshape(2, 1, 4, 5)
    bottom = [Blob(x.shape, np.float32), Blob((9, 9, 2, 3), np.float32)]
    bottom[0].data[...] = x
    top = empty_blobs(1, np.float32)
    layer = make_layer(crop_text("offset: 1 offset: 2"), np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data[0, 0], [[7, 8, 9], [12, 13, 14]])
    np.testing.assert_array_equal(top[0].data[1, 0], [[27, 28, 29], [32, 33, 34]])
    # backward: the top diff lands in the window, zeros elsewhere (old diff overwritten)
    top[0].diff[...] = np.arange(1, 13, dtype=np.float32).reshape(2, 1, 2, 3)
    bottom[0].diff[...] = 7
    bottom[1].diff[...] = 7
    layer.Backward(top, [True, False], bottom)
    expected = np.zeros(x.shape, np.float32)
    expected[:, :, 1:3, 2:5] = top[0].diff
    np.testing.assert_array_equal(bottom[0].diff, expected)
    assert (bottom[1].diff == 7).all()  # not asked: untouched
    layer.Backward(top, [False, True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, expected)
    assert not bottom[1].diff.any()  # the reference's values do not influence the top


def test_reshape_follows_the_reference():
    layer = make_layer(crop_text())
    bottom, top = random_blobs([(1, 2, 8, 8), (1, 1, 3, 4)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    assert top[0].shape == (1, 2, 3, 4)
    bottom[1].reshape(1, 1, 8, 1)
    layer.Forward(bottom, top)
    assert top[0].shape == (1, 2, 8, 1)
    np.testing.assert_array_equal(top[0].data, bottom[0].data[:, :, :, :1])


def test_net_never_forces_backward_into_the_reference():
    text = """
force_backward: true
layer { name: "in" type: "Input" top: "x" top: "ref"
        input_param { shape { dim: 1 dim: 2 dim: 6 dim: 6 }
                      shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }
layer { name: "crop" type: "Crop" bottom: "x" bottom: "ref" top: "y" crop_param { offset: 1 } }
"""
    net = Net(text, caffe.TRAIN)
    assert net.records[net.layer_index("crop")].bottom_need_backward == [True, False]
    net.blobs["x"].data[...] = np.arange(72).reshape(1, 2, 6, 6)
    net.forward()
    np.testing.assert_array_equal(net.blobs["y"].data, net.blobs["x"].data[:, :, 1:5, 1:5])


@pytest.mark.parametrize("params,shapes,message", [
    ("offset: 3", [(1, 1, 5, 5), (1, 1, 3, 2)],
     "crop for axis 2 is out of bounds: offset 3 + size 3"),
    ("", [(1, 1, 5, 5), (1, 1, 3, 6)], "crop for axis 3 is out of bounds: offset 0 + size 6"),
    ("offset: 0 offset: 4", [(1, 1, 5, 5), (1, 1, 3, 2)],
     "crop for axis 3 is out of bounds: offset 4 + size 2"),
    ("axis: 0", [(2, 1, 5, 5), (3, 1, 5, 5)], "crop for axis 0 is out of bounds"),
    ("offset: 1 offset: 1 offset: 1", [(1, 1, 5, 5), (1, 1, 3, 3)],
     "number of offset values specified must be equal to the number of dimensions "
     "following axis: got 3 offsets for axes 2..3"),
    ("axis: 4", [(1, 1, 5, 5), (1, 1, 3, 3)], "crop axis 4 is out of range"),
    ("axis: -5", [(1, 1, 5, 5), (1, 1, 3, 3)], "crop axis -5 is out of range"),
    ("", [(1, 1, 5, 5), (3, 3)], "must have at least as many axes as the data"),
])
def test_invalid_usage(params, shapes, message):
    layer = make_layer(crop_text(params))
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs(shapes), empty_blobs(1))
    assert "Crop" in str(info.value)


def test_invalid_blob_counts_and_in_place():
    with pytest.raises(LayerError, match="takes exactly 2 bottom blobs, got 1"):
        make_layer(crop_text()).SetUp(random_blobs([(1, 1, 3, 3)]), empty_blobs(1))
    bottom = random_blobs([(1, 1, 4, 4), (1, 1, 2, 2)])
    with pytest.raises(LayerError, match="cannot run in place"):
        make_layer(crop_text()).SetUp(bottom, [bottom[0]])
