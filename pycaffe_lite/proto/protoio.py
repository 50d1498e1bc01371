"""Reading and writing protobuf messages in text (prototxt) and binary form.

Errors name the file and, for text, the line and column. Net and solver files are upgraded from
Caffe's legacy forms on read (see :mod:`pycaffe_lite.proto.upgrade`).
"""

import errno
import os
import re

from google.protobuf import text_format

from ..errors import ProtoError
from . import caffe_pb2, fork_fields, fork_layer_fields, tolerant

_LOCATION = re.compile(r"^(\d+):(\d+)\s*:\s*(.*)$", re.S)


def _source_name(path):
    return path if path is not None else "<string>"


def _decode_text(data, message, path):
    """``data`` (bytes) as text. Bytes that are not UTF-8 are tolerated in comments only: in a
    name or a value they would silently become another string (a layer name that no longer
    matches its weights), so they are an error naming the line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    text = data.decode("utf-8", errors="replace")
    for number, line in enumerate(text.split("\n"), 1):
        bad = line.find("\ufffd")
        if bad < 0:
            continue
        comment = line.find("#")
        if 0 <= comment < bad:
            continue
        raw = data.split(b"\n")[number - 1]
        byte = next((b for b in raw if b >= 0x80), 0)
        raise ProtoError("cannot parse %s as %s: byte 0x%02x is not UTF-8 text; save the file "
                         "as UTF-8 (names and strings must be UTF-8)"
                         % (os.path.basename(_source_name(path)), message.DESCRIPTOR.name, byte),
                         _source_name(path), number, bad + 1)
    return text


def parse_text(text, message, path=None):
    """Parse prototxt ``text`` into ``message`` (modified in place and returned)."""
    if isinstance(text, bytes):
        text = _decode_text(text, message, path)
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
            "cannot parse %s as %s: %s%s" % (os.path.basename(_source_name(path)),
                                               message.DESCRIPTOR.name, detail,
                                               _fork_hint(detail) or _brace_hint(detail, message)
                                               or _kind_hint(detail, message)
                                               or _field_hint(detail) or _enum_hint(detail)),
            _source_name(path), line, column) from None
    return message


_NO_FIELD = re.compile(r'Message type "caffe\.(\w+)" has no field named "(\w+)"')


def _fork_hint(detail):
    """Where a Caffe fork defines a field that this schema lacks, say which."""
    m = _NO_FIELD.search(detail)
    fork = m and fork_fields.fork_of_field(m.group(1), m.group(2))
    if not fork:
        return ""
    types = m.group(1) == "LayerParameter" and fork_layer_fields.types_of_field(m.group(2))
    if types:
        return (" (the parameters of the %s layer%s of %s, which pycaffe-lite does not "
                "implement)" % (" and ".join(types), "s" if len(types) > 1 else "", fork))
    return " (a field of the %s fork, not supported here)" % fork


def _brace_hint(detail, message):
    """A field that the message lacks but the message around it has (``layer`` in a
    LayerParameter): a block above was left open, the usual cause being a missing '}'."""
    m = _NO_FIELD.search(detail)
    if not m:
        return ""
    inner, wrong = m.group(1), m.group(2)
    if inner == message.DESCRIPTOR.name:
        return ""  # the file's top level: no block is open there
    outer = [(d, "which holds the " + inner) for d in
             caffe_pb2.DESCRIPTOR.message_types_by_name.values()
             if any(f.message_type is not None and f.message_type.name == inner
                    for f in d.fields)]
    outer.append((message.DESCRIPTOR, "the file's top level"))
    for descriptor, relation in outer:
        if wrong in descriptor.fields_by_name:
            return (" ('%s' is a field of %s, %s: is a '}' missing above this line, closing "
                    "the block before it, or is the field in the wrong block?)"
                    % (wrong, descriptor.name, relation))
    return ""


# The files given for one another: a solver as a net, a net as a solver.
_KINDS = {"NetParameter": ("SolverParameter", "a solver file (give it as the solver: --solver, "
                           "caffe.get_solver)"),
          "SolverParameter": ("NetParameter", "a net definition (a solver names it in its "
                              "'net' field; give it as --model or to caffe.Net)")}


def _kind_hint(detail, message):
    """A top-level field of the other kind of file: the wrong file was given."""
    m = _NO_FIELD.search(detail)
    kind = _KINDS.get(message.DESCRIPTOR.name)
    if not m or not kind or m.group(1) != message.DESCRIPTOR.name:
        return ""
    other = caffe_pb2.DESCRIPTOR.message_types_by_name[kind[0]]
    if m.group(2) not in other.fields_by_name:
        return ""
    return " ('%s' is a field of %s: is this %s?)" % (m.group(2), kind[0], kind[1])


_NO_ENUM_VALUE = re.compile(r'Enum type "caffe\.([\w.]+)" has no value named (\w+)')


def _enum_hint(detail):
    """For an enum value the enum lacks, its values (and the closest, for a typo)."""
    m = _NO_ENUM_VALUE.search(detail)
    if not m:
        return ""
    try:
        enum = caffe_pb2.DESCRIPTOR.pool.FindEnumTypeByName("caffe." + m.group(1))
    except KeyError:
        return ""
    import difflib

    names = [v.name for v in enum.values]
    wrong = m.group(2)
    fork = fork_fields.fork_of_enum_value(m.group(1), wrong)
    if fork:
        return " (a value of %s, not supported here) Values: %s." % (fork, ", ".join(names))
    close = [n for n in names if n.lower() == wrong.lower()] or \
        difflib.get_close_matches(wrong, names, n=1, cutoff=0.6)
    return "%s Values: %s." % (" Did you mean %s?" % close[0] if close else "",
                               ", ".join(names))


def _field_hint(detail):
    """For a field name that the message lacks, the closest names it has (a typo)."""
    m = _NO_FIELD.search(detail)
    descriptor = m and caffe_pb2.DESCRIPTOR.message_types_by_name.get(m.group(1))
    if not descriptor:
        return ""
    import difflib

    names = [f.name for f in descriptor.fields]
    wrong = m.group(2)
    close = [n for n in names if n.lower() == wrong.lower()] or \
        difflib.get_close_matches(wrong, names, n=3, cutoff=0.6)
    return " Did you mean %s?" % " or ".join("'%s'" % n for n in close) if close else ""


def read_text(path, message):
    """Read a prototxt file into ``message``."""
    return parse_text(_read_bytes(path), message, path)


def read_binary(path, message):
    """Read a binary protobuf file (``.caffemodel``, ``.solverstate``, ``.binaryproto``).

    A field whose bytes are not what this schema declares at its number (a fork's field under
    a number this schema gives to something else) does not fail the file: it is kept as it is
    (:mod:`.tolerant`), a NetParameter's forks' fields are moved to this schema's numbers
    (:func:`fork_fields.restore`), and one warning names each field still unread. Broken
    bytes (truncated, garbage) are a ProtoError naming the byte offset."""
    data = _read_bytes(path)
    if not data:
        raise ProtoError("file is empty (0 bytes), expected a binary %s: it was not written "
                         "completely (a crash or a full disk?); use an earlier copy"
                         % message.DESCRIPTOR.name, path)
    parse_binary(data, message, path)
    return message


def parse_binary(data, message, source=None, seen=None):
    """Parse the bytes of a binary message into ``message`` as :func:`read_binary` does
    (``source`` names them in errors and warnings; ``seen``: see
    :func:`fork_fields.report_unknown`, for the records of one database)."""
    tolerant.parse(data, message, source)
    if isinstance(message, caffe_pb2.NetParameter):
        fork_fields.restore(message)
    fork_fields.report_unknown(message, _source_name(source), seen)
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


def text_bytes(message):
    """``message`` as prototxt, UTF-8 encoded (what :func:`write_text` writes)."""
    return text_format.MessageToString(message).encode("utf-8")


def binary_bytes(message):
    """``message`` in binary form, fields kept unread on reading unchanged (what
    :func:`write_binary` writes)."""
    return tolerant.serialize(message)


def write_text(message, path):
    atomic_write(path, text_bytes(message))


def write_binary(message, path):
    """Write ``message`` in binary form; fields kept unread on reading go back unchanged."""
    atomic_write(path, binary_bytes(message))


#: errno values meaning "no room left": a full disk, a quota, a file size limit
NO_SPACE_ERRNOS = frozenset(getattr(errno, name) for name in ("ENOSPC", "EDQUOT", "EFBIG")
                            if hasattr(errno, name))


def is_no_space(exc):
    """Whether the OSError ``exc`` says the disk (or a quota) is full. HDF5 reports it only in
    its message."""
    if getattr(exc, "errno", None) in NO_SPACE_ERRNOS:
        return True
    text = str(exc)
    return "No space left" in text or "Disk quota exceeded" in text or "File too large" in text


def write_error(exc, path, what="file"):
    """A ProtoError for an OSError ``exc`` raised while writing ``path`` (a temporary file
    and a rename): says what happened and that the previous file, if any, is unchanged."""
    reason = (exc.strerror or str(exc)) if isinstance(exc, OSError) else str(exc)
    if is_no_space(exc):
        return ProtoError("cannot write %s: no space left for it (%s: the disk, a quota or "
                          "the file size limit is full); nothing was replaced (a previous file "
                          "of this name is unchanged). Free some space, or write elsewhere"
                          % (what, reason), path)
    return ProtoError("cannot write %s: %s; nothing was replaced (a previous file of this name "
                      "is unchanged)" % (what, reason), path)


def temporary_name(path):
    """The hidden temporary file next to ``path`` that :func:`atomic_write` renames into it
    (``.<name>.tmp<pid>``). Removes those of writers that were killed before their rename."""
    folder = os.path.dirname(os.path.abspath(path))
    _remove_stale_temporaries(folder, os.path.basename(path))
    return os.path.join(folder, ".%s.tmp%d" % (os.path.basename(path), os.getpid()))


def _remove_stale_temporaries(folder, name):
    prefix = ".%s.tmp" % name
    try:
        entries = os.listdir(folder)
    except OSError:
        return
    for entry in entries:
        pid = entry[len(prefix):]
        if not entry.startswith(prefix) or not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # its writer is still running
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(os.path.join(folder, entry))
        except OSError:
            pass


def atomic_write(path, data, what="file"):
    """Write ``data`` to ``path`` through a temporary file, fsync and a rename.

    A crash (even kill -9) or a full disk while writing leaves the previous file (if any)
    untouched: ``path`` is always either the old or the new complete file.
    """
    tmp = temporary_name(path)
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
        raise write_error(exc, path, what) from None


def atomic_write_all(files):
    """Write several files that belong together (a prototxt and its caffemodel), all of them or
    none: ``files`` is a list of ``(path, data, what)``. Every one is written to its temporary
    first, and only when all are complete are they renamed into place; a failure (a missing
    folder, a full disk, an output that is a directory) leaves every previous file untouched
    and no new one."""
    for path, _, what in files:
        if os.path.isdir(path):
            raise ProtoError("cannot write %s: is a directory; nothing was written" % what, path)
    temporaries = []
    try:
        for path, data, what in files:
            tmp = temporary_name(path)
            try:
                with open(tmp, "wb") as f:
                    temporaries.append(tmp)
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as exc:
                raise write_error(exc, path, what) from None
        for (path, _, what), tmp in zip(files, temporaries):
            try:
                os.replace(tmp, path)
            except OSError as exc:
                raise write_error(exc, path, what) from None
    finally:
        for tmp in temporaries:
            if os.path.lexists(tmp):
                try:
                    os.unlink(tmp)
                except OSError:
                    pass


# Control bytes that never occur in a prototxt but always early in a binary message (tags and
# lengths below 0x20).
_BINARY_BYTES = re.compile(rb"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def looks_like_text(data):
    """Guess whether ``data`` is a prototxt (text) rather than a binary message. Bytes above
    0x7f do not decide: a prototxt with a Latin-1 character is still text (and reported as
    such)."""
    return not _BINARY_BYTES.search(data[:512])


def holds_weights(param, path):
    """Whether ``param`` (a NetParameter read from ``path``) came from a binary file whose
    layers hold learned blobs: a .caffemodel given where a net definition belongs."""
    with open(path, "rb") as f:
        head = f.read(512)
    return not looks_like_text(head) and any(
        len(lp.blobs) for lp in list(param.layer) + list(param.layers))


def _not_found(source, expected):
    if isinstance(source, (str, os.PathLike)):
        return ProtoError("file not found", os.fspath(source))
    return ProtoError("expected %s, got %s" % (expected, type(source).__name__))


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
        if not data.strip():
            raise ProtoError("file is empty: expected a net definition (prototxt) or a binary "
                             "NetParameter", path)
        param = caffe_pb2.NetParameter()
        if looks_like_text(data):
            parse_text(data, param, path)
        else:
            read_binary(path, param)
    elif isinstance(source, str) and ("{" in source or ":" in source):
        path = None
        param = parse_text(source, caffe_pb2.NetParameter())
    else:
        raise _not_found(source, "a net: a prototxt path, prototxt text or a NetParameter")
    fork_fields.restore(param)
    _check_bn_layers(param, path)
    if upgrade:
        _upgrade.upgrade_net_as_needed(param, path or "<string>")
    return param


def _check_bn_layers(param, path):
    """A BN layer's bn_param sets the fields of one kind of BN (SegNet/ENet's or PSPNet's):
    a ProtoError naming the file and the layer where it mixes them."""
    for layer in param.layer:
        if layer.type == "BN" and layer.HasField("bn_param"):
            try:
                fork_layer_fields.bn_kind(layer.bn_param)
            except ValueError as exc:
                raise ProtoError("layer '%s' (type BN): %s" % (layer.name, exc),
                                 _source_name(path)) from None


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
        raise _not_found(source, "a solver: a prototxt path, prototxt text or a "
                                 "SolverParameter")
    if upgrade:
        _upgrade.upgrade_solver_as_needed(param, path or "<string>")
    return param
