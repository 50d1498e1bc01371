"""Compiled host kernels for the CPU hot paths (optional: built at install from C).

``pip install .`` compiles ``kernels.c`` into the extension ``pycaffe_lite.ops.cpu._kernels``
when a C compiler is present (an optional build: without one the package installs all the
same). Then the host (NumPy) arrays of the hot paths below go through these compiled loops
instead of a sequence of NumPy slice operations, with the same results: the same values,
summed in the same order, so the two paths agree bit for bit (tests/test_ops_cpu_kernels.py
checks it on every geometry family). Without the library, or with
``PYCAFFE_LITE_CPU_KERNELS=0`` / :func:`set_kernels_enabled`, the NumPy code runs.

Why compiled code here: the NumPy forms of these kernels make ``kh * kw`` passes over the
data, each a strided copy of a few dozen elements at a time (LeNet's im2col is 25 copies of
runs of 8 to 24 values per image and channel), and MAX pooling's window scan has no NumPy
form without a pass per kernel offset; a loop that visits every element once is several
times faster. The library is plain C behind ctypes: no Python API in the loops, no runtime
compiler, nothing to import but the shared object (a JIT such as numba would add about 140 MB
of memory to a process whose whole LeNet training fits in 100 MB).

- :func:`im2col_batch_first` / :func:`col2im_batch_first`: the convolution column matrix,
  Caffe's per-image layout with the images side by side (2-D);
- :func:`max_pool_forward` / :func:`max_pool_backward`: MAX pooling with the window choices
  of :mod:`pycaffe_lite.ops.pooling`; :func:`ave_pool_forward`: AVE pooling's window sums;
- :func:`lrn_scale` / :func:`lrn_accum`: LRN's sums over neighbouring channels (the power
  stays NumPy's);
- :func:`add_relu`: an Eltwise SUM of two blobs and the ReLU after it in one pass;
- :func:`bias_relu` / :func:`relu_backward`: a convolution's bias and ReLU in one pass, ReLU's
  forward and gradient (NumPy's ``maximum`` is several times slower than an add);
- :func:`sgd_update`: the SGD solver's step for one parameter in one pass;
  :func:`solver_update_all`: the SGD, Nesterov or Adam step and ``data -= diff`` for every
  parameter in one call;
- :func:`bn_train_forward` / :func:`bn_train_backward`: BatchNorm -> Scale -> ReLU on one
  blob in training (the net's fused chains, :mod:`pycaffe_lite.net_train_fuse`);
- :func:`host_matmul`: a product through :func:`split_matmul`, or on the calling thread alone;
- :func:`split_matmul`: a large product's columns shared by the kernel threads, each chunk a
  single-threaded OpenBLAS call (equal to the whole product to float rounding);
- :mod:`.convolution`: the direct depthwise convolution and Winograd's F(2x2, 3x3) and
  F(4x4, 3x3) (equal to
  the matrix-product path to float rounding, not bit for bit: see there).
- :mod:`.blocked`: the channel-blocked (NCHWc) layout's direct convolution and pooling,
  float32, AVX-512F or AVX2 + FMA chosen at run time (see there).

ctypes releases the GIL during a call, so each kernel cuts its work into chunks (by channel,
plane or element) that the calling thread and ``threads() - 1`` workers claim as they come: a
2-core machine runs it on both cores, and a worker descheduled by a busy machine leaves its
chunks to the calling thread instead of stalling the call.

The package: :mod:`._library` loads the shared object, checks its ABI and declares every
kernel's C prototype by name; :mod:`._threads` owns the kernel threads, hands a call's chunks
to them and sets the thread count (affinity, cgroup quota; OpenBLAS gets the same); this
module holds the switch, the array checks and the kernels' Python faces; :mod:`.convolution`
the convolution kernels; :mod:`.blocked` the channel-blocked ones.
"""


import numpy as np

from ._library import address as _address, function as _function
from ._library import library_available, load as _load, unavailable_reason  # noqa: F401
from ._threads import MIN_ELEMENTS_PER_THREAD, grain as _grain, split as _split
from ._threads import SingleThreadedBlas as _SingleThreadedBlas
from ._threads import blas_controllable as _blas_controllable
from ._threads import threads, usable_cpus  # noqa: F401
from ...switches import flag as flag_value, switch

_enabled = [switch("PYCAFFE_LITE_CPU_KERNELS")]
_gemm_split = [switch("PYCAFFE_LITE_GEMM_SPLIT")]
threads()  # settles the count now, and with it OpenBLAS's (NumPy has loaded it)


def set_kernels_enabled(flag):
    """Use the compiled kernels when they were built (True, the default) or the NumPy code
    (False). Returns the previous setting."""
    old = _enabled[0]
    _enabled[0] = flag_value(flag, "set_kernels_enabled")
    return old


def kernels_enabled():
    """True when the compiled kernels are on and the library is there."""
    return _enabled[0] and _load() is not None


def supported(*arrays):
    """The kernels take these arrays: enabled, NumPy arrays, C-contiguous, and one float
    dtype (float32 or float64) among the float arrays (int32 for the others)."""
    if not kernels_enabled():
        return False
    dtype = None
    for a in arrays:
        if a is None:
            continue
        if type(a) is not np.ndarray or not a.flags.c_contiguous:
            return False
        if a.dtype.kind == "f":
            if a.dtype not in (np.float32, np.float64) or (dtype is not None and a.dtype != dtype):
                return False
            dtype = a.dtype
        elif a.dtype != np.int32:
            return False
    return dtype is not None


# ---- convolution ----------------------------------------------------------------------------
def _conv_geometry(image_shape, kernel, pad, stride, dilation, out_spatial):
    nb, nc, h, w = (int(v) for v in image_shape)
    return [nb, nc, h, w, kernel[0], kernel[1], pad[0], pad[1], stride[0], stride[1],
            dilation[0], dilation[1], out_spatial[0], out_spatial[1]]


def im2col_batch_first(x, kernel, pad, stride, dilation, out_spatial, out):
    """:func:`pycaffe_lite.ops.im2col.im2col` (2-D): columns ``(C * kh * kw, B * OH * OW)``,
    each image's columns side by side."""
    geometry = _conv_geometry(x.shape, kernel, pad, stride, dilation, out_spatial)
    per_channel = out.size // max(1, x.shape[1])
    _split(_function("im2col_batch_first", x.dtype), x.shape[1],
           [_address(x), _address(out)] + geometry, grain=_grain(per_channel))
    return out


def col2im_batch_first(col, image_shape, kernel, pad, stride, dilation, out_spatial, out):
    """:func:`pycaffe_lite.ops.im2col.col2im` (2-D) into ``out`` (overwritten), overlaps
    summed in kernel-offset order."""
    geometry = _conv_geometry(image_shape, kernel, pad, stride, dilation, out_spatial)
    per_channel = col.size // max(1, image_shape[1])
    _split(_function("col2im_batch_first", col.dtype), int(image_shape[1]),
           [_address(col), _address(out)] + geometry, grain=_grain(per_channel))
    return out


# ---- MAX pooling ----------------------------------------------------------------------------
def _pool_geometry(image_shape, kernel, pad, stride, pooled):
    h, w = (int(v) for v in image_shape[2:])
    return [h, w, pooled[0], pooled[1], kernel[0], kernel[1], pad[0], pad[1], stride[0],
            stride[1]]


def max_pool_forward(x, kernel, pad, stride, pooled, top, argmax):
    """:func:`pycaffe_lite.ops.pooling.max_pool_forward` (first maximum in row-major order,
    NaN skipped, ``-FLT_MAX`` floor, kernel offset or -1 in ``argmax``; ``argmax`` None:
    the values only)."""
    planes = x.shape[0] * x.shape[1]
    _split(_function("max_pool_forward", x.dtype), planes,
           [_address(x), _address(top), None if argmax is None else _address(argmax)] +
           _pool_geometry(x.shape, kernel, pad, stride, pooled),
           grain=_grain(x.shape[2] * x.shape[3]))


def ave_pool_forward(x, kernel, pad, stride, pooled, top, divisors):
    """:func:`pycaffe_lite.ops.pooling.ave_pool_forward` (window sums in kernel-offset order,
    over ``divisors``)."""
    planes = x.shape[0] * x.shape[1]
    _split(_function("ave_pool_forward", x.dtype), planes,
           [_address(x), _address(top), _address(divisors)] +
           _pool_geometry(x.shape, kernel, pad, stride, pooled),
           grain=_grain(x.shape[2] * x.shape[3]))


def max_pool_backward(top_diff, argmax, kernel, pad, stride, pooled, bottom_diff):
    """:func:`pycaffe_lite.ops.pooling.max_pool_backward` (overwrites ``bottom_diff``; a
    bottom element picked by several windows sums them in kernel-offset order). A NaN top
    gradient reaches only its window's picked element, as in Caffe (the NumPy code's
    ``top_diff * (choice == k)`` spreads it over the window)."""
    shape = bottom_diff.shape
    _split(_function("max_pool_backward", bottom_diff.dtype), shape[0] * shape[1],
           [_address(top_diff), _address(argmax), _address(bottom_diff)] +
           _pool_geometry(shape, kernel, pad, stride, pooled),
           grain=_grain(shape[2] * shape[3]))


# ---- LRN across channels ----------------------------------------------------------------------
def lrn_scale(x, scale, size, a, k, top=None):
    """``scale = k + a * window_sum(x^2)`` over ``size`` channels of ``x (N, C, H, W)`` (the
    NumPy code's order and roundings; ``a`` and ``k`` already in the arrays' type); with
    ``top``, also ``top = x * scale^-0.75`` as :func:`pycaffe_lite.ops.lrn.lrn_forward`
    computes it for ``beta = 0.75``. Split over (image, channel) planes: one image's
    channels share the threads."""
    n, c = x.shape[:2]
    npix = x.size // max(1, n * c)
    _split(_function("lrn_scale", x.dtype), n * c,
           [_address(x), _address(scale), None if top is None else _address(top), c, npix,
            size, a, k], grain=_grain(npix * size))


def lrn_accum(top_diff, top, scale, work, accum, size):
    """``accum = window_sum(top_diff * top / scale)`` over ``size`` channels (``work``: a
    buffer shaped like the others)."""
    n, c = top.shape[:2]
    npix = top.size // max(1, n * c)
    _split(_function("lrn_accum", top.dtype), n,
           [_address(top_diff), _address(top), _address(scale), _address(work),
            _address(accum), c, npix, size], grain=_grain(c * npix))


# ---- bias and ReLU ---------------------------------------------------------------------------
# Elements per part when an array has no channels to split by.
_FLAT_PART = 1 << 14


def bias_relu(x, y, bias=None, relu=True):
    """``y = max(x (+ bias per channel), 0)`` (the max only when ``relu``; bias over axis 1 of
    ``x (N, C, ...)``) in one pass, as NumPy's ``x + bias`` and ``maximum(., 0)`` compute it;
    ``y`` may be ``x``."""
    if bias is not None:
        nc = x.shape[1]
        planes = x.shape[0] * nc
        npix = x.size // max(1, planes)
    else:  # no channels: fixed-size parts
        nc, npix = 1, _FLAT_PART
        planes = -(-x.size // npix)
        if planes == 1:
            npix = x.size
    if planes * npix != x.size:  # a ragged last part: ReLU in two calls
        head = (x.size // npix) * npix
        bias_relu(x.reshape(-1)[:head], y.reshape(-1)[:head], None, relu)
        bias_relu(x.reshape(-1)[head:], y.reshape(-1)[head:], None, relu)
        return y
    _split(_function("bias_relu", x.dtype), planes,
           [_address(x), _address(y), None if bias is None else _address(bias), nc, npix,
            int(bool(relu))], grain=_grain(npix))
    return y


def relu_backward(x, dy, dx):
    """``dx = dy * (x > 0)`` (ReLU's gradient, negative slope 0), as NumPy forms it."""
    _split(_function("relu_backward", x.dtype), x.size,
           [_address(x), _address(dy), _address(dx)], grain=MIN_ELEMENTS_PER_THREAD)
    return dx


def add_relu(a, b, y, relu=True):
    """``y = a + b`` (then ``max(y, 0)`` when ``relu``) in one pass, as NumPy's ``a + b`` and
    the ReLU compute it; ``y`` may be ``a`` or ``b``."""
    _split(_function("add_relu", a.dtype), a.size,
           [_address(a), _address(b), _address(y), int(bool(relu))],
           grain=MIN_ELEMENTS_PER_THREAD)
    return y


# ---- solver ---------------------------------------------------------------------------------
def sgd_update(diff, history, data, norm, decay, l1, rate, momentum):
    """The SGD solver's normalize + regularize + compute_update_value for one parameter in
    one pass (``diff`` and ``history`` updated in place; see kernels_impl.h), with the same
    float rounding as its NumPy steps. The scalars are the ones those steps use."""
    _split(_function("sgd_update", diff.dtype), diff.size,
           [_address(diff), _address(history), _address(data), norm, decay, int(bool(l1)),
            rate, momentum], grain=1 << 18)


#: the rules :func:`solver_update_all` computes, by the kernel's number for each
UPDATE_RULES = {"SGD": 0, "Nesterov": 1, "Adam": 2}


def solver_update_all(rule, diffs, states, datas, rates, decays, norm, l1, coefficients):
    """The update of every parameter by ``rule`` (a key of :data:`UPDATE_RULES`), then
    ``data -= diff``, in one call whose threads share the elements of all of them: lists of
    arrays of one dtype (``states`` one list per state of the rule: the history, or Adam's m
    and v), ``rates`` and ``decays`` one per parameter, ``coefficients`` the rule's scalars
    (see train_impl.h). The same values as the solver's per-parameter steps, bit for bit."""
    dtype = diffs[0].dtype
    ptr = np.uint64
    ends = np.cumsum(np.fromiter((d.size for d in diffs), np.int64, len(diffs)))
    tables = [np.fromiter((a.ctypes.data for a in arrays), ptr, len(arrays))
              for arrays in (diffs, states[0], states[-1], datas)]
    scalars = [np.asarray(v, dtype) for v in (rates, decays, coefficients)]
    total = int(ends[-1]) if len(ends) else 0
    _split(_function("solver_update_all", dtype), total,
           [_address(t) for t in tables] + [_address(ends)] + [_address(v) for v in scalars]
           + [len(diffs), norm, int(bool(l1)), UPDATE_RULES[rule]], grain=1 << 18)


def _null(a):
    return None if a is None else _address(a)


def bn_train_forward(x, y, xnorm, mean, var, stdv, gamma, beta, eps, use_global, relu):
    """BatchNorm (batch statistics into ``mean`` and ``var``, or ``use_global``: read from
    them) -> per-channel ``gamma`` and ``beta`` (each may be None) -> ReLU (``relu``) of ``x``
    (B, C, S) into ``y`` (may be ``x``), keeping ``xnorm`` and ``stdv`` for the backward."""
    nb, nc, sp = x.shape
    _split(_function("bn_train_forward", x.dtype), nc,
           [_address(x), _address(y), _address(xnorm), _address(mean), _address(var),
            _address(stdv), _null(gamma), _null(beta), nb, nc, sp, eps, int(bool(use_global)),
            int(bool(relu))], grain=_grain(nb * sp))


def bn_train_backward(dy, xnorm, y, stdv, gamma, dgamma, dbeta, dx, use_global, relu,
                      keep=False):
    """The chain's backward (see kernels' train_impl.h): ``dgamma`` and ``dbeta`` (each may be
    None) accumulate, ``dx`` (may be ``dy``) is overwritten; ``keep`` (``dx`` not ``dy``):
    ``dy`` becomes the gradient before BatchNorm (past the ReLU, times gamma)."""
    nb, nc, sp = dy.shape
    _split(_function("bn_train_backward", dy.dtype), nc,
           [_address(dy), _address(xnorm), _address(y), _address(stdv), _null(gamma),
            _null(dgamma), _null(dbeta), _address(dx), nb, nc, sp, int(bool(use_global)),
            int(bool(relu)), int(bool(keep))], grain=_grain(nb * sp))


# ---- matrix products -------------------------------------------------------------------------
# Columns per unit of a split product (whole SIMD panels of OpenBLAS's kernels), and the least
# multiply-adds worth a chunk.
GEMM_COLUMNS = 64
GEMM_MIN_WORK = 1 << 21
# Rows per unit where a product has too few columns to share (a weight gradient's ``out`` has
# as many columns as its layer has outputs).
GEMM_ROWS = 16


def set_gemm_split(flag):
    """Split large products over the kernel threads (True, the default) or leave each to
    OpenBLAS's own threads (False; ``PYCAFFE_LITE_GEMM_SPLIT=0``). Returns the previous
    setting."""
    old = _gemm_split[0]
    _gemm_split[0] = flag_value(flag, "set_gemm_split")
    return old


def gemm_split_enabled():
    """Whether large products may be shared by the kernel threads (see :func:`split_matmul`)."""
    return _gemm_split[0]


def _matmul_columns(a, b, out, start, stop):
    start, stop = start * GEMM_COLUMNS, min(b.shape[1], stop * GEMM_COLUMNS)
    np.matmul(a, b[:, start:stop], out=out[:, start:stop])


def _matmul_rows(a, b, out, start, stop):
    start, stop = start * GEMM_ROWS, min(a.shape[0], stop * GEMM_ROWS)
    np.matmul(a[start:stop], b, out=out[start:stop])


def _matmul_stack(a, b, out, start, stop):
    np.matmul(a[start:stop], b[start:stop], out=out[start:stop])


def split_matmul(a, b, out):
    """``out = a @ b`` for float host arrays shared by the kernel threads, each chunk a
    single-threaded OpenBLAS product that a thread claims as it comes: a thread that a busy
    machine deschedules leaves its share to the others (OpenBLAS's own threads split a
    product in fixed parts and wait for each).

    - 2-D (``a (M, K)``, ``b (K, N)``): the columns of ``b`` and ``out`` in chunks of
      :data:`GEMM_COLUMNS`, or, where they are too few to share (a weight gradient's), the
      rows of ``a`` and ``out`` in chunks of :data:`GEMM_ROWS`. Each element is the same dot
      product as in one whole product, computed by OpenBLAS's kernel for its panel: equal to
      the unsplit result to float rounding (bit for bit on most shapes);
    - 3-D (a stack of products, as NumPy's ``matmul`` broadcasts them): whole products per
      chunk, each the same call NumPy makes for it.

    Returns False, having done nothing, where it does not apply: switched off, one thread, a
    product too small to share, ``out`` not C-contiguous, or a BLAS whose threads cannot be
    set."""
    if not _gemm_split[0] or threads() <= 1:
        return False
    if type(a) is not np.ndarray or type(b) is not np.ndarray or type(out) is not np.ndarray:
        return False
    if a.ndim != b.ndim or out.ndim != a.ndim or not out.flags.c_contiguous:
        return False
    if a.ndim == 2:
        m, k = a.shape
        n = b.shape[1]
        units = -(-n // GEMM_COLUMNS)
        grain = max(1, GEMM_MIN_WORK // max(1, m * k * GEMM_COLUMNS))
        fn = _matmul_columns
        if units < 2 * grain:
            units = -(-m // GEMM_ROWS)
            grain = max(1, GEMM_MIN_WORK // max(1, GEMM_ROWS * k * n))
            fn = _matmul_rows
    elif a.ndim == 3 and a.shape[0] == b.shape[0] == out.shape[0]:
        units = a.shape[0]
        grain = max(1, GEMM_MIN_WORK // max(1, a.shape[1] * a.shape[2] * b.shape[2]))
        fn = _matmul_stack
    else:
        return False
    if units < 2 * grain or not _blas_controllable():
        return False
    with _SingleThreadedBlas():
        _split(fn, units, (a, b, out), grain=grain)
    return True


# Multiply-adds of a product too small to share that runs on the calling thread alone.
SMALL_PRODUCT = 4 * GEMM_MIN_WORK


def host_matmul(a, b, out):
    """``out = a @ b`` for host arrays: :func:`split_matmul` where it applies; else, for a
    product of at most :data:`SMALL_PRODUCT` multiply-adds while the products are shared
    (``set_gemm_split``) and there are kernel threads, one product on the calling thread.
    OpenBLAS's own threads, once a product wakes them, spin for a while (up to about 0.1 s
    unless ``OPENBLAS_THREAD_TIMEOUT`` was set before NumPy loaded it) on the cores the kernel
    threads need next: a script that imports NumPy before pycaffe_lite ran ResNet-50 1.5x
    slower for the one small product of its classifier."""
    if split_matmul(a, b, out):
        return out
    small = out.size * a.shape[-1] <= SMALL_PRODUCT
    if small and _gemm_split[0] and threads() > 1 and _blas_controllable():
        with _SingleThreadedBlas():
            np.matmul(a, b, out=out)
    else:
        np.matmul(a, b, out=out)
    return out
