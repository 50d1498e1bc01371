"""MXNet NDArray-list files written byte by byte from the format's description (for the
reader's tests: the layouts MXNet 1.9.1 no longer writes, and damaged files)."""

import struct

import numpy as np

FLAGS = {np.dtype(np.float32): 0, np.dtype(np.float64): 1, np.dtype(np.float16): 2,
         np.dtype(np.int32): 4, np.dtype(np.int64): 6}


def array_bytes(arr, layout="v2"):
    """One array: ``v2``/``v3`` (magic, storage type, int32 ndim + int64 sizes), ``v1`` (magic,
    int32 ndim + int64 sizes) or ``legacy`` (uint32 ndim + uint32 sizes, no magic); then the
    device (cpu, 0), the type flag and the little-endian values."""
    arr = np.asarray(arr)
    shape = struct.pack("<i", arr.ndim) + struct.pack("<%dq" % arr.ndim, *arr.shape)
    if layout in ("v2", "v3"):
        head = struct.pack("<Ii", 0xF993FAC9 if layout == "v2" else 0xF993FACA, 0) + shape
    elif layout == "v1":
        head = struct.pack("<I", 0xF993FAC8) + shape
    else:
        head = struct.pack("<I", arr.ndim) + struct.pack("<%dI" % arr.ndim, *arr.shape)
    body = struct.pack("<ii", 1, 0) + struct.pack("<i", FLAGS[arr.dtype])
    return head + body + arr.astype(arr.dtype.newbyteorder("<")).tobytes()


def ndarray_list(arrays, layout="v2", keys=True):
    """The file: list magic, reserved, the arrays, the keys (``arrays`` a dict key -> array)."""
    out = struct.pack("<QQ", 0x112, 0) + struct.pack("<Q", len(arrays))
    for arr in arrays.values():
        out += array_bytes(arr, layout)
    names = list(arrays) if keys else []
    out += struct.pack("<Q", len(names))
    for name in names:
        raw = name.encode("utf-8")
        out += struct.pack("<Q", len(raw)) + raw
    return out
