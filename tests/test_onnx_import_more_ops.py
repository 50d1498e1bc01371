"""ONNX ops imported and checked against onnxruntime on the same inputs: DepthToSpace (DCR
and CRD) and SpaceToDepth (Reshape, Permute, Reshape: values moved, so bit for bit), Gelu
(the GELU layer, or tanh's decomposition), ReduceLogSum (ReduceSum, Log), ThresholdedRelu."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402


def run_both(model, x, folder):
    """onnxruntime's output for input ``x``, and the converted net run on it: (the deploy
    NetParameter, the net, the output blob names, onnxruntime's output)."""
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    prefix = str(folder)
    deploy, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    return deploy, net, outputs, want


@pytest.mark.parametrize("op,mode,shape", [("DepthToSpace", "DCR", (2, 12, 3, 4)),
                                           ("DepthToSpace", "CRD", (1, 8, 2, 3)),
                                           ("SpaceToDepth", None, (2, 3, 4, 6))])
def test_blocks_moved_as_onnxruntime_moves_them(tmp_path, op, mode, shape):
    # they were refused: 'this op has no Caffe equivalent'
    kw = dict(blocksize=2) if mode is None else dict(blocksize=2, mode=mode)
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], name="d2s", **kw)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = np.random.default_rng(4).normal(size=shape).astype(np.float32)
    _, net, outputs, want = run_both(model, x, tmp_path / "d2s")
    np.testing.assert_array_equal(net.blobs[outputs["y"]].data, want)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_against_onnxruntime(tmp_path, approximate):
    # it was refused: 'this op has no Caffe equivalent'. none: the GELU layer's erf fit (1.2e-7
    # relative): within 1e-6. tanh: the gate 0.5 (1 + tanh(.)) cancels where tanh is near -1,
    # so its rounding is absolute, a few 2^-24, times |x|: both engines are within 4 2^-24 |x|
    # of the float64 formula (checked here for onnxruntime too), so within 8 2^-24 |x| of each
    # other
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], name="gelu", approximate=approximate)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 200])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    x = np.random.default_rng(5).uniform(-6, 6, (3, 200)).astype(np.float32)
    deploy, net, outputs, want = run_both(model, x, tmp_path / "gelu")
    got = net.blobs[outputs["y"]].data
    if approximate == "none":
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    else:
        x64 = x.astype(np.float64)
        exact = 0.5 * x64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (x64 + 0.044715 * x64 ** 3)))
        step = 2.0 ** -24 * np.abs(x64)
        assert np.all(np.abs(want - exact) <= 4 * step)
        assert np.all(np.abs(got - exact) <= 4 * step)
        assert np.all(np.abs(got - want) <= 8 * step)
    assert ("GELU" in [lp.type for lp in deploy.layer]) == (approximate == "none")


@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 1)])
def test_reduce_log_sum_against_onnxruntime(tmp_path, axes, keepdims):
    # it was refused: 'this op has no Caffe equivalent'. A float32 sum in another order, then
    # log: within 1e-6 relative
    graph = helper.make_graph(
        [helper.make_node("ReduceLogSum", ["x", "axes"], ["y"], name="rls", keepdims=keepdims)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(np.array(axes, np.int64), "axes")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = np.random.default_rng(6).uniform(0.1, 3, (3, 4, 5)).astype(np.float32)
    _, net, outputs, want = run_both(model, x, tmp_path / "rls")
    got = net.blobs[outputs["y"]].data
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("alpha", [1.0, 0.0, 0.25])
def test_thresholded_relu_against_onnxruntime(tmp_path, alpha):
    # it was refused: 'this op has no Caffe equivalent'. relu(x) * [x > alpha]: exact, values
    # equal to alpha (0 in ONNX: the comparison is strict) and infinities included
    graph = helper.make_graph(
        [helper.make_node("ThresholdedRelu", ["x"], ["y"], name="trelu", alpha=alpha)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 50])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    x = np.random.default_rng(7).uniform(-3, 3, (4, 50)).astype(np.float32)
    x.reshape(-1)[:5] = [alpha, np.inf, -np.inf, np.nextafter(np.float32(alpha), np.inf), 0.0]
    _, net, outputs, want = run_both(model, x, tmp_path / "trelu")
    np.testing.assert_array_equal(net.blobs[outputs["y"]].data, want)


def test_thresholded_relu_of_a_negative_alpha_is_refused():
    from pycaffe_lite.errors import CaffeError
    graph = helper.make_graph(
        [helper.make_node("ThresholdedRelu", ["x"], ["y"], name="trelu", alpha=-0.5)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    with pytest.raises(CaffeError, match=r"ONNX node 'trelu' \(op ThresholdedRelu\): alpha "
                                         r"-0.5 < 0"):
        caffe_onnx.to_caffe(model, None)
