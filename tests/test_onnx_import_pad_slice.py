"""ONNX import of Slice with steps other than 1 and of Pad in every mode, on any axis:
one-node models built with onnx.helper at the opsets of each form, run by onnxruntime and by
the imported net on the same input, NaN, infinities and signed zeros included. The values
are copied, never computed, so the two agree bit for bit. What onnxruntime refuses, or what
has no Caffe layout, is refused naming the node."""

import numpy as np
import pytest

from helpers.onnx_runtime import run_ort
from onnx import TensorProto, helper, numpy_helper

import pycaffe_lite as caffe
from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError

RNG = np.random.default_rng(11)
BIG = 2 ** 63 - 1  # what exporters write for an open end (INT64_MAX / INT64_MIN + 1)


def _input(shape):
    """Random values with a NaN, both infinities and both zeros among them."""
    x = RNG.uniform(-2, 2, shape).astype(np.float32).reshape(-1)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0], np.float32)
    at = RNG.choice(x.size, min(x.size, len(specials)), replace=False)
    x[at] = specials[:len(at)]
    return x.reshape(shape)


def _model(shape, node, consts, opset):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _same(ours, theirs, what):
    """Bit for bit: equal shapes, equal values, NaN where NaN, the same signs of zeros."""
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    np.testing.assert_array_equal(ours, theirs, err_msg=what)
    assert np.array_equal(np.signbit(ours), np.signbit(theirs)), what


def _check(model, shape, tmp_path, key):
    x = _input(shape)
    theirs = run_ort(model, {"x": x})["y"]
    prefix = str(tmp_path / key)
    deploy, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    _same(net.blobs[outputs["y"]].data, theirs, key)
    return deploy


def _slice(shape, starts, ends, axes=None, steps=None, opset=13):
    consts = {"starts": np.array(starts, np.int64), "ends": np.array(ends, np.int64)}
    inputs = ["x", "starts", "ends"]
    if axes is not None or steps is not None:
        consts["axes"] = np.array(axes if axes is not None else range(len(starts)), np.int64)
        inputs.append("axes")
    if steps is not None:
        consts["steps"] = np.array(steps, np.int64)
        inputs.append("steps")
    return _model(shape, helper.make_node("Slice", inputs, ["y"], name="cut"), consts, opset)


# -- Slice with steps ----------------------------------------------------------------------
SLICES = [
    # (shape, starts, ends, axes, steps): YOLOv5's Focus picks x[..., ::2, ::2] and its shifts
    ((1, 3, 6, 8), [0, 0], [BIG, BIG], [2, 3], [2, 2]),
    ((1, 3, 6, 8), [1, 0], [BIG, BIG], [2, 3], [2, 2]),
    ((2, 3, 7, 5), [1, 1], [BIG, BIG], [2, 3], [2, 2]),
    ((1, 3, 9, 4), [0], [9], [2], [3]),          # the last pick at the last row
    ((1, 3, 10, 4), [1], [9], [2], [4]),         # a partial last step
    ((1, 3, 10, 4), [2], [-1], [-2], [5]),       # one pick only
    ((1, 6, 4, 4), [1], [BIG], [1], [2]),        # channels
    ((4, 2, 3), [0], [BIG], [0], [3]),           # batch, a 3-D blob
    ((2, 9), [-BIG], [BIG], [1], [4]),
    ((1, 2, 3, 4, 5), [0, 1], [BIG, 5], [2, 4], [2, 3]),
    # negative steps: x[:, ::-1] (BGR <-> RGB), ends clamped to -1
    ((1, 3, 4, 4), [-1], [-BIG], [1], [-1]),
    ((1, 3, 5, 6), [BIG, 4], [-BIG, 0], [2, 3], [-2, -1]),
    ((1, 3, 5, 6), [3], [0], [-1], [-2]),
    ((2, 3, 5), [10], [-10], [2], [-3]),
    ((1, 4, 6, 6), [-1, 1, 0], [0, BIG, -1], [1, 2, 3], [-1, 2, 1]),
]


@pytest.mark.parametrize("case", range(len(SLICES)))
@pytest.mark.parametrize("opset", (10, 13, 18))
def test_slices_with_steps_match_onnxruntime(tmp_path, case, opset):
    shape, starts, ends, axes, steps = SLICES[case]
    deploy = _check(_slice(shape, starts, ends, axes, steps, opset), shape, tmp_path, "slice")
    assert {lp.type for lp in deploy.layer} <= {"Input", "Slice", "Silence", "Concat",
                                                "Reshape"}


def test_slice_of_a_step_of_two_is_a_reshape_not_single_slices(tmp_path):
    deploy = _check(_slice((1, 3, 64, 64), [0], [BIG], [3], [2]), (1, 3, 64, 64), tmp_path,
                    "wide")
    assert [lp.type for lp in deploy.layer] == ["Input", "Reshape", "Slice", "Silence",
                                                "Reshape"]


@pytest.mark.parametrize("shape, starts, ends, axes, steps, message", [
    ((1, 3, 4, 4), [0], [4], [2], [0], "steps \\[0\\]: a step of 0 is not a slice"),
    ((1, 600, 2, 2), [-1], [-BIG], [1], [-1],
     "it would take 600 single slices of axis 1 \\(at most 512 convert\\)"),
])
def test_slices_that_do_not_convert_name_the_node(shape, starts, ends, axes, steps, message):
    with pytest.raises(CaffeError, match="ONNX node 'cut' \\(op Slice\\): " + message):
        caffe_onnx.to_caffe(_slice(shape, starts, ends, axes, steps), None)
