"""cuDNN convolution and pooling through CuPy, and Caffe's engine selection.

Engines (``convolution_param.engine`` / ``pooling_param.engine``), as Caffe's layer factory:

- ``CAFFE``: pycaffe-lite's own code (im2col + GEMM, the pooling kernels) - always present;
- ``CUDNN``: cuDNN, when the layer runs on a CuPy array and CuPy provides cuDNN; asked for but
  unavailable, a warning is logged once and CAFFE is used;
- ``DEFAULT``: CUDNN when it is available (and the configuration is one cuDNN computes as
  Caffe does), else CAFFE.

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

from ... import backend
from ._util import is_cupy, kernel_dtype

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
        import cupy  # noqa: F401  (lazily: only when an engine decision needs it)
        import cupy.cudnn as api
        from cupy.cuda import cudnn as lib
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


def _gpu_mode():
    return backend.mode() == backend.GPU and \
        getattr(backend.device_module(), "__name__", "") == "cupy"


def _engine(layer, param, why_not):
    """The engine this layer uses on the GPU (cached on the layer): CUDNN or CAFFE."""
    cached = layer.__dict__.get("_pcl_engine")
    if cached is not None:
        return cached
    asked = param.engine
    if asked == CAFFE:
        engine = CAFFE
    elif why_not:
        if asked == CUDNN:
            log.info("Layer %s: %s; using the CAFFE engine", layer.name, why_not)
        engine = CAFFE
    elif available():
        engine = CUDNN
    else:
        if asked == CUDNN and "unavailable" not in _warned:
            _warned.add("unavailable")
            log.warning("engine: CUDNN was asked for (layer %s) but cuDNN is not available "
                        "through CuPy (%s); using the CAFFE engine", layer.name,
                        unavailable_reason())
        engine = CAFFE
    layer.__dict__["_pcl_engine"] = engine
    return engine


# ---- convolution ---------------------------------------------------------------------------
def _conv_why_not(layer):
    if layer.num_spatial_axes != 2 or layer.channel_axis != 1:
        return "cuDNN convolution here takes 2-D images with the channel axis 1"
    return ""


def _conv_engine(layer):
    param = layer.layer_param.convolution_param
    if param.engine == CUDNN and not _gpu_mode():
        _engine(layer, param, _conv_why_not(layer))  # warn now if it will not be honoured
        return CAFFE
    if not _gpu_mode():
        return CAFFE
    return _engine(layer, param, _conv_why_not(layer))


def _conv_args(layer):
    return (tuple(int(v) for v in layer.pad), tuple(int(v) for v in layer.stride),
            tuple(int(v) for v in layer.dilation), int(layer.group))


def conv_forward(layer, bottom, top):
    """Convolution's forward through cuDNN when its engine is CUDNN; False otherwise (the
    caller then runs the CAFFE engine)."""
    if _conv_engine(layer) != CUDNN:
        return False
    weights = layer.blobs[0].read_data()
    bias = layer.blobs[1].read_data() if layer.bias_term else None
    arrays = [b.read_data() for b in bottom]
    if not is_cupy(weights, *arrays) or kernel_dtype(weights, *arrays) is None:
        return False
    api = _state["api"]
    pad, stride, dilation, groups = _conv_args(layer)
    for x, t in zip(arrays, top):
        api.convolution_forward(x, weights, bias, t.write_data(), pad, stride, dilation, groups,
                                auto_tune=True, tensor_core="never")
    layer.__dict__["_pcl_cudnn_forward"] = True
    return True


def conv_backward(layer, top, propagate_down, bottom):
    """Convolution's backward through cuDNN (when the forward used it); False otherwise."""
    if not layer.__dict__.get("_pcl_cudnn_forward") or _conv_engine(layer) != CUDNN:
        return False
    cp = backend.device_module()
    api = _state["api"]
    pad, stride, dilation, groups = _conv_args(layer)
    weights = layer.blobs[0].read_data()
    do_weights = layer.param_propagate_down[0]
    do_bias = layer.bias_term and layer.param_propagate_down[1]
    for t, down, b in zip(top, propagate_down, bottom):
        dy = t.read_diff()
        if do_bias:
            layer.backward_bias(layer.blobs[1].write_diff(), dy)
        if do_weights:
            grad = cp.empty_like(weights)
            api.convolution_backward_filter(b.read_data(), dy, grad, pad, stride, dilation,
                                            groups, deterministic=False, auto_tune=True,
                                            tensor_core="never")
            dw = layer.blobs[0].write_diff()
            dw += grad
        if down:
            api.convolution_backward_data(weights, dy, None, b.write_diff(), pad, stride,
                                          dilation, groups, deterministic=False,
                                          auto_tune=True, tensor_core="never")
    return True


# ---- pooling ---------------------------------------------------------------------------------
def _pool_why_not(layer, top_count, x_shape):
    if layer.pool not in (POOL_MAX, POOL_AVE):
        return "cuDNN has no STOCHASTIC pooling"
    if top_count > 1:
        return "cuDNN pooling has no mask top"
    if layer.pad != (0, 0):
        return "cuDNN pooling is not used with padding (Caffe's rule)"
    if x_shape is not None and len(x_shape) == 4 and layer.kernel is not None:
        h, w = x_shape[2:]
        for size, k, s, pooled in zip((h, w), layer.kernel, layer.stride, layer.pooled):
            if (size - k) // s + 1 != pooled:
                return "the ceil-mode output size differs from cuDNN's"
    return ""


def _pool_engine(layer, top_count, x_shape):
    param = layer.layer_param.pooling_param
    if not _gpu_mode():
        if param.engine == CUDNN:
            _engine(layer, param, "")
        return CAFFE
    why_not = _pool_why_not(layer, top_count, x_shape)
    if why_not:  # shape-dependent: decided per call, the engine choice stays cached
        if param.engine == CUDNN and "pool:" + layer.name not in _warned:
            _warned.add("pool:" + layer.name)
            log.info("Layer %s: %s; using the CAFFE engine", layer.name, why_not)
        return CAFFE
    return _engine(layer, param, "")


def _pool_mode(layer):
    lib = _state["lib"]
    if layer.pool == POOL_MAX:
        return getattr(lib, "CUDNN_POOLING_MAX", 0)
    return getattr(lib, "CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING", 1)


def pool_forward(layer, bottom, top):
    """Pooling's forward through cuDNN when its engine is CUDNN; False otherwise."""
    layer.__dict__["_pcl_cudnn_forward"] = False
    if _pool_engine(layer, len(top), bottom[0].shape) != CUDNN:
        return False
    x = bottom[0].read_data()
    y = top[0].write_data()
    if not is_cupy(x, y) or kernel_dtype(x, y) is None:
        return False
    _state["api"].pooling_forward(x, y, tuple(layer.kernel), tuple(layer.stride), (0, 0),
                                  _pool_mode(layer))
    layer.__dict__["_pcl_cudnn_forward"] = True
    return True


def pool_backward(layer, top, propagate_down, bottom):
    """Pooling's backward through cuDNN (when the forward used it); False otherwise."""
    if not layer.__dict__.get("_pcl_cudnn_forward"):
        return False
    if not propagate_down[0]:
        return True
    x = bottom[0].read_data()
    y = top[0].read_data()
    dy = top[0].read_diff()
    dx = _state["api"].pooling_backward(x, y, dy, tuple(layer.kernel), tuple(layer.stride),
                                        (0, 0), _pool_mode(layer))
    bottom[0].write_diff()[...] = dx
    return True
