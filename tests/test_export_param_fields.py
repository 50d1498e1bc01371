"""Every parameter field that an exported layer type reads is, for the exporters, either
honoured (the option sweep draws it and compares both exporters' outputs with our net's:
tests/test_export_option_sweep.py), one that changes no deploy output (NOT_SWEPT), or
accounted for here with a test of its value. The messages a type reads are found in the
source of its layer class (and its bases), so a field or message added to a layer without
an export check fails this test, naming the type and the field."""

import inspect
import re

import numpy as np
import pytest

from helpers import export_sweep_common, export_sweep_layout  # noqa: F401  (their generators)
from helpers.export_sweep import run_pytorch
from helpers.export_sweep_cases import NOT_SWEPT, PARAM
from helpers.onnx_runtime import input_layers, net_from_text, run_ort
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2

pytest.importorskip("torch")

LP = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name

# (type, message) -> {field: how it is accounted for}; each kind has a test below
OTHER = {
    ("ReLU6", "relu_param"): {"negative_slope": "refused by our net"},
    ("ReLU6", "clip_param"): {"min": "fixed bounds", "max": "fixed bounds"},
    # tests/test_onnx_forks.py's DET_CASES compare the exported rows for the rest
    ("DetectionOutput", "detection_output_param"): {
        f: "tests/test_onnx_forks.py" for f in (
            "background_label_id", "clip", "code_type", "confidence_threshold", "keep_top_k",
            "nms_param", "normalized_bbox", "num_classes", "objectness_score", "share_location",
            "variance_encoded_in_target")} | {
        f: "writes files or images, no top" for f in (
            "save_file", "save_output_param", "visualize", "visualize_threshold")},
}


def exported_types():
    from pycaffe_lite.onnx import CONVERTERS
    from pycaffe_lite.pytorch import GENERATORS

    return sorted(set(CONVERTERS) | set(GENERATORS))


def messages_read(type_):
    from pycaffe_lite.layers import load_all
    from pycaffe_lite.registry import LAYERS

    load_all()
    cls = LAYERS.get(type_)
    source = "".join(inspect.getsource(inspect.getmodule(c)) for c in cls.__mro__
                     if c.__module__.startswith("pycaffe_lite"))
    found = set(re.findall(r"layer_param\.(\w+_param)\b", source)) & set(LP)
    return found | ({PARAM[type_]} if PARAM.get(type_) else set())


def test_every_field_of_every_exported_type_is_accounted_for():
    missing, checked = [], 0
    for type_ in exported_types():
        for message in sorted(messages_read(type_)):
            for field in LP[message].message_type.fields:
                checked += 1
                if message == PARAM.get(type_) or field.name in NOT_SWEPT.get(message, ()):
                    continue  # the sweep's test_every_field_of_the_schema_is_drawn
                if field.name not in OTHER.get((type_, message), {}):
                    missing.append("%s: %s.%s" % (type_, message, field.name))
    assert not missing, missing
    assert checked > 200  # the scan finds the messages (241 fields at this writing)


def test_relu6_refuses_a_negative_slope_naming_the_layer():
    text = input_layers({"data": (2, 3)}) + (
        '\nlayer { name: "layer" type: "ReLU6" bottom: "data" top: "out" '
        'relu_param { negative_slope: 0.1 } }')
    with pytest.raises(CaffeError, match=r"'layer'.*negative_slope 0.1"):
        net_from_text(text)


def test_relu6_keeps_its_bounds_whatever_clip_param_says():
    """The forks' ReLU6 has no bounds to set: a clip_param beside it is not read, by our net
    nor by the exporters: min(max(x, 0), 6) by hand in all three."""
    from pycaffe_lite import onnx as caffe_onnx

    text = input_layers({"data": (2, 4)}) + (
        '\nlayer { name: "layer" type: "ReLU6" bottom: "data" top: "out" '
        'clip_param { min: -1 max: 2 } }')
    net = net_from_text(text)
    x = np.array([[-3, -0.5, 1.5, 2.5], [5.9, 6.1, 9, 0]], np.float32)
    by_hand = np.array([[0, 0, 1.5, 2.5], [5.9, 6, 6, 0]], np.float32)
    np.testing.assert_array_equal(net.forward(data=x)["out"], by_hand)
    np.testing.assert_array_equal(run_ort(caffe_onnx.export(net, None)[0], {"data": x})["out"],
                                  by_hand)
    np.testing.assert_array_equal(run_pytorch(net, {"data": x}, None)["out"], by_hand)
