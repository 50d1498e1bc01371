"""The compiled kernels' shared object: finding and loading it (ctypes), its ABI check, and
the C signature of every kernel, named as the C sources declare them."""

import ctypes
import importlib.util
import logging
import os
import re
import threading

import numpy as np

ABI_VERSION = 15
_state = {"lib": None, "checked": False, "error": None}
_lock = threading.Lock()
log = logging.getLogger("pycaffe_lite")

# The kernels' C prototypes as kernels_impl.h, conv_impl.h and train_impl.h declare them
# (``restrict`` left out), each exported once per element type as ``pcl_<name>_f32`` and
# ``_f64``: T is that type (float or double), idx is int64_t. Every kernel also takes
# ``idx start, idx stop`` last, the range of its split axis it computes (see
# :func:`._threads.split`).
PROTOTYPES = """
im2col_batch_first(const T *x, T *cols, idx nb, idx nc, idx h, idx w, idx kh, idx kw, idx pad_h,
    idx pad_w, idx stride_h, idx stride_w, idx dil_h, idx dil_w, idx oh, idx ow)
col2im_batch_first(const T *cols, T *out, idx nb, idx nc, idx h, idx w, idx kh, idx kw,
    idx pad_h, idx pad_w, idx stride_h, idx stride_w, idx dil_h, idx dil_w, idx oh, idx ow)
max_pool_forward(const T *x, T *top, int32_t *argmax, idx h, idx w, idx ph, idx pw, idx kh,
    idx kw, idx pad_h, idx pad_w, idx stride_h, idx stride_w)
ave_pool_forward(const T *x, T *top, const T *divisors, idx h, idx w, idx ph, idx pw, idx kh,
    idx kw, idx pad_h, idx pad_w, idx stride_h, idx stride_w)
max_pool_backward(const T *top_diff, const int32_t *argmax, T *bottom_diff, idx h, idx w,
    idx ph, idx pw, idx kh, idx kw, idx pad_h, idx pad_w, idx stride_h, idx stride_w)
bias_relu(const T *x, T *y, const T *bias, idx nc, idx npix, int32_t relu)
relu_backward(const T *x, const T *dy, T *dx)
add_relu(const T *a, const T *b, T *y, int32_t relu)
sgd_update(T *diff, T *history, const T *data, T norm, T decay, int32_t l1, T rate, T momentum)
lrn_scale(const T *x, T *scale, T *top, idx nc, idx npix, idx size, T a, T k)
lrn_accum(const T *top_diff, const T *top, const T *scale, T *work, T *accum, idx nc, idx npix,
    idx size)
depthwise_forward(const T *x, const T *wts, const T *bias, T *y, idx nc, idx h, idx w, idx kh,
    idx kw, idx pad_h, idx pad_w, idx stride_h, idx stride_w, idx dil_h, idx dil_w, idx oh,
    idx ow)
depthwise_backward_data(const T *dy, const T *wts, T *dx, idx nc, idx h, idx w, idx kh, idx kw,
    idx pad_h, idx pad_w, idx stride_h, idx stride_w, idx dil_h, idx dil_w, idx oh, idx ow)
depthwise_backward_weight(const T *x, const T *dy, T *dw, idx nb, idx nc, idx h, idx w, idx kh,
    idx kw, idx pad_h, idx pad_w, idx stride_h, idx stride_w, idx dil_h, idx dil_w, idx oh,
    idx ow)
winograd_weights(const T *g, T *u, idx nk, idx nc)
winograd_input(const T *x, T *v, idx nb, idx nc, idx xc, idx h, idx w, idx pad_h, idx pad_w,
    idx th, idx tw)
winograd_output(const T *m, const T *bias, T *y, idx nb, idx nk, idx yc, idx oh, idx ow, idx th,
    idx tw)
winograd4_weights(const T *g, T *u, idx nk, idx nc)
winograd4_input(const T *x, T *v, idx nb, idx nc, idx xc, idx h, idx w, idx pad_h, idx pad_w,
    idx th, idx tw)
winograd4_output(const T *m, const T *bias, T *y, idx nb, idx nk, idx yc, idx oh, idx ow,
    idx th, idx tw)
pointwise_forward(const T *x, const T *w, const T *bias, T *y, idx nk, idx nc, idx npix,
    idx relu)
bn_train_forward(const T *x, T *y, T *xnorm, T *mean, T *var, T *stdv, const T *gamma,
    const T *beta, idx nb, idx nc, idx sp, T eps, int32_t global, int32_t relu)
bn_train_backward(T *dy, const T *xnorm, const T *y, const T *stdv, const T *gamma,
    T *dgamma, T *dbeta, T *dx, idx nb, idx nc, idx sp, int32_t global, int32_t relu,
    int32_t keep)
solver_update_all(T **diffs, T **states0, T **states1, T **datas, const idx *ends,
    const T *rates, const T *decays, const T *coef, idx nparams, T norm, int32_t l1,
    int32_t rule)
"""

# Float-only kernels (blocked_impl.h), exported once as ``pcl_<name>_f32``; ``blocked_isa``
# (no arguments) is bound apart.
PROTOTYPES_F32 = """
to_blocked(const float *x, float *xb, idx nc, idx hw, idx bs, idx xbs_n)
from_blocked(const float *xb, float *x, idx nc, idx hw, idx bs, idx xbs_n)
blocked_conv(const float *x, const float *wts, const float *bias, const float *res, float *y,
    idx bs, idx depthwise, idx input_blocked, idx nk, idx cg, idx kg, idx h, idx w, idx kh,
    idx kw, idx ph, idx pw, idx sh, idx sw, idx dh, idx dw, idx oh, idx ow, idx xs_n, idx ys_n,
    idx rs_n, idx relu, idx seglen)
blocked_pool(const float *x, float *y, idx bs, idx method_ave, idx cbn, idx h, idx w, idx oh,
    idx ow, idx kh, idx kw, idx ph, idx pw, idx sh, idx sw, idx xs_n, idx ys_n)
"""

_C_TYPES = {"idx": ctypes.c_int64, "int32_t": ctypes.c_int32}


def parse_prototypes(text):
    """``{name: [(C type, parameter name), ...]}`` of prototypes in the form above, with the
    trailing ``start`` and ``stop``."""
    found = {}
    for name, params in re.findall(r"(\w+)\(([^)]*)\)", text):
        args = []
        for param in params.split(","):
            ctype, _, pname = " ".join(param.split()).rpartition(" ")
            if pname.startswith("*"):
                ctype, pname = ctype + " *", pname[1:]
            args.append((ctype.replace("const ", ""), pname))
        found[name] = args + [("idx", "start"), ("idx", "stop")]
    return found


SIGNATURES = parse_prototypes(PROTOTYPES)
SIGNATURES_F32 = parse_prototypes(PROTOTYPES_F32)


def _argtype(ctype, scalar):
    if ctype.endswith("*"):
        return ctypes.c_void_p
    return scalar if ctype == "T" else _C_TYPES[ctype]


def _source_checkout():
    """The source checkout this package is imported from (its folder holds setup.py and
    proto/caffe.proto), or None for an installed package."""
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    if all(os.path.isfile(os.path.join(root, *parts))
           for parts in (("setup.py",), ("proto", "caffe.proto"))):
        return root
    return None


def load():
    """The compiled library (ctypes), or None when it was not built or does not load."""
    if _state["checked"]:
        return _state["lib"]
    with _lock:
        if _state["checked"]:
            return _state["lib"]
        lib = None
        try:
            package = __name__.rpartition(".")[0]
            spec = importlib.util.find_spec(package + "._kernels")
            if spec is None or not spec.origin:
                checkout = _source_checkout()
                if checkout is None:
                    raise ImportError("the extension %s._kernels was not built" % package)
                raise ImportError("the extension %s._kernels was not built in the source "
                                  "checkout %s, which Python imports pycaffe_lite from (the "
                                  "working directory or PYTHONPATH), not from where pip "
                                  "installed it; build them there with 'pip install -e .'"
                                  % (package, checkout))
            lib = ctypes.CDLL(spec.origin)
            if lib.pcl_abi_version() != ABI_VERSION:
                raise ImportError("%s was built from other sources (ABI %d, expected %d): "
                                  "reinstall the package" % (spec.origin,
                                                             lib.pcl_abi_version(),
                                                             ABI_VERSION))
            for name, args in SIGNATURES.items():
                for suffix, scalar in (("_f32", ctypes.c_float), ("_f64", ctypes.c_double)):
                    fn = getattr(lib, "pcl_" + name + suffix)
                    fn.argtypes = [_argtype(ctype, scalar) for ctype, _ in args]
                    fn.restype = None
            for name, args in SIGNATURES_F32.items():
                fn = getattr(lib, "pcl_" + name + "_f32")
                fn.argtypes = [_argtype(ctype, ctypes.c_float) for ctype, _ in args]
                fn.restype = None
            lib.pcl_blocked_isa.argtypes, lib.pcl_blocked_isa.restype = [], ctypes.c_int
        except (ImportError, OSError, AttributeError) as exc:
            _state["error"] = str(exc)
            lib = None
            how = "" if "pip install" in str(exc) else (
                " Reinstall the package where a C compiler is present to build them.")
            log.warning("The compiled CPU kernels are not used (%s); the NumPy code runs "
                        "instead, slower.%s Set PYCAFFE_LITE_CPU_KERNELS=0 to use NumPy "
                        "without this message.", exc, how)
        _state["lib"] = lib
        _state["checked"] = True
    return lib


def library_available():
    """Whether the compiled library was built and loads (the reason why not:
    :func:`unavailable_reason`)."""
    return load() is not None


def unavailable_reason():
    """Why the compiled library is not used (None when it is)."""
    load()
    return _state["error"]


def function(name, dtype):
    """The kernel ``name`` for arrays of ``dtype`` (float32 or float64)."""
    return getattr(load(), "pcl_%s_%s" % (name, "f32" if dtype == np.float32 else "f64"))


def address(a):
    """The address of a C-contiguous NumPy array's first element."""
    return a.ctypes.data
