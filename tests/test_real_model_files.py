"""Published model files in the forms their authors wrote them load unchanged and compute what
Caffe computes: legacy V0/V1 definitions and binary weights, checked against independent
references (a float64 NumPy forward written from the layer definitions, OpenCV's Caffe
importer reading the same files)."""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli
from pycaffe_lite.errors import ProtoError
from pycaffe_lite.proto import caffe_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")
V1 = caffe_pb2.V1LayerParameter


def _legacy_blob(blob, array):
    """A BlobProto in the old 4-D form (num, channels, height, width; missing leading axes 1),
    as V0 and V1 Caffe wrote weights."""
    dims = [1] * (4 - array.ndim) + list(array.shape)
    blob.num, blob.channels, blob.height, blob.width = dims
    blob.data.extend(array.ravel().tolist())


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


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


def _v1_model_with_unknown_type(path, weight, bias):
    """A V1 .caffemodel: a CONVOLUTION layer with legacy blobs, then a layer whose type field
    holds 40, a number BVLC's V1 enum does not have (the CROP of Caffe's FCN-era branches);
    protobuf keeps such a value as an unknown field, so the layer reads as having no type."""
    model = caffe_pb2.NetParameter(name="fcn")
    conv = model.layers.add(name="score", type=V1.CONVOLUTION, bottom=["data"], top=["score"])
    _legacy_blob(conv.blobs.add(), weight)
    _legacy_blob(conv.blobs.add(), bias)
    crop = V1(name="crop", bottom=["score", "data"], top=["out"]).SerializeToString()
    crop += bytes([5 << 3]) + _varint(40)  # V1LayerParameter.type (field 5) = 40
    data = model.SerializeToString() + bytes([2 << 3 | 2]) + _varint(len(crop)) + crop
    path.write_bytes(data)


DEPLOY = """name: "fcn"
layer { name: "input" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 6 dim: 7 } } }
layer { name: "score" type: "Convolution" bottom: "data" top: "score"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
"""


def test_v1_caffemodel_with_a_layer_of_unknown_type_loads_by_name(tmp_path):
    """Caffe's UpgradeV1LayerParameter sets the type only when the V1 layer has one, and
    CopyTrainedLayersFrom matches layers by name, so a V1 .caffemodel holding another fork's
    layer type still gives its weights (as OpenCV's importer, which shares that code, does);
    it was refused with 'V1 layer without a known type'."""
    rng = np.random.default_rng(3)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    weights = tmp_path / "old.caffemodel"
    _v1_model_with_unknown_type(weights, weight, bias)
    prototxt = tmp_path / "deploy.prototxt"
    prototxt.write_text(DEPLOY)

    net = caffe.Net(str(prototxt), str(weights), caffe.TEST)
    np.testing.assert_array_equal(net.params["score"][0].data, weight)
    np.testing.assert_array_equal(net.params["score"][1].data, bias)
    x = rng.standard_normal((2, 3, 6, 7)).astype(np.float32)
    ours = net.forward(data=x)["score"]
    np.testing.assert_allclose(ours, _conv2d(x, weight, bias, pad=1), rtol=1e-5, atol=1e-6)

    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    cvnet = cv2.dnn.readNetFromCaffe(str(prototxt), str(weights))
    cvnet.setInput(x)
    np.testing.assert_allclose(ours, cvnet.forward("score"), rtol=1e-5, atol=1e-5)


def test_upgrade_net_proto_binary_keeps_a_v1_layer_of_unknown_type(tmp_path, caplog):
    """Caffe's upgrade_net_proto_binary writes such a file (the layer without a type) and
    exits 0; the upgraded file's weights load as the original's."""
    rng = np.random.default_rng(4)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    old, new = tmp_path / "old.caffemodel", tmp_path / "new.caffemodel"
    _v1_model_with_unknown_type(old, weight, bias)
    assert cli.main(["upgrade_net_proto_binary", str(old), str(new)]) == 0
    assert any("('crop')" in r.getMessage() and "without a known type" in r.getMessage()
               for r in caplog.records if r.levelname == "WARNING")
    upgraded = caffe_pb2.NetParameter.FromString(new.read_bytes())
    assert not len(upgraded.layers)
    assert [(layer.name, layer.type) for layer in upgraded.layer] == [
        ("score", "Convolution"), ("crop", "")]
    assert list(upgraded.layer[1].bottom) == ["score", "data"]
    np.testing.assert_array_equal(
        np.asarray(upgraded.layer[0].blobs[0].data, np.float32), weight.ravel())
    prototxt = tmp_path / "deploy.prototxt"
    prototxt.write_text(DEPLOY)
    net = caffe.Net(str(prototxt), str(new), caffe.TEST)
    np.testing.assert_array_equal(net.params["score"][1].data, bias)


def test_v1_net_definition_with_an_untyped_layer_is_still_an_error(tmp_path):
    """A net definition cannot be built without its layers' types: that stays an error naming
    the layer, for text and binary net files alike."""
    path = tmp_path / "net.prototxt"
    path.write_text('input: "data" input_dim: 1 input_dim: 1 input_dim: 2 input_dim: 2\n'
                    'layers { name: "mystery" bottom: "data" top: "y" }\n')
    with pytest.raises(ProtoError, match=r"\('mystery'\).*type"):
        caffe.Net(str(path), caffe.TEST)
