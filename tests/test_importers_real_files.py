"""Importing models as their publishers and exporters write them: PyTorch's ONNX exporter
(``torch.onnx.export(..., dynamo=False)``) and the published Darknet ``.cfg`` files. Results are
compared with onnxruntime, OpenCV's Darknet importer or a NumPy reference; what does not
convert must be an error naming the node (ONNX) or the file, line and section (Darknet)."""

import io

import numpy as np
import pytest

from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

onnx = pytest.importorskip("onnx", reason="the onnx extra")
ort = pytest.importorskip("onnxruntime", reason="onnxruntime is a test extra")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


# -- ONNX: If nodes ------------------------------------------------------------------------
def _if_model(branch_input, initializers=()):
    """``y = If(True) then Relu(v) else Neg(v)``, ``v`` a value of the enclosing graph; the
    graph's output is ``x * y``."""
    value = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, None)  # noqa: E731
    then_g = helper.make_graph([helper.make_node("Relu", [branch_input], ["t"])], "then", [],
                               [value("t")])
    else_g = helper.make_graph([helper.make_node("Neg", [branch_input], ["e"])], "else", [],
                               [value("e")])
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
             helper.make_node("Constant", [], ["c"], name="cond",
                              value=helper.make_tensor("c", TensorProto.BOOL, [], [True])),
             helper.make_node("If", ["c"], ["y"], name="branch", then_branch=then_g,
                              else_branch=else_g),
             helper.make_node("Mul", ["s", "y"], ["out"], name="mul")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 2, 2])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 3, 2, 2])],
        list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_if_whose_branches_read_constants_of_the_enclosing_graph_folds(tmp_path):
    """An If on a constant condition whose branch reads an initializer of the enclosing graph
    (the form PyTorch's exporter gives data-dependent Python branches) is folded to that
    branch's value; the folding used to stop with onnx's 'Unable to find input' RuntimeError."""
    import pycaffe_lite as caffe
    k = np.array([-1.0, 0.5, 2.0], np.float32).reshape(1, 3, 1, 1)
    model = _if_model("k", [numpy_helper.from_array(k, "k")])
    x = np.random.default_rng(0).normal(size=(1, 3, 2, 2)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    np.testing.assert_allclose(expected, 1 / (1 + np.exp(-x)) * np.maximum(k, 0), rtol=1e-6)
    _, _, outs = caffe_onnx.to_caffe(model, tmp_path / "m")
    net = caffe.Net(str(tmp_path / "m.prototxt"), str(tmp_path / "m.caffemodel"), caffe.TEST)
    net.blobs["x"].data[...] = x
    net.forward()
    np.testing.assert_allclose(net.blobs[outs["out"]].data, expected, rtol=1e-5, atol=1e-7)


def test_if_whose_branch_reads_a_tensor_names_the_node():
    """A branch reading a computed tensor cannot fold: the error names the If node (it was a
    bare RuntimeError from onnx's reference evaluator)."""
    with pytest.raises(CaffeError, match=r"ONNX node 'branch' \(op If\)"):
        caffe_onnx.to_caffe(_if_model("s"), None)


@pytest.mark.parametrize("opset", [11, 17])
def test_torch_local_response_norm_names_the_node_it_stops_at(opset):
    """``F.local_response_norm`` as torch 2's exporter writes it (Pad, AveragePool and an If
    on the input's rank whose branches read the pooled tensor): a clear error naming the first
    node that does not convert, not a RuntimeError from folding the If."""
    torch = pytest.importorskip("torch")
    F = torch.nn.functional

    class LRN(torch.nn.Module):
        def forward(self, x):
            return F.local_response_norm(x, 3)

    buf = io.BytesIO()
    torch.onnx.export(LRN().eval(), (torch.zeros(1, 4, 3, 3),), buf, dynamo=False,
                      opset_version=opset, input_names=["x"], output_names=["y"])
    model = onnx.load_from_string(buf.getvalue())
    assert "If" in {n.op_type for n in model.graph.node}
    with pytest.raises(CaffeError, match=r"ONNX node '[^']+' \(op (Pad|If|Div)\)"):
        caffe_onnx.to_caffe(model, None)
