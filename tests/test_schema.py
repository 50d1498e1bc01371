"""The compiled schema against BVLC Caffe's final caffe.proto and the SSD fork's additions,
fact by fact."""

import ast
import glob
import os
import struct
import subprocess
import sys

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor as FD
from helpers.wire_bytes import length_delimited as _len
from helpers.wire_bytes import tag as _key
from helpers.wire_bytes import varint_field as _vint

from pycaffe_lite.proto import caffe_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TSV = os.path.join(HERE, "fixtures", "caffe_proto_fields.tsv")
SSD_TSV = os.path.join(HERE, "fixtures", "ssd_fork_proto_fields.tsv")

FDP = descriptor_pb2.FieldDescriptorProto
LABELS = {FDP.LABEL_OPTIONAL: "optional", FDP.LABEL_REPEATED: "repeated",
          FDP.LABEL_REQUIRED: "required"}
SCALARS = {FD.TYPE_DOUBLE: "double", FD.TYPE_FLOAT: "float", FD.TYPE_INT64: "int64",
           FD.TYPE_UINT64: "uint64", FD.TYPE_INT32: "int32", FD.TYPE_BOOL: "bool",
           FD.TYPE_STRING: "string", FD.TYPE_BYTES: "bytes", FD.TYPE_UINT32: "uint32",
           FD.TYPE_SINT32: "sint32", FD.TYPE_SINT64: "sint64"}


# Other Caffe forks' fields that BVLC lacks, with the forks' numbers (one file per group of
# forks); the SSD fork's table has its own tests below (some of its numbers move).
FORK_DIRS = (os.path.join(HERE, "fixtures"), os.path.join(HERE, "fixtures", "forks"))
FORK_TSVS = sorted(p for folder in FORK_DIRS
                   for p in glob.glob(os.path.join(folder, "*fork*_proto_fields.tsv"))
                   if os.path.basename(p) != os.path.basename(SSD_TSV))


def _rows(path):
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            yield (line.rstrip("\n").split("\t") + [""] * 7)[:7]


ROWS = list(_rows(TSV))
SSD_ROWS = list(_rows(SSD_TSV))
FORK_ROWS = [row for path in FORK_TSVS for row in _rows(path)]

# The SSD fork's fields whose number BVLC gives to another field of the same message: BVLC
# keeps its number, the fork's field takes one from 1000 up.
SSD_RENUMBERED = {("SolverParameter", "eval_type"): 1004,
                  ("SolverParameter", "ap_version"): 1005}


def _type_name(field):
    if field.type in (FD.TYPE_MESSAGE, FD.TYPE_ENUM):
        full = (field.message_type or field.enum_type).full_name
        return full[len("caffe."):]
    return SCALARS[field.type]


def _default_text(field, raw):
    """Compare defaults as Caffe's text would write them."""
    if field.type == FD.TYPE_ENUM:
        return field.enum_type.values_by_number[field.default_value].name
    if field.type == FD.TYPE_BOOL:
        return "true" if field.default_value else "false"
    if field.type in (FD.TYPE_FLOAT, FD.TYPE_DOUBLE):
        return float(field.default_value)
    return str(field.default_value)


def test_tsv_is_complete():
    assert len(ROWS) > 500
    assert {r[0] for r in ROWS} == {"field", "enum"}


@pytest.mark.parametrize("row", [r for r in ROWS + FORK_ROWS if r[0] == "field"],
                         ids=lambda r: "%s.%s" % (r[1], r[2]))
def test_field(row):
    _check_field(*row[1:])


def _check_field(message, name, number, label, type_, default):
    desc = caffe_pb2.DESCRIPTOR.message_types_by_name[message]
    field = desc.fields_by_name[name]
    proto_field = descriptor_pb2.DescriptorProto()
    desc.CopyToProto(proto_field)
    proto_field = [f for f in proto_field.field if f.name == name][0]
    assert field.number == int(number)
    assert LABELS[proto_field.label] == label
    assert _type_name(field) == type_
    default, _, packed = default.partition(";")
    default = default.strip()
    assert bool(proto_field.options.packed) == (packed == "packed")
    if default:
        assert field.has_default_value
        got = _default_text(field, default)
        if isinstance(got, float):
            assert got == pytest.approx(float(default), rel=1e-7)
        else:
            assert got == default
    else:
        assert not proto_field.HasField("default_value")


@pytest.mark.parametrize("row", [r for r in ROWS + FORK_ROWS if r[0] == "enum"],
                         ids=lambda r: "%s.%s" % (r[1], r[2]))
def test_enum_value(row):
    _, enum, name, number = row[:4]
    if "." in enum:
        message, inner = enum.split(".", 1)
        desc = caffe_pb2.DESCRIPTOR.message_types_by_name[message].enum_types_by_name[inner]
    else:
        desc = caffe_pb2.DESCRIPTOR.enum_types_by_name[enum]
    assert desc.values_by_name[name].number == int(number)


def test_ssd_tsv_is_complete():
    messages = {r[1] for r in SSD_ROWS if r[0] == "field"}
    assert {"AnnotatedDatum", "Annotation", "AnnotationGroup", "NormalizedBBox", "LabelMap",
            "LabelMapItem", "PriorBoxParameter", "DetectionOutputParameter",
            "MultiBoxLossParameter", "NormalizeParameter", "PermuteParameter",
            "DetectionEvaluateParameter", "AnnotatedDataParameter", "BatchSampler",
            "Sampler", "SampleConstraint", "EmitConstraint", "ResizeParameter",
            "NoiseParameter", "SaltPepperParameter", "DistortionParameter",
            "ExpansionParameter", "NonMaximumSuppressionParameter", "SaveOutputParameter",
            "TransformationParameter", "SolverParameter", "LayerParameter"} <= messages
    layer = {r[2]: int(r[3]) for r in SSD_ROWS if r[0] == "field" and r[1] == "LayerParameter"}
    assert {n: layer[n] for n in ("annotated_data_param", "multibox_loss_param",
                                  "permute_param", "prior_box_param", "detection_output_param",
                                  "detection_evaluate_param", "norm_param")} == {
        "annotated_data_param": 200, "multibox_loss_param": 201, "permute_param": 202,
        "prior_box_param": 203, "detection_output_param": 204,
        "detection_evaluate_param": 205, "norm_param": 206}
    # none of the fork's rows repeats a BVLC field
    assert not {(r[1], r[2]) for r in SSD_ROWS} & {(r[1], r[2]) for r in ROWS}


def test_ssd_renumbered_fields_are_exactly_the_collisions():
    """A fork number moves to 1000+ only where BVLC's message already uses it."""
    bvlc_numbers = {(r[1], int(r[3])) for r in ROWS if r[0] == "field"}
    collisions = {(r[1], r[2]) for r in SSD_ROWS
                  if r[0] == "field" and (r[1], int(r[3])) in bvlc_numbers}
    assert collisions == set(SSD_RENUMBERED)
    assert all(n >= 1000 for n in SSD_RENUMBERED.values())


@pytest.mark.parametrize("row", [r for r in SSD_ROWS if r[0] == "field"],
                         ids=lambda r: "%s.%s" % (r[1], r[2]))
def test_ssd_fork_field(row):
    _, message, name, number, label, type_, default = row
    number = str(SSD_RENUMBERED.get((message, name), number))
    _check_field(message, name, number, label, type_, default)


@pytest.mark.parametrize("row", [r for r in SSD_ROWS if r[0] == "enum"],
                         ids=lambda r: "%s.%s" % (r[1], r[2]))
def test_ssd_fork_enum_value(row):
    test_enum_value(row)


def test_no_unlisted_fields_below_1000():
    """Every field of ours under 1000 is a Caffe field (BVLC's or a fork's); additions use
    numbers >= 1000."""
    listed = {(r[1], r[2]) for r in ROWS + SSD_ROWS + FORK_ROWS if r[0] == "field"}
    for mname, desc in caffe_pb2.DESCRIPTOR.message_types_by_name.items():
        for f in desc.fields:
            if (mname, f.name) not in listed:
                assert f.number >= 1000, "%s.%s (%d) is not a Caffe field" % (mname, f.name,
                                                                              f.number)


def _serialized_descriptor(module_source):
    """The descriptor bytes a generated ``*_pb2.py`` registers (AddSerializedFile's argument)."""
    tree = ast.parse(module_source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "AddSerializedFile":
            return node.args[0].value
    raise AssertionError("no AddSerializedFile call in the generated module")


def test_generated_module_matches_schema(tmp_path):
    """Compile proto/caffe.proto afresh and compare with the module in use."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools is a test dependency")
    schema = os.path.join(ROOT, "proto", "caffe.proto")
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + os.path.dirname(schema),
                    "--python_out=" + str(tmp_path), schema], check=True)
    fresh = _normalised(_serialized_descriptor((tmp_path / "caffe_pb2.py").read_text()))
    assert fresh == _normalised(caffe_pb2.DESCRIPTOR.serialized_pb)


def _normalised(serialized):
    """A FileDescriptorProto with float defaults in one spelling (protoc versions write
    '1e-08' or its float32 rounding '9.99999994e-09')."""
    fdp = descriptor_pb2.FileDescriptorProto()
    fdp.ParseFromString(serialized)
    for message in fdp.message_type:
        for f in message.field:
            if f.type == FDP.TYPE_FLOAT and f.HasField("default_value"):
                f.default_value = repr(struct.unpack("f", struct.pack("f", float(
                    f.default_value)))[0])
    return fdp


def test_caffe_wire_bytes():
    """A known message serialises to the bytes Caffe writes (field numbers and packing)."""
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend([2, 3])
    blob.data.extend([1.0])
    # data = field 5, packed float 1.0; shape = field 7 holding dim (field 1) packed [2, 3]
    # fields go out in number order: data (5) before shape (7)
    assert blob.SerializeToString() == bytes.fromhex("2a040000803f") + \
        bytes.fromhex("3a040a020203")


def test_installed_protobuf_requirement_matches_the_generated_module():
    """Generated code needs a protobuf runtime of its own major version, at least as new: the
    package's requirement is derived from it, so pip upgrades an older protobuf."""
    import importlib.metadata
    import re

    from google.protobuf import __version__ as runtime

    source = open(caffe_pb2.__file__).read()
    gencode = re.search(r"Protobuf Python Version: (\d+)\.(\d+)\.(\d+)", source)
    assert gencode, "the generated module names its protobuf version"
    major, minor, patch = (int(v) for v in gencode.groups())
    reqs = [r for r in importlib.metadata.requires("pycaffe-lite") or []
            if r.startswith("protobuf")]
    assert reqs == ["protobuf<%d,>=%d.%d.%d" % (major + 1, major, minor, patch)] or \
        reqs == ["protobuf>=%d.%d.%d,<%d" % (major, minor, patch, major + 1)], reqs
    run = tuple(int(v) for v in re.match(r"(\d+)\.(\d+)\.(\d+)", runtime).groups())
    assert run[0] == major and run >= (major, minor, patch)


def _f32(number, value):
    return _key(number, 5) + struct.pack("<f", value)


def test_ssd_fork_wire_bytes_parse():
    """Bytes laid out as the SSD fork writes them (its field numbers, proto2 unpacked repeated
    floats) parse into the fork's fields: a net with a PriorBox layer, an AnnotatedDatum."""
    prior = (_f32(1, 30.0) + _f32(2, 60.0) + _f32(3, 2.0) + _f32(3, 3.0) + _vint(4, 0)
             + _vint(5, 1) + b"".join(_f32(6, v) for v in (0.1, 0.1, 0.2, 0.2))
             + _vint(7, 300) + _f32(10, 8.0) + _f32(13, 0.25))
    nms = _f32(1, 0.45) + _vint(2, 400) + _f32(3, 0.9)
    det_out = (_vint(1, 21) + _vint(2, 1) + _vint(3, 0) + _len(4, nms) + _vint(6, 2)
               + _vint(7, 200) + _f32(9, 0.01))
    layer1 = _len(1, b"mbox_priorbox") + _len(2, b"PriorBox") + _len(203, prior)
    layer2 = _len(1, b"detection_out") + _len(2, b"DetectionOutput") + _len(204, det_out)
    layer3 = (_len(1, b"conv4_3_norm") + _len(2, b"Normalize")
              + _len(206, _vint(1, 0) + _len(2, _len(1, b"constant") + _f32(2, 20.0))
                     + _vint(3, 0)))
    wire = _len(100, layer1) + _len(100, layer2) + _len(100, layer3)
    net = caffe_pb2.NetParameter.FromString(wire)
    # nothing was left as an unknown field: the bytes (in field order) come back unchanged
    assert net.SerializeToString() == wire
    p = net.layer[0].prior_box_param
    assert list(p.min_size) == [30.0] and list(p.max_size) == [60.0]
    assert list(p.aspect_ratio) == [2.0, 3.0] and not p.flip and p.clip
    assert list(p.variance) == pytest.approx([0.1, 0.1, 0.2, 0.2])
    assert (p.img_size, p.step, p.offset) == (300, 8.0, 0.25)
    d = net.layer[1].detection_output_param
    assert (d.num_classes, d.share_location, d.background_label_id, d.keep_top_k) == \
        (21, True, 0, 200)
    assert d.code_type == caffe_pb2.PriorBoxParameter.CENTER_SIZE
    assert d.confidence_threshold == pytest.approx(0.01)
    assert (d.nms_param.nms_threshold, d.nms_param.top_k, d.nms_param.eta) == \
        pytest.approx((0.45, 400, 0.9))
    n = net.layer[2].norm_param
    assert not n.across_spatial and not n.channel_shared
    assert (n.scale_filler.type, n.scale_filler.value) == ("constant", 20.0)

    bbox = (_f32(1, 0.1) + _f32(2, 0.2) + _f32(3, 0.5) + _f32(4, 0.75) + _vint(6, 1))
    group = _vint(1, 3) + _len(2, _vint(1, 7) + _len(2, bbox))
    datum = _vint(1, 3) + _vint(2, 2) + _vint(3, 2) + _len(4, bytes(range(12))) + _vint(7, 0)
    record = _len(1, datum) + _vint(2, 0) + _len(3, group)
    anno = caffe_pb2.AnnotatedDatum.FromString(record)
    assert anno.type == caffe_pb2.AnnotatedDatum.BBOX and anno.HasField("type")
    assert (anno.datum.channels, anno.datum.height, anno.datum.width) == (3, 2, 2)
    assert anno.datum.data == bytes(range(12))
    g = anno.annotation_group[0]
    assert g.group_label == 3 and g.annotation[0].instance_id == 7
    b = g.annotation[0].bbox
    assert (b.xmin, b.ymin, b.xmax, b.ymax) == pytest.approx((0.1, 0.2, 0.5, 0.75))
    assert b.difficult
    # and the same bytes come back when written here
    assert anno.SerializeToString() == record
