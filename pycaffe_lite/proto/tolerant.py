"""Binary messages read field by field where protobuf refuses the whole: a field whose bytes
are not what this schema declares at its number is kept aside, unchanged, and the rest reads.

Forks number their fields freely: CaffeOnSpark writes the string ``source_class`` at
LayerParameter 10001, where R-FCN (and this schema) has ``psroi_pooling_param``. Protobuf keeps
a field of another wire type as an unknown field by itself, but length-delimited bytes at a
message-typed number must parse as that message, or the whole file fails. So:

1. :func:`parse` tries protobuf on the whole (the fast path: one call, no copy).
2. Only when that fails, the bytes are walked with the schema's descriptors: a message field
   whose payload parses is kept as it is; one that does not is mended the same way inside; one
   whose bytes are not that message at all (not even the wire format, or nothing inside can be
   mended) is wrapped, tag and bytes unchanged, in an *envelope*: an unknown field of the parent
   at :data:`ENVELOPE`, the largest field number, which no schema uses. Protobuf keeps unknown
   fields through copies and merges.
3. :func:`serialize` (every binary write of :mod:`.protoio`) opens the envelopes again: the
   field goes back to the file byte for byte, at its own number.

Fields that hold the file's data (:data:`LOAD_BEARING`: a net's layers, a layer's blobs, a
snapshot's history) are never set aside: bytes there that are not the message mean a broken
file, as does a walk that runs off the end or meets a wire type Caffe never writes. That is a
:class:`~pycaffe_lite.errors.ProtoError` naming the byte offset.

What was set aside is listed, with the forks that use the number, by
:func:`.fork_fields.unknown_fields`; the readers log one warning per field.
"""

from typing import NamedTuple

from google.protobuf import message as _pb_message
from google.protobuf import message_factory

from ..errors import ProtoError
from .wire import (END_GROUP, FIXED32, FIXED64, LEN, START_GROUP, VARINT, decode_varint,
                   encode_varint, tag)

#: the field number of an envelope (2**29 - 1, the largest protobuf allows)
ENVELOPE = (1 << 29) - 1
ENVELOPE_TAG = tag(ENVELOPE, LEN)

#: (message, field) pairs whose bytes must parse: the file's own data, never a fork's field
LOAD_BEARING = frozenset([
    ("NetParameter", "layer"), ("NetParameter", "layers"), ("LayerParameter", "blobs"),
    ("V1LayerParameter", "blobs"), ("V0LayerParameter", "blobs"), ("SolverState", "history"),
    ("BlobProtoVector", "blobs"), ("BlobProto", "shape"),
])

_MAX_DEPTH = 64
#: what protobuf's parser raises on bytes it cannot decode
DECODE_ERRORS = (_pb_message.DecodeError, RuntimeError, ValueError)


class Broken(Exception):
    """Bytes that cannot be read at all: ``offset`` in the file and what was found there."""

    def __init__(self, offset, reason, final=False):
        super().__init__("at byte %d: %s" % (offset, reason))
        self.offset = offset
        self.reason = reason
        self.final = final  # damage in a field that holds the file's data: no mending above


def _varint(data, pos, base):
    """:func:`wire.decode_varint`, failing with a :class:`Broken` at the varint's offset."""
    try:
        return decode_varint(data, pos)
    except ValueError as exc:
        raise Broken(base + pos, str(exc)) from None


def walk(data, base=0, one=False, depth=0):
    """The fields of serialized bytes as (number, wire type, key start, value start, end),
    positions within ``data``; a :class:`Broken` (with the offset ``base`` + position) where
    the bytes are not the wire format or end early."""
    pos, size = 0, len(data)
    while pos < size:
        key, start = _varint(data, pos, base)
        number, wire = key >> 3, key & 7
        if number == 0 or key >> 32:
            raise Broken(base + pos, "field number %d is not valid (garbage?)" % number)
        if wire == VARINT:
            _, end = _varint(data, start, base)
        elif wire == LEN:
            length, body = _varint(data, start, base)
            end = body + length
        elif wire == FIXED64:
            end = start + 8
        elif wire == FIXED32:
            end = start + 4
        elif wire == START_GROUP:
            # Caffe writes no groups, but protobuf reads a whole one as an unknown field
            end = _group_end(data, start, number, base, depth + 1)
        else:
            raise Broken(base + pos, "wire type %d at field %d (garbage?)" % (wire, number))
        if end > size:
            raise Broken(base + pos, "field %d needs %d bytes, the data ends after %d "
                         "(truncated)" % (number, end - start, size - start))
        yield number, wire, pos, start, end
        if one:
            return
        pos = end


def _group_end(data, pos, number, base, depth):
    """The position after the end of the group ``number`` whose fields start at ``pos``."""
    if depth > _MAX_DEPTH:
        raise Broken(base + pos, "groups nested deeper than %d (garbage?)" % _MAX_DEPTH)
    size = len(data)
    while pos < size:
        key, start = _varint(data, pos, base)
        if key & 7 == END_GROUP:
            if key >> 3 != number:
                break
            return start
        # one field of the group: walk it alone (a nested group included)
        for _, _, _, _, end in walk(data[pos:], base + pos, True, depth):
            pos += end
    raise Broken(base + pos, "group %d does not end (garbage?)" % number)


def _class(descriptor):
    return message_factory.GetMessageClass(descriptor)


def _parses(cls, data):
    try:
        cls().ParseFromString(data)
        return True
    except DECODE_ERRORS:
        return False


class Kept(NamedTuple):
    """A field set aside: where (``place``, a path of message and field names), the message
    it belongs to, its number and wire type, the byte offset of its key in the file, the field
    this schema declares at the number, and why the bytes are not that."""

    place: str
    message: str
    number: int
    wire_type: int
    offset: int
    declared: str
    reason: str


def _length_delimited(number, payload):
    return tag(number, LEN) + encode_varint(len(payload)) + bytes(payload)


def envelope(raw_field):
    """The envelope holding one whole field (its key and value bytes)."""
    return _length_delimited(ENVELOPE, raw_field)


def _mend(data, descriptor, base, place, kept, depth):
    """``data`` (a ``descriptor`` message's bytes that protobuf refuses) with every field that
    does not decode put in an envelope; the fields set aside are appended to ``kept``."""
    if depth > _MAX_DEPTH:
        raise Broken(base, "messages nested deeper than %d" % _MAX_DEPTH)
    cls = _class(descriptor)
    out = []
    counts = {}
    for number, wire, key_at, start, end in walk(data, base):
        raw = data[key_at:end]
        if number == ENVELOPE:
            out.append(envelope(raw))
            continue
        field = descriptor.fields_by_number.get(number)
        index = counts[number] = counts.get(number, -1) + 1
        is_message = field is not None and field.type == field.TYPE_MESSAGE and wire == LEN
        if field is None or _parses(cls, raw) and not (is_message and
                                                       ENVELOPE_TAG in bytes(raw)):
            out.append(raw)
            continue
        where = "%s.%s" % (place, field.name) + ("[%d]" % index if field.is_repeated else "")
        if is_message:
            length, body = _varint(data, start, base)
            payload = data[body:end]
            sub = field.message_type
            reason = "not a %s" % sub.name
            try:
                fixed = _mend(payload, sub, base + body, where, kept, depth + 1)
                if _parses(_class(sub), fixed):
                    out.append(bytes(data[key_at:start]) + encode_varint(len(fixed)) + fixed)
                    continue
            except Broken as exc:
                if exc.final:
                    raise
                reason = "not a %s (%s)" % (sub.name, exc)
            if (descriptor.name, field.name) in LOAD_BEARING:
                raise Broken(base + key_at, "%s is %s" % (where, reason), final=True)
        else:
            reason = "not a valid %s value" % _type_name(field)
            if (descriptor.name, field.name) in LOAD_BEARING or field.is_repeated and \
                    field.type != field.TYPE_MESSAGE:
                # packed numbers that do not divide into values: the data is damaged
                raise Broken(base + key_at, "%s is %s" % (where, reason), final=True)
        kept.append(Kept(place, descriptor.name, number, wire, base + key_at,
                         "%s (%s)" % (field.name, _type_name(field)), reason))
        out.append(envelope(raw))
    return b"".join(out)


def _type_name(field):
    if field.type == field.TYPE_MESSAGE:
        return field.message_type.name
    return {field.TYPE_STRING: "string", field.TYPE_BYTES: "bytes", field.TYPE_FLOAT: "float",
            field.TYPE_DOUBLE: "double", field.TYPE_BOOL: "bool",
            field.TYPE_ENUM: "enum"}.get(field.type, "integer")


def parse(data, message, path=None):
    """Parse ``data`` into ``message`` (cleared first), setting aside the fields that do not
    decode as this schema declares them. Returns the list of :class:`Kept` (empty on the fast
    path). A ProtoError naming ``path`` and the byte offset when the bytes are broken."""
    if not isinstance(data, (bytes, bytearray)):
        data = bytes(data)  # a buffer from a database
    first = None
    if ENVELOPE_TAG not in data:
        try:
            message.ParseFromString(data)
            return []
        except DECODE_ERRORS as exc:
            first = exc
    # else a field at the envelope's number is in the file itself (a fork's, or damage): it
    # goes into an envelope of its own, so that writing back gives it back as it was
    name = message.DESCRIPTOR.name
    kept = []
    try:
        mended = _mend(memoryview(data), message.DESCRIPTOR, 0, name, kept, 0)
        message.Clear()
        message.ParseFromString(mended)
    except Broken as exc:
        message.Clear()
        raise _error(data, name, "at byte %d: %s" % (exc.offset, exc.reason), path) from None
    except DECODE_ERRORS as exc:
        message.Clear()
        raise _error(data, name, str(first or exc), path) from None
    return kept


def _error(data, name, reason, path):
    """The ProtoError for bytes that are not a ``name`` message; ``reason`` (without the
    path) stays on it for readers that name the bytes their own way (a database record)."""
    exc = ProtoError("cannot decode %d bytes as binary %s (truncated or not a %s file?): %s"
                     % (len(data), name, name, reason), path)
    exc.reason = reason
    return exc


def serialize(message):
    """The bytes of ``message`` as a file holds them: the envelopes opened, each field set aside
    on reading back at its own number, byte for byte. A message that lacks a required field
    (a fork's file may) is written as it is, as protobuf would read it back."""
    data = message.SerializePartialToString()
    if ENVELOPE_TAG not in data:
        return data
    return _unwrap(data, message.DESCRIPTOR)


def _unwrap(data, descriptor):
    """``data`` (bytes) with its envelopes, and those of the messages inside, opened."""
    out = []
    for number, wire, key_at, start, end in walk(data):
        if number == ENVELOPE and wire == LEN:
            _, body = _varint(data, start, 0)
            out.append(data[body:end])
            continue
        field = descriptor.fields_by_number.get(number)
        if field is not None and field.type == field.TYPE_MESSAGE and wire == LEN:
            _, body = _varint(data, start, 0)
            payload = data[body:end]
            if ENVELOPE_TAG in payload:
                inner = _unwrap(payload, field.message_type)
                out.append(data[key_at:start] + encode_varint(len(inner)) + inner)
                continue
        out.append(data[key_at:end])
    return b"".join(out)


def opened(raw):
    """(number, wire type, whole field bytes) of the field inside an envelope's payload."""
    key, start = _varint(raw, 0, 0)
    return key >> 3, key & 7, bytes(raw)
