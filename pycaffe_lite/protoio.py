"""Reading and writing protobuf messages in text (prototxt) and binary form.

Errors name the file and, for text, the line and column. Net and solver files are upgraded from
Caffe's legacy forms on read (see :mod:`pycaffe_lite.upgrade`).
"""

import os
import re

from google.protobuf import message as _pb_message
from google.protobuf import text_format

from .errors import ProtoError
from .proto import caffe_pb2

_LOCATION = re.compile(r"^(\d+):(\d+)\s*:\s*(.*)$", re.S)


def _source_name(path):
    return path if path is not None else "<string>"


def parse_text(text, message, path=None):
    """Parse prototxt ``text`` into ``message`` (modified in place and returned)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        text_format.Merge(text, message, allow_unknown_extension=False)
    except text_format.ParseError as exc:
        line, column, detail = None, None, str(exc)
        m = _LOCATION.match(detail)
        if m:
            line, column, detail = int(m.group(1)), int(m.group(2)), m.group(3)
        elif getattr(exc, "GetLine", None) and exc.GetLine() is not None:
            line, column = exc.GetLine(), exc.GetColumn()
        raise ProtoError(
            "cannot parse %s as %s: %s" % (os.path.basename(_source_name(path)),
                                             message.DESCRIPTOR.name, detail),
            _source_name(path), line, column) from None
    return message


def read_text(path, message):
    """Read a prototxt file into ``message``."""
    return parse_text(_read_bytes(path), message, path)


def read_binary(path, message):
    """Read a binary protobuf file (``.caffemodel``, ``.solverstate``, ``.binaryproto``)."""
    data = _read_bytes(path)
    try:
        message.ParseFromString(data)
    except (_pb_message.DecodeError, RuntimeError) as exc:
        raise ProtoError(
            "cannot decode %d bytes as binary %s (truncated or not a %s file?): %s"
            % (len(data), message.DESCRIPTOR.name, message.DESCRIPTOR.name, exc),
            path) from None
    return message


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise ProtoError("file not found", path) from None
    except IsADirectoryError:
        raise ProtoError("is a directory, expected a file", path) from None
    except OSError as exc:
        raise ProtoError("cannot read file: %s" % exc.strerror, path) from None


def write_text(message, path):
    atomic_write(path, text_format.MessageToString(message).encode("utf-8"))


def write_binary(message, path):
    atomic_write(path, message.SerializeToString())


def atomic_write(path, data):
    """Write ``data`` to ``path`` through a temporary file and a rename.

    A crash while writing leaves the previous file (if any) untouched.
    """
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, ".%s.tmp%d" % (os.path.basename(path), os.getpid()))
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise ProtoError("cannot write file: %s" % (exc.strerror or exc), path) from None


def looks_like_text(data):
    """Guess whether ``data`` is a prototxt (text) rather than a binary message."""
    head = data[:512]
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def read_net_param(source, upgrade=True):
    """A NetParameter from a prototxt path, a binary path, prototxt text or a message."""
    from . import upgrade as _upgrade

    if isinstance(source, caffe_pb2.NetParameter):
        param = caffe_pb2.NetParameter()
        param.CopyFrom(source)
        path = None
    elif isinstance(source, (str, os.PathLike)) and os.path.exists(source):
        path = os.fspath(source)
        data = _read_bytes(path)
        param = caffe_pb2.NetParameter()
        if looks_like_text(data):
            parse_text(data, param, path)
        else:
            read_binary(path, param)
    elif isinstance(source, str) and ("{" in source or ":" in source):
        path = None
        param = parse_text(source, caffe_pb2.NetParameter())
    else:
        raise ProtoError("file not found", os.fspath(source))
    if upgrade:
        _upgrade.upgrade_net_as_needed(param, path or "<string>")
    return param


def read_solver_param(source, upgrade=True):
    """A SolverParameter from a prototxt path, prototxt text or a message."""
    from . import upgrade as _upgrade

    if isinstance(source, caffe_pb2.SolverParameter):
        param = caffe_pb2.SolverParameter()
        param.CopyFrom(source)
        path = None
    elif isinstance(source, (str, os.PathLike)) and os.path.exists(source):
        path = os.fspath(source)
        param = read_text(path, caffe_pb2.SolverParameter())
    elif isinstance(source, str) and ":" in source:
        path = None
        param = parse_text(source, caffe_pb2.SolverParameter())
    else:
        raise ProtoError("file not found", os.fspath(source))
    if upgrade:
        _upgrade.upgrade_solver_as_needed(param, path or "<string>")
    return param
