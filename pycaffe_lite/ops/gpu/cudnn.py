"""cuDNN convolution and pooling through CuPy, and Caffe's engine selection.

Engines (``convolution_param.engine`` / ``pooling_param.engine``), as Caffe's layer factory:

- ``CAFFE``: pycaffe-lite's own code (im2col + GEMM, the pooling kernels) - always present;
- ``CUDNN``: cuDNN, when the layer runs on a CuPy array and CuPy provides cuDNN; asked for but
  unavailable, a warning is logged once and CAFFE is used;
- ``DEFAULT``: CUDNN when it is available (and the configuration is one cuDNN computes as
  Caffe does), else CAFFE.

A layer resolves its engine once, in setup (:func:`choose_engine`, with the reason a
configuration is left to CAFFE from :func:`conv_why_not` / :func:`pool_why_not`), and passes it
to the ops functions (:mod:`pycaffe_lite.ops.conv`, :mod:`pycaffe_lite.ops.pooling`) with its
arrays; those call :func:`conv_takes` / :func:`pool_takes` and, when cuDNN takes the arrays, the
functions here. Nothing here sees a layer.

cuDNN comes from ``cupy.cudnn``, which CuPy 13 provides with the cuDNN library installed
(``pip install nvidia-cudnn-cu12``); CuPy 14 removed it, and then every layer uses CAFFE.
The calls (``convolution_forward``, ``convolution_backward_filter``,
``convolution_backward_data``, ``pooling_forward``, ``pooling_backward``) are CuPy 13's
documented-in-source signatures; cuDNN writes its outputs (beta = 0), so the weight gradient
is computed into a temporary and added, as Caffe's layers accumulate it.

Configurations left to CAFFE, as Caffe does: pooling with padding, a second (mask) top or
STOCHASTIC; plus (pycaffe-lite) pooling whose ceil-mode output size differs from cuDNN's floor
size, and convolution other than 2-D with the channel axis 1.
"""

import logging

from ...backend import cudnn_modules
from ._util import cupy, is_cupy, kernel_dtype

log = logging.getLogger("pycaffe_lite")

# caffe.proto's Engine values (ConvolutionParameter / PoolingParameter) and PoolMethod values
DEFAULT, CAFFE, CUDNN = 0, 1, 2
NAMES = {DEFAULT: "DEFAULT", CAFFE: "CAFFE", CUDNN: "CUDNN"}
POOL_MAX, POOL_AVE = 0, 1

_state = {"probed": False, "api": None, "lib": None, "version": None, "reason": "",
          "disabled": False}
_warned = set()


def _probe():
    if _state["probed"]:
        return
    _state["probed"] = True
    try:
        api, lib = cudnn_modules()  # lazily: only when an engine decision needs it
        _state["version"] = int(lib.getVersion())
    except Exception as exc:  # CuPy or cuDNN missing, or CuPy >= 14 (no cuDNN)
        _state["reason"] = "%s: %s" % (type(exc).__name__, exc)
        return
    _state["api"], _state["lib"] = api, lib


def available():
    """True when CuPy provides cuDNN here (and it was not disabled)."""
    if _state["disabled"]:
        return False
    _probe()
    return _state["api"] is not None


def version():
    """cuDNN's version number, or None."""
    return _state["version"] if available() else None


def unavailable_reason():
    _probe()
    if _state["disabled"]:
        return "disabled by pycaffe_lite.ops.gpu.cudnn.set_enabled(False)"
    return _state["reason"] or "available"


def set_enabled(flag):
    """Allow (True) or forbid (False) the CUDNN engine, e.g. to time CAFFE against it.
    Returns the previous setting."""
    old = not _state["disabled"]
    _state["disabled"] = not flag
    return old


def choose_engine(asked, why_not, layer_name):
    """The engine of a layer, decided once in its setup: CUDNN (cuDNN whenever the layer's
    arrays are CuPy arrays and CuPy provides cuDNN) or CAFFE. ``asked`` is the parameter's
    engine; ``why_not`` a reason the configuration is left to CAFFE ("" when none)."""
    if asked == CAFFE:
        return CAFFE
    if why_not:
        if asked == CUDNN:
            log.info("Layer %s: %s; using the CAFFE engine", layer_name, why_not)
        return CAFFE
    if asked == CUDNN and not available():
        if "unavailable" not in _warned:
            _warned.add("unavailable")
            log.warning("engine: CUDNN was asked for (layer %s) but cuDNN is not available "
                        "through CuPy (%s); using the CAFFE engine", layer_name,
                        unavailable_reason())
        return CAFFE
    return CUDNN


def _takes(engine, arrays):
    return engine == CUDNN and is_cupy(*arrays) and kernel_dtype(*arrays) is not None and \
        available()


# ---- convolution ---------------------------------------------------------------------------
def conv_why_not(num_spatial_axes, channel_axis):
    if num_spatial_axes != 2 or channel_axis != 1:
        return "cuDNN convolution here takes 2-D images with the channel axis 1"
    return ""


def conv_takes(engine, *arrays):
    """Whether cuDNN computes a convolution of engine ``engine`` on these arrays."""
    return _takes(engine, arrays)


def conv_forward(x, weights, bias, y, pad, stride, dilation, groups):
    """``y = conv(x, weights) (+ bias)`` for a batch ``(N, C, H, W)``."""
    _state["api"].convolution_forward(x, weights, bias, y, tuple(pad), tuple(stride),
                                      tuple(dilation), int(groups), auto_tune=True,
                                      tensor_core="never")


def conv_backward(x, dy, weights, dx, dw, pad, stride, dilation, groups):
    """``dw += dW(x, dy)`` (when ``dw`` is given: cuDNN writes, so through a temporary) and
    ``dx = dX(weights, dy)`` (when ``dx`` is given)."""
    api = _state["api"]
    args = tuple(pad), tuple(stride), tuple(dilation), int(groups)
    if dw is not None:
        grad = cupy().empty_like(weights)
        api.convolution_backward_filter(x, dy, grad, *args, deterministic=False,
                                        auto_tune=True, tensor_core="never")
        dw += grad
    if dx is not None:
        api.convolution_backward_data(weights, dy, None, dx, *args, deterministic=False,
                                      auto_tune=True, tensor_core="never")


# ---- pooling ---------------------------------------------------------------------------------
def pool_why_not(method, top_count, pad):
    if method not in (POOL_MAX, POOL_AVE):
        return "cuDNN has no STOCHASTIC pooling"
    if top_count > 1:
        return "cuDNN pooling has no mask top"
    if tuple(pad) != (0, 0):
        return "cuDNN pooling is not used with padding (Caffe's rule)"
    return ""


def pool_takes(engine, x, kernel, stride, pooled, *arrays):
    """Whether cuDNN computes a pooling of engine ``engine`` (no padding) on these arrays: also
    not when the ceil-mode output size differs from cuDNN's floor size."""
    if not _takes(engine, (x,) + arrays):
        return False
    return all((size - k) // s + 1 == p
               for size, k, s, p in zip(x.shape[2:], kernel, stride, pooled))


def _pool_mode(method):
    lib = _state["lib"]
    if method == POOL_MAX:
        return getattr(lib, "CUDNN_POOLING_MAX", 0)
    return getattr(lib, "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING", 1)


def pool_forward(method, x, y, kernel, stride):
    """MAX or AVE pooling of ``x`` into ``y`` (no padding)."""
    _state["api"].pooling_forward(x, y, tuple(kernel), tuple(stride), (0, 0),
                                  _pool_mode(method))


def pool_backward(method, x, y, dy, dx, kernel, stride):
    """The gradient of :func:`pool_forward` into ``dx``."""
    dx[...] = _state["api"].pooling_backward(x, y, dy, tuple(kernel), tuple(stride), (0, 0),
                                             _pool_mode(method))
