"""Shared pieces of the MXNet import tests: the references MXNet 1.9.1 wrote (see
tools/mxnet_reference.py) and NDArray-list files written byte by byte from the format's
description (the layouts MXNet 1.9.1 no longer writes, and damaged files)."""

import json
import os
import struct

import numpy as np

FIXTURES = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures",
                        "mxnet")
with open(os.path.join(FIXTURES, "manifest.json")) as _f:
    MANIFEST = json.load(_f)
CASES = sorted(k for k, v in MANIFEST.items() if "expect_error" not in v)
ERROR_CASES = sorted(k for k, v in MANIFEST.items() if "expect_error" in v)
RTOL = 1e-4  # relative, with a floor of RTOL x the output's largest magnitude


# full-width references (tools/mxnet_reference.py --full), where a directory of them is given
MORE = os.environ.get("PYCAFFE_LITE_MXNET_REFERENCES")
MORE_MANIFEST = {}
if MORE and os.path.exists(os.path.join(MORE, "manifest.json")):
    with open(os.path.join(MORE, "manifest.json")) as _f:
        MORE_MANIFEST = json.load(_f)


def _where(case):
    return (MORE, MORE_MANIFEST) if case not in MANIFEST else (FIXTURES, MANIFEST)


def files(case):
    root, _ = _where(case)
    return (os.path.join(root, case + "-symbol.json"),
            os.path.join(root, case + "-0000.params"))


def inputs(case):
    root, manifest = _where(case)
    return {k: np.load(os.path.join(root, v["file"])).astype(np.float32)
            for k, v in manifest[case]["inputs"].items()}


def references(case):
    root, manifest = _where(case)
    return [np.load(os.path.join(root, f)) for f in manifest[case]["outputs"]]


def assert_matches(got, ref, what):
    assert got.shape == ref.shape, "%s: shape %s, MXNet %s" % (what, got.shape, ref.shape)
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=RTOL * scale, err_msg=what)


def run(net, case):
    for name, arr in inputs(case).items():
        net.blobs[name].data[...] = arr
    net.forward()


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
