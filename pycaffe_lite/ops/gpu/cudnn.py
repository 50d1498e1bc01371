"""cuDNN convolution and pooling, and Caffe's engine selection.

Engines (``convolution_param.engine`` / ``pooling_param.engine``), as Caffe's layer factory:

- ``CAFFE``: pycaffe-lite's own code (im2col + GEMM, the pooling kernels) - always present;
  never touches cuDNN;
- ``CUDNN``: cuDNN, when the layer runs on a CuPy array and cuDNN can be loaded; asked for but
  unavailable, a warning is logged once and CAFFE is used;
- ``DEFAULT``: CUDNN when it is available (and the configuration is one cuDNN computes as
  Caffe does), else CAFFE; in GPU mode one log line says why cuDNN could not be loaded.

A layer resolves its engine once, in setup (:func:`choose_engine`, with the reason a
configuration is left to CAFFE from :func:`conv_why_not` / :func:`pool_why_not`), and passes it
to the ops functions (:mod:`pycaffe_lite.ops.conv`, :mod:`pycaffe_lite.ops.pooling`) with its
arrays; those call :func:`conv_takes` / :func:`pool_takes` and, when cuDNN takes the arrays, the
functions here. Nothing here sees a layer.

Convolutions (Convolution and Deconvolution, forward, data and filter gradients, groups,
dilation, depthwise) run through NVIDIA's cuDNN frontend (``pip install nvidia-cudnn-frontend``
with the cuDNN 9 wheel, ``nvidia-cudnn-cu12`` or ``-cu13``: the ``gpu`` and ``gpu-cuda13``
extras), one graph per shape with its plan chosen once (:mod:`.cudnn_graphs`); with CuPy 13's
``cupy.cudnn`` only, through that. Pooling uses ``cupy.cudnn`` where CuPy provides it (CuPy 13),
else the CAFFE kernels. cuDNN writes its outputs (beta = 0), so the weight gradient is
computed into a temporary and added, as Caffe's layers accumulate it.

Configurations left to CAFFE, as Caffe does: pooling with padding, a second (mask) top or
STOCHASTIC; plus (pycaffe-lite) pooling whose ceil-mode output size differs from cuDNN's floor
size, and convolution other than 2-D with the channel axis 1; and any convolution for which
cuDNN offers no plan (logged once per configuration).
"""

import logging

import numpy as np

from ...backend import cudnn_frontend, cudnn_modules
from . import cudnn_graphs as graphs
from ._util import LazyKernel, contiguous, cupy, is_cupy, kernel_dtype

log = logging.getLogger("pycaffe_lite")

# caffe.proto's Engine values (ConvolutionParameter / PoolingParameter) and PoolMethod values
DEFAULT, CAFFE, CUDNN = 0, 1, 2
NAMES = {DEFAULT: "DEFAULT", CAFFE: "CAFFE", CUDNN: "CUDNN"}
POOL_MAX, POOL_AVE = 0, 1

_state = {"probed": False, "fe": None, "api": None, "lib": None, "version": None,
          "reason": "", "disabled": False}
_warned = set()


def _probe():
    if _state["probed"]:
        return
    _state["probed"] = True
    reasons = []
    try:
        fe = cudnn_frontend()  # lazily: only when an engine decision needs it
        version = int(fe.backend_version())
        if version <= 0:
            raise RuntimeError("the cuDNN library was not found")
        _state["fe"], _state["version"] = fe, version
    except Exception as exc:  # frontend or cuDNN 9 missing
        reasons.append("cuDNN frontend: %s: %s" % (type(exc).__name__, exc))
    try:
        api, lib = cudnn_modules()
        version = int(lib.getVersion())
        _state["api"], _state["lib"] = api, lib
        if _state["version"] is None:
            _state["version"] = version
    except Exception as exc:  # CuPy >= 14 has no cupy.cudnn
        reasons.append("cupy.cudnn: %s: %s" % (type(exc).__name__, exc))
    if _state["fe"] is None and _state["api"] is None:
        _state["reason"] = "; ".join(reasons)


def available():
    """True when cuDNN can be loaded here (and it was not disabled)."""
    if _state["disabled"]:
        return False
    _probe()
    return _state["fe"] is not None or _state["api"] is not None


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
                        "(%s); using the CAFFE engine", layer_name, unavailable_reason())
        return CAFFE
    return CUDNN


def _half(arrays):
    """All the arrays float16 (cuDNN takes them: float16 input and output, float32 math)."""
    return all(a.dtype == np.float16 for a in arrays if a is not None)


def _takes(engine, arrays):
    if engine != CUDNN or not is_cupy(*arrays) or \
            (kernel_dtype(*arrays) is None and not _half(arrays)):
        return False
    if available():
        return True
    if "default" not in _warned and not _state["disabled"]:
        _warned.add("default")
        log.info("cuDNN is not available (%s); the CAFFE engine runs instead",
                 unavailable_reason())
    return False


# ---- convolution ---------------------------------------------------------------------------
def conv_why_not(num_spatial_axes, channel_axis):
    if num_spatial_axes != 2 or channel_axis != 1:
        return "cuDNN convolution here takes 2-D images with the channel axis 1"
    return ""


def conv_takes(engine, *arrays):
    """Whether cuDNN computes a convolution of engine ``engine`` on these arrays."""
    return _takes(engine, arrays)


_bias_act = LazyKernel(lambda cp: cp.ElementwiseKernel(
    "raw T b, int32 inner, int32 channels, bool relu", "T y",
    "T v = y + b[(i / inner) % channels]; y = (relu && v < (T)0) ? (T)0 : v;",
    "pycaffe_lite_bias_act"))
_relu = LazyKernel(lambda cp: cp.ElementwiseKernel(
    "T x", "T y", "y = (x < (T)0) ? (T)0 : x;", "pycaffe_lite_relu_inplace"))


def _tensor_core(x):
    """CuPy's cuDNN tensor-core switch: float16 on tensor cores, float32 never (TF32)."""
    return "auto" if x.dtype == np.float16 else "never"


def _geometry(pad, stride, dilation):
    return tuple(int(v) for v in pad), tuple(int(v) for v in stride), \
        tuple(int(v) for v in dilation)


def conv_forward(x, weights, bias, y, pad, stride, dilation, groups, relu=False,
                 half_math=False):
    """``y = conv(x, weights) (+ bias) (then max(y, 0) when relu)`` for a batch ``(N, C, H,
    W)``. True when done; False (nothing written) when cuDNN has no plan for it.
    ``half_math``: float16 arrays accumulate in float16 (the frontend's graphs only)."""
    geometry = _geometry(pad, stride, dilation)
    if _state["fe"] is not None:
        x, w = contiguous(x), contiguous(weights)
        shapes = (x.shape, w.shape, y.shape) + geometry
        if bias is not None:
            b = contiguous(bias)
            kind = graphs.FPROP_BIAS_RELU if relu else graphs.FPROP_BIAS

            def fused():
                return graphs.run(kind, (x, w, b, y), *shapes, half_math=half_math)

            def separate():
                if not graphs.run(graphs.FPROP, (x, w, y), *shapes, half_math=half_math):
                    return False
                _add_bias(y, b, relu)
                return True

            key = graphs.Key.make(kind, *shapes, x.dtype, cupy().cuda.runtime.getDevice(),
                                  half_math)
            if graphs.prefer_fused(key, fused, separate) and fused():
                return True
        if not graphs.run(graphs.FPROP, (x, w, y), *shapes, half_math=half_math):
            return False
    else:
        _state["api"].convolution_forward(x, weights, None, y, *geometry, int(groups),
                                          auto_tune=True, tensor_core=_tensor_core(x))
    if bias is not None:
        _add_bias(y, bias, relu)
    elif relu:
        _relu(y, y)
    return True


def _add_bias(y, bias, relu):
    """``y += bias`` per channel (axis 1), then ``max(y, 0)`` when ``relu``."""
    inner = 1
    for n in y.shape[2:]:
        inner *= int(n)
    _bias_act(bias, inner, int(y.shape[1]), bool(relu), y)


def conv_backward(x, dy, weights, dx, dw, pad, stride, dilation, groups, half_math=False):
    """``dw += dW(x, dy)`` (when ``dw`` is given: cuDNN writes, so through a temporary) and
    ``dx = dX(weights, dy)`` (when ``dx`` is given). Returns ``(dw done, dx done)``: what cuDNN
    could not compute is left for the caller. ``half_math`` as :func:`conv_forward`."""
    geometry = _geometry(pad, stride, dilation)
    dw_done = dx_done = False
    if _state["fe"] is not None:
        dy, w = contiguous(dy), contiguous(weights)
        if dw is not None:
            x = contiguous(x)
            grad = cupy().empty(w.shape, dtype=w.dtype)
            if graphs.run(graphs.WGRAD, (x, dy, grad), x.shape, w.shape, dy.shape, *geometry,
                          half_math=half_math):
                dw += grad
                dw_done = True
        if dx is not None:
            out = contiguous(dx)
            if graphs.run(graphs.DGRAD, (dy, w, out), dx.shape, w.shape, dy.shape,
                          *geometry, half_math=half_math):
                if out is not dx:
                    dx[...] = out
                dx_done = True
        return dw_done or dw is None, dx_done or dx is None
    api = _state["api"]
    args = geometry + (int(groups),)
    if dw is not None:
        grad = cupy().empty_like(weights)
        api.convolution_backward_filter(x, dy, grad, *args, deterministic=False,
                                        auto_tune=True, tensor_core=_tensor_core(x))
        dw += grad
    if dx is not None:
        api.convolution_backward_data(weights, dy, None, dx, *args, deterministic=False,
                                      auto_tune=True, tensor_core=_tensor_core(dy))
    return True, True


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
    if not _takes(engine, (x,) + arrays) or _state["api"] is None:
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
