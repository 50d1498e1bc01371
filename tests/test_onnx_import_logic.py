"""ONNX comparisons, logical ops, Where, IsNaN / IsInf, boolean graph inputs and the integer
arithmetic that float32 blobs compute as ONNX does (Add, Sub, Mul of 32- and 64-bit
integers), checked against onnxruntime; and the integer and boolean computations that do not
convert, refused naming the node and why.

Every conversion here is exact (``assert_array_equal``): a comparison's operands are copied
and subtracted once (exact in sign, subnormals included), booleans are 0 and 1, integers up
to 2^24 in magnitude are exact in float32 and so are their sums and products that stay
below it. The outputs come back as floats; they are compared as the types the model
declares."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F, B = TensorProto.FLOAT, TensorProto.BOOL


def _model(nodes, inputs, outputs, inits=(), opset=19):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model, feed, tmp_path, key):
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    prefix = str(tmp_path / key)
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(**{k: np.asarray(v, np.float32) for k, v in feed.items()})
    got = [net.blobs[outputs[o.name]].data.astype(w.dtype) for o, w in
           zip(model.graph.output, want)]
    return got, want


def _awkward(shape, seed):
    """Random floats with equal pairs, infinities, NaN, signed zeros and subnormals."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape).astype(np.float32)
    flat = x.reshape(-1)
    specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -1e-45, 3e-39,
                         np.finfo(np.float32).max, 1.0], np.float32)
    pick = rng.random(flat.size) < 0.5
    flat[pick] = rng.choice(specials, pick.sum())
    return x


@pytest.mark.parametrize("op", ["Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal"])
def test_comparisons_of_floats(tmp_path, op):
    # every pair of the special values meets (a 10 x 10 grid), then random broadcast operands
    specials = _awkward((100,), 0)
    grid_a, grid_b = np.meshgrid(specials[:10], specials[:10])
    a = np.concatenate([grid_a.reshape(1, 100), specials.reshape(1, 100)]).reshape(2, 4, 25)
    b = np.concatenate([grid_b.reshape(1, 100), _awkward((1, 100), 1)]).reshape(2, 4, 25)
    model = _model([helper.make_node(op, ["a", "b"], ["y"])],
                   [("a", F, a.shape), ("b", F, b.shape)], [("y", B)])
    (got,), (want,) = _run(model, {"a": a, "b": b}, tmp_path, op)
    np.testing.assert_array_equal(got, want)
    c = _awkward((1, 1, 5), 2)
    model = _model([helper.make_node(op, ["a", "c"], ["y"])],
                   [("a", F, (2, 4, 1)), ("c", F, c.shape)], [("y", B)])
    (got,), (want,) = _run(model, {"a": _awkward((2, 4, 1), 3), "c": c}, tmp_path, op + "_b")
    assert got.shape == want.shape == (2, 4, 5)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype,elem", [(np.int8, TensorProto.INT8),
                                        (np.uint16, TensorProto.UINT16),
                                        (np.int64, TensorProto.INT64)])
def test_comparisons_of_integers_feed_where(tmp_path, dtype, elem):
    rng = np.random.default_rng(4)
    info = np.iinfo(dtype)
    low, high = max(info.min, -2 ** 24), min(info.max, 2 ** 24)
    a = rng.integers(low, high, (3, 4), endpoint=True).astype(dtype)
    b = a.copy()
    b[1] = rng.integers(low, high, 4, endpoint=True)
    x, y = _awkward((3, 4), 5), _awkward((3, 4), 6)  # NaN in either branch, chosen or not
    nodes = [helper.make_node("GreaterOrEqual", ["a", "b"], ["ge"]),
             helper.make_node("Less", ["a", "b"], ["lt"]),
             helper.make_node("Equal", ["a", "b"], ["eq"]),
             helper.make_node("Where", ["ge", "x", "y"], ["w"])]
    model = _model(nodes, [("a", elem, a.shape), ("b", elem, b.shape), ("x", F, x.shape),
                           ("y", F, y.shape)], [("ge", B), ("lt", B), ("eq", B), ("w", F)])
    got, want = _run(model, {"a": a, "b": b, "x": x, "y": y}, tmp_path, "ints")
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_boolean_inputs_through_logical_ops(tmp_path):
    # boolean graph inputs were refused ('is of type bool; a Caffe blob holds floats')
    rng = np.random.default_rng(7)
    p, q = rng.random((2, 3, 4)) < 0.5, rng.random((3, 1)) < 0.5
    x = _awkward((2, 3, 4), 8)
    nodes = [helper.make_node("And", ["p", "q"], ["and"]),
             helper.make_node("Or", ["p", "q"], ["or"]),
             helper.make_node("Xor", ["p", "q"], ["xor"]),
             helper.make_node("Not", ["xor"], ["not"]),
             helper.make_node("IsNaN", ["x"], ["nan"]),
             helper.make_node("IsInf", ["x"], ["inf"]),
             helper.make_node("IsInf", ["x"], ["pos"], detect_negative=0),
             helper.make_node("Or", ["nan", "inf"], ["bad"]),
             helper.make_node("Where", ["bad", "zero", "x"], ["clean"])]
    model = _model(nodes, [("p", B, p.shape), ("q", B, q.shape), ("x", F, x.shape)],
                   [(n, B) for n in ("and", "or", "xor", "not", "nan", "inf", "pos")] +
                   [("clean", F)], inits=[("zero", np.zeros((1,), np.float32))])
    got, want = _run(model, {"p": p, "q": q, "x": x}, tmp_path, "bools")
    assert want[-1].dtype == np.float32 and np.isfinite(want[-1]).all()
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype,elem", [(np.int32, TensorProto.INT32),
                                        (np.int64, TensorProto.INT64),
                                        (np.uint32, TensorProto.UINT32)])
def test_integer_add_sub_mul(tmp_path, dtype, elem):
    # were refused: 'node ... computes with it (the graph's integer arithmetic ...)'
    rng = np.random.default_rng(9)
    lo = 0 if dtype == np.uint32 else -2 ** 11
    a = rng.integers(lo, 2 ** 11, (2, 5), endpoint=True).astype(dtype)
    b = rng.integers(lo, 2 ** 11, (2, 5), endpoint=True).astype(dtype)
    nodes = [helper.make_node("Mul", ["a", "b"], ["m"]),
             helper.make_node("Add", ["m", "a"], ["y"])]
    outputs = [("y", elem)]
    if dtype != np.uint32:
        nodes.append(helper.make_node("Sub", ["b", "y"], ["z"]))
        outputs.append(("z", elem))
    model = _model(nodes, [("a", elem, a.shape), ("b", elem, b.shape)], outputs)
    got, want = _run(model, {"a": a, "b": b}, tmp_path, "int")
    assert max(np.abs(w.astype(np.int64)).max() for w in want) < 2 ** 24
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op,elem,why", [
    ("Div", TensorProto.INT32, r"\(integer division truncates the quotient, which no Caffe "
                               r"layer does\)"),
    ("Mod", TensorProto.INT64, r"\(the remainder of an integer division"),
    ("Add", TensorProto.INT16, r"\(int16 arithmetic wraps at int16's bounds, where float32 "
                               r"does not\)"),
    ("Sub", TensorProto.UINT32, r"\(an unsigned difference wraps below 0\)")])
def test_integer_arithmetic_that_does_not_convert(op, elem, why):
    model = _model([helper.make_node(op, ["a", "b"], ["y"], name="n")],
                   [("a", elem, (2, 3)), ("b", elem, (2, 3))], [("y", elem)])
    kind = helper.tensor_dtype_to_np_dtype(elem).name
    with pytest.raises(CaffeError, match=r"ONNX input 'a' is of type %s; .*node 'n' \(op %s\) "
                                         r"computes with it " % (kind, op) + why):
        caffe_onnx.to_caffe(model, None)


def test_a_boolean_input_read_by_arithmetic_is_refused():
    # (through a Cast to int32 its Add would convert: 0 and 1 added in 32 bits; in 8 bits
    # a sum of such wraps)
    model = _model([helper.make_node("Cast", ["p"], ["i"], to=TensorProto.INT8),
                    helper.make_node("Add", ["i", "i"], ["y"], name="add")],
                   [("p", B, (2, 3))], [("y", TensorProto.INT8)])
    with pytest.raises(CaffeError, match=r"ONNX input 'p' is of type bool; a Caffe blob holds "
                                         r"floats, which carry booleans as 0 and 1 through the "
                                         r"logical ops .* node 'add' \(op Add\) computes with "
                                         r"it otherwise"):
        caffe_onnx.to_caffe(model, None)
