"""ONNX import of Slice with steps other than 1 and of Pad in every mode, on any axis:
one-node models built with onnx.helper at the opsets of each form, run by onnxruntime and by
the imported net on the same input, NaN, infinities and signed zeros included. The values
are copied, never computed, so the two agree bit for bit. What onnxruntime refuses, or what
has no Caffe layout, is refused naming the node."""

import io

import numpy as np
import pytest

from helpers.onnx_runtime import ort, run_ort
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
    ((1, 3, 10, 4), [2], [-1], [-2], [5]),       # two picks, the second past whole steps
    ((1, 3, 10, 4), [7], [9], [2], [5]),         # one pick only
    ((1, 3, 5), [3], [1], [2], [-4]),            # one pick of a negative step
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


# -- Pad -----------------------------------------------------------------------------------
def _pad(shape, pads, mode="constant", value=None, axes=None, opset=18):
    attrs = {"mode": mode} if mode != "constant" or opset >= 11 else {}
    consts = {}
    if opset < 11:
        attrs["pads"] = pads
        if value is not None:
            attrs["value"] = value
        inputs = ["x"]
    else:
        consts["pads"] = np.array(pads, np.int64)
        inputs = ["x", "pads"]
        if value is not None or axes is not None:
            inputs.append("value" if value is not None else "")
            if value is not None:
                consts["value"] = np.array(value, np.float32)
        if axes is not None:
            consts["axes"] = np.array(axes, np.int64)
            inputs.append("axes")
    return _model(shape, helper.make_node("Pad", inputs, ["y"], name="pad", **attrs), consts,
                  opset)


PADS = [
    # (shape, pads, axes): every axis, uneven, 2-D to 5-D
    ((1, 3, 4, 5), [0, 0, 1, 2, 0, 0, 2, 1], None),
    ((2, 3, 4, 5), [1, 2, 0, 3, 0, 1, 2, 0], None),
    ((3, 4), [2, 3, 1, 1], None),
    ((2, 3, 4), [0, 1, 3, 1, 0, 2], None),
    ((1, 2, 3, 4, 5), [0, 0, 2, 1, 1, 0, 0, 1, 2, 2], None),
    # crops: onnxruntime crops first, then pads what is left
    ((1, 3, 5, 6), [0, 0, -1, 2, 0, 0, 2, -3], None),
    ((2, 4, 5, 5), [0, -1, -2, -2, 0, -1, 0, -1], None),
    # opset 18's axes, negative ones too
    ((1, 3, 4, 5), [1, 2, 2, 1], [2, 3]),
    ((1, 3, 4, 5), [2, 0, 1, 2], [-1, 1]),
]


@pytest.mark.parametrize("case", range(len(PADS)))
@pytest.mark.parametrize("mode, value", [("constant", None), ("constant", -1.5),
                                         ("edge", None), ("reflect", None), ("wrap", None)])
def test_pads_match_onnxruntime(tmp_path, case, mode, value):
    shape, pads, axes = PADS[case]
    _check(_pad(shape, pads, mode, value, axes, opset=19 if mode == "wrap" else 18), shape,
           tmp_path, "pad")


@pytest.mark.parametrize("opset", (2, 11, 13))
@pytest.mark.parametrize("mode, value", [("constant", 2.5), ("edge", None),
                                         ("reflect", None)])
def test_pads_of_the_older_forms_match_onnxruntime(tmp_path, opset, mode, value):
    # before opset 11, pads and value are attributes; from 11 inputs, without axes
    shape = (2, 3, 4, 4)
    _check(_pad(shape, [1, 0, 3, 2, 0, 2, 1, 3], mode, value, opset=opset), shape, tmp_path,
           "pad%d" % opset)


def test_reflect_pads_up_to_the_axis_less_one(tmp_path):
    # onnxruntime's limit: a reflection of at most size - 1 rows (a 2-row axis: 1)
    _check(_pad((1, 2, 2, 5), [0, 0, 1, 4, 0, 0, 1, 4], "reflect"), (1, 2, 2, 5), tmp_path,
           "reflect")


def _ort_release():
    return tuple(int(part) for part in ort.__version__.split(".")[:2])


# onnxruntime's Pad checks these pads from the release given (an edge crop to nothing from
# 1.24, reflections from 1.25); its releases before ran them, reading past the axis (1.23.2,
# the last for Python 3.10, filled the rows with whatever memory held)
REFUSED_SINCE = {"reflect": (1, 25), "edge": (1, 24)}


@pytest.mark.parametrize("shape, pads, mode, message", [
    ((1, 2, 3, 4), [0, 0, 3, 0, 0, 0, 0, 0], "reflect",
     "reflect pads 3, 0 of axis 2 \\(of size 3\\): a reflection needs pads smaller"),
    ((1, 2, 1, 4), [0, 0, 0, 0, 0, 0, 1, 0], "reflect", "reflect pads 0, 1 of axis 2"),
    # cropped to 2 rows first, then 2 more to reflect
    ((1, 2, 4, 4), [0, 0, -2, 0, 0, 0, 2, 0], "reflect",
     "reflect pads 0, 2 of axis 2 \\(of size 2\\)"),
    ((1, 2, 3, 4), [0, 0, 0, 5, 0, 0, 0, 0], "wrap", "wrap pads 5, 0 of axis 3"),
    ((1, 2, 3, 4), [0, 0, -3, 0, 0, 0, 1, 0], "edge",
     "its pads -3, 1 crop axis 2 \\(of size 3\\) to nothing"),
])
def test_pads_onnxruntime_refuses_are_refused_naming_the_node(shape, pads, mode, message):
    model = _pad(shape, pads, mode, opset=19)
    # onnxruntime refuses these too (a wrap it wraps around the axis again itself)
    if mode != "wrap" and _ort_release() >= REFUSED_SINCE[mode]:
        with pytest.raises(Exception, match="Pad"):
            run_ort(model, {"x": _input(shape)})
    with pytest.raises(CaffeError, match="ONNX node 'pad' \\(op Pad\\): " + message):
        caffe_onnx.to_caffe(model, None)


def test_constant_pads_export_back_as_constants(tmp_path):
    # the constant pieces are Parameter layers (not learnt) that the exporter writes as
    # initializers: the imported net exported again still has the one input
    shape = (2, 3, 4, 5)
    model = _pad(shape, [0, 1, 2, 0, 1, 0, 1, 2], "constant", 0.75)
    deploy = _check(model, shape, tmp_path, "const")
    assert "Parameter" in [lp.type for lp in deploy.layer]
    assert all(lp.param[0].lr_mult == 0 for lp in deploy.layer if lp.type == "Parameter")
    prefix = str(tmp_path / "const")
    out = str(tmp_path / "again.onnx")
    caffe_onnx.export_files(prefix + ".prototxt", prefix + ".caffemodel", out,
                            static_batch=True)
    import onnx
    again = onnx.load(out)
    inits = {i.name for i in again.graph.initializer}
    assert [v.name for v in again.graph.input if v.name not in inits] == ["x"]
    x = _input(shape)
    _same(list(run_ort(again, {"x": x}).values())[0], run_ort(model, {"x": x})["y"], "again")


def test_zero_pad_of_an_average_pool_stays_its_pad(tmp_path):
    shape = (1, 2, 6, 6)
    model = _pad(shape, [0, 0, 1, 1, 0, 0, 1, 1])
    pool = helper.make_node("AveragePool", ["y"], ["z"], kernel_shape=[3, 3], strides=[2, 2])
    model.graph.node.append(pool)
    model.graph.output[0].name = "z"
    x = _input(shape)
    x[np.isinf(x)] = 0.5
    theirs = run_ort(model, {"x": x})["z"]
    deploy, weights, outputs = caffe_onnx.to_caffe(model, str(tmp_path / "avg"))
    pools = [lp.pooling_param for lp in deploy.layer if lp.type == "Pooling"]
    assert [p.pad for p in pools] == [1] and "Concat" not in [lp.type for lp in deploy.layer]
    net = caffe.Net(str(tmp_path / "avg.prototxt"), str(tmp_path / "avg.caffemodel"), caffe.TEST)
    net.forward(x=x)
    np.testing.assert_allclose(net.blobs[outputs["z"]].data, theirs, rtol=1e-6, atol=1e-6)


# -- PyTorch's exports ---------------------------------------------------------------------
def _focus(torch, mode):
    """YOLOv5's Focus: the four pixel phases as channels; beside it the channel order flipped
    (``x[:, [2, 1, 0]]``, a Gather, and ``x.flip(1)``, a negative step) and padded by
    ``F.pad``."""
    class Focus(torch.nn.Module):
        def forward(self, x):
            y = torch.cat([x[..., ::2, ::2], x[..., 1::2, ::2], x[..., ::2, 1::2],
                           x[..., 1::2, 1::2]], 1)
            z = torch.nn.functional.pad(x[:, [2, 1, 0]] + x.flip(1), (2, 1, 1, 2), mode=mode)
            return y, z
    return Focus().eval()


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate"])
def test_torch_focus_flip_and_pad_export(tmp_path, mode):
    torch = pytest.importorskip("torch")
    buf = io.BytesIO()
    torch.onnx.export(_focus(torch, mode), (torch.zeros(1, 3, 8, 6),), buf, dynamo=False,
                      opset_version=17, input_names=["x"], output_names=["y", "z"])
    import onnx
    model = onnx.load_from_string(buf.getvalue())
    ops = [n.op_type for n in model.graph.node]
    assert "Slice" in ops and "Pad" in ops
    x = _input((1, 3, 8, 6))
    x[~np.isfinite(x)] = 1.0  # (the sum of a flip meets inf - inf; the copies are tested above)
    theirs = run_ort(model, {"x": x})
    prefix = str(tmp_path / "focus")
    _, _, outputs = caffe_onnx.to_caffe(model, prefix)
    net = caffe.Net(prefix + ".prototxt", prefix + ".caffemodel", caffe.TEST)
    net.forward(x=x)
    for name in ("y", "z"):
        _same(net.blobs[outputs[name]].data, theirs[name], name)
