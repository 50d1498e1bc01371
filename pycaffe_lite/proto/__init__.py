"""Message classes generated from ``proto/caffe.proto`` (``caffe_pb2``).

The module is produced by protoc at install time (``pip install .`` or ``pip install -e .``).
When the package is used straight from a source checkout without installing, it is compiled
here on first import if grpcio-tools is available.
"""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))
_SCHEMA = os.path.join(os.path.dirname(os.path.dirname(_HERE)), "proto", "caffe.proto")


def _compile_from_checkout():
    try:
        from grpc_tools import protoc
    except ImportError:
        return False
    if not os.path.exists(_SCHEMA):
        return False
    args = ["protoc", "-I" + os.path.dirname(_SCHEMA), "--python_out=" + _HERE, _SCHEMA]
    return protoc.main(args) == 0


try:
    from . import caffe_pb2  # noqa: F401
except ImportError as exc:
    if "caffe_pb2" not in str(exc) or not _compile_from_checkout():
        raise ImportError(
            "pycaffe_lite.proto.caffe_pb2 is missing: install the package with "
            "'pip install .' (or 'pip install -e .') so that proto/caffe.proto is compiled"
        ) from exc
    from . import caffe_pb2  # noqa: F401
