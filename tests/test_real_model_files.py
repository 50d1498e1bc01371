"""Published model files in the forms their authors wrote them load unchanged and compute what
Caffe computes: legacy V0/V1 definitions and binary weights, checked against independent
references (a float64 NumPy forward written from the layer definitions, OpenCV's Caffe
importer reading the same files)."""

import os

import numpy as np

import pycaffe_lite as caffe
from pycaffe_lite.proto import caffe_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


def _legacy_blob(blob, array):
    """A BlobProto in the old 4-D form (num, channels, height, width; missing leading axes 1),
    as V0 and V1 Caffe wrote weights."""
    dims = [1] * (4 - array.ndim) + list(array.shape)
    blob.num, blob.channels, blob.height, blob.width = dims
    blob.data.extend(array.ravel().tolist())


def _conv2d(x, w, b, pad=0):
    """Cross-correlation in float64 (stride 1), written out from its definition."""
    x = np.pad(np.asarray(x, np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    o, _, kh, kw = w.shape
    oh, ow = h - kh + 1, wd - kw + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(kh):
        for j in range(kw):
            out += np.einsum("nchw,oc->nohw", x[:, :, i:i + oh, j:j + ow], w[:, :, i, j])
    return out + np.asarray(b, np.float64)[None, :, None, None]


def _max_pool_2x2(x):
    n, c, h, w = x.shape
    return x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _lenet_reference(x, params):
    """LeNet's forward in float64 from its definition (conv 5x5 -> max pool 2/2 -> conv 5x5 ->
    max pool 2/2 -> ip 500 -> ReLU -> ip 10 -> softmax)."""
    h = _max_pool_2x2(_conv2d(x, *params["conv1"]))
    h = _max_pool_2x2(_conv2d(h, *params["conv2"]))
    w1, b1 = params["ip1"]
    h = np.maximum(h.reshape(len(h), -1) @ np.asarray(w1, np.float64).T + b1, 0.0)
    w2, b2 = params["ip2"]
    z = h @ np.asarray(w2, np.float64).T + b2
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _lenet_params(seed):
    rng = np.random.default_rng(seed)
    shapes = {"conv1": (20, 1, 5, 5), "conv2": (50, 20, 5, 5), "ip1": (500, 800),
              "ip2": (10, 500)}
    params = {}
    for name, shape in shapes.items():
        fan_in = int(np.prod(shape[1:]))
        w = (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        params[name] = [w, rng.normal(0, 0.1, shape[0]).astype(np.float32)]
    return params, rng


def test_v0_lenet_prototxt_and_v0_caffemodel_compute_lenet(tmp_path):
    """BVLC's V0 LeNet (2014) with weights in a V0 binary (V0 layer types, legacy 4-D blobs:
    inner-product weights 1 x 1 x N x K, biases 1 x 1 x 1 x N, the net input named as old
    Caffe's ToProto wrote it) gives LeNet's outputs."""
    params, rng = _lenet_params(7)
    v0_types = {"conv1": "conv", "pool1": "pool", "conv2": "conv", "pool2": "pool",
                "ip1": "innerproduct", "relu1": "relu", "ip2": "innerproduct", "prob": "softmax"}
    wiring = {"conv1": ("data", "conv1"), "pool1": ("conv1", "pool1"),
              "conv2": ("pool1", "conv2"), "pool2": ("conv2", "pool2"), "ip1": ("pool2", "ip1"),
              "relu1": ("ip1", "ip1"), "ip2": ("ip1", "ip2"), "prob": ("ip2", "prob")}
    model = caffe_pb2.NetParameter(name="LeNet", input=["data"])
    for name, kind in v0_types.items():
        entry = model.layers.add(bottom=[wiring[name][0]], top=[wiring[name][1]])
        entry.layer.name, entry.layer.type = name, kind
        for array in params.get(name, []):
            _legacy_blob(entry.layer.blobs.add(), array)
    weights = tmp_path / "lenet_v0.caffemodel"
    weights.write_bytes(model.SerializeToString())

    prototxt = os.path.join(REAL, "lenet_v0.prototxt")
    net = caffe.Net(prototxt, str(weights), caffe.TEST)
    assert [layer.type for layer in net.layers] == [
        "Input", "Convolution", "Pooling", "Convolution", "Pooling", "InnerProduct", "ReLU",
        "InnerProduct", "Softmax"]
    x = rng.uniform(0, 1, (64, 1, 28, 28)).astype(np.float32)
    ours = net.forward(data=x)["prob"]
    np.testing.assert_allclose(ours, _lenet_reference(x, params), rtol=1e-5, atol=1e-7)
