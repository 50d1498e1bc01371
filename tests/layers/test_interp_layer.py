import re

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

ndimage = pytest.importorskip("scipy.ndimage", reason="SciPy (the reference) is a test dependency")


def interp_text(params):
    return 'type: "Interp" interp_param { %s }' % params


def run(params, x, dtype=np.float32):
    layer = make_layer(interp_text(params), dtype)
    bottom, top = random_blobs([np.asarray(x)], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def scipy_reference(x, out_h, out_w, pad_beg=0, pad_end=0):
    """Linear interpolation with the corners aligned, by scipy.ndimage on the cropped input."""
    crop = x[:, :, -pad_beg:x.shape[2] + pad_end, -pad_beg:x.shape[3] + pad_end]
    h, w = crop.shape[2:]
    rows = np.arange(out_h) * ((h - 1) / (out_h - 1) if out_h > 1 else 0.0)
    cols = np.arange(out_w) * ((w - 1) / (out_w - 1) if out_w > 1 else 0.0)
    grid = np.meshgrid(rows, cols, indexing="ij")
    out = np.empty(x.shape[:2] + (out_h, out_w))
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            out[n, c] = ndimage.map_coordinates(crop[n, c].astype(np.float64), grid, order=1,
                                                mode="nearest")
    return out


def test_schema_interp_param_takes_1003_and_bvlc_keeps_143():
    fields = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    assert fields["interp_param"].number == 1003
    assert fields["input_param"].number == 143
    p = caffe_pb2.InterpParameter()
    assert (p.height, p.width, p.zoom_factor, p.shrink_factor, p.pad_beg, p.pad_end) == \
        (0, 0, 1, 1, 0, 0)
    numbers = {f.name: f.number for f in p.DESCRIPTOR.fields}
    assert numbers == {"height": 1, "width": 2, "zoom_factor": 3, "shrink_factor": 4,
                       "pad_beg": 5, "pad_end": 6}


def test_hand_example_forward_and_backward():
    x = np.array([[[[0, 2], [4, 6]]]], np.float32)
    layer, bottom, top = run("zoom_factor: 2", x)
    # 2 -> 3 samples per axis at 0, 0.5, 1: the corners stay, the middles average
    np.testing.assert_array_equal(top[0].data[0, 0], [[0, 1, 2], [2, 3, 4], [4, 5, 6]])
    top[0].diff[...] = 0
    top[0].diff[0, 0, 1, 1] = 4  # the centre took a quarter of each corner
    top[0].diff[0, 0, 0, 0] = 1
    bottom[0].diff[...] = 9  # overwritten
    layer.Backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff[0, 0], [[2, 1], [1, 1]])


@pytest.mark.parametrize("params,size", [
    ("zoom_factor: 3", (25, 22)),                   # 9 + 8 * 2, 8 + 7 * 2
    ("shrink_factor: 2", (5, 4)),                   # 8 // 2 + 1, 7 // 2 + 1
    ("shrink_factor: 3 zoom_factor: 2", (5, 5)),    # shrink to 3 x 3, then zoom
    ("height: 7 width: 11", (7, 11)),
    ("zoom_factor: 2 height: 4 width: 4", (17, 15)),  # a factor alone comes first
    ("height: 1 width: 1", (1, 1)),
    ("zoom_factor: 2 pad_beg: -1 pad_end: -2", (11, 9)),  # crop 9 x 8 to 6 x 5 first
    ("height: 9 width: 8", (9, 8)),                 # same size: a copy
])
def test_forward_matches_scipy_and_the_forks_sizes(params, size):
    x = np.random.default_rng(1).standard_normal((2, 3, 9, 8)).astype(np.float32)
    layer, _, top = run(params, x)
    assert top[0].shape == (2, 3) + size
    p = layer.layer_param.interp_param
    expect = scipy_reference(x, size[0], size[1], p.pad_beg, p.pad_end)
    np.testing.assert_allclose(top[0].data, expect, rtol=1e-5, atol=1e-5)


def test_same_size_is_an_exact_copy():
    x = np.random.default_rng(2).standard_normal((1, 2, 5, 4)).astype(np.float32)
    _, _, top = run("height: 5 width: 4", x)
    np.testing.assert_array_equal(top[0].data, x)


@pytest.mark.parametrize("params", ["zoom_factor: 2", "shrink_factor: 2",
                                    "height: 3 width: 7", "zoom_factor: 3 pad_beg: -1",
                                    "height: 1 width: 2 pad_end: -1"])
def test_gradient(params):
    check_layer(interp_text(params), [(2, 3, 5, 4)])


def test_reshape_to_another_size():
    layer, _, top = run("zoom_factor: 2", np.zeros((1, 1, 2, 2), np.float32))
    x = Blob((2, 3, 4, 5), np.float32)
    x.data[...] = np.random.default_rng(3).standard_normal(x.shape)
    layer.Forward([x], top)
    assert top[0].shape == (2, 3, 7, 9)
    np.testing.assert_allclose(top[0].data, scipy_reference(x.data, 7, 9), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("params,shape,message", [
    ("zoom_factor: 2 pad_beg: 1", (1, 1, 4, 4), "supports only padding <= 0 (cropping), got "
                                                "pad_beg 1, pad_end 0"),
    ("height: 4", (1, 1, 4, 4), "must give zoom_factor, shrink_factor, or both height and "
                                "width"),
    ("zoom_factor: 0", (1, 1, 4, 4), "zoom_factor must be >= 1, got 0"),
    ("shrink_factor: 0", (1, 1, 4, 4), "shrink_factor must be >= 1, got 0"),
    ("zoom_factor: 2 pad_beg: -2 pad_end: -2", (1, 1, 4, 6),
     "the cropped input is empty: 0 x 2 after pad_beg -2 and pad_end -2 on a 4 x 6 input"),
    ("height: 0 width: 3", (1, 1, 4, 4), "output size must be positive, got 0 x 3"),
    ("zoom_factor: 2", (1, 4, 4), "input must have 4 axes"),
])
def test_invalid_usage(params, shape, message):
    layer = make_layer(interp_text(params))
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs([shape]), empty_blobs(1))
    assert "Interp" in str(info.value)
    x = Blob((1, 1, 2, 2))
    with pytest.raises(LayerError, match="cannot run in place"):
        make_layer(interp_text("zoom_factor: 2")).SetUp([x], [x])
