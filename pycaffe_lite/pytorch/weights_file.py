"""A state_dict of float32 tensors written in PyTorch's file format without PyTorch.

The format (``torch.save`` since 1.6): a zip archive (stored, not compressed) whose entries
share one folder: ``data.pkl``, a pickle (protocol 2) of an ``OrderedDict`` mapping each name
to ``torch._utils._rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict())``, where
``storage`` is a persistent id ``("storage", torch.FloatStorage, key, "cpu", numel)``;
``data/<key>``, the storage's bytes, little-endian; ``byteorder``; ``version``. The pickle
names only globals that ``torch.load(..., weights_only=True)`` accepts.
"""

import io
import struct
import zipfile

import numpy as np

from ..proto.protoio import atomic_write

FOLDER = "weights"


class _Pickle:
    """Protocol-2 pickle opcodes, enough for a state_dict."""

    def __init__(self):
        self.out = bytearray(b"\x80\x02")

    def glob(self, module, name):
        self.out += b"c" + module.encode() + b"\n" + name.encode() + b"\n"

    def text(self, s):
        data = s.encode("utf-8")
        self.out += b"X" + struct.pack("<I", len(data)) + data

    def int(self, value):
        if 0 <= value < 256:
            self.out += b"K" + bytes([value])
        elif -2 ** 31 <= value < 2 ** 31:
            self.out += b"J" + struct.pack("<i", value)
        else:
            data = int(value).to_bytes((int(value).bit_length() + 8) // 8, "little", signed=True)
            self.out += b"\x8a" + bytes([len(data)]) + data

    def ints(self, values):
        self.out += b"("
        for v in values:
            self.int(int(v))
        self.out += b"t"

    def empty_ordered_dict(self):
        self.glob("collections", "OrderedDict")
        self.out += b")R"


def _contiguous_strides(shape):
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= max(int(d), 1)
    return tuple(reversed(strides))


def state_dict_bytes(weights):
    """The bytes of ``weights`` (name -> array, in order) as ``torch.save`` writes a
    state_dict of float32 tensors."""
    p = _Pickle()
    p.empty_ordered_dict()
    arrays = []
    p.out += b"("
    for key, (name, value) in enumerate(weights.items()):
        array = np.array(value, dtype="<f4")  # a copy in C order, 0-d kept
        arrays.append(array)
        p.text(name)
        p.glob("torch._utils", "_rebuild_tensor_v2")
        p.out += b"("
        p.out += b"("
        p.text("storage")
        p.glob("torch", "FloatStorage")
        p.text(str(key))
        p.text("cpu")
        p.int(array.size)
        p.out += b"tQ"  # the persistent id tuple, then BINPERSID
        p.int(0)
        p.ints(array.shape)
        p.ints(_contiguous_strides(array.shape))
        p.out += b"\x89"  # requires_grad False
        p.empty_ordered_dict()
        p.out += b"tR"
    p.out += b"u."
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as z:
        z.writestr(FOLDER + "/data.pkl", bytes(p.out))
        z.writestr(FOLDER + "/byteorder", "little")
        for key, array in enumerate(arrays):
            z.writestr("%s/data/%d" % (FOLDER, key), array.tobytes())
        z.writestr(FOLDER + "/version", "3\n")
    return buffer.getvalue()


def save_state_dict(weights, path):
    """Writes :func:`state_dict_bytes` of ``weights`` to ``path`` through a temporary file,
    renamed into place (a failed write leaves a previous file unchanged)."""
    atomic_write(path, state_dict_bytes(weights), "the PyTorch weights")
