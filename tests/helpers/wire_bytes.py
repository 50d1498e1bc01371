"""Protobuf's wire format written out by hand, for tests that build binary files byte by byte
(independent of the package's own encoder in pycaffe_lite/proto/wire.py)."""


def varint(n):
    """Base-128 varint; negative values go out as 10-byte two's complement, as protobuf writes
    negative int32 and int64 fields."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def tag(number, wire_type):
    return varint(number << 3 | wire_type)


def length_delimited(number, payload):
    return tag(number, 2) + varint(len(payload)) + payload


def varint_field(number, value):
    return tag(number, 0) + varint(value)


def string(number, text):
    return length_delimited(number, text.encode())


def fork_layer(name, type_, bottoms, tops, extra=b""):
    """A LayerParameter's bytes: name (1), type (2), bottoms (3), tops (4), then ``extra``
    (a fork's parameter fields, written by the caller)."""
    out = string(1, name) + string(2, type_)
    for b in bottoms:
        out += string(3, b)
    for t in tops:
        out += string(4, t)
    return out + extra
