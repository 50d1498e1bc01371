"""The protobuf wire format, read and written by hand where the generated classes cannot help:
a fork's field under another number (:mod:`.fork_fields`), and bytes that do not decode as
this schema declares them (:mod:`.tolerant`)."""

VARINT, FIXED64, LEN, START_GROUP, END_GROUP, FIXED32 = 0, 1, 2, 3, 4, 5


def encode_varint(n):
    """The protobuf varint bytes of a non-negative integer."""
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def tag(number, wire):
    """The key bytes of field ``number`` with wire type ``wire``."""
    return encode_varint(number << 3 | wire)


def decode_varint(data, pos):
    """The varint at ``pos`` of ``data`` and the position after it; ValueError where the data
    ends inside it or it runs past protobuf's 10 bytes."""
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ValueError("the data ends inside a varint (truncated)")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise ValueError("a varint longer than 10 bytes")


def fields(data):
    """The top-level fields of serialized bytes: (number, wire type, raw bytes after the tag,
    value), the value being an int (varint), the payload (length-delimited) or the raw bytes."""
    pos = 0
    while pos < len(data):
        key, start = decode_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, end = decode_varint(data, start)
        elif wire == LEN:
            length, body = decode_varint(data, start)
            end = body + length
            value = data[body:end]
        elif wire in (FIXED64, FIXED32):
            end = start + (8 if wire == FIXED64 else 4)
            value = data[start:end]
        else:
            raise ValueError("wire type %d (groups are not used by Caffe)" % wire)
        if end > len(data):
            raise ValueError("truncated field %d" % number)
        yield number, wire, data[start:end], value
        pos = end
