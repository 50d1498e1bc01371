"""The one exception family of pycaffe-lite.

Every error a user can cause (a bad file, a bad parameter, a shape that does not fit) is raised
as a :class:`CaffeError` whose message names where it happened (file and line, layer, blob) and,
where it can, what to do about it. It derives from ``ValueError`` so that generic handlers of bad
input keep working.
"""


class CaffeError(ValueError):
    """A user-facing error of pycaffe-lite."""


class ProtoError(CaffeError):
    """A prototxt, caffemodel or other protobuf file that cannot be read."""

    def __init__(self, message, path=None, line=None, column=None):
        where = ""
        if path:
            where = str(path)
            if line is not None:
                where += ":%d" % line
                if column is not None:
                    where += ":%d" % column
            where += ": "
        super().__init__(where + message)
        self.path = path
        self.line = line
        self.column = column


class NetError(CaffeError):
    """A net definition that cannot be built (missing blob, duplicate top, ...)."""


class LayerError(CaffeError):
    """A layer whose parameters or input shapes are invalid."""

    def __init__(self, message, layer=None, layer_type=None):
        prefix = ""
        if layer is not None:
            prefix = "layer '%s'" % layer
            if layer_type:
                prefix += " (type %s)" % layer_type
            prefix += ": "
        super().__init__(prefix + message)
        self.layer = layer
        self.layer_type = layer_type


class ShapeError(CaffeError):
    """Two shapes that must agree do not."""


class NumericError(CaffeError):
    """Training produced NaN or Inf; names the iteration and the first layer and blob that did
    (``culprit``, a :class:`pycaffe_lite.health.Culprit`, when found)."""

    def __init__(self, message, iteration=None, culprit=None):
        super().__init__(message)
        self.iteration = iteration
        self.culprit = culprit


class SnapshotError(CaffeError):
    """A snapshot that could not be written (full disk, missing folder); names the last
    complete snapshot to resume from."""
