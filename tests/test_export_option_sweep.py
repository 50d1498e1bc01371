"""Every export option against the engine that runs it.

For each layer type with an ONNX converter or a PyTorch generator, seeded random
combinations of its ``*_param`` fields and input shapes (tests/helpers/export_sweep*.py): the
one-layer net, exported at the exporter's lowest and highest ONNX opsets and run by
onnxruntime, and exported to PyTorch and run as a module, equals our forward to 1e-5 of its
largest magnitude. A combination our Net refuses is left out (a sample of those refusals is
checked against BVLC's own checks below); an exporter may refuse only with a CaffeError that
names the layer and one of the reasons in ``EXPORT_REFUSALS``.

The everyday tier draws a few combinations of every type; the full sweep (``slow``) many
more, at two more opsets (18: ReduceSum & co. take their axes as an input from there on;
21: the exporter's default)."""

import collections
import re

import numpy as np
import pytest

from helpers import export_sweep as sweep
from helpers import export_sweep_common, export_sweep_layout  # noqa: F401  (their generators)
from helpers.export_sweep import Case
from helpers.export_sweep_cases import GENERATORS, NOT_SWEPT, PARAM
from helpers.onnx_runtime import net_from_text
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2

torch = pytest.importorskip("torch", reason="torch is a test dependency (marker: torch)")
pytestmark = pytest.mark.torch

EVERYDAY = 10  # combinations per type
FULL = 150
FULL_OPSETS = (13, 18, 21, sweep.max_opset())  # 21: the exporter's default

# what an exporter may refuse, each a documented limit of ONNX / PyTorch (docs/onnx.md,
# docs/pytorch.md)
EXPORT_REFUSALS = [
    r"the last one wholly outside the input",  # a Caffe pooling window past the input
    r"the MAX pooling mask \(second top\) has no (ONNX|PyTorch) equivalent",
    r"does not convert with batch statistics|convert with use_global_stats only",
    r"MaxRoiPool at opset \d+ \(its version 22\) has no onnxruntime kernel",
]

# the highest opset a type exports at
OPSET_LIMITS = {"ROIPooling": 21}

# types whose options the sweep leaves to their own tests
LEFT_TO_OWN_TESTS = {"DetectionOutput"}  # test_onnx_forks.py's DET_CASES, rows compared as sets


def rng_for(type_, seed):
    return np.random.default_rng([sum(map(ord, type_)), seed])


def sweep_type(type_, seeds, engines):
    counts, failures = collections.Counter(), []
    for seed in seeds:
        case = GENERATORS[type_](rng_for(type_, seed))
        if case is None:
            continue
        result = sweep.run_case(case, seed, engines)
        if result is None:
            counts["refused by our Net"] += 1
            continue
        for engine, outcome in result.items():
            kind = outcome.split(":")[0]
            counts[engine, kind] += 1
            if kind == "refused" and not any(re.search(r, outcome) for r in EXPORT_REFUSALS):
                failures.append("%s: unexpected refusal %s\n  %r" % (engine, outcome, case))
            elif kind in ("mismatch", "crash"):
                failures.append("%s: %s\n  %r" % (engine, outcome, case))
    assert not failures, "\n".join(failures[:10])
    for engine in engines:  # the sweep compares numbers, not only refusals
        if engine.startswith("onnx-") and int(engine[5:]) > OPSET_LIMITS.get(type_, 1000):
            assert counts[engine, "ok"] == 0, (engine, dict(counts))
            continue
        assert counts[engine, "ok"] >= len(seeds) // 3, (engine, dict(counts))
    return counts


@pytest.mark.parametrize("type_", sorted(GENERATORS))
def test_a_few_combinations_of_every_type(type_):
    sweep_type(type_, range(EVERYDAY), sweep.engines(sweep.OPSETS))


@pytest.mark.slow
@pytest.mark.parametrize("type_", sorted(GENERATORS))
def test_full_option_sweep(type_):
    sweep_type(type_, range(EVERYDAY, EVERYDAY + FULL), sweep.engines(FULL_OPSETS))


def test_every_exported_type_is_swept():
    from pycaffe_lite.onnx import CONVERTERS
    from pycaffe_lite.pytorch import GENERATORS as TORCH

    assert set(CONVERTERS) | set(TORCH) - LEFT_TO_OWN_TESTS <= set(GENERATORS) | \
        LEFT_TO_OWN_TESTS, (set(CONVERTERS) | set(TORCH)) - set(GENERATORS) - LEFT_TO_OWN_TESTS


@pytest.mark.parametrize("type_", sorted(t for t in GENERATORS if PARAM[t]))
def test_every_field_of_the_schema_is_drawn(type_):
    """The fields of the type's message, from caffe_pb2's descriptors, each drawn by some
    combination of the full sweep (only NOT_SWEPT's, which change no deploy output, not)."""
    field = PARAM[type_]
    message = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name[field].message_type
    schema = {f.name for f in message.fields} - NOT_SWEPT.get(field, set())
    drawn = set()
    for seed in range(EVERYDAY + FULL):
        case = GENERATORS[type_](rng_for(type_, seed))
        if case is not None:
            drawn |= {name for msg, name in case.fields() if msg == field}
    assert schema <= drawn, sorted(schema - drawn)


# ---- what the sweep found, one test each -----------------------------------------------

def assert_every_engine_agrees(case, seed=0):
    result = sweep.run_case(case, seed, sweep.engines(sweep.OPSETS))
    assert result is not None, "our Net refuses %r" % case
    assert set(result.values()) == {"ok"}, result


def test_pytorch_slice_with_one_top_is_its_bottom():
    """A Slice with one top (no slice_point) is a copy in Caffe; the module's layer returned
    torch.split's one-element tuple as the blob."""
    case = Case("Slice", "slice_param { axis: -3 }", {"data": (2, 2, 3)})
    net = net_from_text(case.text)
    x = np.arange(12, dtype=np.float32).reshape(2, 2, 3)
    np.testing.assert_array_equal(net.forward(data=x)["out"], x)  # by hand: a copy
    assert_every_engine_agrees(case)
    assert_every_engine_agrees(Case("Slice", "", {"data": (3, 1, 4, 2)}))


def test_pytorch_argmax_of_a_vector_without_axis():
    """ArgMax without axis ranks each item's values flattened: an (N,) bottom has one value
    per item, its index 0 (BVLC: the top is (N, 1, top_k)); the module flattened from axis
    1, which a vector lacks."""
    case = Case("ArgMax", "argmax_param { out_max_val: true }", {"data": (5,)})
    net = net_from_text(case.text)
    x = np.array([3, -1, 2, 0.5, 7], np.float32)
    out = net.forward(data=x)["out"]
    assert out.shape == (5, 2, 1)
    np.testing.assert_array_equal(out[:, 0, 0], 0)  # by hand
    np.testing.assert_array_equal(out[:, 1, 0], x)
    assert_every_engine_agrees(case)
    assert_every_engine_agrees(Case("ArgMax", "", {"data": (4,)}))


def test_pytorch_batch_norm_of_a_vector():
    """BVLC's BatchNorm takes a 1-axis bottom as one channel; the module broadcast its
    (1, C) statistics over it and gave a (1, N) top."""
    case = Case("BatchNorm", "batch_norm_param { eps: 0.1 }", {"data": (4,)})
    net = net_from_text(case.text)
    net.params["layer"][0].data[...] = 0.5
    net.params["layer"][1].data[...] = 2.0
    net.params["layer"][2].data[...] = 0.5
    x = np.array([1, -2, 3, 0], np.float32)
    np.testing.assert_allclose(net.forward(data=x)["out"], (x - 1.0) / np.sqrt(4.0 + 0.1),
                               rtol=1e-6)  # by hand: mean 0.5 / 0.5, variance 2 / 0.5
    assert_every_engine_agrees(case)
    for params in ("batch_norm_param { use_global_stats: false }",
                   "batch_norm_param { scale_bias: true }"):
        assert_every_engine_agrees(Case("BatchNorm", params, {"data": (5,)}))


def test_stochastic_pooling_where_a_window_sums_to_zero_or_less():
    """Caffe's test-time STOCHASTIC pooling is sum(v^2) / sum(v) where the sum is positive,
    else 0 (a window of a ReLU's zeros); ONNX divided 0 by 0 (NaN) and both engines divided
    a negative sum."""
    case = Case("Pooling", "pooling_param { pool: STOCHASTIC kernel_size: 2 stride: 2 }",
                {"data": (1, 1, 2, 6)},
                feeds={"data": np.array([[0, 0, 1, 0, -1, 0.5], [0, 0, 2, 3, 0, 0]])})
    net = net_from_text(case.text)
    out = net.forward(data=case.feeds["data"].reshape(1, 1, 2, 6).astype(np.float32))["out"]
    np.testing.assert_allclose(out.ravel(), [0, (1 + 4 + 9) / 6, 0], rtol=1e-6)  # by hand
    assert_every_engine_agrees(case)


def test_global_stochastic_pooling():
    """Global STOCHASTIC pooling is the same sum(v^2) / sum(v) over the whole plane; both
    exporters refused it."""
    x = np.array([[[[1, 2, 0], [0, 3, 0]], [[-1, 0, 0], [0, 0, 0.5]]]], np.float32)
    case = Case("Pooling", "pooling_param { pool: STOCHASTIC global_pooling: true }",
                {"data": (1, 2, 2, 3)}, feeds={"data": x})
    out = net_from_text(case.text).forward(data=x)["out"]
    np.testing.assert_allclose(out.ravel(), [14 / 6, 0], rtol=1e-6)  # by hand
    assert_every_engine_agrees(case)


# ---- combinations our Net refuses, as BVLC does ----------------------------------------

def one(type_, params, shapes, bottoms=("data",)):
    return Case(type_, params, shapes, bottoms).text


# each with the check in BVLC's layer (or the fork's) that refuses it too
BVLC_REFUSES = {
    # FlattenLayer::Reshape: bottom[0]->count(start_axis, end_axis + 1): CHECK_LE(start, end)
    "flatten_end_two_before_axis": one("Flatten", "flatten_param { axis: 2 end_axis: 0 }",
                                       {"data": (2, 3, 4)}),
    # CanonicalAxisIndex(1) of a one-axis blob: CHECK_LT(axis_index, num_axes())
    "flatten_of_a_vector": one("Flatten", "", {"data": (4,)}),
    # CropLayer: the default axis 2 through CanonicalAxisIndex of a two-axis blob
    "crop_default_axis_of_a_matrix": one("Crop", "", {"data": (4, 3), "ref": (2, 2)},
                                         ("data", "ref")),
    # MVNLayer reads num(), channels(), height(), width(): LegacyShape's CHECK_LE(num_axes, 4)
    "mvn_of_five_axes": one("MVN", "", {"data": (2, 3, 2, 2, 2)}),
    # PoolingLayer::LayerSetUp: "Padding implemented only for average and max pooling."
    "stochastic_pooling_with_pad": one("Pooling", "pooling_param { pool: STOCHASTIC "
                                       "kernel_size: 3 pad: 1 }", {"data": (1, 2, 5, 5)}),
    # PoolingLayer::LayerSetUp: "With Global_pooling: true Filter size cannot specified"
    "global_pooling_with_kernel": one("Pooling", "pooling_param { global_pooling: true "
                                      "kernel_size: 2 }", {"data": (1, 2, 5, 5)}),
    # EltwiseLayer::LayerSetUp: "Eltwise Layer takes one coefficient per bottom blob."
    "eltwise_coeff_count": one("Eltwise", "eltwise_param { coeff: 1 coeff: 2 }",
                               {"a": (2, 3), "b": (2, 3), "c": (2, 3)}, ("a", "b", "c")),
    # ScaleLayer::Reshape: CHECK_EQ(bottom[0]->shape(axis_ + i), scale->shape(i))
    "scale_bottom_of_other_shape": one("Scale", "", {"data": (1, 5, 2, 2), "s": (1,)},
                                       ("data", "s")),
    # LRNLayer::LayerSetUp: "LRN only supports odd values for local_size"
    "lrn_even_size": one("LRN", "lrn_param { local_size: 4 }", {"data": (1, 3, 4, 4)}),
    # PSPNet's InterpLayer::Reshape: CHECK_GT(height_in_eff_, 0)
    "interp_cropped_to_nothing": one("Interp", "interp_param { zoom_factor: 2 pad_beg: -1 "
                                     "pad_end: -1 }", {"data": (1, 1, 2, 3)}),
}


@pytest.mark.parametrize("key", sorted(BVLC_REFUSES))
def test_our_refusals_are_caffes(key):
    with pytest.raises(CaffeError, match="layer 'layer'"):
        net_from_text(BVLC_REFUSES[key])


def test_flatten_with_end_axis_just_before_axis_inserts_an_axis():
    """BVLC's Flatten takes count(axis, end_axis + 1), which is 1 for end_axis = axis - 1:
    an axis of 1 inserted at axis (Caffe refuses only an end_axis further back). Our Net
    refused the net."""
    case = Case("Flatten", "flatten_param { axis: 2 end_axis: 1 }", {"data": (2, 3, 4)})
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    out = net_from_text(case.text).forward(data=x)["out"]
    np.testing.assert_array_equal(out, x.reshape(2, 3, 1, 4))  # by hand
    assert_every_engine_agrees(case)
    assert_every_engine_agrees(Case("Flatten", "flatten_param { axis: -1 end_axis: -2 }",
                                    {"data": (6, 1, 1)}))


def test_roi_pooling_past_opset_21_is_refused_naming_the_layer():
    """ONNX's MaxRoiPool became version 22 (bfloat16 added); onnxruntime has no kernel for
    it, so a model written at opset 22 or later failed to load. The exporter refuses those
    opsets for ROIPooling, naming the layer; 21 and lower run (the sweep above)."""
    from pycaffe_lite import onnx as caffe_onnx

    case = Case("ROIPooling", "roi_pooling_param { pooled_h: 2 pooled_w: 2 }",
                {"data": (1, 1, 5, 5), "rois": (1, 5)}, ("data", "rois"),
                feeds={"rois": np.array([0, 0, 0, 3, 3], np.float32)})
    net = net_from_text(case.text)
    for opset in (22, sweep.max_opset()):
        with pytest.raises(CaffeError, match=r"layer 'layer' \(type ROIPooling\): MaxRoiPool "
                                             r"at opset %d .* export at opset 21" % opset):
            caffe_onnx.export(net, None, opset=opset)
    assert sweep.run_case(case, 0, ["onnx-13", "onnx-21"]) == {"onnx-13": "ok",
                                                               "onnx-21": "ok"}


# layers whose ONNX graph holds the batch size: along the batch axis, or a Reshape whose
# target starts before it
BATCH_AXIS_CASES = {
    "slice_axis_0": Case("Slice", "slice_param { axis: 0 slice_point: 1 }", {"data": (3, 2)},
                         tops=("a", "b")),
    "crop_axis_0": Case("Crop", "crop_param { axis: 0 offset: 1 }",
                        {"data": (3, 4), "ref": (2, 2)}, ("data", "ref")),
    "argmax_axis_0": Case("ArgMax", "argmax_param { axis: 0 }", {"data": (4, 3)}),
    "reshape_before_the_batch": Case("Reshape", "reshape_param { shape { dim: 1 dim: -1 } "
                                     "num_axes: 0 }", {"data": (2, 3)}),
}


@pytest.mark.parametrize("key", sorted(BATCH_AXIS_CASES))
def test_a_layer_that_holds_the_batch_size_makes_the_onnx_batch_static(key):
    """The graph's batch axis is dynamic by default, but these layers' ONNX nodes hold the
    batch size (split sizes, crop ends, the reversed axis's length, a Reshape's target): at
    another batch size the model gave other shapes or values than the net, without an
    error. Their graph declares the net's batch instead, and the report says why."""
    from pycaffe_lite import onnx as caffe_onnx

    case = BATCH_AXIS_CASES[key]
    net = net_from_text(case.text)
    model, report = caffe_onnx.export(net, None)
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        assert not dims[0].dim_param and dims[0].dim_value == net.blobs[value.name].shape[0]
    assert [layer for layer, _ in report["static_batch"]] == ["layer"]
    assert_every_engine_agrees(case)
    # the other layers keep the dynamic batch (test_onnx_export.py runs other batch sizes)
    other = Case("TanH", "", {"data": case.shapes["data"]})
    dynamic, report = caffe_onnx.export(net_from_text(other.text), None)
    assert dynamic.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "N"
    assert report["static_batch"] == []
