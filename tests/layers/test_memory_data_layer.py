"""The MemoryData layer: arrays set from Python."""

import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import empty_blobs, make_layer


def _layer(batch=2, transform=""):
    layer = make_layer('name: "mem" type: "MemoryData" top: "data" top: "label" '
                       'memory_data_param { batch_size: %d channels: 1 height: 2 width: 3 } '
                       'transform_param { %s }' % (batch, transform), dtype=np.float32)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    return layer, top


def test_batches_of_the_arrays_in_order_with_wraparound():
    layer, top = _layer()
    assert top[0].shape == (2, 1, 2, 3) and top[1].shape == (2,)
    data = np.arange(6 * 6, dtype=np.float32).reshape(6, 1, 2, 3)
    labels = np.arange(6, dtype=np.float32)[:, None, None, None]  # pycaffe's 4-D labels
    layer.reset(data, labels)
    seen = []
    for _ in range(4):
        layer.Forward([], top)
        np.testing.assert_array_equal(top[0].data, data[top[1].data.astype(int)])
        seen.extend(top[1].data.tolist())
    assert seen == [0, 1, 2, 3, 4, 5, 0, 1]
    assert layer.get_state()["pos"] == 2
    layer.set_state({"type": "MemoryData", "pos": 4, "rng": layer.get_state()["rng"]})
    layer.Forward([], top)
    assert top[1].data.tolist() == [4, 5]


def test_checks_and_messages():
    layer, top = _layer(batch=4)
    with pytest.raises(LayerError, match="needs data before forward: call "
                                         r"net.set_input_arrays"):
        layer.Forward([], top)
    with pytest.raises(LayerError, match=r"number of items \(6\) must be a positive multiple "
                                         r"of batch_size \(4\)"):
        layer.reset(np.zeros((6, 1, 2, 3)), np.zeros(6))
    with pytest.raises(LayerError, match=r"expects N x 1 x 2 x 3"):
        layer.reset(np.zeros((4, 2, 2, 3)), np.zeros(4))
    with pytest.raises(LayerError, match="one value per item"):
        layer.reset(np.zeros((4, 1, 2, 3)), np.zeros(3))
    with pytest.raises(LayerError, match="must be specified and positive"):
        make_layer('type: "MemoryData" memory_data_param { batch_size: 2 channels: 1 }'
                   ).SetUp([], empty_blobs(2))


def test_added_datums_and_images_are_transformed():
    layer, top = _layer(transform="scale: 0.5 mean_value: 1")
    datums = []
    for i in range(2):
        arr = np.full((1, 2, 3), 10 * (i + 1), np.uint8)
        datums.append(caffe_pb2.Datum(channels=1, height=2, width=3, data=arr.tobytes(),
                                      label=i + 7))
    layer.add_datum_vector(datums)
    with pytest.raises(LayerError, match="until the current data has been consumed"):
        layer.add_datum_vector(datums)
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data[:, 0, 0, 0], [4.5, 9.5])
    assert top[1].data.tolist() == [7, 8]
    layer.add_mat_vector([np.full((2, 3), 3, np.uint8)] * 2, [1, 2])  # consumed: allowed again
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, np.full((2, 1, 2, 3), 1.0))


def test_net_set_input_arrays_feeds_the_layer(tmp_path):
    import pycaffe_lite

    proto = tmp_path / "net.prototxt"
    text = """
    layer { name: "mem" type: "MemoryData" top: "data" top: "label"
            memory_data_param { batch_size: 2 channels: 1 height: 1 width: 1 } }
    layer { name: "r" type: "Reshape" bottom: "label" top: "label_r"
            reshape_param { shape { dim: 2 dim: 1 dim: 1 dim: 1 } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "data" bottom: "label_r" top: "loss" }
    """
    proto.write_text(text)
    net = pycaffe_lite.Net(str(proto), pycaffe_lite.TRAIN)
    data = np.array([1, 2, 3, 4], np.float32).reshape(4, 1, 1, 1)
    net.set_input_arrays(data, np.array([1, 0, 3, 0], np.float32))
    # Euclidean loss: sum of squared differences / (2 N)
    assert float(net.forward()["loss"]) == pytest.approx((0 + 4) / 4)
    assert float(net.forward()["loss"]) == pytest.approx((0 + 16) / 4)
