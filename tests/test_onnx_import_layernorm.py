"""ONNX LayerNormalization imported (Reduction, Bias, Power, Scale), against onnxruntime on
the same inputs: Y, and the Mean and InvStdDev outputs."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


@pytest.mark.parametrize("axis,bias", [(-1, True), (1, False), (0, True)])
def test_layer_normalization_against_onnxruntime(tmp_path, axis, bias):
    # it was refused: 'this op has no Caffe equivalent'
    rng = np.random.default_rng(3 + axis)
    x = (rng.normal(size=(2, 3, 4, 6)) * 3 + 1).astype(np.float32)
    tail = x.shape[axis:]
    inits = [numpy_helper.from_array(rng.normal(size=tail).astype(np.float32), "w")]
    inputs = ["x", "w"]
    if bias:
        inits.append(numpy_helper.from_array(rng.normal(size=tail).astype(np.float32), "b"))
        inputs.append("b")
    node = helper.make_node("LayerNormalization", inputs, ["y", "mean", "inv_std"], name="ln",
                            axis=axis, epsilon=1e-3)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
         for n in ("y", "mean", "inv_std")], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})
    prefix = str(tmp_path / "ln")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    for name, w in zip(("y", "mean", "inv_std"), want):
        got = net.blobs[outputs[name]].data
        assert got.shape == w.shape, (name, got.shape, w.shape)
        # float32 sums over up to 144 values in another order, and (var + eps)^-0.5 where
        # onnxruntime takes 1 / sqrt: a few float32 steps
        np.testing.assert_allclose(got, w, rtol=1e-5, atol=1e-5, err_msg=name)
