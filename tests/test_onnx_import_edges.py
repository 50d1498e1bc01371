"""ONNX import of the less common forms of ops that convert: non-square geometry, default
axes, broadcasting slopes and constants, constant operands, degenerate variadics, Pads that
are no pool's pad, training-mode Dropout and shapes known only after folding. Each
accepted model gives onnxruntime's numbers from a prototxt that loads back; each refused one is
an error naming the node and its op."""

import numpy as np
import pytest

from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError
from test_onnx_import import Graph, convert_and_compare  # skips where onnx is absent
from onnx import numpy_helper


def _const(g, value):
    name = g.w(1)
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.asarray(value), name))
    return name


def test_non_square_convolution_geometry(tmp_path):
    # Inception's 1x3 / 3x1 convolutions: Caffe takes kernel_h/kernel_w (and stride_h/w,
    # pad_h/w) instead of the repeated fields, never both
    g = Graph((1, 3, 7, 8))
    y = g.op("Conv", ["x", g.w(4, 3, 1, 3), g.w(4, scale=0.1)], "conv13", kernel_shape=[1, 3],
             strides=[1, 2], pads=[0, 1, 0, 1])
    y = g.op("Conv", [y, g.w(5, 4, 3, 1)], "conv31", kernel_shape=[3, 1], strides=[2, 2],
             pads=[1, 0, 1, 0])
    g.op("ConvTranspose", [y, g.w(5, 2, 1, 3), g.w(2, scale=0.1)], "deconv",
         kernel_shape=[1, 3], strides=[1, 2], pads=[0, 1, 0, 1])
    deploy, net = convert_and_compare(g.model(["deconv"]), tmp_path, "nonsquare")
    p = {lp.name: lp.convolution_param for lp in deploy.layer}
    assert (p["conv13"].kernel_h, p["conv13"].kernel_w) == (1, 3)
    assert not p["conv13"].kernel_size and not p["conv13"].stride and not p["conv13"].pad
    assert (p["conv31"].kernel_h, p["conv31"].kernel_w, list(p["conv31"].stride)) == (3, 1, [2])
    assert (p["deconv"].stride_h, p["deconv"].stride_w, p["deconv"].pad_w) == (1, 2, 1)
    assert net.blobs["deconv"].shape == (1, 2, 4, 3)


@pytest.mark.parametrize("opset", [11, 13])
def test_softmax_default_axis(tmp_path, opset):
    # no axis attribute: ONNX's default is 1 before opset 13 (the input flattened to 2-D
    # there), -1 from 13 on; a (N, 6, 1, 1) input makes the two differ
    g = Graph((1, 6, 1, 1))
    g.op("Softmax", ["x"], "prob")
    deploy, net = convert_and_compare(g.model(["prob"], opset=opset), tmp_path, "sm%d" % opset)
    assert deploy.layer[-1].softmax_param.axis == (1 if opset < 13 else 3)


def test_softmax_default_axis_over_flattened_axes_is_refused():
    g = Graph((1, 3, 2, 2))
    g.op("Softmax", ["x"], "prob")
    with pytest.raises(CaffeError, match="ONNX node 'prob' \\(op Softmax\\): a Softmax before "
                                         "opset 13 over axes 1\\.\\."):
        caffe_onnx.to_caffe(g.model(["prob"], opset=11), None)


def test_prelu_slope_broadcast_from_the_last_axis(tmp_path):
    # (1, C, 1, 1) and (C, 1) on a 3-D input are per channel
    g = Graph((1, 3, 4, 4))
    g.op("PRelu", ["x", g.w(1, 3, 1, 1, scale=0.5)], "prelu")
    convert_and_compare(g.model(["prelu"]), tmp_path, "prelu4")
    g = Graph((1, 3, 5))
    g.op("PRelu", ["x", g.w(3, 1, scale=0.5)], "prelu")
    convert_and_compare(g.model(["prelu"]), tmp_path, "prelu3")
    # a (C,) slope on N, C, H, W applies along W (here W == C): not Caffe's per channel, it
    # was refused; it converts as relu(x) + (-slope) relu(-x), the slope along W
    g = Graph((1, 3, 4, 3))
    g.op("PRelu", ["x", g.w(3, scale=0.5)], "prelu")
    deploy, _ = convert_and_compare(g.model(["prelu"]), tmp_path, "prelu_w")
    assert "PReLU" not in [lp.type for lp in deploy.layer]


def test_constant_operands_of_concat_max_and_sum(tmp_path):
    # torch.cat([x, torch.ones(..)]) and torch.maximum(x, const): the constant becomes a
    # Parameter layer (not learnt) that the Concat / Eltwise reads
    from onnx import helper
    g = Graph((1, 2, 3, 3))
    g.nodes.append(helper.make_node("Constant", [], ["ones"], name="ones",
                                    value=numpy_helper.from_array(
                                        np.ones((1, 1, 3, 3), np.float32))))
    y = g.op("Concat", ["x", "ones"], "cat", axis=1)
    y = g.op("Max", [y, g.w(1, 3, 3, 3, scale=0.5)], "max")
    g.op("Sum", [y, g.w(1, 3, 3, 3), "ones_3"], "sum")
    g.nodes.insert(-1, helper.make_node("Concat", ["ones", "ones", "ones"], ["ones_3"],
                                        name="ones_3", axis=1))  # folded: a constant too
    # (BVLC's Parameter layer is one OpenCV's importer does not have)
    deploy, net = convert_and_compare(g.model(["sum"]), tmp_path, "const_operands",
                                      opencv=False)
    params = [lp for lp in deploy.layer if lp.type == "Parameter"]
    assert [tuple(lp.parameter_param.shape.dim) for lp in params] == \
        [(1, 1, 3, 3), (1, 3, 3, 3), (1, 3, 3, 3), (1, 3, 3, 3)]
    assert all(lp.param[0].lr_mult == 0 for lp in params)
    assert np.all(net.blobs["ones_3"].data == 1)


@pytest.mark.parametrize("op", ["Sum", "Max"])
def test_one_input_sum_or_max_is_the_identity(tmp_path, op):
    g = Graph((1, 2, 3, 3))
    y = g.op(op, [g.op("Relu", ["x"], "relu")], "one")
    g.op("Tanh", [y], "tanh")
    deploy, net = convert_and_compare(g.model(["tanh", "one"]), tmp_path, "one_" + op)
    assert [lp.type for lp in deploy.layer] == ["Input", "ReLU", "TanH"]


def _padded(pads, readers, opset=17, **pad_attrs):
    g = Graph((1, 2, 6, 6))
    inputs = ["x"] if opset < 11 else ["x", _const(g, np.array(pads, np.int64))]
    if opset < 11:
        pad_attrs["pads"] = pads
    g.op("Pad", inputs, "pad", **pad_attrs)
    outs = []
    for reader in readers:
        if reader == "avg":
            outs.append(g.op("AveragePool", ["pad"], "avg%d" % len(outs), kernel_shape=[3, 3],
                             strides=[2, 2]))
        elif reader == "conv":
            outs.append(g.conv("pad", 2, 2, 3, "conv%d" % len(outs)))
        else:
            outs.append("pad")
    return g.model(outs, opset=opset)


def test_zero_pad_read_by_an_average_pool(tmp_path):
    g = Graph((1, 2, 6, 6))
    g.op("Pad", ["x", _const(g, np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64))], "pad")
    g.op("AveragePool", ["pad"], "avg", kernel_shape=[3, 3])
    deploy, _ = convert_and_compare(g.model(["avg"]), tmp_path, "pad_avg")
    assert [lp.pooling_param.pad for lp in deploy.layer if lp.type == "Pooling"] == [1]


@pytest.mark.parametrize("pads, readers, opset, attrs", [
    # read by another node too, by a convolution, as a graph output: the padded blob itself
    ([0, 0, 1, 1, 0, 0, 1, 1], ["avg", "conv"], 17, {}),
    ([0, 0, 1, 1, 0, 0, 1, 1], ["conv", "avg"], 17, {}),
    ([0, 0, 1, 1, 0, 0, 1, 1], ["conv"], 17, {}),
    ([0, 0, 1, 1, 0, 0, 1, 1], ["output"], 17, {}),
    # cropping; padded unevenly (the pool's pad is the same on both sides)
    ([0, 0, -1, -1, 0, 0, -1, -1], ["avg"], 17, {}),
    ([0, 0, 1, 0, 0, 0, 2, 1], ["avg"], 17, {}),
    # before opset 11 the value is an attribute
    ([0, 0, 1, 1, 0, 0, 1, 1], ["avg"], 10, {"value": 1.5}),
])
def test_pad_that_is_no_pool_pad_is_built_of_layers(tmp_path, pads, readers, opset, attrs):
    # these were refused ('only a zero Pad of the two spatial axes converts (as the pad of
    # an AveragePool that alone reads it)'); the pad is now built by DummyData, Slice and
    # Concat, and the pool pools the padded blob
    deploy, _ = convert_and_compare(_padded(pads, readers, opset, **attrs), tmp_path, "pad",
                                    opencv=False)
    assert {"Concat", "Slice"} & {lp.type for lp in deploy.layer}
    assert not any(lp.pooling_param.pad for lp in deploy.layer if lp.type == "Pooling")


@pytest.mark.parametrize("training, ratio, opset, converts", [
    (None, None, 17, True), (False, 0.5, 17, True), (True, 0.0, 17, True),
    (True, 0.5, 17, False), (True, None, 13, False)])
def test_dropout_in_training_mode_is_refused(tmp_path, training, ratio, opset, converts):
    # torch writes training_mode = True for a model exported in train() mode: onnxruntime
    # then drops values at random (none when the ratio is 0)
    g = Graph((1, 2, 4, 4))
    inputs = ["x", "" if ratio is None else _const(g, np.array(ratio, np.float32))]
    if training is not None:
        inputs.append(_const(g, np.array(training)))
    g.op("Relu", [g.op("Dropout", inputs, "drop")], "relu")
    model = g.model(["relu"], opset=opset)
    if converts:
        deploy, _ = convert_and_compare(model, tmp_path, "dropout")
        assert [lp.type for lp in deploy.layer] == ["Input", "ReLU"]
    else:
        with pytest.raises(CaffeError, match="ONNX node 'drop' \\(op Dropout\\): "
                                             "training-mode dropout"):
            caffe_onnx.to_caffe(model, None)


def test_dropout_before_opset_7_is_in_training_mode_unless_is_test():
    for attrs, refused in [({}, True), ({"is_test": 0}, True), ({"is_test": 1}, False)]:
        g = Graph((1, 2, 4, 4))
        g.op("Relu", [g.op("Dropout", ["x"], "drop", **attrs)], "relu")
        if refused:
            with pytest.raises(CaffeError, match="'drop' \\(op Dropout\\): training-mode"):
                caffe_onnx.to_caffe(g.model(["relu"], opset=6), None)
        else:
            deploy, _, _ = caffe_onnx.to_caffe(g.model(["relu"], opset=6), None)
            assert [lp.type for lp in deploy.layer] == ["Input", "ReLU"]


@pytest.mark.parametrize("op, swap", [("Add", False), ("Mul", True), ("Sub", False)])
def test_constant_with_more_axes_than_the_tensor_is_refused(op, swap):
    # x: (N, 4) + c: (1, 1, 1) is (1, N, 4) in ONNX: a Power layer would keep (N, 4)
    g = Graph((2, 4))
    c = _const(g, np.full((1, 1, 1), 0.5, np.float32))
    y = g.op(op, [c, "x"] if swap else ["x", c], "arith")
    g.op("Concat", [y, y], "cat", axis=1)
    with pytest.raises(CaffeError, match="ONNX node 'arith' \\(op %s\\): a constant of shape "
                                         "\\(1, 1, 1\\) gives the output more axes" % op):
        caffe_onnx.to_caffe(g.model(["cat"]), None)


def _flatten_by_shape_model(opset):
    """PyTorch's x.view(x.size(0), -1) as its exporter writes it with a dynamic batch: Shape,
    Gather of a scalar index, Unsqueeze (its axes an attribute before opset 13), Concat with
    -1, Reshape."""
    g = Graph((1, 3, 6, 6))
    y = g.op("Relu", [g.conv("x", 3, 4, 3, "conv")], "relu")
    batch = g.op("Gather", [g.op("Shape", [y], "shape"), _const(g, np.array(0, np.int64))],
                 "batch", axis=0)
    if opset < 13:
        batch = g.op("Unsqueeze", [batch], "batch1", axes=[0])
    else:
        batch = g.op("Unsqueeze", [batch, _const(g, np.array([0], np.int64))], "batch1")
    target = g.op("Concat", [batch, _const(g, np.array([-1], np.int64))], "target", axis=0)
    y = g.op("Reshape", [y, target], "flat")
    y = g.op("Gemm", [y, g.w(5, 64), g.w(5, scale=0.1)], "fc", transB=1)
    g.op("Softmax", [y], "prob", axis=-1)  # needs the (folded) shape of its input
    return g.model(["prob"], opset=opset)


@pytest.mark.parametrize("opset", [11, 13])
def test_flatten_by_the_shape_of_a_dynamic_batch(tmp_path, opset):
    deploy, net = convert_and_compare(_flatten_by_shape_model(opset), tmp_path, "view")
    flat = [lp for lp in deploy.layer if lp.type == "Reshape"][0]
    assert list(flat.reshape_param.shape.dim) == [0, 64]  # the batch axis copied
    net.blobs["x"].reshape(3, 3, 6, 6)  # and the net runs at another batch size
    net.reshape()
    assert net.blobs["prob"].shape == (3, 5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore:Constant folding:UserWarning")
def test_torch_exports_with_a_dynamic_batch(tmp_path):
    # x.view(x.size(0), -1) and F.pad's computed pads: known only once folded
    torch = pytest.importorskip("torch")
    import io

    import onnx

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)
            self.fc = torch.nn.Linear(4 * 4 * 4 * 2, 5)

        def forward(self, x):
            y = torch.relu(self.conv(x))
            y = torch.nn.functional.pad(y, (1, 1, 1, 1))
            y = torch.nn.functional.avg_pool2d(y, 3, 1)
            y = torch.cat([y, torch.sigmoid(y)], 1)
            return torch.softmax(self.fc(y.view(y.size(0), -1)), -1)

    torch.manual_seed(0)
    for opset in (11, 13, 17):
        buf = io.BytesIO()
        torch.onnx.export(Model().eval(), (torch.zeros(1, 3, 6, 6),), buf, dynamo=False,
                          opset_version=opset, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "N"}, "y": {0: "N"}})
        model = onnx.load_from_string(buf.getvalue())
        deploy, _ = convert_and_compare(model, tmp_path, "torch%d" % opset)
        assert [lp.pooling_param.pad for lp in deploy.layer if lp.type == "Pooling"] == [1]
