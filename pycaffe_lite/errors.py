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


# ---- a layer's own failure, named -------------------------------------------------------------
_WITH_CAUSE_TYPE = {}


def install_hint(extra, packages):
    """How to install an optional dependency: the packages themselves, or the package's extra
    from its source tree (the project installs from a checkout, not from an index)."""
    return "pip install %s (or the %s extra: pip install '.[%s]' in pycaffe-lite's source " \
        "tree)" % (packages, extra, extra)


def _layer_error_class(cause_type):
    """A LayerError subclass that is also a ``cause_type`` (None when the two cannot be
    combined: exception types with their own C layout, such as OSError or StopIteration)."""
    if issubclass(LayerError, cause_type):  # a ValueError is a LayerError already
        return LayerError
    if cause_type not in _WITH_CAUSE_TYPE:
        try:
            cls = type("LayerError", (LayerError, cause_type),
                       {"__module__": __name__, "__str__": BaseException.__str__,
                        "__reduce__": _reduce_layer_failure, "cause_type": cause_type})
        except TypeError:
            cls = None
        _WITH_CAUSE_TYPE[cause_type] = cls
    return _WITH_CAUSE_TYPE[cause_type]


def _reduce_layer_failure(error):
    return _rebuild_layer_failure, (type(error).cause_type, error.args, dict(vars(error)))


def _rebuild_layer_failure(cause_type, args, attributes):
    cls = _layer_error_class(cause_type) or LayerError
    error = cls.__new__(cls, *args)
    BaseException.__init__(error, *args)
    vars(error).update(attributes)
    return error


def layer_failure(cause, message, layer=None, layer_type=None):
    """The LayerError for ``cause``, an exception a layer raised: ``message`` names the layer.
    Where it can, the error is also an instance of ``cause``'s type (with its attributes), so
    that ``except RuntimeError`` or a Python layer's own exception class still catches what the
    layer raised, as in pycaffe, where a Python layer's exception reaches the caller as it is."""
    cls = _layer_error_class(type(cause)) if not isinstance(cause, CaffeError) else None
    if cls is None:
        return LayerError(message, layer, layer_type)
    error = cls(message, layer, layer_type)
    for key, value in vars(cause).items():
        if key not in ("layer", "layer_type"):
            setattr(error, key, value)
    return error
