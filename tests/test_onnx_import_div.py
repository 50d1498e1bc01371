"""ONNX Div of two computed tensors (and a constant over a tensor, a constant minus a tensor,
a Mul of tensors that broadcast both ways) imported, against onnxruntime on the same inputs.

Caffe has no division: ``a / b`` becomes ``a * (1 / b)``, the reciprocal a Power of -1. Both
steps round once (IEEE float32, to nearest): ``1 / b`` to ``r = (1 / b)(1 + d1)`` and the
product to ``a r (1 + d2)``, ``|d1|, |d2| <= 2^-24``, so the result is within about
``2 * 2^-24`` relative of the exact quotient, and onnxruntime's correctly rounded quotient
within ``2^-24`` of it: they differ by at most 3 * 2^-24 relative, 1.5 units in the last
place of the reference. The tests allow 2 units in the last place (``np.spacing`` of
onnxruntime's value) and no more; a division by 0 must give the same inf / NaN."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ULPS = 2


def _model(nodes, inputs, out, inits=(), opset=17):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
                     for n, s in inputs],
        [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run_both(model, feed, tmp_path, key):
    """(ours, onnxruntime's) outputs of the model on ``feed``, and the deploy's layer types."""
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    prefix = str(tmp_path / key)
    deploy, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    with np.errstate(divide="ignore", invalid="ignore"):
        net.forward(**feed)
    got = net.blobs[outputs[model.graph.output[0].name]].data.copy()
    return got, want, [lp.type for lp in deploy.layer]


def _assert_ulps(got, want, key):
    assert got.shape == want.shape, (key, got.shape, want.shape)
    finite = np.isfinite(want)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=key)
    np.testing.assert_array_equal(got[~finite & ~np.isnan(want)],
                                  want[~finite & ~np.isnan(want)], err_msg=key)
    err = np.abs(got[finite].astype(np.float64) - want[finite])
    bound = ULPS * np.spacing(np.abs(want[finite]))
    assert np.all(err <= bound), (key, float((err / np.spacing(
        np.abs(want[finite]))).max()))


def _operand(rng, shape, zeros=0):
    x = rng.uniform(0.25, 4.0, shape).astype(np.float32) * rng.choice([-1, 1], shape)
    if zeros:
        x.reshape(-1)[rng.choice(x.size, zeros, replace=False)] = 0.0
    return x.astype(np.float32)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 3, 4, 5), (2, 3, 4, 5)),      # equal shapes
    ((2, 3, 4, 5), (5,)),              # b along the last axis
    ((2, 3, 4, 5), (3, 1, 1)),         # per channel
    ((2, 1, 4, 1), (1, 3, 1, 5)),      # both broadcast
    ((4, 1), (2, 3, 1, 6)),            # a of fewer axes, both grow
])
def test_div_of_two_tensors_against_onnxruntime(tmp_path, a_shape, b_shape):
    # it was refused: 'Div of two tensors converts only as Add/Sub/Mul of equal shapes'
    rng = np.random.default_rng(sum(a_shape) * 7 + sum(b_shape))
    a, b = _operand(rng, a_shape), _operand(rng, b_shape)
    model = _model([helper.make_node("Div", ["a", "b"], ["y"], name="div")],
                   [("a", a_shape), ("b", b_shape)], "y")
    got, want, types = _run_both(model, {"a": a, "b": b}, tmp_path, "div")
    _assert_ulps(got, want, "div")
    assert "Power" in types and "Eltwise" in types


def test_div_by_zero_gives_the_engines_inf_and_nan(tmp_path):
    a = np.array([[1.5, -2.0, 0.0, 0.0, 3.0, -0.0, np.inf]], np.float32)
    b = np.array([[0.0, 0.0, 0.0, -0.0, -0.0, 2.0, 4.0]], np.float32)
    model = _model([helper.make_node("Div", ["a", "b"], ["y"], name="div")],
                   [("a", a.shape), ("b", b.shape)], "y")
    got, want, _ = _run_both(model, {"a": a, "b": b}, tmp_path, "zero")
    # onnxruntime: 1.5/0 = inf, -2/0 = -inf, 0/0 = NaN, 3/-0 = -inf, -0/2 = -0, inf/4 = inf
    assert np.isposinf(want[0, 0]) and np.isneginf(want[0, 1]) and np.isnan(want[0, 2])
    _assert_ulps(got, want, "zero")
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_a_division_ulp_apart_is_within_the_bound(tmp_path):
    # many random quotients: the reciprocal-then-product differs from onnxruntime's quotient
    # in some of them (so the bound is what is checked), never by more than 2 ulps
    rng = np.random.default_rng(11)
    a, b = _operand(rng, (64, 256)), _operand(rng, (64, 256))
    model = _model([helper.make_node("Div", ["a", "b"], ["y"], name="div")],
                   [("a", a.shape), ("b", b.shape)], "y")
    got, want, _ = _run_both(model, {"a": a, "b": b}, tmp_path, "many")
    _assert_ulps(got, want, "many")
    assert np.count_nonzero(got != want) > 0


@pytest.mark.parametrize("c", [1.0, 2.5, [[1.5], [-2.0], [0.0]]])
def test_a_constant_over_a_tensor(tmp_path, c):
    # it was refused: 'a constant minus / over a tensor has no Caffe layer'. One value: Powers;
    # several (here one per row, 0 among them): a Parameter layer holding them, the product
    c = np.asarray(c, np.float32)
    rng = np.random.default_rng(3)
    x = _operand(rng, (2, 3, 4), zeros=2)
    model = _model([helper.make_node("Div", ["c", "x"], ["y"], name="rdiv")],
                   [("x", x.shape)], "y", inits=[("c", c)])
    got, want, types = _run_both(model, {"x": x}, tmp_path, "rdiv")
    _assert_ulps(got, want, "rdiv")
    assert set(types) == ({"Input", "Power"} if c.size == 1 else
                          {"Input", "Power", "Parameter", "Reshape", "Tile", "Eltwise"})


def test_a_constant_minus_a_tensor_is_exact(tmp_path):
    # it was refused as the constant over a tensor; -x + c rounds once, as c - x does
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 5)).astype(np.float32)
    model = _model([helper.make_node("Sub", ["c", "x"], ["y"], name="rsub")],
                   [("x", x.shape)], "y", inits=[("c", np.float32(0.7))])
    got, want, types = _run_both(model, {"x": x}, tmp_path, "rsub")
    np.testing.assert_array_equal(got, want)
    assert set(types) == {"Input", "Power"}


def test_mul_of_tensors_that_both_broadcast_is_exact(tmp_path):
    # (3, 1) * (1, 4) and a gate that is not a run of axes: both were refused ('converts only
    # when one has the output's shape', '... matches the other on a run of axes'); the
    # broadcast copies and one product round as onnxruntime's Mul
    rng = np.random.default_rng(6)
    for key, (sa, sb) in {"outer": ((3, 1), (1, 4)), "split": ((2, 3, 4), (2, 1, 4))}.items():
        a = rng.normal(size=sa).astype(np.float32)
        b = rng.normal(size=sb).astype(np.float32)
        model = _model([helper.make_node("Mul", ["a", "b"], ["y"], name="mul")],
                       [("a", sa), ("b", sb)], "y")
        got, want, types = _run_both(model, {"a": a, "b": b}, tmp_path, key)
        np.testing.assert_array_equal(got, want, err_msg=key)
        assert "Eltwise" in types


@pytest.mark.parametrize("op,names,c", [("Mul", ["x", "c"], 0.0), ("Mul", ["x", "c"], -0.0),
                                        ("Div", ["c", "x"], 0.0), ("Div", ["x", "c"], 0.0),
                                        ("Div", ["x", "c"], np.inf)])
def test_products_by_zero_keep_ieee_nan_and_signs(tmp_path, op, names, c):
    # x * 0 (and x / inf) became Caffe's Power of scale 0, which is the constant 0 whatever the
    # input: 0 where onnxruntime gives NaN for inf and NaN, +0 where it gives -0; 0 / x too
    x = np.array([[1.0, -2.0, 0.0, -0.0, np.inf, -np.inf, np.nan]], np.float32)
    model = _model([helper.make_node(op, names, ["y"], name="op")], [("x", x.shape)], "y",
                   inits=[("c", np.float32(c))])
    got, want, _ = _run_both(model, {"x": x}, tmp_path, "zero")
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
