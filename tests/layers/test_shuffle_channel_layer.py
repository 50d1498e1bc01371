import re

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def shuffle_text(group):
    return 'type: "ShuffleChannel" shuffle_channel_param { group: %d }' % group


def run(group, x, dtype=np.float32):
    layer = make_layer(shuffle_text(group), dtype)
    bottom, top = random_blobs([np.asarray(x)], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def test_schema_field_numbers_are_the_forks():
    assert caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name[
        "shuffle_channel_param"].number == 164
    assert caffe_pb2.ShuffleChannelParameter().group == 1


def test_hand_example_forward_and_backward():
    # channel c holds the value c; 6 channels in 3 groups of 2: (0 1) (2 3) (4 5)
    x = np.arange(6, dtype=np.float32).reshape(1, 6, 1, 1) * np.ones((1, 1, 2, 2), np.float32)
    layer, bottom, top = run(3, x)
    # one channel from each group in turn
    assert top[0].data[0, :, 0, 0].tolist() == [0, 2, 4, 1, 3, 5]
    top[0].diff[...] = np.arange(6, dtype=np.float32).reshape(1, 6, 1, 1) * 10
    bottom[0].diff[...] = -1  # overwritten
    layer.Backward(top, [True], bottom)
    # the gradient goes back where each channel came from
    assert bottom[0].diff[0, :, 1, 1].tolist() == [0, 30, 10, 40, 20, 50]


@pytest.mark.parametrize("group,shape", [(1, (2, 4, 3)), (2, (2, 4, 3, 2)), (4, (1, 8, 2, 2)),
                                         (3, (2, 12, 1, 1, 2))])
def test_forward_is_the_forks_permutation(group, shape):
    x = np.random.default_rng(group).standard_normal(shape).astype(np.float32)
    _, _, top = run(group, x)
    channels = shape[1]
    per = channels // group
    for i in range(group):
        for j in range(per):
            np.testing.assert_array_equal(top[0].data[:, j * group + i], x[:, i * per + j])


@pytest.mark.parametrize("group,shape", [(3, (2, 6, 2, 3)), (2, (2, 4, 5))])
def test_gradient(group, shape):
    check_layer(shuffle_text(group), [shape])


@pytest.mark.parametrize("group,shape,message", [
    (3, (2, 8, 2, 2), "the 8 channels of the input (shape (2, 8, 2, 2)) are not a multiple of "
                      "group 3"),
    (0, (2, 8, 2, 2), "group must be > 0, got 0"),
    (1, (4,), "at least 2 axes"),
])
def test_invalid_usage(group, shape, message):
    layer = make_layer(shuffle_text(group))
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs([shape]), empty_blobs(1))
    assert "ShuffleChannel" in str(info.value)
    x = Blob((1, 2, 2, 2))
    with pytest.raises(LayerError, match="cannot run in place"):
        make_layer(shuffle_text(2)).SetUp([x], [x])
