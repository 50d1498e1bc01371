"""What we save is real Caffe: OpenCV's independent Caffe importer reads it and agrees."""

import numpy as np
import pytest

import pycaffe_lite as caffe

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

DEPLOY = """
name: "interop"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 20 dim: 20 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 1
                            weight_filler { type: "gaussian" std: 0.3 }
                            bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1"
        scale_param { bias_term: true filler { type: "uniform" min: 0.5 max: 1.5 }
                      bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "norm1" type: "LRN" bottom: "pool1" top: "norm1"
        lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } }
layer { name: "conv2a" type: "Convolution" bottom: "norm1" top: "conv2a"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 group: 2
                            weight_filler { type: "xavier" } } }
layer { name: "conv2b" type: "Convolution" bottom: "norm1" top: "conv2b"
        convolution_param { num_output: 8 kernel_size: 1 weight_filler { type: "msra" } } }
layer { name: "sum" type: "Eltwise" bottom: "conv2a" bottom: "conv2b" top: "sum" }
layer { name: "cat" type: "Concat" bottom: "sum" bottom: "norm1" top: "cat" }
layer { name: "pool2" type: "Pooling" bottom: "cat" top: "pool2"
        pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool2" top: "fc"
        inner_product_param { num_output: 10 weight_filler { type: "gaussian" std: 0.1 }
                              bias_filler { type: "constant" value: 0.2 } } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""


def test_saved_model_matches_opencv(tmp_path):
    proto = tmp_path / "deploy.prototxt"
    proto.write_text(DEPLOY)
    caffe.set_random_seed(7)
    net = caffe.Net(str(proto), caffe.TEST)
    # give BatchNorm real statistics (mean, variance, scale factor) so the test means something
    rng = np.random.default_rng(0)
    bn = net.params["bn1"]
    bn[0].data[...] = rng.normal(0, 0.2, 8) * 2.0
    bn[1].data[...] = rng.uniform(0.5, 2.0, 8) * 2.0
    bn[2].data[...] = 2.0
    weights = tmp_path / "deploy.caffemodel"
    net.save(str(weights))

    x = rng.uniform(-1, 1, (2, 3, 20, 20)).astype(np.float32)
    ours = net.forward(data=x)["prob"].copy()
    fc = net.blobs["fc"].data.copy()

    cvnet = cv2.dnn.readNetFromCaffe(str(proto), str(weights))
    cvnet.setInput(x)
    theirs_fc = cvnet.forward("fc")
    cvnet.setInput(x)
    theirs = cvnet.forward("prob")
    np.testing.assert_allclose(fc, theirs_fc.reshape(fc.shape), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ours, theirs.reshape(ours.shape), rtol=1e-4, atol=1e-6)
    assert np.abs(ours - 0.1).max() > 1e-3  # outputs are not trivially uniform
