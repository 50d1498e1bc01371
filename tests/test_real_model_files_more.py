"""More published Caffe files (OpenCV's own Caffe test nets, nets of the Caffe forks) build
with made-up weights and compute what Caffe computes: checked against OpenCV's Caffe importer
reading the files we write, or against the fork's C++ written out in NumPy."""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.proto import caffe_pb2

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


def test_channel_shared_prelu_saves_as_caffe_and_opencv_reads_it(tmp_path):
    """OpenCV's layer_prelu.prototxt: a per-channel PReLU then a channel-shared one, whose slope
    is a blob of no axes. BVLC's Blob::ToProto (src/caffe/blob.cpp) adds one shape dim per
    axis, so for that blob it writes no `shape` message at all; we wrote an empty one, and
    OpenCV's importer then refused the whole .caffemodel (a Mat of 0 dims)."""
    prototxt = os.path.join(REAL, "opencv_layer_prelu.prototxt")
    net = caffe.Net(prototxt, caffe.TEST)
    rng = np.random.default_rng(5)
    net.params["prelu_1"][0].data[...] = rng.uniform(0.1, 0.5, 6)
    net.params["output"][0].data[...] = 0.3
    weights = tmp_path / "prelu.caffemodel"
    net.save(str(weights))
    saved = caffe_pb2.NetParameter.FromString(weights.read_bytes())
    shared = [layer for layer in saved.layer if layer.name == "output"][0].blobs[0]
    assert not shared.HasField("shape") and list(shared.data) == pytest.approx([0.3])
    again = caffe.Net(prototxt, str(weights), caffe.TEST)
    assert again.params["output"][0].data.shape == ()

    x = rng.uniform(-2, 2, (2, 6, 75, 113)).astype(np.float32)
    ours = net.forward(input=x)["output"]
    slope = net.params["prelu_1"][0].data.reshape(1, 6, 1, 1)
    first = np.where(x > 0, x, x * slope)
    np.testing.assert_allclose(ours, np.where(first > 0, first, first * 0.3), rtol=1e-6)
    cvnet = cv2.dnn.readNetFromCaffe(prototxt, str(weights))
    cvnet.setInput(x)
    np.testing.assert_allclose(ours, cvnet.forward("output"), rtol=1e-5, atol=1e-6)
