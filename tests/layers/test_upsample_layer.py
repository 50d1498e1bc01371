import re

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def upsample_text(params=""):
    return 'type: "Upsample" upsample_param { %s }' % params


def naive_upsample(x, s):
    n, c, h, w = x.shape
    y = np.empty((n, c, h * s, w * s))
    for i in range(h * s):
        for j in range(w * s):
            y[:, :, i, j] = x[:, :, i // s, j // s]
    return y


def run(text, x, dtype=np.float32):
    layer = make_layer(text, dtype)
    bottom, top = random_blobs([np.asarray(x)], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def test_schema_default_scale_is_2():
    assert caffe_pb2.UpsampleParameter().scale == 2
    assert caffe_pb2.LayerParameter().upsample_param.scale == 2


def test_hand_example_forward_and_backward():
    x = np.array([[[[1, 2], [3, 4]]]], np.float32)
    layer, bottom, top = run(upsample_text(), x)  # default scale 2
    assert top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data[0, 0], [[1, 1, 2, 2],
                                                      [1, 1, 2, 2],
                                                      [3, 3, 4, 4],
                                                      [3, 3, 4, 4]])
    top[0].diff[...] = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    bottom[0].diff[...] = 100  # overwritten, not accumulated
    layer.Backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff[0, 0], [[0 + 1 + 4 + 5, 2 + 3 + 6 + 7],
                                                         [8 + 9 + 12 + 13, 10 + 11 + 14 + 15]])
    bottom[0].diff[...] = 7
    layer.Backward(top, [False], bottom)
    assert (bottom[0].diff == 7).all()


@pytest.mark.parametrize("scale,shape", [(1, (2, 3, 2, 3)), (2, (2, 3, 3, 2)),
                                         (3, (1, 2, 2, 4))])
def test_forward_matches_naive_loop(scale, shape):
    x = np.random.default_rng(scale).standard_normal(shape).astype(np.float32)
    _, _, top = run(upsample_text("scale: %d" % scale), x)
    assert top[0].shape == (shape[0], shape[1], shape[2] * scale, shape[3] * scale)
    np.testing.assert_array_equal(top[0].data, naive_upsample(x, scale))


@pytest.mark.parametrize("scale,shape", [(2, (2, 3, 3, 2)), (3, (2, 2, 2, 3))])
def test_gradient(scale, shape):
    check_layer(upsample_text("scale: %d" % scale), [shape])


def test_reshape_to_another_size():
    layer, bottom, top = run(upsample_text("scale: 2"), np.zeros((1, 1, 2, 2)))
    x = Blob((3, 2, 5, 1), np.float32)
    x.data[...] = np.arange(30).reshape(x.shape)
    layer.Forward([x], top)
    assert top[0].shape == (3, 2, 10, 2)
    np.testing.assert_array_equal(top[0].data, naive_upsample(x.data, 2))


@pytest.mark.parametrize("params,shape,message", [
    ("scale: 0", (1, 1, 2, 2), "scale must be a positive integer, got 0"),
    ("", (1, 2, 2), "input must have 4 axes"),
    ("", (1, 1, 1, 2, 2), "input must have 4 axes"),
])
def test_invalid_usage(params, shape, message):
    layer = make_layer(upsample_text(params))
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs([shape]), empty_blobs(1))
    assert "Upsample" in str(info.value)
    x = Blob((1, 1, 2, 2))
    with pytest.raises(LayerError, match="cannot run in place"):
        make_layer(upsample_text()).SetUp([x], [x])
