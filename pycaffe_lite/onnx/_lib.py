"""The optional ``onnx`` package, imported on first use with a clear error when missing."""

from ..errors import CaffeError, install_hint

INSTALL_HINT = install_hint("onnx", "onnx onnxruntime")


def require_onnx():
    """The ``onnx`` module, or a CaffeError that names the extra to install."""
    try:
        import onnx
    except ImportError as exc:
        raise CaffeError("ONNX conversion needs the 'onnx' package, which is not installed "
                         "(%s); install it with: %s" % (exc, INSTALL_HINT)) from None
    return onnx
