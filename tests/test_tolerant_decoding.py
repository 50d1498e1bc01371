"""One field never fails a binary file: bytes that are not what this schema declares at their
number (a string or another fork's message where this schema has a message; another wire
type) are kept unread with one warning naming the place, the number, the wire type and the
forks that use the number, and written back byte for byte. Broken bytes still fail, naming
the byte offset.

The fields under test are taken from the fork tables (tests/fixtures/*fork*_proto_fields.tsv,
the moved fields, pycaffe_lite.proto.fork_layer_fields and the claims of fork_fields): every
message-typed field this schema takes from a fork, wherever it sits.
"""

import collections
import glob
import logging
import os

import numpy as np
import pytest

from helpers.wire_bytes import length_delimited, tag, varint_field

import pycaffe_lite as caffe
from pycaffe_lite.data.datum import (RECORD_FIELDS_REPORTED, DataError, parse_datum,
                                     parse_datums, raw_shapes)
from pycaffe_lite.errors import ProtoError
from pycaffe_lite.layers.data.annotated_data_layer import parse_annotated
from pycaffe_lite.proto import caffe_pb2, fork_fields, fork_layer_fields, protoio, tolerant

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures")
# CaffeOnSpark's LayerParameter.source_class as open_nsfw's data layer carries it
CAFFE_ON_SPARK = b"com.yahoo.ml.caffe.ImageDataFrame"


# the wire format, written by hand: key(number, wire type), field(number, payload)
key, field = tag, length_delimited


# ---- the fields the schema takes from forks ----------------------------------------------
def _message(name):
    return caffe_pb2.DESCRIPTOR.message_types_by_name.get(name)


def fork_message_fields():
    """{(message, field)} of every message-typed field this schema holds for a fork."""
    found = set()
    for path in glob.glob(os.path.join(FIXTURES, "**", "*fork*_proto_fields.tsv"),
                          recursive=True):
        with open(path, encoding="utf-8") as f:
            for line in f:
                cols = line.rstrip("\n").split("\t")
                if cols[0] == "field" and _message(cols[1]) and _message(cols[5]):
                    found.add((cols[1], cols[2]))
    with open(os.path.join(FIXTURES, "forks", "nvcaffe_intel_moved_fields.tsv"),
              encoding="utf-8") as f:
        for line in f:
            if not line.startswith("#") and line.strip():
                found.add(tuple(line.split("\t")[:2]))
    found |= {("LayerParameter", f.field) for f in fork_layer_fields.LAYER_FIELDS}
    found |= {("LayerParameter", c.field) for c in fork_fields.LAYER_CLAIMS}
    found |= {(m, c.field) for m, claims in fork_fields.MESSAGE_CLAIMS.items() for c in claims}
    out = []
    for message, name in sorted(found):
        descriptor = _message(message).fields_by_name.get(name)
        if descriptor is not None and descriptor.type == descriptor.TYPE_MESSAGE:
            out.append((message, name))
    return out


FORK_FIELDS = fork_message_fields()
ROOTS = ("NetParameter", "AnnotatedDatum", "LabelMap", "SolverParameter")


def path_to(target):
    """(root, [fields]) reaching the message ``target`` from one of :data:`ROOTS`, by the
    shortest chain of message fields."""
    for root in ROOTS:
        seen, queue = {root}, collections.deque([(root, [])])
        while queue:
            name, chain = queue.popleft()
            if name == target:
                return root, chain
            for f in _message(name).fields:
                if f.type != f.TYPE_MESSAGE:
                    continue
                sub = f.message_type.name
                if sub not in seen and f.message_type.containing_type is None:
                    seen.add(sub)
                    queue.append((sub, chain + [(name, f)]))
    raise AssertionError("no way from %s to %s" % (ROOTS, target))


def wrapped(chain, inner, layer_name="forked"):
    """``inner`` (a message's bytes) inside the messages of ``chain``; a LayerParameter on the
    way gets a name first, as every layer has one."""
    for name, f in reversed(chain):
        if f.message_type.name == "LayerParameter":
            inner = field(1, layer_name.encode()) + inner
        inner = field(f.number, inner)
    return inner


def test_the_fork_tables_name_message_fields():
    # Guard against an enumeration that finds nothing and so passes everything.
    names = set(FORK_FIELDS)
    for expected in [("LayerParameter", "psroi_pooling_param"),
                     ("LayerParameter", "detection_output_param"),
                     ("LayerParameter", "interp_param"), ("LayerParameter", "upsample_param"),
                     ("TransformationParameter", "resize_param"),
                     ("AnnotatedDatum", "annotation_group"), ("BatchNormParameter", "filler")]:
        assert expected in names, expected
    assert len(FORK_FIELDS) > 40


def _follow(param, chain):
    """The message at the end of ``chain`` inside ``param``."""
    for _, f in chain:
        param = getattr(param, f.name)
        if f.is_repeated:
            param = param[0]
    return param


def _claim(message, number, wire):
    """The fork claim that takes bytes of ``wire`` type at ``number`` in any layer."""
    claims = fork_fields.LAYER_CLAIMS if message == "LayerParameter" else \
        fork_fields.MESSAGE_CLAIMS.get(message, ())
    return next((c for c in claims if c.number == number and c.wire_type == wire and
                 c.layer_types is None and not c.marked), None)


def _read(root, data, tmp_path):
    if root == "NetParameter":
        path = tmp_path / "fork.caffemodel"
        path.write_bytes(data)
        return protoio.read_binary(str(path), caffe_pb2.NetParameter())
    return protoio.parse_binary(data, getattr(caffe_pb2, root)(), "fork.bin")


PAYLOADS = {
    "a string": lambda number: field(number, CAFFE_ON_SPARK),
    "a varint": lambda number: varint_field(number, 1),
    "4 bytes": lambda number: key(number, 5) + b"\x00\x00\x80\x3f",
}


@pytest.mark.parametrize("kind", sorted(PAYLOADS))
@pytest.mark.parametrize("message,name", FORK_FIELDS)
def test_another_value_at_a_forks_message_number_loads_with_a_warning(message, name, kind,
                                                                      tmp_path, caplog):
    number = _message(message).fields_by_name[name].number
    root, chain = path_to(message)
    data = wrapped(chain, PAYLOADS[kind](number))
    with caplog.at_level(logging.WARNING):
        param = _read(root, data, tmp_path)
    held = _follow(param, chain)
    claim = _claim(message, number, data[len(data) - len(PAYLOADS[kind](number))] & 7)
    if claim is not None:
        # a fork's field of that wire type has this number: the bytes are that field's
        assert held.HasField(claim.field) and not held.HasField(name)
        return
    if held.DESCRIPTOR.fields_by_name[name].is_repeated:
        assert not len(getattr(held, name))
    else:
        assert not held.HasField(name)
    warnings = [r.getMessage() for r in caplog.records
                if "field %d of %s" % (number, message) in r.getMessage()]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    text = warnings[0]
    assert "does not decode as this schema's %s" % name in text, text
    assert "wire type %d" % (data[len(data) - len(PAYLOADS[kind](number))] & 7) in text, text
    if chain and chain[-1][1].message_type.name == "LayerParameter" or message == \
            "LayerParameter":
        assert "layer 'forked'" in text, text
    # nothing of it was read into the field, and the bytes go back as they came
    assert tolerant.serialize(param) == data


def test_the_warning_names_the_forks_that_use_the_number(tmp_path, caplog):
    layer = field(1, b"data") + field(2, b"MemoryData") + \
        field(119, varint_field(1, 32) + varint_field(10000, 0) +
              field(10001, b"/projects/nsfw/data")) + field(10001, CAFFE_ON_SPARK)
    data = field(1, b"nsfw") + field(100, layer)
    path = tmp_path / "nsfw.caffemodel"
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING):
        param = protoio.read_net_param(str(path))
    assert param.layer[0].memory_data_param.batch_size == 32
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    main = next(line for line in lines if "10001 of LayerParameter" in line)
    for part in ("nsfw.caffemodel", "NetParameter.layer[0] (layer 'data')", "wire type 2",
                 "psroi_pooling_param", "CaffeOnSpark (source_class", "R-FCN"):
        assert part in main, (part, main)
    assert any("10000 of MemoryDataParameter" in line and "CaffeOnSpark (share_in_parallel)"
               in line for line in lines), lines
    assert any("10001 of MemoryDataParameter" in line and "CaffeOnSpark (source)" in line
               for line in lines), lines
    out = tmp_path / "again.caffemodel"
    protoio.write_binary(param, str(out))
    assert out.read_bytes() == data


def test_a_forks_claim_still_takes_a_field_set_aside(tmp_path):
    """A Reorg layer of MobileNet-YOLO carries reorg_param at 149; with a string at 10001 in
    the same layer, the claim still moves 149, and the string stays aside."""
    reorg = varint_field(1, 2)  # stride: 2
    layer = field(1, b"reorg") + field(2, b"Reorg") + field(149, reorg) + \
        field(10001, CAFFE_ON_SPARK)
    path = tmp_path / "yolo.caffemodel"
    path.write_bytes(field(100, layer))
    param = protoio.read_binary(str(path), caffe_pb2.NetParameter())
    assert param.layer[0].reorg_param.stride == 2
    assert [u.number for u in fork_fields.unknown_fields(param)] == [10001]


def test_a_valid_file_takes_the_fast_path():
    param = caffe_pb2.NetParameter(name="n")
    param.layer.add(name="a", type="ReLU").psroi_pooling_param.output_dim = 3
    data = param.SerializeToString()
    fresh = caffe_pb2.NetParameter()
    assert tolerant.parse(data, fresh) == [] and fresh == param
    assert tolerant.serialize(fresh) == data


# ---- broken bytes still fail, naming the offset ------------------------------------------
def _small_net():
    net = caffe_pb2.NetParameter(name="n")
    ip = net.layer.add(name="ip", type="InnerProduct")
    ip.blobs.add().CopyFrom(caffe.io.array_to_blobproto(np.ones((2, 3), np.float32)))
    return net


def test_a_truncated_file_names_the_byte_offset(tmp_path):
    data = _small_net().SerializeToString()
    layer_at = len(field(1, b"n"))  # the layer's key follows the net's name
    path = tmp_path / "cut.caffemodel"
    path.write_bytes(data[:-5])
    with pytest.raises(ProtoError, match=r"cut.caffemodel: .*at byte %d: field 100 .*"
                       r"\(truncated\)" % layer_at):
        protoio.read_binary(str(path), caffe_pb2.NetParameter())


def test_garbage_names_the_byte_offset(tmp_path):
    path = tmp_path / "garbage.caffemodel"
    path.write_bytes(field(1, b"n") + b"\xff\xff\xff\xff\x0f\x07")
    with pytest.raises(ProtoError, match=r"at byte 3: .*garbage"):
        protoio.read_binary(str(path), caffe_pb2.NetParameter())


def test_a_blob_that_is_not_a_blob_fails_at_its_offset(tmp_path):
    # the layer's blobs hold the file's data: bytes there that are not a BlobProto are damage,
    # not a fork's field
    layer = field(1, b"ip") + field(7, b"\x0f\xff\x01")
    data = field(1, b"n") + field(100, layer)
    blob_at = len(field(1, b"n")) + 3 + len(field(1, b"ip"))  # 100's key (2) and length (1)
    path = tmp_path / "blob.caffemodel"
    path.write_bytes(data)
    with pytest.raises(ProtoError, match=r"at byte %d: NetParameter.layer\[0\].blobs\[0\] is "
                       r"not a BlobProto" % blob_at):
        protoio.read_binary(str(path), caffe_pb2.NetParameter())


def test_packed_numbers_that_do_not_divide_fail_at_their_offset():
    data = field(5, b"\x00" * 6)  # BlobProto.data: 6 bytes are not whole floats
    with pytest.raises(ProtoError, match=r"at byte 0: BlobProto.data\[0\] is not a valid float"):
        protoio.parse_binary(data, caffe_pb2.BlobProto(), "mean.binaryproto")


# ---- records, binaryproto, solverstate ---------------------------------------------------
def test_datum_records_warn_once_per_field(caplog):
    RECORD_FIELDS_REPORTED.clear()
    good = caffe_pb2.Datum(channels=1, height=1, width=2, data=b"\x01\x02", label=3)
    # label (5) as length-delimited bytes: another wire type at a number this schema reads
    value = good.SerializeToString() + field(5, b"cat")
    with caplog.at_level(logging.WARNING):
        datums = [parse_datum(value, "record %d" % i) for i in range(3)]
    assert all(d.data == b"\x01\x02" and d.label == 3 for d in datums)
    lines = [r.getMessage() for r in caplog.records if "field 5 of Datum" in r.getMessage()]
    assert len(lines) == 1 and "record 0" in lines[0] and "wire type 2" in lines[0], lines
    assert tolerant.serialize(datums[0]) == value


def test_a_broken_datum_record_names_the_record_and_offset():
    value = caffe_pb2.Datum(channels=1, height=1, width=2, data=b"\x01\x02").SerializeToString()
    with pytest.raises(DataError, match=r"record 9 is not a Datum .*at byte 6: .*truncated"):
        parse_datum(value[:-1], "record 9")


def test_a_batch_of_records_parses_as_record_by_record(caplog):
    """parse_datums (the Data layer's batches): plain records take the plain parse and name
    nothing; a record with a field to report, one in an envelope and a broken one go through
    parse_datum with their own names, with its warnings and errors."""
    RECORD_FIELDS_REPORTED.clear()
    plain = [caffe_pb2.Datum(channels=1, height=1, width=2, data=bytes([i, i + 1]), label=i)
             for i in range(4)]
    odd = plain[1].SerializeToString() + field(5, b"cat")  # label as bytes: reported
    kept = plain[2].SerializeToString() + field(999, b"x")  # not in this schema: reported
    values = [plain[0].SerializeToString(), odd, kept, bytearray(plain[3].SerializeToString())]
    # pixels that happen to hold the envelope's key; a field at the envelope's own number
    pixels = caffe_pb2.Datum(channels=1, height=1, width=7, data=tolerant.ENVELOPE_TAG + b"ab",
                             label=4)
    assert len(tolerant.ENVELOPE_TAG) == 5
    values += [pixels.SerializeToString(),
               plain[0].SerializeToString() + field(tolerant.ENVELOPE, b"zz")]
    named = []

    def where_of(i):
        named.append(i)
        return "record %d (key b'%08d')" % (i, i)

    with caplog.at_level(logging.WARNING):
        got = parse_datums(values, where_of)
    want = [parse_datum(bytes(v), "record %d" % i) for i, v in enumerate(values)]
    assert [d.SerializeToString() for d in got] == [d.SerializeToString() for d in want]
    assert [d.label for d in got] == [0, 1, 2, 3, 4, 0]
    assert got[4].data == tolerant.ENVELOPE_TAG + b"ab"
    assert named == [1, 2, 5]
    lines = [r.getMessage() for r in caplog.records]
    assert any("record 1 (key b'00000001')" in line and "field 5 of Datum" in line
               for line in lines), lines
    assert any("record 2 (key b'00000002')" in line and "field 999" in line for line in lines)
    broken = list(values)
    broken[3] = bytes(values[3])[:-1]
    with pytest.raises(DataError, match=r"record 3 \(key b'00000003'\) is not a Datum .*at "
                                        r"byte 11: .*truncated"):
        parse_datums(broken, where_of)


def test_a_batch_of_raw_shapes_names_the_record_with_a_wrong_payload():
    good = caffe_pb2.Datum(channels=2, height=1, width=2, data=b"\x01\x02\x03\x04")
    floats = caffe_pb2.Datum(channels=1, height=1, width=3, float_data=[1, 2, 3])
    named = []

    def where_of(i):
        named.append(i)
        return "record %d" % i

    assert raw_shapes([good, floats], where_of) == [(2, 1, 2), (1, 1, 3)] and not named
    short = caffe_pb2.Datum(channels=1, height=2, width=2, data=b"\x01\x02\x03")
    with pytest.raises(DataError, match="record 1 holds 3 bytes of pixel data for a 1x2x2"):
        raw_shapes([good, short], where_of)
    empty = caffe_pb2.Datum(channels=0, height=2, width=2)
    with pytest.raises(DataError, match=r"record 2 has shape 0x2x2 \(channels x height x "
                                        r"width must be positive\)"):
        raw_shapes([good, floats, empty], where_of)
    floats.float_data.append(4)
    with pytest.raises(DataError, match="record 0 holds 4 float_data values for a 1x1x3"):
        raw_shapes([floats], where_of)


def test_annotated_datum_with_a_string_for_a_box_loads(caplog):
    RECORD_FIELDS_REPORTED.clear()
    datum = caffe_pb2.Datum(channels=1, height=1, width=1, data=b"\x05")
    box = caffe_pb2.NormalizedBBox(xmin=0.1, ymin=0.2, xmax=0.3, ymax=0.4).SerializeToString()
    group = varint_field(1, 2) + field(2, varint_field(1, 0) + field(2, box)) + \
        field(2, varint_field(1, 1) + field(2, CAFFE_ON_SPARK))
    value = field(1, datum.SerializeToString()) + varint_field(2, 0) + field(3, group)
    with caplog.at_level(logging.WARNING):
        anno = parse_annotated(value, "record 0")
    boxes = anno.annotation_group[0].annotation
    assert len(boxes) == 2 and boxes[0].bbox.xmax == pytest.approx(0.3)
    assert not boxes[1].HasField("bbox")
    assert any("annotation_group[0].annotation[1]" in r.getMessage() and
               "field 2 of Annotation" in r.getMessage() for r in caplog.records)
    assert tolerant.serialize(anno) == value


def test_binaryproto_and_solverstate_keep_a_field_of_another_wire_type(tmp_path, caplog):
    blob = caffe.io.array_to_blobproto(np.arange(4, dtype=np.float32).reshape(1, 1, 2, 2))
    data = blob.SerializeToString() + field(1, b"x")  # num (1) as bytes
    path = tmp_path / "mean.binaryproto"
    path.write_bytes(data)
    with caplog.at_level(logging.WARNING):
        back = protoio.read_binary(str(path), caffe_pb2.BlobProto())
    np.testing.assert_array_equal(caffe.io.blobproto_to_array(back).ravel(), np.arange(4))
    state = caffe_pb2.SolverState(iter=7, learned_net="w.caffemodel").SerializeToString()
    state += field(4, b"\x01")  # current_step (4) as bytes
    path = tmp_path / "s.solverstate"
    path.write_bytes(state)
    with caplog.at_level(logging.WARNING):
        s = protoio.read_binary(str(path), caffe_pb2.SolverState())
    assert s.iter == 7 and s.current_step == 0
    lines = [r.getMessage() for r in caplog.records]
    assert any("mean.binaryproto" in t and "field 1 of BlobProto" in t for t in lines), lines
    assert any("s.solverstate" in t and "field 4 of SolverState" in t for t in lines), lines


def filled(descriptor):
    """A message of ``descriptor`` with every scalar field set to a value that is not its
    default (another fork's parameters, as that fork writes them)."""
    msg = tolerant.message_factory.GetMessageClass(descriptor)()
    for f in descriptor.fields:
        if f.type == f.TYPE_MESSAGE:
            continue
        if f.type in (f.TYPE_STRING, f.TYPE_BYTES):
            value = "s" if f.type == f.TYPE_STRING else b"s"
        elif f.type == f.TYPE_BOOL:
            value = not f.default_value
        elif f.type == f.TYPE_ENUM:
            value = f.enum_type.values[-1].number
        elif f.type in (f.TYPE_FLOAT, f.TYPE_DOUBLE):
            value = 2.5
        else:
            value = 3
        if f.is_repeated:
            getattr(msg, f.name).append(value)
        else:
            setattr(msg, f.name, value)
    return msg.SerializeToString()


CROWDED = [c for c in fork_fields.LAYER_CLAIMS
           if c.wire_type == 2 and c.layer_types
           and caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_number.get(c.number) is not None
           and caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_number[c.number].type == 11
           and caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name[c.field].number != c.number]


def test_the_crowded_numbers_are_found():
    assert {c.number for c in CROWDED} >= {137, 140, 142, 143, 147, 148}


@pytest.mark.parametrize("claim", CROWDED, ids=lambda c: "%d-%s" % (c.number, c.field))
def test_another_forks_message_at_a_crowded_number_loads(claim, tmp_path, caplog):
    """Another fork's parameters at a number this schema gives a message: in a layer of the
    fork's type they go to the fork's field; in any other layer they stay as they are (unread
    when they do not decode as this schema's message), and go back unchanged."""
    target = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name[claim.field]
    payload = filled(target.message_type)
    own_type = sorted(claim.layer_types)[0]
    for layer_type in (own_type, "SomeOtherType"):
        layer = field(1, b"forked") + field(2, layer_type.encode()) + field(claim.number,
                                                                             payload)
        data = field(100, layer)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            param = _read("NetParameter", data, tmp_path)
        got = param.layer[0]
        if layer_type == own_type:
            assert got.HasField(claim.field)
            continue
        # protobuf writes the fields it reads before those it does not (and a bool read from
        # a 3 as 1): the same fields, maybe in another order
        written = tolerant.serialize(param)
        again = _read("NetParameter", written, tmp_path)
        assert len(written) == len(data) and tolerant.serialize(again) == written
        assert fork_fields.unknown_fields(again) == fork_fields.unknown_fields(param)
        declared = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_number[claim.number]
        unread = [u for u in fork_fields.unknown_fields(param) if u.number == claim.number]
        if not got.HasField(declared.name):
            lines = [r.getMessage() for r in caplog.records]
            assert unread and any("field %d of LayerParameter" % claim.number in t and
                                  "does not decode" in t for t in lines), lines
