"""The compiled schema against BVLC Caffe's final caffe.proto, fact by fact."""

import ast
import glob
import os
import struct
import subprocess
import sys

import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor import FieldDescriptor as FD

from pycaffe_lite.proto import caffe_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TSV = os.path.join(HERE, "data", "caffe_proto_fields.tsv")

FDP = descriptor_pb2.FieldDescriptorProto
LABELS = {FDP.LABEL_OPTIONAL: "optional", FDP.LABEL_REPEATED: "repeated",
          FDP.LABEL_REQUIRED: "required"}
SCALARS = {FD.TYPE_DOUBLE: "double", FD.TYPE_FLOAT: "float", FD.TYPE_INT64: "int64",
           FD.TYPE_UINT64: "uint64", FD.TYPE_INT32: "int32", FD.TYPE_BOOL: "bool",
           FD.TYPE_STRING: "string", FD.TYPE_BYTES: "bytes", FD.TYPE_UINT32: "uint32",
           FD.TYPE_SINT32: "sint32", FD.TYPE_SINT64: "sint64"}


# Caffe forks' fields that BVLC lacks, with the forks' numbers (one file per group of forks).
FORK_TSVS = sorted(glob.glob(os.path.join(HERE, "data", "*fork*_proto_fields.tsv")))


def _rows(path=TSV):
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            yield (line.rstrip("\n").split("\t") + [""] * 7)[:7]


ROWS = list(_rows())
FORK_ROWS = [row for path in FORK_TSVS for row in _rows(path)]


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
    _, message, name, number, label, type_, default = row
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


def test_no_unlisted_fields_below_1000():
    """Every field of ours under 1000 is a Caffe field (BVLC's or a fork's); additions use
    numbers >= 1000."""
    listed = {(r[1], r[2]) for r in ROWS + FORK_ROWS if r[0] == "field"}
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
