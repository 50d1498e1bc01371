"""ONNX MatMul of two computed tensors (products laid out and summed over K) and Pow by a
constant of several exponents (one Power per run of equal exponents) imported, against
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


def _pow_model(x_shape, y):
    graph = helper.make_graph(
        [helper.make_node("Pow", ["x", "y"], ["z"], name="pow")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
        initializer=[onnx.numpy_helper.from_array(y, "y")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("y", [np.array([[2.0], [3.0], [0.5]], np.float32),
                               np.array([1, 2, 2, -1], np.int64)])
def test_pow_by_a_constant_of_several_values_against_onnxruntime(tmp_path, y):
    # it was refused: 'an exponent of several values ... has no Caffe equivalent'. Each value
    # is raised by a Power layer (pow of float32, as onnxruntime's): the same to 2 units in
    # the last place (an implementation's pow may differ by one), negative bases with
    # fractional exponents NaN in both
    x = np.random.default_rng(1).uniform(-3, 3, (2, 3, 4)).astype(np.float32)
    model = _pow_model(x.shape, y)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    prefix = str(tmp_path / "pow")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    with np.errstate(invalid="ignore", divide="ignore"):
        net.forward(x=x)
    got = net.blobs[outputs["z"]].data
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.all(np.abs(got[ok] - want[ok]) <= 2 * np.spacing(np.abs(want[ok])))
    assert np.isnan(want).any() == bool(y.dtype == np.float32)


def test_pow_of_too_many_runs_is_refused():
    from pycaffe_lite.errors import CaffeError
    y = np.arange(600, dtype=np.float32).reshape(1, 600) % 7
    with pytest.raises(CaffeError, match=r"ONNX node 'pow' \(op Pow\): an exponent of 1200 runs "
                                         r"of equal values .* at most 512"):  # (2 rows of 600)
        caffe_onnx.to_caffe(_pow_model((2, 600), y), None)
