"""ONNX graph inputs of integer types: carried as floats (float32 holds every integer up to
2^24 in magnitude exactly) where only ops that move values read them (Pad of every mode,
Reshape, Transpose, Concat, ...), and refused, naming the node, where one computes with them.
Checked against onnxruntime on the same integers."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

LIMIT = 2 ** 24  # the largest magnitude up to which float32 holds every integer


def _model(nodes, inputs, outputs, inits=(), opset=19):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, list(s)) for n, t, s in inputs],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs],
        initializer=[numpy_helper.from_array(v, n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _ours(model, feed, tmp_path, key):
    prefix = str(tmp_path / key)
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(**{k: v.astype(np.float32) for k, v in feed.items()})
    return [net.blobs[outputs[o.name]].data.copy() for o in model.graph.output]


def _ints(shape, dtype, seed):
    info = np.iinfo(dtype)
    low, high = max(info.min, -LIMIT), min(info.max, LIMIT)
    x = np.random.default_rng(seed).integers(low, high, shape, endpoint=True).astype(dtype)
    x.reshape(-1)[:2] = [low, high]  # the ends of the exact range
    return x


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect", "wrap"])
def test_pads_of_int32_inputs_against_onnxruntime(tmp_path, mode, caplog):
    # ONNX's test_edge_pad, test_reflect_pad and test_wrap_pad were refused ('is of type int32;
    # a Caffe blob holds floats'); a pad moves values, so the float blob carries them exactly
    x = _ints((1, 3, 4, 5), np.int32, 7)
    inits = [("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64))]
    inputs = ["x", "pads"]
    if mode == "constant":
        inits.append(("value", np.array(-LIMIT + 3, np.int32)))
        inputs.append("value")
    model = _model([helper.make_node("Pad", inputs, ["y"], name="pad", mode=mode)],
                   [("x", TensorProto.INT32, x.shape)], [("y", TensorProto.INT32)], inits)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert want.dtype == np.int32
    with caplog.at_level("INFO", logger="pycaffe_lite.onnx.import_"):
        got = _ours(model, {"x": x}, tmp_path, mode)[0]
    np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))
    assert "input 'x' (int32) is carried as float32, which holds its integers exactly up " \
           "to 2^24" in caplog.text


@pytest.mark.parametrize("dtype,elem", [(np.int8, TensorProto.INT8),
                                        (np.uint16, TensorProto.UINT16),
                                        (np.int64, TensorProto.INT64)])
def test_integers_moved_by_reshape_transpose_concat(tmp_path, dtype, elem):
    x = _ints((2, 3, 4), dtype, 3)
    z = _ints((2, 3, 4), dtype, 4)
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="t", perm=[0, 2, 1]),
             helper.make_node("Reshape", ["t", "shape"], ["r"], name="r"),
             helper.make_node("Reshape", ["z", "shape"], ["rz"], name="rz"),
             helper.make_node("Concat", ["r", "rz"], ["y"], name="cat", axis=1)]
    model = _model(nodes, [("x", elem, x.shape), ("z", elem, z.shape)], [("y", elem)],
                   [("shape", np.array([2, 12], np.int64))])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"x": x, "z": z})[0]
    got = _ours(model, {"x": x, "z": z}, tmp_path, "moved")[0]
    np.testing.assert_array_equal(got.astype(np.int64), want.astype(np.int64))


def test_integer_arithmetic_is_refused_naming_the_node():
    # an Add of int16 wraps in ONNX (2^15 - 1 + 1 = -2^15), floats do not: refused, also where
    # the input reaches the Add through a Pad (an int32 Add converts: it wraps only beyond
    # 2^31, and float32 holds integers exactly up to 2^24 only, as the log says)
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], name="pad", mode="edge"),
             helper.make_node("Add", ["p", "p"], ["y"], name="twice")]
    model = _model(nodes, [("x", TensorProto.INT16, [1, 4])], [("y", TensorProto.INT16)],
                   [("pads", np.array([0, 1, 0, 1], np.int64))])
    with pytest.raises(CaffeError, match=r"ONNX input 'x' is of type int16; a Caffe blob holds "
                                         r"floats, which carry integers exactly only through "
                                         r"ops that move or compare them \(.*Pad.*\) and the "
                                         r"Add, Sub and Mul of 32- and 64-bit integers, and "
                                         r"node 'twice' \(op Add\) computes with it \(int16 "
                                         r"arithmetic wraps at int16's bounds"):
        caffe_onnx.to_caffe(model, None)


def test_integers_compared_by_max_min_clip_and_max_pooling(tmp_path):
    # the table's test_max_int8 ... test_min_uint64, test_clip_default_int8_*, and
    # test_maxpool_2d_uint8 were refused: a maximum or a clip picks one of the values
    # (ONNX's MaxPool takes 8-bit integers only)
    x = _ints((1, 2, 5, 5), np.int32, 11)
    z = _ints((1, 2, 5, 5), np.int32, 12)
    u = _ints((1, 2, 5, 5), np.uint8, 13)
    nodes = [helper.make_node("Max", ["x", "z"], ["hi"], name="max"),
             helper.make_node("Min", ["x", "z"], ["lo"], name="min"),
             helper.make_node("Clip", ["x", "low", "high"], ["clipped"], name="clip"),
             helper.make_node("MaxPool", ["u"], ["pooled"], name="pool", kernel_shape=[3, 3],
                              strides=[2, 2], pads=[1, 1, 1, 1])]
    outputs = [(n, TensorProto.INT32) for n in ("hi", "lo", "clipped")] + \
        [("pooled", TensorProto.UINT8)]
    model = _model(nodes, [("x", TensorProto.INT32, x.shape), ("z", TensorProto.INT32, z.shape),
                           ("u", TensorProto.UINT8, u.shape)],
                   outputs, [("low", np.array(-1000, np.int32)),
                             ("high", np.array(LIMIT - 5, np.int32))])
    feed = {"x": x, "z": z, "u": u}
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)
    got = _ours(model, feed, tmp_path, "compare")
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a.astype(np.int64), b.astype(np.int64))


@pytest.mark.parametrize("rank", [2, 1])
def test_rows_of_a_constant_table_by_computed_indices(tmp_path, rank):
    # nn.Embedding's Gather (pytorch-converted/test_Embedding, refused as 'of type int64'):
    # Caffe's Embed, the table its weights
    table = np.random.default_rng(2).normal(size=(7, 3) if rank == 2 else (7,))
    idx = np.array([[0, 6, 3], [2, 2, 5]], np.int64)
    model = _model([helper.make_node("Gather", ["table", "idx"], ["y"], name="embed")],
                   [("idx", TensorProto.INT64, idx.shape)], [("y", TensorProto.FLOAT)],
                   [("table", table.astype(np.float32))])
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"idx": idx})[0]
    got = _ours(model, {"idx": idx}, tmp_path, "rows%d" % rank)[0]
    np.testing.assert_array_equal(got, want)
    # an index ONNX counts from the end stops the net, naming it (Caffe's Embed)
    prefix = str(tmp_path / ("rows%d" % rank))
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    with pytest.raises(CaffeError, match=r"-1"):
        net.forward(idx=np.array([[0, -1, 3], [2, 2, 5]], np.float32))
