"""MXNet's ``.params`` file (an NDArray list, as ``mx.nd.save`` and ``export`` write it), read
without MXNet.

The layout (little-endian), after MXNet's ``src/ndarray/ndarray.cc`` and dmlc's streams::

    uint64 0x112 (the list magic), uint64 reserved
    uint64 count, then count arrays
    uint64 count, then count keys: uint64 length + bytes ("arg:NAME" / "aux:NAME")

One array, in its newer form (MXNet >= 0.12)::

    uint32 0xF993FAC9 (V2) or 0xF993FACA (V3, NumPy shape semantics)
    int32 storage type (0 dense; 1 row-sparse and 2 CSR are refused here)
    shape: int32 ndim, ndim x int64       (V2: ndim 0 = an empty array, nothing follows)
    context: int32 device type, int32 device id
    int32 type flag (0 float32, 1 float64, 2 float16, 3 uint8, 4 int32, 5 int8, 6 int64,
                     7 bool (one byte), 12 bfloat16 (the upper 16 bits of a float32))
    the values, C order

and in the older ones: ``uint32 0xF993FAC8`` (V1) then the shape as above; or, in the oldest,
no magic: ``uint32 ndim`` and ndim x uint32 sizes; then context, type flag and values.
"""

import math
import os
import struct

import numpy as np

from ..errors import CaffeError

LIST_MAGIC = 0x112
V1_MAGIC = 0xF993FAC8
V2_MAGIC = 0xF993FAC9
V3_MAGIC = 0xF993FACA

DTYPES = {0: np.float32, 1: np.float64, 2: np.float16, 3: np.uint8, 4: np.int32, 5: np.int8,
          6: np.int64, 7: np.bool_, 12: np.uint16}
BFLOAT16 = 12  # stored as uint16 bits, given as float32
MAX_NDIM = 32


class _Reader:
    def __init__(self, data, path):
        self.data = data
        self.path = path
        self.pos = 0

    def error(self, message, at=None):
        return CaffeError("%s: byte offset %d: %s" % (self.path, self.pos if at is None else at,
                                                     message))

    def take(self, n, what):
        if n < 0 or self.pos + n > len(self.data):
            raise self.error("the file ends (at %d bytes) inside %s, which needs %d bytes"
                             % (len(self.data), what, n))
        chunk = self.data[self.pos:self.pos + n]
        self.pos += n
        return chunk

    def unpack(self, fmt, what):
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))

    def u32(self, what):
        return self.unpack("I", what)[0]

    def i32(self, what):
        return self.unpack("i", what)[0]

    def u64(self, what):
        return self.unpack("Q", what)[0]


def _shape(r, what):
    """A TShape: int32 ndim then int64 sizes. None for an unknown (negative ndim) shape."""
    at = r.pos
    ndim = r.i32(what + " (its number of axes)")
    if ndim < 0:
        return None
    if ndim > MAX_NDIM:
        raise r.error("%s has %d axes; the file is corrupt" % (what, ndim), at)
    dims = r.unpack("%dq" % ndim, what + " (its sizes)") if ndim else ()
    if any(d < 0 for d in dims):
        raise r.error("%s has a negative size %s; the file is corrupt" % (what, dims), at)
    return tuple(int(d) for d in dims)


def _array(r, index):
    what = "array %d" % index
    at = r.pos
    magic = r.u32(what + " (its header)")
    if magic in (V2_MAGIC, V3_MAGIC):
        stype = r.i32(what + " (its storage type)")
        if stype != 0:
            raise r.error("%s is stored sparse (storage type %d); only dense arrays are read"
                          % (what, stype), at)
        shape = _shape(r, what + "'s shape")
        if shape is None or (magic == V2_MAGIC and shape == ()):
            return None  # an empty (none) array: nothing follows
    elif magic == V1_MAGIC:
        shape = _shape(r, what + "'s shape")
        if not shape:
            return None
    else:  # the oldest layout: the magic is the number of axes, sizes are uint32
        if magic > MAX_NDIM:
            raise r.error("%s starts with 0x%08X, neither an NDArray magic number nor a "
                          "number of axes; the file is corrupt" % (what, magic), at)
        shape = r.unpack("%dI" % magic, what + "'s shape") if magic else ()
        if not shape:
            return None
    r.unpack("ii", what + " (its device)")
    flag_at = r.pos
    flag = r.i32(what + " (its type flag)")
    if flag not in DTYPES:
        raise r.error("%s has type flag %d, which is not a type this reader knows (float32, "
                      "float64, float16, bfloat16, bool and the integer types)"
                      % (what, flag), flag_at)
    dtype = np.dtype(DTYPES[flag]).newbyteorder("<")
    count = math.prod(shape)  # Python integers: a corrupt size cannot wrap around
    raw = r.take(count * dtype.itemsize, "%s's %d values of shape %s" % (what, count, shape))
    values = np.frombuffer(raw, dtype).reshape(shape)
    if flag == BFLOAT16:
        return (values.astype(np.uint32) << 16).view(np.float32)
    return values


def parse_params(data, path="<params>"):
    """The arrays of an NDArray-list file's bytes, as an ordered dict key -> NumPy array
    (keys as stored, ``arg:``/``aux:`` prefixes included; ``"0"``, ``"1"``, ... when the file
    has no keys). A bad or truncated file is a :class:`CaffeError` naming ``path`` and the
    byte offset."""
    r = _Reader(bytes(data), path)
    if not data:
        return {}
    magic = r.u64("the header")
    if magic != LIST_MAGIC:
        raise r.error("not an MXNet NDArray file (header 0x%X, expected 0x%X)"
                      % (magic, LIST_MAGIC), 0)
    r.u64("the header")
    count_at = r.pos
    count = r.u64("the number of arrays")
    if count > len(data):
        raise r.error("the file claims %d arrays; it is corrupt" % count, count_at)
    arrays = [_array(r, i) for i in range(count)]
    keys_at = r.pos
    nkeys = r.u64("the number of names")
    if nkeys not in (0, count):
        raise r.error("%d names for %d arrays; the file is corrupt" % (nkeys, count), keys_at)
    keys = []
    for i in range(nkeys):
        length = r.u64("the length of name %d" % i)
        raw = r.take(length, "name %d" % i)
        try:
            keys.append(raw.decode("utf-8"))
        except UnicodeDecodeError:
            raise r.error("name %d is not UTF-8 text; the file is corrupt" % i,
                          r.pos - length) from None
    if r.pos != len(data):
        raise r.error("%d bytes follow the last name; the file is corrupt"
                      % (len(data) - r.pos))
    if not keys:
        keys = [str(i) for i in range(count)]
    return dict(zip(keys, arrays))


def read_params(path):
    """``(arg_params, aux_params)`` of a ``.params`` file: dicts name -> float32 array, the
    ``arg:``/``aux:`` prefixes taken off (a key without one counts as an argument). An empty
    file gives two empty dicts."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise CaffeError("%s: cannot read the MXNet params file: %s"
                         % (path, exc.strerror or exc)) from None
    args, aux = {}, {}
    for key, arr in parse_params(data, path).items():
        kind, sep, name = key.partition(":")
        if not sep:
            kind, name = "arg", key
        if arr is None:
            continue
        (aux if kind == "aux" else args)[name] = np.asarray(arr, np.float32)
    return args, aux
