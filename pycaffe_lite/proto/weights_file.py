"""The files that hold trained weights, apart from any Net: a ``.caffemodel`` (a binary
NetParameter) read into a message with the forks' fields found again and the legacy forms
upgraded, and the HDF5 files (Caffe's ``/data/<layer>/<i>`` layout) written whole or not at
all. Copying weights into a Net is the Net's business (:mod:`pycaffe_lite.weights`)."""

import io

from ..errors import CaffeError, ProtoError, install_hint
from . import caffe_pb2, protoio

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def h5py_module():
    """h5py, or a CaffeError saying how to install it."""
    try:
        import h5py
    except ImportError:
        raise CaffeError("HDF5 weights need h5py: %s" % install_hint("hdf5", "h5py")) from None
    return h5py


def is_hdf5(path):
    """Whether ``path`` starts with the HDF5 signature (a ProtoError when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read(8) == HDF5_SIGNATURE
    except IsADirectoryError:
        raise ProtoError("is a directory, expected a weights file (.caffemodel or .h5)",
                         path) from None
    except OSError as exc:
        raise ProtoError("cannot read file: %s" % (exc.strerror or exc), path) from None


def read_caffemodel(path):
    """The NetParameter of a ``.caffemodel``: the forks' fields moved to this schema's numbers
    and legacy nets upgraded, as Caffe's ``CopyTrainedLayers`` reads it; a field whose bytes
    are not this schema's there is kept aside with a warning (:func:`protoio.read_binary`)."""
    from . import upgrade

    source = read_expecting(path, caffe_pb2.NetParameter(), "weights")
    upgrade.upgrade_net_as_needed(source, path, weights=True)
    return source


def read_expecting(path, message, expected):
    """``protoio.read_binary(path, message)``; a file that does not parse and is plainly
    another kind of Caffe file than ``expected`` raises a ProtoError saying so
    (:func:`other_kind`)."""
    try:
        return protoio.read_binary(path, message)
    except ProtoError:
        hint = other_kind(path, expected)
        if not hint:
            raise
        raise ProtoError(hint, path) from None


def other_kind(path, expected):
    """Where the file at ``path``, wanted as ``expected`` ("weights" or "solver state"), is
    plainly another kind of Caffe file (a prototxt, a solver state, a .caffemodel): a sentence
    saying so and where it goes; else "". Parsed strictly, so that no warning is logged."""
    from google.protobuf.message import DecodeError

    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return ""
    if data and protoio.looks_like_text(data):
        return ("this is a text file (a .prototxt net or solver definition?), not %s: "
                "give the binary file that training wrote (.%s)"
                % ("binary weights" if expected == "weights" else "a binary solver state",
                   "caffemodel" if expected == "weights" else "solverstate"))
    try:
        if expected == "weights":
            state = caffe_pb2.SolverState.FromString(data)
            if len(state.history) and state.learned_net:
                return ("this is a solver state (.solverstate, which training writes next to "
                        "the .caffemodel), not weights: resume training from it with "
                        "--snapshot (solver.restore), or give the .caffemodel it names (%s) "
                        "as the weights" % state.learned_net)
        else:
            net = caffe_pb2.NetParameter.FromString(data)
            if any(len(lp.blobs) for lp in list(net.layer) + list(net.layers)):
                return ("this is a weights file (.caffemodel), not a solver state: fine-tune "
                        "from it with --weights (net.copy_from), or resume from the "
                        ".solverstate written with it")
    except (DecodeError, ValueError, RuntimeError):
        return ""
    return ""


def write_hdf5(path, fill, what="HDF5 file"):
    """Write an HDF5 file built by ``fill(h5file)``: in memory first, then to ``path`` with
    :func:`protoio.atomic_write`. A full disk or a crash then leaves any previous file intact,
    and a failing write is a ProtoError rather than an HDF5 library error (which, on a full
    disk, can bring the process down when the file is closed)."""
    h5py = h5py_module()
    buffer = io.BytesIO()
    with h5py.File(buffer, "w") as f:
        fill(f)
    protoio.atomic_write(path, buffer.getvalue(), what)
