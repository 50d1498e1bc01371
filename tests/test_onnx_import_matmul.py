"""ONNX MatMul of two computed tensors imported (products laid out and summed over K), against
onnxruntime on the same inputs. The sums run in another order than onnxruntime's matrix
product, so each output may differ by the rounding of a K-term float32 sum: at most about
``K * 2^-24 * sum_k |a_ik b_kj|``; the test allows twice that bound, per element."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402


@pytest.mark.parametrize("a_shape,b_shape", [
    ((5, 7), (7, 3)),              # matrices
    ((2, 3, 6), (2, 6, 4)),        # a batch
    ((3, 1, 2, 5), (1, 4, 5, 2)),  # batches that broadcast both ways
    ((6,), (2, 6, 3)),             # a 1-D left operand
    ((2, 4, 5), (5,)),             # a 1-D right operand
    ((9,), (9,)),                  # a dot product: a scalar
])
def test_matmul_of_two_tensors_against_onnxruntime(tmp_path, a_shape, b_shape):
    # it was refused: 'only a MatMul by a constant 2-D matrix converts (to InnerProduct)'
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    a = rng.normal(size=a_shape).astype(np.float32)
    b = rng.normal(size=b_shape).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], "g",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, list(a_shape)),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, list(b_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"a": a, "b": b})[0]
    prefix = str(tmp_path / "mm")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(a=a, b=b)
    got = net.blobs[outputs["y"]].data
    assert got.shape == want.shape
    k = a_shape[-1]
    magnitude = np.matmul(np.abs(a.astype(np.float64)), np.abs(b.astype(np.float64)))
    bound = 2 * k * 2.0 ** -24 * magnitude
    assert np.all(np.abs(got - want.astype(np.float64)) <= bound)
    # and the exact product (float64) is as close to ours as to onnxruntime's
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert np.all(np.abs(got - exact) <= bound)
