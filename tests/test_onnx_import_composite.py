"""ONNX ops built of a few other ops' layers (Celu, LpNormalization, ReduceLogSumExp,
RMSNormalization, GroupNormalization, Trilu, Shrink, Swish, Cast), and the exact GELU written
with Erf (PyTorch's ``nn.GELU`` before opset 20), checked against onnxruntime on random
shapes and values.

Tolerances, each from how the layers round: Celu divides by alpha as a product by ``1 /
alpha`` and scales back (alpha 1: the ELU alone), a few float32 units in the last place,
``rtol=1e-6``; near 0 ``exp(x) - 1`` cancels, an absolute error of about ``alpha 2^-23``
(``atol=4e-7`` for alpha up to 2.5). LpNormalization, ReduceLogSumExp, RMSNormalization and
GroupNormalization sum in another order than onnxruntime and take the inverse root by a
Power: ``rtol=1e-5``. Trilu and Cast copy values, Shrink subtracts or adds the bias once as
onnxruntime does: exact. Swish is Caffe's Swish layer against x sigmoid(alpha x) in float64:
``rtol=1e-6``. GELU is our GELU layer (erf form) against onnxruntime's
Div, Erf, Add, Mul, Mul, whose ``1 + erf(x / sqrt(2))`` cancels for negative ``x`` (an
absolute error up to about ``|x| 2^-24``, as in torch's float32): ``rtol=1e-6``,
``atol=1e-6`` for ``|x|`` below 10."""

import io

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(nodes, inputs, outputs=("y",), inits=(), opset=18):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) if isinstance(o, str) else
         helper.make_tensor_value_info(o[0], o[1], None) for o in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, feed, tmp_path, key):
    """(our outputs, onnxruntime's, the deploy net)"""
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    prefix = str(tmp_path / key)
    deploy, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(**{k: np.asarray(v, np.float32) for k, v in feed.items()})
    got = [net.blobs[outputs[o.name]].data.copy() for o in model.graph.output]
    return got, want, deploy


def _float(shape, seed, scale=1.0):
    return (np.random.default_rng(seed).normal(size=shape) * scale).astype(np.float32)


@pytest.mark.parametrize("alpha", [1.0, 0.35, 2.5])
def test_celu(tmp_path, alpha):
    # Celu was refused ('this op has no Caffe equivalent')
    x = _float((2, 3, 5, 4), 1, 3.0)
    model = _model([helper.make_node("Celu", ["x"], ["y"], alpha=alpha)],
                   [("x", TensorProto.FLOAT, x.shape)], opset=12)
    (got,), (want,), _ = _run(model, {"x": x}, tmp_path, "celu")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=4e-7)


@pytest.mark.parametrize("p,axis,seed", [(1, 1, 0), (2, -1, 1), (2, 0, 2), (1, 2, 3)])
def test_lp_normalization(tmp_path, p, axis, seed):
    x = _float((3, 4, 5), seed)
    x[1, :, 2] = 0.0  # a zero norm along axis 1: onnxruntime gives 0 there (not 0 / 0)
    x[0, 1, :] = 0.0
    x[:, 3, 4] = 0.0
    model = _model([helper.make_node("LpNormalization", ["x"], ["y"], p=p, axis=axis)],
                   [("x", TensorProto.FLOAT, x.shape)], opset=1)
    (got,), (want,), _ = _run(model, {"x": x}, tmp_path, "lp")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("axes,keepdims", [([1], 0), ([0, 2], 1), ([2, 3], 0), ([-1], 1)])
def test_reduce_log_sum_exp(tmp_path, axes, keepdims):
    x = _float((2, 3, 4, 5), 4, 30.0)
    x[0, 0, 0, 0] = 150.0  # exp overflows float32: the shift by the maximum keeps it finite
    x[1, 1] = -np.inf  # rows of -inf give -inf, one holding +inf gives +inf (not NaN)
    x[1, 2, 1, 2] = np.inf
    model = _model([helper.make_node("ReduceLogSumExp", ["x", "axes"], ["y"],
                                     keepdims=keepdims)],
                   [("x", TensorProto.FLOAT, x.shape)],
                   inits=[("axes", np.array(axes, np.int64))])
    (got,), (want,), _ = _run(model, {"x": x}, tmp_path, "lse")
    assert got.shape == want.shape
    assert np.isinf(want).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axis", [1, -1, 2])
def test_rms_normalization(tmp_path, axis):
    x = _float((2, 3, 4, 6), 5, 2.0)
    rank = x.ndim
    scale = _float(x.shape[axis % rank:], 6)
    model = _model([helper.make_node("RMSNormalization", ["x", "scale"], ["y"], axis=axis,
                                     epsilon=1e-3)],
                   [("x", TensorProto.FLOAT, x.shape)], inits=[("scale", scale)], opset=23)
    (got,), (want,), _ = _run(model, {"x": x}, tmp_path, "rms")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("upper,k,shape", [(1, 0, (2, 3, 5, 4)), (0, 1, (4, 6)),
                                           (1, -2, (3, 5, 5)), (0, -1, (2, 1, 3, 7)),
                                           (1, 9, (3, 4))])
def test_trilu_keeps_infinities_and_zeroes_exactly(tmp_path, upper, k, shape):
    x = _float(shape, 7)
    flat = x.reshape(-1)
    flat[::3], flat[1::5] = np.inf, -np.inf  # in both parts: 0 where zeroed, kept where kept
    model = _model([helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)],
                   [("x", TensorProto.FLOAT, shape)], inits=[("k", np.array(k, np.int64))],
                   opset=14)
    (got,), (want,), _ = _run(model, {"x": x}, tmp_path, "trilu")
    np.testing.assert_array_equal(got, want)


def test_cast_that_keeps_values_and_casts_that_do_not(tmp_path):
    # int32 -> int64 -> float -> double: every value kept (an identity on the blob)
    x = np.random.default_rng(8).integers(-2 ** 20, 2 ** 20, (3, 4)).astype(np.int32)
    nodes = [helper.make_node("Cast", ["x"], ["a"], to=TensorProto.INT64),
             helper.make_node("Cast", ["a"], ["b"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["b"], ["y"], to=TensorProto.DOUBLE)]
    model = _model(nodes, [("x", TensorProto.INT32, x.shape)], [("y", TensorProto.DOUBLE)])
    (got,), (want,), _ = _run(model, {"x": x}, tmp_path, "cast")
    assert want.dtype == np.float64
    np.testing.assert_array_equal(got.astype(np.float64), want)
    for to, why in ((TensorProto.FLOAT16, "a cast from float32 to float16 rounds the values"),
                    (TensorProto.INT32, "a cast from float32 to int32 truncates towards zero"),
                    (TensorProto.BOOL, "a cast from float32 to bool makes booleans of the")):
        model = _model([helper.make_node("Cast", ["x"], ["y"], name="c", to=to)],
                       [("x", TensorProto.FLOAT, (2, 3))], [("y", to)])
        with pytest.raises(CaffeError, match=r"ONNX node 'c' \(op Cast\): " + why):
            caffe_onnx.to_caffe(model, None)
    model = _model([helper.make_node("Cast", ["x"], ["y"], name="c", to=TensorProto.INT8)],
                   [("x", TensorProto.INT32, (2, 3))], [("y", TensorProto.INT8)])
    with pytest.raises(CaffeError, match=r"a cast from int32 to int8 wraps the values outside "
                                         r"int8's range"):
        caffe_onnx.to_caffe(model, None)


@pytest.mark.parametrize("opset", [13, 17])
def test_pytorch_gelu_before_opset_20_is_one_gelu_layer(tmp_path, opset):
    # nn.GELU() exports Div, Erf, Add, Mul, Mul before opset 20: it was refused at the Erf
    # ('this op has no Caffe equivalent')
    torch = pytest.importorskip("torch")
    module = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU()).eval()
    x = torch.from_numpy(_float((4, 6), 9, 3.0))
    buf = io.BytesIO()
    torch.onnx.export(module, (x,), buf, opset_version=opset, dynamo=False,
                      input_names=["x"], output_names=["y"])
    model = onnx.load_from_string(buf.getvalue())
    assert "Erf" in [n.op_type for n in model.graph.node]
    (got,), (want,), deploy = _run(model, {"x": x.numpy()}, tmp_path, "gelu")
    assert [lp.type for lp in deploy.layer] == ["Input", "InnerProduct", "GELU"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, module(x).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_gelu_written_other_ways_and_erf_alone(tmp_path):
    # 0.5 * x first, Mul by 1/sqrt(2) (as other exporters write it)
    x = _float((2, 7), 10, 2.0)
    consts = [("half", np.array(0.5, np.float32)), ("one", np.array(1.0, np.float32)),
              ("r2", np.array(1 / np.sqrt(2), np.float32))]
    nodes = [helper.make_node("Mul", ["half", "x"], ["h"]),
             helper.make_node("Mul", ["r2", "x"], ["s"]),
             helper.make_node("Erf", ["s"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]),
             helper.make_node("Mul", ["h", "p"], ["y"])]
    model = _model(nodes, [("x", TensorProto.FLOAT, x.shape)], inits=consts, opset=13)
    (got,), (want,), deploy = _run(model, {"x": x}, tmp_path, "gelu2")
    assert [lp.type for lp in deploy.layer] == ["Input", "GELU"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # the Erf's value read also elsewhere (here a second output): no GELU, and Erf alone has
    # no Caffe layer
    model = _model(nodes, [("x", TensorProto.FLOAT, x.shape)], outputs=("y", "e"),
                   inits=consts, opset=13)
    model.graph.node[2].name = "erf"
    with pytest.raises(CaffeError, match=r"ONNX node 'erf' \(op Erf\): Caffe has no erf layer: "
                                         r"Erf converts only inside the exact GELU"):
        caffe_onnx.to_caffe(model, None)


@pytest.mark.parametrize("lambd,bias", [(0.5, 0.0), (1.5, 1.5), (0.7, -0.3)])
def test_shrink(tmp_path, lambd, bias):
    x = _awkward_floats((4, 9), 11)
    model = _model([helper.make_node("Shrink", ["x"], ["y"], lambd=lambd, bias=bias)],
                   [("x", TensorProto.FLOAT, x.shape)], opset=9)
    (got,), (want,), _ = _run(model, {"x": x}, tmp_path, "shrink")
    np.testing.assert_array_equal(got, want)


def _awkward_floats(shape, seed):
    x = _float(shape, seed, 2.0)
    flat = x.reshape(-1)
    flat[::5] = np.array([np.inf, -np.inf, np.nan, 0.5, -0.5, 1.5, -1.5],
                         np.float32)[np.arange(flat[::5].size) % 7]
    return x


@pytest.mark.parametrize("opset,groups,shape", [(21, 2, (2, 4, 3, 5)), (21, 3, (3, 6, 7)),
                                                (18, 2, (2, 6, 2, 2, 3))])
def test_group_normalization(tmp_path, opset, groups, shape):
    x = _float(shape, 12, 3.0)
    n = shape[1] if opset >= 21 else groups  # opset 18: a scale and bias per group
    scale, bias = _float((n,), 13), _float((n,), 14)
    model = _model([helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"],
                                     num_groups=groups, epsilon=1e-3)],
                   [("x", TensorProto.FLOAT, shape)],
                   inits=[("scale", scale), ("bias", bias)], opset=opset)
    prefix = str(tmp_path / "gn")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    got = net.blobs[outputs["y"]].data
    # the definition, in float64 (onnxruntime has no opset-18 GroupNormalization kernel)
    g = x.astype(np.float64).reshape(shape[0], groups, -1)
    normed = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-3))
    per = np.repeat(scale, shape[1] // n), np.repeat(bias, shape[1] // n)
    tail = (1,) * (len(shape) - 2)
    want = normed.reshape(shape) * per[0].reshape((-1,) + tail) + per[1].reshape((-1,) + tail)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    if opset >= 21:
        theirs = ort.InferenceSession(model.SerializeToString(),
                                      providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, theirs, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("alpha", [1.0, 0.6])
def test_swish(tmp_path, alpha):
    x = _float((3, 8), 15, 4.0)
    model = _model([helper.make_node("Swish", ["x"], ["y"], alpha=alpha)],
                   [("x", TensorProto.FLOAT, x.shape)], opset=24)
    prefix = str(tmp_path / "swish")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(net.blobs[outputs["y"]].data,
                               x64 / (1 + np.exp(-alpha * x64)), rtol=1e-6, atol=1e-7)
