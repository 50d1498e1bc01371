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
- :func:`bias_relu` / :func:`relu_backward`: a convolution's bias and ReLU in one pass, ReLU's
  forward and gradient (NumPy's ``maximum`` is several times slower than an add);
- :func:`sgd_update`: the SGD solver's step for one parameter in one pass;
- :mod:`.convolution`: the direct depthwise convolution and Winograd's F(2x2, 3x3) and
  F(4x4, 3x3) (equal to
  the matrix-product path to float rounding, not bit for bit: see there);
- :func:`accumulate_matmul` (NumPy only, always on): ``c += a @ b`` in cache-sized blocks, for
  the fully connected layers' weight gradients.

ctypes releases the GIL during a call, so each kernel splits its work over ``threads()``
threads (by channel or by plane) and a 2-core machine runs it on both cores.
"""

import ctypes
import os
import threading

import numpy as np

_ABI_VERSION = 13
_enabled = [os.environ.get("PYCAFFE_LITE_CPU_KERNELS", "1") != "0"]
_state = {"lib": None, "checked": False, "pool": None, "threads": None, "error": None}
_lock = threading.Lock()

_I = ctypes.c_int64
_P = ctypes.c_void_p
_F = "scalar"  # the element type's C scalar (float or double)
_SIGNATURES = {
    "im2col_batch_first": [_P, _P] + [_I] * 16,
    "col2im_batch_first": [_P, _P] + [_I] * 16,
    "max_pool_forward": [_P, _P, _P] + [_I] * 12,
    "max_pool_backward": [_P, _P, _P] + [_I] * 12,
    "ave_pool_forward": [_P, _P, _P] + [_I] * 12,
    "bias_relu": [_P, _P, _P, _I, _I, ctypes.c_int32, _I, _I],
    "relu_backward": [_P, _P, _P, _I, _I],
    "sgd_update": [_P, _P, _P, _F, _F, ctypes.c_int32, _F, _F, _I, _I],
    "lrn_scale": [_P, _P, _P, _I, _I, _I, _F, _F, _I, _I],
    "lrn_accum": [_P, _P, _P, _P, _P, _I, _I, _I, _I, _I],
    "depthwise_forward": [_P, _P, _P, _P] + [_I] * 15,
    "depthwise_backward_data": [_P, _P, _P] + [_I] * 15,
    "depthwise_backward_weight": [_P, _P, _P] + [_I] * 16,
    "winograd_weights": [_P, _P] + [_I] * 4,
    "winograd_input": [_P, _P] + [_I] * 11,
    "winograd_output": [_P, _P, _P] + [_I] * 9,
    "winograd4_weights": [_P, _P] + [_I] * 4,
    "winograd4_input": [_P, _P] + [_I] * 11,
    "winograd4_output": [_P, _P, _P] + [_I] * 9,
    "pointwise_forward": [_P, _P, _P, _P] + [_I] * 6,
}


def _load():
    """The compiled library (ctypes), or None when it was not built or does not load."""
    if _state["checked"]:
        return _state["lib"]
    with _lock:
        if _state["checked"]:
            return _state["lib"]
        lib = None
        try:
            import importlib.util
            spec = importlib.util.find_spec(__name__ + "._kernels")
            if spec is None or not spec.origin:
                raise ImportError("the extension %s._kernels was not built" % __name__)
            lib = ctypes.CDLL(spec.origin)
            if lib.pcl_abi_version() != _ABI_VERSION:
                raise ImportError("%s was built from other sources (ABI %d, expected %d): "
                                  "reinstall the package" % (spec.origin,
                                                             lib.pcl_abi_version(),
                                                             _ABI_VERSION))
            for name, args in _SIGNATURES.items():
                for suffix, scalar in (("_f32", ctypes.c_float), ("_f64", ctypes.c_double)):
                    fn = getattr(lib, "pcl_" + name + suffix)
                    fn.argtypes = [scalar if a is _F else a for a in args]
                    fn.restype = None
        except (ImportError, OSError, AttributeError) as exc:
            _state["error"] = str(exc)
            lib = None
        _state["lib"] = lib
        _state["checked"] = True
    return lib


def library_available():
    """Whether the compiled library was built and loads (the reason why not:
    :func:`unavailable_reason`)."""
    return _load() is not None


def unavailable_reason():
    """Why the compiled library is not used (None when it is)."""
    _load()
    return _state["error"]


def set_kernels_enabled(flag):
    """Use the compiled kernels when they were built (True, the default) or the NumPy code
    (False). Returns the previous setting."""
    old = _enabled[0]
    _enabled[0] = bool(flag)
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


def threads():
    """How many threads the kernels use: ``PYCAFFE_LITE_CPU_THREADS``, else
    ``OMP_NUM_THREADS``, else the number of CPUs this process may run on."""
    n = _state["threads"]
    if n is None:
        value = os.environ.get("PYCAFFE_LITE_CPU_THREADS") or os.environ.get("OMP_NUM_THREADS")
        try:
            n = int(value) if value else len(os.sched_getaffinity(0))
        except (ValueError, AttributeError):
            n = os.cpu_count() or 1
        n = _state["threads"] = max(1, n)
    return n


def _function(name, dtype):
    return getattr(_load(), "pcl_%s_%s" % (name, "f32" if dtype == np.float32 else "f64"))


def _address(a):
    return a.ctypes.data


class _Job:
    """One call's ranges in flight: the last part to finish releases ``finished``."""

    __slots__ = ("lock", "left", "finished", "error")

    def __init__(self, parts):
        self.lock = threading.Lock()
        self.left = parts
        self.finished = threading.Lock()
        self.finished.acquire()
        self.error = None
        if parts == 0:
            self.finished.release()

    def done(self, parts=1, error=None):
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.left -= parts
            last = self.left == 0
        if last:
            self.finished.release()

    def wait(self):
        """Wait for every part, through interrupts: the parts write into arrays the caller
        owns, so the caller unwinds only once they are done (then the interrupt goes on)."""
        interrupted = None
        while True:
            try:
                self.finished.acquire()
                break
            except BaseException as exc:  # KeyboardInterrupt, or another signal's exception
                interrupted = exc
        if interrupted is not None:
            raise interrupted
        if self.error is not None:
            raise self.error


def _work(tasks):
    while True:
        task = tasks.get()
        if task is None:
            return
        job, fn, args, start, stop = task
        try:
            fn(*args, start, stop)
        except BaseException as exc:
            job.done(error=exc)
        else:
            job.done()


class _Pool:
    """The kernels' worker threads. The calling thread talks to them only through C-level
    objects (a SimpleQueue, plain locks), never a Python Condition: a KeyboardInterrupt in
    the calling thread can then never leave behind a lock that a worker waits for. The
    threads end, joined, when the pool is closed: at interpreter exit before atexit handlers
    (:mod:`pycaffe_lite.lifecycle`), or when a larger pool replaces it."""

    def __init__(self, size):
        import queue

        from ...lifecycle import Resources, stop_and_join
        self.size = size
        self.tasks = queue.SimpleQueue()
        self.threads = []
        self.resources = Resources(self, "the C kernels' threads")
        self.resources.push(stop_and_join(self.threads, self._stop))
        for i in range(size):
            t = threading.Thread(target=_work, args=(self.tasks,), daemon=True,
                                 name="pycaffe-lite-kernel #%d" % i)
            self.threads.append(t)
            t.start()

    def _stop(self):
        for _ in self.threads:
            self.tasks.put(None)

    @property
    def closed(self):
        return self.resources.closed

    def run(self, job, fn, args, start, stop):
        if self.resources.closed:
            raise RuntimeError("the kernel threads are closed")
        self.tasks.put((job, fn, args, start, stop))


def _pool(size):
    pool = _state["pool"]
    if pool is None or pool.closed or pool.size < size:
        with _lock:
            pool = _state["pool"]
            if pool is None or pool.closed or pool.size < size:
                if pool is not None:
                    pool.resources.release()
                pool = _state["pool"] = _Pool(size)
    return pool


def _split(fn, total, args, grain=1):
    """Run ``fn(*args, start, stop)`` over ``[0, total)`` split into contiguous ranges, one
    per thread (the calling thread takes the first). ``grain``: the least work worth a
    thread, in units of ``total``."""
    n = min(threads(), total // max(1, grain))
    if n <= 1:
        fn(*args, 0, total)
        return
    bounds = [total * i // n for i in range(n + 1)]
    job = _Job(n - 1)
    handed = 1  # parts 1 .. handed - 1 are with the threads
    try:
        try:
            pool = _pool(n - 1)
            for i in range(1, n):
                pool.run(job, fn, args, bounds[i], bounds[i + 1])
                handed = i + 1
        except RuntimeError:
            # the interpreter is exiting (the threads are closed): the rest in this thread
            job.done(n - handed)
            fn(*args, bounds[handed], total)
        except BaseException:
            job.done(n - handed)  # not handed: nobody will count them down
            raise
        fn(*args, bounds[0], bounds[1])
    finally:
        job.wait()


# A thread is worth starting for about this many elements of work (handing a range to a
# worker and waiting for it cost some tens of microseconds).
_MIN_ELEMENTS_PER_THREAD = 1 << 15


def _grain(elements_per_unit):
    """Units of work per thread so that each thread moves at least the minimum."""
    return max(1, _MIN_ELEMENTS_PER_THREAD // max(1, int(elements_per_unit)))


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
           [_address(x), _address(dy), _address(dx)], grain=_MIN_ELEMENTS_PER_THREAD)
    return dx


# ---- solver ---------------------------------------------------------------------------------
def sgd_update(diff, history, data, norm, decay, l1, rate, momentum):
    """The SGD solver's normalize + regularize + compute_update_value for one parameter in
    one pass (``diff`` and ``history`` updated in place; see kernels_impl.h), with the same
    float rounding as its NumPy steps. The scalars are the ones those steps use."""
    _split(_function("sgd_update", diff.dtype), diff.size,
           [_address(diff), _address(history), _address(data), norm, decay, int(bool(l1)),
            rate, momentum], grain=1 << 18)


# ---- matrix products accumulated in place ---------------------------------------------------
# Rows of ``c`` per block of :func:`accumulate_matmul`: a block's product stays in cache until
# it is added.
_ACCUMULATE_BLOCK_BYTES = 1 << 20
_accumulate_buffers = threading.local()


def accumulate_matmul(c, a, b):
    """``c += a @ b`` for host matrices without a temporary the size of ``c``: the product is
    made a block of rows at a time into a small reused buffer and added while it is still in
    cache. A large fully connected layer's weight gradient (a product of rank ``batch``) is
    memory-bound: this halves its memory traffic and its page faults. Small products, and
    device arrays, take ``c += a @ b``."""
    rows = max(1, _ACCUMULATE_BLOCK_BYTES // max(1, c.shape[1] * c.itemsize))
    if type(c) is not np.ndarray or c.shape[0] <= 2 * rows:
        c += a @ b
        return c
    buf = getattr(_accumulate_buffers, "buf", None)
    if buf is None or buf.dtype != c.dtype or buf.size < rows * c.shape[1]:
        buf = _accumulate_buffers.buf = np.empty(rows * c.shape[1], c.dtype)
    for r in range(0, c.shape[0], rows):
        part = c[r:r + rows]
        product = buf[:part.size].reshape(part.shape)
        np.matmul(a[r:r + rows], b, out=product)
        part += product
    return c
