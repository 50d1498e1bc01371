"""ONNX DepthToSpace (DCR and CRD) and SpaceToDepth imported (Reshape, Permute, Reshape):
values moved, so onnxruntime's outputs bit for bit."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402


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
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    prefix = str(tmp_path / "d2s")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    np.testing.assert_array_equal(net.blobs[outputs["y"]].data, want)
