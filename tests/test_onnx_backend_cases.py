"""ONNX's own conformance cases (the node cases of ``onnx.backend.test.case.node`` and the
models under ``onnx/backend/test/data`` in the installed package) through ``to_caffe``: each
case either converts and our Net gives ONNX's expected outputs (computed by ONNX's NumPy
reference), or is refused at import with an error naming the node, its op and what does not
convert. The cases' inputs that the importer needs as constants (weights, scales, axes, ...)
are given as initializers of the case's values; every other input is fed to the Net."""

import functools
import glob
import os
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="onnx is a test dependency")
from onnx import numpy_helper  # noqa: E402

import pycaffe_lite as caffe  # noqa: E402
from helpers.onnx_backend_refused import REFUSED  # noqa: E402
from helpers.onnx_backend_table import MATCH  # noqa: E402
from pycaffe_lite import onnx as caffe_onnx  # noqa: E402
from pycaffe_lite.errors import CaffeError  # noqa: E402

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
RTOL, ATOL = 1e-5, 1e-4
ROUNDING = {"float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


@functools.lru_cache(maxsize=None)
def _node_cases():
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():  # some cases' generators overflow casts on purpose
        warnings.simplefilter("ignore")
        return {c.name: c for c in collect_testcases(None)}


def node_case(name):
    """(model, inputs, expected outputs) of one of ONNX's node cases."""
    case = _node_cases()[name]
    inputs, outputs = case.data_sets[0]

    def array(x):  # the cast cases give TensorProtos (of types NumPy lacks)
        return numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x
    return case.model, [array(x) for x in inputs], [array(x) for x in outputs]


def _tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def data_case(name):
    """(model, inputs, expected outputs) of a model case under the package's data folder:
    ``pytorch-converted/NAME`` etc. (test_data_set_0), or ``light/NAME`` (the zoo nets of
    constant-of-shape weights, fed ``arange(n) / n`` as ONNX's runner feeds them)."""
    kind, base = name.split("/")
    if kind == "light":
        model = onnx.load(os.path.join(DATA, "light", "light_%s.onnx" % base))
        inits = {i.name for i in model.graph.initializer}
        x = [v for v in model.graph.input if v.name not in inits][0]
        shape = tuple(d.dim_value or 1 for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        inputs = [(np.arange(n).reshape(shape) / n).astype(np.float32)]
        return model, inputs, [_tensor(os.path.join(DATA, "light", "light_%s_output_0.pb"
                                                    % base))]
    folder = os.path.join(DATA, kind, base)
    model = onnx.load(os.path.join(folder, "model.onnx"))

    def load(pattern):
        files = glob.glob(os.path.join(folder, "test_data_set_0", pattern))
        return [_tensor(f) for f in sorted(files, key=lambda p: int(re.findall(r"\d+", p)[-1]))]
    return model, load("input_*.pb"), load("output_*.pb")


def freeze(model, inputs, names):
    """The model with the graph inputs ``names`` made initializers of the case's values, and
    the inputs left to feed."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    inits = {i.name for i in m.graph.initializer}
    graph_inputs = [v for v in m.graph.input if v.name not in inits]
    values = {v.name: np.asarray(x) for v, x in zip(graph_inputs, inputs)}
    unknown = set(names) - set(values)
    assert not unknown, "not graph inputs: %s" % sorted(unknown)
    kept = [v for v in m.graph.input if v.name not in names]
    del m.graph.input[:]
    m.graph.input.extend(kept)
    for name in names:
        m.graph.initializer.append(numpy_helper.from_array(values[name], name))
    return m, [(v.name, values[v.name]) for v in kept if v.name in values]


def convert(model, inputs, frozen):
    """The case converted (``frozen`` inputs as initializers, the others' shapes given) and
    built as a TEST Net of the deploy and weights NetParameters (no files: writing them is
    tests/test_onnx_import.py's); returns (net, feed, the ONNX outputs' blobs)."""
    m, feed = freeze(model, inputs, frozen)
    deploy, weights, outputs = caffe_onnx.to_caffe(m, None,
                                                   input_shapes={n: x.shape for n, x in feed})
    net = caffe.Net(deploy, weights, caffe.TEST)
    return net, feed, [outputs[o.name] for o in m.graph.output]


def check_match(model, inputs, expected, frozen, key, rtol=RTOL, atol=ATOL):
    net, feed, blobs = convert(model, inputs, frozen)
    net.forward(**{n: x.astype(np.float32) for n, x in feed})
    for blob, want in zip(blobs, expected):
        got = net.blobs[blob].data
        want = np.asarray(want, dtype=np.float32)
        assert got.shape == want.shape, (key, blob, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=key)


def check_refused(model, inputs, frozen, pattern):
    m, feed = freeze(model, inputs, frozen)
    with pytest.raises(CaffeError, match=pattern):
        caffe_onnx.to_caffe(m, None, input_shapes={n: x.shape for n, x in feed})


# -- the defects these cases found ------------------------------------------------------------
@pytest.mark.slow   # the first test to read a node case: ONNX generates them all, about 4 s
def test_zoo_nets_whose_dropout_names_a_mask():
    # the model zoo's SqueezeNet (as alexnet and vgg19) names the mask output of its Dropout
    # (opset 3..6) and reads it nowhere: nothing to convert, the Dropout is the identity
    model, inputs, expected = data_case("light/squeezenet")
    assert any(len(n.output) > 1 for n in model.graph.node if n.op_type == "Dropout")
    check_match(model, inputs, expected, [], "squeezenet")
    # a mask that is read (here a graph output): at inference nothing is dropped and ONNX's
    # mask is all true, a Power of scale 0 (constant 1; it was refused: 'the dropout mask has
    # no Caffe equivalent'); with training_mode a constant true, still refused
    model, inputs, expected = node_case("test_dropout_default_mask")
    assert np.all(expected[1])
    check_match(model, inputs, expected, [], "mask")
    m, _ = freeze(model, inputs, [])
    m.graph.node[0].input.extend(["", "training"])
    m.graph.initializer.append(numpy_helper.from_array(np.array(True), "training"))
    with pytest.raises(CaffeError, match=r"ONNX node 'y' \(op Dropout\): training-mode dropout "
                                         r"\(random\) does not convert"):
        caffe_onnx.to_caffe(m, None)


def test_align_corners_resize_by_scales_of_fractional_lengths_is_refused():
    # ONNX's align_corners maps x to x (in - 1) / (in * scale - 1): scales of 0.6 on 2 x 4
    # give lengths 1.2 and 2.4, sampled so (ONNX's output [1, 3.142857]); Caffe's Interp
    # samples by the rounded sizes (it gave [1, 4])
    model, inputs, _ = node_case("test_resize_downsample_scales_linear_align_corners")
    check_refused(model, inputs, ["scales"],
                  r"ONNX node 'Y' \(op Resize\): scales \[0\.6.*, 0\.6.*\] give the fractional "
                  r"output lengths \[1\.2.*, 2\.4.*\], which align_corners samples by")
    # scales of whole lengths convert: ONNX's upsampling case
    model, inputs, expected = node_case("test_resize_upsample_scales_linear_align_corners")
    check_match(model, inputs, expected, ["scales"], "up_align")


def test_flatten_of_a_one_axis_input():
    # x.view(1, -1) of a 1-D tensor, exported as Flatten(axis=1): ONNX gives (n, 1); Caffe's
    # Flatten layer refused the net ("axis 1 / end_axis -1 out of range for a bottom of
    # shape (1,)") once imported
    model, inputs, expected = data_case("pytorch-operator/test_operator_view")
    assert inputs[0].ndim == 1
    check_match(model, inputs, expected, [], "view")


def test_empty_tensors_are_refused_at_import():
    # a Caffe blob cannot be empty: an input of size 0 was read as size 1 (the Reshape to
    # (3, 4, 0) with allowzero then failed in the Net), a Split into a piece of size 0
    # of an empty input imported and failed in the Net ("cannot slice axis 0 of size 1 into
    # 3 tops")
    model, inputs, _ = node_case("test_reshape_allowzero_reordered")
    check_refused(model, inputs, ["shape"], r"ONNX input 'data' has an axis of size 0 "
                                             r"\(shape \[0, 3, 4\]\); a Caffe blob cannot be "
                                             r"empty")
    for name in ("test_split_zero_size_splits_opset13", "test_split_zero_size_splits_opset18"):
        model, inputs, _ = node_case(name)
        check_refused(model, inputs, ["split"], r"ONNX input 'input' has an axis of size 0")
    # an empty piece of a Split of a non-empty input (opset 18 allows sizes of 0)
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("Split", ["x", "sizes"], ["a", "b", "c"], name="split", axis=1)],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in "abc"],
        initializer=[numpy_helper.from_array(np.array([2, 0, 1], np.int64), "sizes")])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(CaffeError, match=r"ONNX node 'split' \(op Split\): its output 'b' "
                                         r"has an axis of size 0 \(shape \(1, 0\)\); a Caffe "
                                         r"blob cannot be empty"):
        caffe_onnx.to_caffe(m, None)


def test_gemm_whose_shape_onnx_does_not_infer():
    # torch's addmm at opset 6 (Gemm with `broadcast`): ONNX's shape inference leaves the first
    # Gemm's output without a shape, and the second Gemm, which adds it as C, was refused
    # ("the shape of '3' is unknown")
    model, inputs, expected = data_case("pytorch-operator/test_operator_addmm")
    check_match(model, inputs, expected, ["1"], "addmm")


def test_clip_of_min_above_max_is_refused_at_import():
    # it imported as a Clip layer that the Net then refused (clip_param.min (2) must not be
    # greater than clip_param.max (1))
    model, inputs, _ = node_case("test_clip_min_greater_than_max")
    check_refused(model, inputs, ["min", "max"], r"ONNX node 'y' \(op Clip\): min 2 is greater "
                                                 r"than max 1 \(ONNX then gives max everywhere")


def test_integer_and_non_tensor_inputs_are_refused():
    # a uint8 Sub wraps in ONNX (1 - 2 = 255); fed to Caffe as floats it gave -1 silently
    # (ONNX's own case happens to stay in range, so it matched)
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    graph = helper.make_graph(
        [helper.make_node("Sub", ["x", "y"], ["z"], name="sub")], "g",
        [helper.make_tensor_value_info(n, TensorProto.UINT8, [1, 2]) for n in "xy"],
        [helper.make_tensor_value_info("z", TensorProto.UINT8, [1, 2])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    x, y = np.array([[1, 5]], np.uint8), np.array([[2, 3]], np.uint8)
    assert ReferenceEvaluator(m).run(None, {"x": x, "y": y})[0].tolist() == [[255, 2]]
    with pytest.raises(CaffeError, match=r"ONNX input 'x' is of type uint8; a Caffe blob "
                                         r"holds floats"):
        caffe_onnx.to_caffe(m, None)
    # (a Max of int64, compared and not computed, converts: the table's test_max_int64; so do
    # the Add and Mul of 32- and 64-bit integers, test_mul_uint64, exact below 2^24)
    for name in ("test_sub_uint8", "test_add_int8", "test_mul_uint16", "test_sub_uint64"):
        model, inputs, _ = node_case(name)
        check_refused(model, inputs, [], r"ONNX input '\w+' is of type u?int(8|16|64); .* "
                                         r"computes with it \((u?int(8|16) arithmetic wraps|an "
                                         r"unsigned difference wraps below 0)")
    # a sequence: not a tensor (it was 'input_shapes['x'] has 5 axes; the ONNX input has 0')
    model, _, _ = node_case("test_identity_sequence")
    with pytest.raises(CaffeError, match=r"ONNX input 'x' is of type none \(not a tensor\)"):
        caffe_onnx.to_caffe(model, None)


@pytest.mark.parametrize("name", ["test_shape_start_1", "test_shape_end_negative_1",
                                  "test_shape_clip_start", "test_shape_start_greater_than_end"])
def test_shape_with_start_and_end_folds(name):
    # Shape of a static shape with opset 15's start / end folds to ONNX's dims (it was left
    # unfolded: 'this op has no Caffe equivalent'); a Reshape of a second input to them then
    # converts
    from onnx import TensorProto, helper
    model, inputs, expected = node_case(name)
    dims = [int(d) for d in expected[0]]
    node = model.graph.node[0]
    graph = helper.make_graph(
        [node, helper.make_node("Concat", ["one", node.output[0]], ["target"], axis=0),
         helper.make_node("Reshape", ["z", "target"], ["out"], name="reshape")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(inputs[0].shape)),
         helper.make_tensor_value_info("z", TensorProto.FLOAT, [1] + dims)],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(np.array([1], np.int64), "one")])
    m = helper.make_model(graph, opset_imports=model.opset_import)
    z = np.random.default_rng(0).normal(size=[1] + dims).astype(np.float32)
    check_match(m, [inputs[0], z], [z], [], name)


@pytest.mark.parametrize("name,frozen", [("test_conv_with_autopad_same", ["W"]),
                                         ("test_maxpool_2d_same_lower", []),
                                         ("test_maxpool_2d_precomputed_same_upper", [])])
def test_auto_pad_same_of_even_pads(name, frozen):
    # SAME_UPPER / SAME_LOWER on a static input: the pads they give, where Caffe can take
    # them (these were refused: 'auto_pad SAME_LOWER has no Caffe equivalent')
    model, inputs, expected = node_case(name)
    check_match(model, inputs, expected, frozen, name)


def test_auto_pad_same_of_uneven_pads_is_refused():
    # uneven pads convert as the pool of even pads, its extra windows sliced off (the table's
    # test_maxpool_2d_same_upper, light/inception_v1), but not for an average that counts the
    # padding: ONNX counts one pad, the even pool two
    model, inputs, _ = node_case("test_averagepool_2d_same_upper")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.node[0].attribute.append(onnx.helper.make_attribute("count_include_pad", 1))
    check_refused(m, inputs, [], r"ONNX node 'y' \(op AveragePool\): ONNX pools \[32, 32\] "
                                 r"windows where Caffe's rounding gives \[31, 31\]")
    model, inputs, _ = node_case("test_conv_with_autopad_same")
    m, _ = freeze(model, inputs, ["W"])
    m.graph.node[0].attribute[0].s = b"SAME_UPPER"
    w = numpy_helper.to_array(m.graph.initializer[0])
    m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w[:, :, :2, :2].copy(), "W"))
    for att in m.graph.node[0].attribute:
        if att.name == "kernel_shape":
            att.ints[:] = [2, 2]
        if att.name == "strides":
            att.ints[:] = [1, 1]
    with pytest.raises(CaffeError, match=r"ONNX node 'y' \(op Conv\): asymmetric pads "
                                         r"\[0, 0, 1, 1\] have no Caffe equivalent"):
        caffe_onnx.to_caffe(m, None)


# -- every case whose ops the importer has, and what each must give (helpers/onnx_backend_*)

CASES = [(name, None) for name in MATCH] + \
    [(name, pattern) for pattern, names in REFUSED.items() for name in names]


def test_the_counts_docs_onnx_md_gives():
    text = open(os.path.join(os.path.dirname(__file__), os.pardir, "docs", "onnx.md")).read()
    text = " ".join(text.split())
    assert "%d convert and give ONNX's outputs, %d are refused" % (
        len(MATCH), sum(len(v) for v in REFUSED.values())) in text
    assert len(set(MATCH)) == len(MATCH)


def _load(name):
    return data_case(name) if "/" in name else node_case(name)


def _needs_constant(model, message):
    """The graph input (not the first) that a refusal asks for as a constant: a weight, a
    shape, axes, scales ... given as an input by ONNX's case, or an integer input (axes,
    indices)."""
    found = re.search(r"its \w+ '([^']+)' must be a constant", message) or \
        re.search(r"^ONNX input '([^']+)' is of type u?int", message)
    inits = {i.name for i in model.graph.initializer}
    inputs = [v.name for v in model.graph.input if v.name not in inits]
    if found and found.group(1) in inputs[1:]:
        return found.group(1)
    return None


@pytest.mark.slow   # the whole table: about 10 s on 2 cores
@pytest.mark.parametrize("name,refusal", CASES, ids=[c[0] for c in CASES])
def test_backend_case(name, refusal):
    model, inputs, expected = _load(name)
    frozen = []
    while True:  # the inputs that must be constants become initializers, one by one
        try:
            net, feed, blobs = convert(model, inputs, frozen)
        except CaffeError as exc:
            more = _needs_constant(model, str(exc))
            if more is not None and more not in frozen:
                frozen.append(more)
                continue
            if refusal is None:
                raise
            assert re.match(refusal, str(exc)), str(exc)
            return
        break
    assert refusal is None, "converted; expected a refusal matching %r" % refusal
    net.forward(**{n: x.astype(np.float32) for n, x in feed})
    for blob, want in zip(blobs, expected):
        got = net.blobs[blob].data
        # ONNX's output of float16 or bfloat16 is rounded to that type (half a unit in its
        # last place: 2^-11, 2^-8 relative), ours is float32
        rtol = max(RTOL, ROUNDING.get(np.asarray(want).dtype.name, 0.0))
        want = np.asarray(want).astype(np.float32)
        assert got.shape == want.shape, (blob, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=ATOL)
