"""What the GPU kernels share: the lazy CuPy import, array checks, kernel caches and launches.

Nothing here imports CuPy: ``cupy()`` is :func:`pycaffe_lite.backend.cupy_module`, which only
the kernel functions (which run on CuPy arrays, so CuPy is already loaded) call.
"""

import logging
import threading

import numpy as np

from ...backend import cupy_module as cupy  # noqa: F401  (re-exported: the kernels' CuPy)
from ...backend import is_cupy_array as is_cupy  # noqa: F401  (re-exported)
from ...switches import flag as flag_value, switch

# Kernels index with 32-bit ints (fast division on the GPU); larger arrays take the
# xp-generic path instead.
MAX_KERNEL_ELEMENTS = 2 ** 30
BLOCK = 256
MAX_GRID = 65535 * 32

_lock = threading.Lock()
log = logging.getLogger("pycaffe_lite")
# PYCAFFE_LITE_GPU_KERNELS=0 turns the kernels off: the xp-generic NumPy code then runs on
# CuPy (for debugging and for timing the kernels against it).
_enabled = [switch("PYCAFFE_LITE_GPU_KERNELS")]


def set_kernels_enabled(flag):
    """Use the CUDA kernels on CuPy arrays (True, the default) or the generic code (False).
    Returns the previous setting."""
    old = _enabled[0]
    _enabled[0] = flag_value(flag, "set_kernels_enabled")
    return old


def kernels_enabled():
    return _enabled[0]


def on_gpu(*arrays):
    """The kernels take these arrays: kernels enabled and every array a CuPy array."""
    return _enabled[0] and is_cupy(*arrays)


def fits(*sizes):
    return all(int(s) < MAX_KERNEL_ELEMENTS for s in sizes)


#: the C storage type of each element type a kernel with float16 variants takes
_STORAGE = {np.dtype(np.float16): "half", np.dtype(np.float32): "float",
            np.dtype(np.float64): "double"}
#: the element type of such a kernel's per-channel statistics and buffers, by storage type:
#: float16 data keeps them in float32 (as BatchNorm's statistics blobs of a float16 net)
WIDE_DTYPE = {"half": np.dtype(np.float32), "float": np.dtype(np.float32),
              "double": np.dtype(np.float64)}


def storage_ctype(*arrays):
    """:func:`kernel_dtype` with float16 too: "half", "float" or "double" for the arrays'
    common dtype (None: mixed or another dtype). Only kernels compiled for a "half" variant
    (``RawModuleCache(..., ctypes=...)``) take "half"."""
    dtypes = {np.dtype(a.dtype) for a in arrays if a is not None}
    return _STORAGE.get(dtypes.pop()) if len(dtypes) == 1 else None


def kernel_dtype(*arrays):
    """The C type name for the arrays' common float dtype ("float" or "double"), or None
    (mixed types, float16, another type): the kernels without float16 variants."""
    ctype = storage_ctype(*arrays)
    return None if ctype == "half" else ctype


def storage_and_wide(storage, wide=()):
    """The kernel variant (:func:`storage_ctype`) of ``storage`` arrays of one dtype whose
    per-channel ``wide`` arrays all have that variant's :data:`WIDE_DTYPE`; else None."""
    ctype = storage_ctype(*storage)
    if ctype is None or any(np.dtype(a.dtype) != WIDE_DTYPE[ctype]
                            for a in wide if a is not None):
        return None
    return ctype


def _typedef(ctype):
    return "typedef %s T;\n" % ctype


class RawModuleCache:
    """A CUDA source compiled once per variant (``ctype``) and device, on first use. The code
    compiled is ``prelude(ctype)`` then the source; the default prelude is ``typedef ctype T;``
    and the variants ``float`` and ``double``; ``ctypes`` lists them (what
    ``tools/check_cuda_sources.py`` compiles)."""

    def __init__(self, source, names, prelude=_typedef, ctypes=("float", "double")):
        self.source = source
        self.names = tuple(names)
        self.prelude = prelude
        self.ctypes = tuple(ctypes)
        self._modules = {}
        self._failed = {}

    def code(self, ctype):
        """The whole source compiled for variant ``ctype``."""
        return self.prelude(ctype) + self.source

    def _module(self, ctype):
        cp = cupy()
        key = (ctype, cp.cuda.runtime.getDevice())
        module = self._modules.get(key)
        if module is None:
            with _lock:
                module = self._modules.get(key)
                if module is None:
                    module = cp.RawModule(code=self.code(ctype), options=("--std=c++11",))
                    module.get_function(self.names[0])  # compiles and loads it now
                    self._modules[key] = module
        return module

    def function(self, name, ctype):
        return self._module(ctype).get_function(name)

    def compiles(self, ctype):
        """Whether variant ``ctype`` compiled here (it is compiled now if it was not yet). A
        variant that does not compile (a CUDA toolkit without ``cuda_fp16.h`` on NVRTC's
        path, say) is logged once, with the compiler's reason, and answers False from then on:
        its callers run their generic array code instead."""
        if ctype in self._failed:
            return False
        try:
            self._module(ctype)
        except Exception as exc:  # CuPy's CompileException, a driver's error: run generically
            self._failed[ctype] = "%s: %s" % (type(exc).__name__, exc)
            log.warning("the %s kernels (%s) did not compile on this GPU (%s); their "
                        "generic array code runs instead", ctype, ", ".join(self.names),
                        self._failed[ctype].splitlines()[0])
            return False
        return True


class LazyKernel:
    """An ElementwiseKernel (or any CuPy kernel object) built once, on first use."""

    def __init__(self, build):
        self._build = build
        self._kernel = None

    def __call__(self, *args, **kwargs):
        kernel = self._kernel
        if kernel is None:
            with _lock:
                if self._kernel is None:
                    self._kernel = self._build(cupy())
                kernel = self._kernel
        return kernel(*args, **kwargs)


def launch(function, n, args):
    """Run a grid-stride kernel over ``n`` items (``args`` as the CUDA signature wants:
    contiguous CuPy arrays and NumPy scalars of the exact C types)."""
    n = int(n)
    if n <= 0:
        return
    grid = min((n + BLOCK - 1) // BLOCK, MAX_GRID)
    function((grid,), (BLOCK,), args)


def contiguous(a):
    """``a`` itself when C-contiguous, else a contiguous copy (RawKernels index flat memory)."""
    return a if a.flags.c_contiguous else cupy().ascontiguousarray(a)


def write_back(out, result):
    """Copy ``result`` into ``out`` when the kernel had to write into a contiguous temporary."""
    if result is not out:
        out[...] = result
    return out


def i32(v):
    return np.int32(v)
