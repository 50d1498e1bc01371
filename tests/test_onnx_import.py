"""ONNX import: graphs built with onnx.helper (no network, no PyTorch) become a prototxt and
a caffemodel that our Net and OpenCV's independent Caffe importer (cv2.dnn) both run with
onnxruntime's numbers; unsupported ops are errors naming the node."""

import numpy as np
import pytest

from helpers.onnx_runtime import assert_close, run_ort
from onnx import TensorProto, helper, numpy_helper

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

RNG = np.random.default_rng(5)


class Graph:
    """A small ONNX graph under construction with random weights."""

    def __init__(self, shape):
        self.nodes, self.inits, self.shape = [], [], shape
        self.i = 0

    def w(self, *shape, scale=None, positive=False):
        self.i += 1
        name = "w%d" % self.i
        if positive:
            value = RNG.uniform(0.5, 1.5, shape)
        else:
            fan_in = np.prod(shape[1:]) if len(shape) > 1 else 1
            value = RNG.normal(0, scale or np.sqrt(2.0 / fan_in), shape)
        self.inits.append(numpy_helper.from_array(value.astype(np.float32), name))
        return name

    def op(self, op_type, inputs, name, n_out=1, **attrs):
        outs = [name] if n_out == 1 else ["%s_%d" % (name, i) for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x, cin, cout, k, name, **attrs):
        return self.op("Conv", [x, self.w(cout, cin // attrs.get("group", 1), k, k),
                                self.w(cout, scale=0.1)], name, kernel_shape=[k, k], **attrs)

    def bn(self, x, c, name):
        return self.op("BatchNormalization", [x, self.w(c, positive=True), self.w(c, scale=0.1),
                                              self.w(c, scale=0.1), self.w(c, positive=True)],
                       name, epsilon=1e-3)

    def model(self, outputs, opset=17):
        graph = helper.make_graph(
            self.nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                            ["N"] + list(self.shape[1:]))],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
            initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = 8
        return m


def chain_model():
    """conv/BN/ReLU/pool/Gemm/Softmax, with PyTorch's floor-mode pooling and its Flatten."""
    g = Graph((1, 3, 16, 16))
    y = g.conv("x", 3, 8, 3, "conv1", pads=[1, 1, 1, 1], strides=[1, 1])
    y = g.op("Relu", [g.bn(y, 8, "bn1")], "relu1")
    y = g.op("MaxPool", [y], "pool1", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    y = g.conv(y, 8, 8, 3, "conv2", group=2, dilations=[2, 2], pads=[2, 2, 2, 2])
    y = g.op("LeakyRelu", [g.bn(y, 8, "bn2")], "lrelu2", alpha=0.1)
    y = g.op("AveragePool", [y], "pool2", kernel_shape=[2, 2], strides=[2, 2])
    y = g.op("AveragePool", [y], "pool3", kernel_shape=[3, 3], strides=[1, 1],
             pads=[1, 1, 1, 1], count_include_pad=1)
    y = g.op("Flatten", [y], "flatten", axis=1)
    y = g.op("Gemm", [y, g.w(10, 8 * 4 * 4), g.w(10, scale=0.1)], "fc", transB=1)
    y = g.op("Dropout", [y], "drop")
    y = g.op("Mul", [y, g.w(1, positive=True)], "temperature")
    g.op("Softmax", [y], "prob", axis=1)
    return g.model(["prob"])


def residual_model():
    """A ResNet basic block with a projection shortcut, then a classifier head written with
    MatMul + Add, per-channel Mul/Add constants, Clip(0, 6) and a PyTorch-style reshape."""
    g = Graph((1, 4, 8, 8))
    y = g.op("Relu", [g.bn(g.conv("x", 4, 8, 3, "conv_a", pads=[1, 1, 1, 1], strides=[2, 2]),
                           8, "bn_a")], "relu_a")
    y = g.bn(g.conv(y, 8, 8, 3, "conv_b", pads=[1, 1, 1, 1]), 8, "bn_b")
    short = g.bn(g.conv("x", 4, 8, 1, "proj", strides=[2, 2]), 8, "bn_proj")
    y = g.op("Relu", [g.op("Add", [y, short], "add")], "relu_out")
    y = g.op("Mul", [y, g.w(8, 1, 1, positive=True)], "channel_scale")
    y = g.op("Add", [y, g.w(1, 8, 1, 1, scale=0.1)], "channel_shift")
    y = g.op("Clip", [y, g.w(1, scale=0.0), g.w(1, scale=0.0)], "relu6")
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.array(6, np.float32), g.inits[-1].name))
    g.inits[-2].CopyFrom(numpy_helper.from_array(np.array(0, np.float32), g.inits[-2].name))
    y = g.op("GlobalAveragePool", [y], "gap")
    shape = g.op("Shape", [y], "shape")
    batch = g.op("Gather", [shape, g.w(1, scale=0.0)], "batch", axis=0)
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.array([0], np.int64), g.inits[-1].name))
    minus = g.w(1)
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.array([-1], np.int64), minus))
    target = g.op("Concat", [batch, minus], "target", axis=0)
    y = g.op("Reshape", [y, target], "flat")
    y = g.op("MatMul", [y, g.w(8, 5).replace("", "")], "fc_matmul")
    y = g.op("Add", [y, g.w(5, scale=0.1)], "fc_bias")
    a, b = g.op("Split", [y, g.w(1)], "split", n_out=2, axis=1)
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.array([2, 3], np.int64), g.inits[-1].name))
    g.op("Sigmoid", [a], "head_a")
    g.op("Sub", [b, g.w(3, scale=0.5)], "head_b")
    return g.model(["head_a", "head_b"])


def convert_and_compare(model, tmp_path, key, opencv=True):
    x = RNG.uniform(-1, 1, (1,) + tuple(d.dim_value for d in
                                        model.graph.input[0].type.tensor_type.shape.dim[1:]))
    x = x.astype(np.float32)
    theirs = run_ort(model, {"x": x})
    prefix = tmp_path / key
    deploy, weights, outputs = caffe_onnx.to_caffe(model, str(prefix))
    net = caffe.Net(str(prefix) + ".prototxt", str(prefix) + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    for name, value in theirs.items():
        assert_close(net.blobs[outputs[name]].data, value, "%s: %s (ours)" % (key, name))
    if not opencv:
        return deploy, net
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    cvnet = cv2.dnn.readNetFromCaffe(str(prefix) + ".prototxt", str(prefix) + ".caffemodel")
    cvnet.setInput(x, "x")
    names = sorted(theirs)
    # OpenCV names an output by the layer that writes it (its first top)
    writer = {lp.top[0]: lp.name for lp in deploy.layer if lp.top}
    cv_outs = cvnet.forward([writer.get(outputs[n], outputs[n]) for n in names])
    for name, value in zip(names, cv_outs):
        assert_close(np.asarray(value).reshape(theirs[name].shape), theirs[name],
                     "%s: %s (OpenCV)" % (key, name), rtol=1e-4)
    return deploy, net


def test_conv_bn_relu_pool_gemm_softmax_chain(tmp_path):
    deploy, net = convert_and_compare(chain_model(), tmp_path, "chain")
    types = [layer.type for layer in deploy.layer]
    assert types.count("BatchNorm") == 2 and types.count("Scale") == 2
    assert "InnerProduct" in types and "Dropout" not in types and "Power" in types
    # floor-mode pooling of 16 -> 8 (Caffe rounds up to 9): the last row/column is sliced off
    assert net.blobs["pool1"].shape == (1, 8, 8, 8)


def test_residual_block_and_constant_arithmetic(tmp_path):
    deploy, _ = convert_and_compare(residual_model(), tmp_path, "residual")
    types = [layer.type for layer in deploy.layer]
    assert "Eltwise" in types and "ReLU6" in types and "Slice" in types
    layers = {layer.name: layer for layer in deploy.layer}
    # Mul then Add of per-channel constants: one Scale with a bias; MatMul + Add: one
    # InnerProduct with a bias (as Caffe writes them)
    assert layers["channel_scale"].scale_param.bias_term and "channel_shift" not in layers
    assert layers["fc_matmul"].inner_product_param.bias_term and "fc_bias" not in layers
    assert layers["head_b"].type == "Scale"  # a vector offset: a Scale by ones with a bias


def test_the_net_params_to_caffe_returns_build_the_net_without_files(tmp_path, caplog):
    # Net(deploy, weights, TEST) of the two NetParameters, as of the two files: onnxruntime's
    # outputs, BatchNorm folded into the convolutions the same; the message is not changed
    model = chain_model()
    x = RNG.uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)
    theirs = run_ort(model, {"x": x})
    prefix = str(tmp_path / "chain")
    deploy, weights, outputs = caffe_onnx.to_caffe(model, prefix)
    written = weights.SerializeToString()
    files = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST,
                      keep_intermediates=False)
    def chains(net):
        return [(c.producer, list(c.absorbed)) for c in net.folding.chains]
    assert chains(files)
    for net in (caffe.Net(deploy, weights, caffe.TEST, keep_intermediates=False),
                caffe.Net(deploy, caffe.TEST, weights=weights, keep_intermediates=False)):
        assert chains(net) == chains(files)
        net.forward(x=x)
        for name, value in theirs.items():
            assert_close(net.blobs[outputs[name]].data, value, "in memory: %s" % name)
    assert weights.SerializeToString() == written
    # weights of legacy (V1) layers are upgraded as a .caffemodel's are, on a copy; a layer
    # the message has nothing for is named as for a file
    legacy = caffe.proto.caffe_pb2.NetParameter()
    for layer in weights.layer:
        if layer.name != "fc" and layer.blobs:
            legacy.layers.add(name=layer.name).blobs.extend(layer.blobs)
    before = legacy.SerializeToString()
    caplog.clear()
    net = caffe.Net(deploy, legacy, caffe.TEST, fold=False)
    assert legacy.SerializeToString() == before
    assert "<NetParameter>: no weights for layer 'fc' of net" in caplog.text
    conv = [lp for lp in weights.layer if lp.name == "conv1"][0]
    np.testing.assert_array_equal(net.params["conv1"][0].data.ravel(), conv.blobs[0].data)
    with pytest.raises(CaffeError, match=r"<NetParameter>: the weights file holds no layers"):
        caffe.Net(deploy, caffe.proto.caffe_pb2.NetParameter(), caffe.TEST)


def other_ops_model():
    """ConvTranspose (group, stride, pads), ceil-mode MaxPool, PRelu, Elu, Tanh, Softplus,
    Concat, Max, Sub of tensors, a channel-wise Div, LRN, Squeeze."""
    g = Graph((1, 4, 6, 6))
    y = g.op("ConvTranspose", ["x", g.w(4, 3, 3, 3), g.w(6, scale=0.1)], "deconv",
             kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], group=2)
    y = g.op("MaxPool", [y], "pool", kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)
    a = g.op("PRelu", [y, g.w(6, 1, 1, scale=0.3)], "prelu")
    b = g.op("Elu", [y], "elu", alpha=0.5)
    c = g.op("Tanh", [g.op("Softplus", [y], "softplus")], "tanh")
    y = g.op("Concat", [g.op("Max", [a, b], "max"), g.op("Sub", [b, c], "sub")], "cat",
             axis=1)
    y = g.op("Div", [y, g.w(1, 12, 1, 1, positive=True)], "div")
    y = g.op("LRN", [y], "lrn", size=3, alpha=0.3, beta=0.7)  # OpenCV reads no k (bias)
    y = g.op("GlobalMaxPool", [y], "gmp")
    g.op("Squeeze", [y, g.w(2)], "squeeze")
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.array([2, 3], np.int64), g.inits[-1].name))
    return g.model(["squeeze"])


def test_deconvolution_activations_and_lrn(tmp_path):
    deploy, net = convert_and_compare(other_ops_model(), tmp_path, "other")
    types = [layer.type for layer in deploy.layer]
    assert {"Deconvolution", "PReLU", "ELU", "BNLL", "TanH", "LRN", "Reshape"} <= set(types)
    assert net.blobs["pool"].shape == (1, 6, 6, 6)  # 11 -> 6, rounded up in both


def test_one_shared_prelu_slope_loads_back(tmp_path):
    # PyTorch's nn.PReLU() exports one slope of shape (1,): Caffe's channel-shared slope is a
    # blob of no axes, which the written weights must hold for the prototxt to load them
    g = Graph((1, 3, 4, 4))
    g.op("PRelu", [g.conv("x", 3, 4, 3, "conv", pads=[1, 1, 1, 1]), g.w(1, scale=0.3)],
         "prelu")
    # (OpenCV's importer cannot make a blob of no axes: BVLC's own files with one are refused
    # there the same way)
    deploy, net = convert_and_compare(g.model(["prelu"]), tmp_path, "prelu_shared",
                                      opencv=False)
    layer = [lp for lp in deploy.layer if lp.type == "PReLU"][0]
    assert layer.prelu_param.channel_shared and net.params[layer.name][0].shape == ()


def test_unsupported_op_names_the_node(tmp_path):
    g = Graph((1, 3, 4, 4))
    # (SpaceToDepth was the example until it converted: Reshape, Permute, Reshape)
    g.op("Floor", ["x"], "floor")
    with pytest.raises(CaffeError, match="ONNX node 'floor' \\(op Floor\\): this op has "
                                         "no Caffe equivalent"):
        caffe_onnx.to_caffe(g.model(["floor"]), str(tmp_path / "t"))


def test_average_pool_excluding_padding(tmp_path):
    # count_include_pad 0 with pads: Caffe's AVE pooling, then its divisors turned into ONNX's
    # by a fixed Scale (it was refused: 'its average divides border windows by ...')
    g = Graph((1, 3, 6, 6))
    g.op("AveragePool", ["x"], "avg", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    deploy, _ = convert_and_compare(g.model(["avg"]), tmp_path, "avg")
    assert [lp.type for lp in deploy.layer][-1] == "Scale"


def large_weight_model(ir_version):
    """A MatMul by a weight of 16 x 512 (more elements than any shape computation reads), then
    a Reshape to a target that shape inference works out from a Shape (data propagation)."""
    g = Graph((1, 4, 16))
    y = g.op("MatMul", ["x", g.w(16, 512)], "fc")
    batch = g.op("Slice", [g.op("Shape", [y], "shape"), g.w(1), g.w(1)], "batch")
    g.inits[-2].CopyFrom(numpy_helper.from_array(np.array([0], np.int64), g.inits[-2].name))
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.array([1], np.int64), g.inits[-1].name))
    target = g.op("Concat", [batch, g.w(2)], "target", axis=0)
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.array([64, -1], np.int64),
                                                 g.inits[-1].name))
    g.op("Relu", [g.op("Reshape", [y, target], "reshape")], "out")
    m = g.model(["out"])
    m.ir_version = ir_version
    if ir_version < 4:  # initializers were graph inputs too
        m.graph.input.extend(helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                             for t in m.graph.initializer)
    return m


@pytest.mark.parametrize("ir_version", [3, 8])
def test_shape_inference_is_not_handed_the_large_weights(tmp_path, monkeypatch, ir_version):
    # the model ONNX's shape inference returns for the whole model, with data propagation,
    # without copying the weights to it and back (most of the import of a net of 200 MB)
    import onnx
    from pycaffe_lite.onnx import import_
    model = large_weight_model(ir_version)
    weight = numpy_helper.to_array(model.graph.initializer[0])
    assert weight.size == 16 * 512  # above import_.LARGE_INITIALIZER
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 1
    whole = onnx.shape_inference.infer_shapes(model, data_prop=True)
    assert [d.dim_value for d in [v for v in whole.graph.value_info if v.name == "reshape"][0]
            .type.tensor_type.shape.dim] == [1, 64, 32]
    given = []
    infer = onnx.shape_inference.infer_shapes
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes",
                        lambda m, **kw: given.append(m.ByteSize()) or infer(m, **kw))
    assert import_._infer_shapes(onnx, model) == whole
    assert given and max(given) < weight.nbytes
    monkeypatch.undo()
    convert_and_compare(large_weight_model(ir_version), tmp_path, "large", opencv=False)


ROUND_TRIP = """
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 1 dim: 3 dim: 13 dim: 13 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 8 kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 pad: 1 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 group: 2 } }
layer { name: "sum" type: "Eltwise" bottom: "conv2" bottom: "pool1" top: "sum" }
layer { name: "pool2" type: "Pooling" bottom: "sum" top: "pool2"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool2" top: "fc"
        inner_product_param { num_output: 6 } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""


def test_caffe_onnx_caffe_round_trip(tmp_path):
    from helpers.onnx_runtime import fill_random, net_from_text
    net = net_from_text(ROUND_TRIP)
    fill_random(net, 9)
    x = RNG.uniform(-1, 1, (1, 3, 13, 13)).astype(np.float32)
    ours = net.forward(data=x)["prob"].copy()
    model, _ = caffe_onnx.export(net, str(tmp_path / "rt.onnx"))
    deploy, weights, outputs = caffe_onnx.to_caffe(str(tmp_path / "rt.onnx"),
                                                   str(tmp_path / "rt"))
    back = caffe.Net(str(tmp_path / "rt.prototxt"), str(tmp_path / "rt.caffemodel"), caffe.TEST)
    assert_close(ours, back.forward(data=x)[outputs["prob"]], "round trip")
    assert [lp.type for lp in deploy.layer].count("Pooling") == 2
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    cvnet = cv2.dnn.readNetFromCaffe(str(tmp_path / "rt.prototxt"),
                                     str(tmp_path / "rt.caffemodel"))
    cvnet.setInput(x)
    assert_close(ours, cvnet.forward(outputs["prob"]).reshape(ours.shape), "OpenCV", rtol=1e-4)
