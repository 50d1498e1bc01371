"""CUDA kernel sources of ``pycaffe_lite.ops.gpu`` built and run on the host (no GPU needed).

A source is compiled by ``g++`` with a prelude that emulates CUDA's execution model: every
``extern "C" __global__`` kernel gets a ``host_launch_<name>(grid x, grid y, block x, threaded,
<its parameters>)`` that runs the whole grid. ``blockIdx``/``threadIdx`` are per host thread,
``gridDim``/``blockDim`` the launch's; ``__shared__`` memory is one static array (the blocks run
one after another). Kernels without barriers run their threads one after another; kernels with
``__syncthreads`` or ``__shfl_down_sync`` (directly or through a ``__device__`` function) run
each block's threads as real host threads, with a barrier per block and one per warp for the
shuffles (``__shfl_down_sync`` exchanges values through the warp's slots, as lanes do).

:class:`HostKernel` takes CuPy's calling convention (``kernel(grid, block, args)``) and checks
each argument against the kernel's C signature as CuPy would need it to be: arrays contiguous
and of the pointer's element type, scalars NumPy scalars of the exact C type, ``np.uint64(0)``
for a null pointer. :class:`HostCuPy` is just enough of CuPy for ``ops/gpu`` (``RawModule``,
``ElementwiseKernel``, NumPy for the array functions); :func:`install_shim` puts it in place.
"""

import ctypes
import hashlib
import os
import re
import subprocess

import numpy as np

PRELUDE = r"""
#include <cmath>
#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>
using std::max; using std::min; using std::sqrt; using std::pow; using std::log;
struct Dim3 { unsigned int x, y, z; };
static thread_local Dim3 blockIdx = {0, 0, 0}, threadIdx = {0, 0, 0};
static Dim3 gridDim = {1, 1, 1}, blockDim = {1, 1, 1};
struct HostBarrier {
    std::mutex m; std::condition_variable cv; unsigned int n = 0, count = 0, gen = 0;
    void wait() {
        std::unique_lock<std::mutex> lock(m);
        unsigned int g = gen;
        if (++count == n) { count = 0; ++gen; cv.notify_all(); }
        else cv.wait(lock, [&] { return gen != g; });
    }
};
static HostBarrier host_block_barrier, host_warp_barrier[32];
static inline void __syncthreads() { host_block_barrier.wait(); }
template <class V> V __shfl_down_sync(unsigned int, V v, int off) {
    static V slots[1024];
    unsigned int t = threadIdx.x, lane = t & 31;
    slots[t] = v;
    host_warp_barrier[t >> 5].wait();
    V r = (lane + off < 32 && t + off < blockDim.x) ? slots[t + off] : v;
    host_warp_barrier[t >> 5].wait();
    return r;
}
template <class F> static void host_grid(unsigned int gx, unsigned int gy, unsigned int bx,
                                         int threaded, F f) {
    gridDim = {gx, gy, 1};
    blockDim = {bx, 1, 1};
    host_block_barrier.n = bx;
    for (unsigned int w = 0; w < 32; ++w)
        host_warp_barrier[w].n = bx > 32 * w ? std::min(32u, bx - 32 * w) : 0;
    for (unsigned int y = 0; y < gy; ++y)
        for (unsigned int x = 0; x < gx; ++x) {
            if (!threaded) {
                for (unsigned int t = 0; t < bx; ++t) {
                    blockIdx = {x, y, 0};
                    threadIdx = {t, 0, 0};
                    f();
                }
                continue;
            }
            std::vector<std::thread> threads;
            for (unsigned int t = 0; t < bx; ++t)
                threads.emplace_back([=] { blockIdx = {x, y, 0}; threadIdx = {t, 0, 0}; f(); });
            for (auto& th : threads) th.join();
        }
    blockIdx = {0, 0, 0};
    threadIdx = {0, 0, 0};
}
#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
"""

_KERNEL_RE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')
_DEVICE_RE = re.compile(r'__device__\s+[\w\s\*]+?\b(\w+)\s*\(')
_BARRIERS = ("__syncthreads", "__shfl")

#: C scalar types -> NumPy dtypes (T, S, M: the variant's typedefs, added per build)
C_DTYPES = {"float": np.float32, "double": np.float64, "int": np.int32, "long long": np.int64,
            "unsigned int": np.uint32, "unsigned long long": np.uint64, "bool": np.bool_}
CTYPES_OF = {np.dtype(np.float32): ctypes.c_float, np.dtype(np.float64): ctypes.c_double,
             np.dtype(np.int32): ctypes.c_int, np.dtype(np.int64): ctypes.c_longlong,
             np.dtype(np.uint32): ctypes.c_uint, np.dtype(np.uint64): ctypes.c_ulonglong,
             np.dtype(np.bool_): ctypes.c_bool}


def _segments(source):
    """``{function name: its text}`` for the source's kernels and device functions."""
    starts = sorted([(m.start(), m.group(1)) for m in _KERNEL_RE.finditer(source)] +
                    [(m.start(), m.group(1)) for m in _DEVICE_RE.finditer(source)])
    return {name: source[s:(starts[k + 1][0] if k + 1 < len(starts) else len(source))]
            for k, (s, name) in enumerate(starts)}


def kernels_of(source):
    """``[(name, [(C type, pointer?, name)], threaded)]`` of every kernel in ``source``."""
    segments = _segments(source)
    waiting = {n for n, text in segments.items() if any(b in text for b in _BARRIERS)}
    found = []
    for m in _KERNEL_RE.finditer(source):
        params = []
        for p in m.group(2).split(","):
            words = p.replace("*", " * ").split()
            pointer = "*" in words
            words = [w for w in words if w not in ("const", "*")]
            params.append((" ".join(words[:-1]), pointer, words[-1]))
        text = segments[m.group(1)]
        threaded = m.group(1) in waiting or any(re.search(r"\b%s\s*\(" % f, text)
                                                for f in waiting)
        found.append((m.group(1), params, threaded))
    return found


def launchers(source):
    """The ``host_launch_<name>`` wrappers of the source's kernels (C++)."""
    out = []
    for name, params, _ in kernels_of(source):
        decl = ", ".join("%s%s %s" % (t, "*" if ptr else "", n) for t, ptr, n in params)
        out.append('extern "C" void host_launch_%s(unsigned int host_gx_, unsigned int host_gy_, '
                   'unsigned int host_bx_, int host_threaded_, %s) {\n'
                   '    host_grid(host_gx_, host_gy_, host_bx_, host_threaded_, [=] { %s(%s); });'
                   '\n}\n' % (name, decl, name, ", ".join(n for _, _, n in params)))
    return "".join(out)


class Host:
    """Sources compiled for the host into ``workdir``, loaded with ctypes (one build per
    distinct source)."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.libs = {}
        self.launches = {}  # kernel name -> launches run
        self.grid_cap = None  # when set: launches get at most this many blocks along x

    def compile(self, source, stem="kernels"):
        key = hashlib.sha1(source.encode()).hexdigest()[:16]
        lib = self.libs.get(key)
        if lib is None:
            path = os.path.join(self.workdir, "%s_%s" % (stem, key))
            with open(path + ".cpp", "w") as f:
                f.write(source)
            subprocess.run(["g++", "-std=c++14", "-O1", "-ffp-contract=off", "-shared", "-fPIC",
                            "-pthread", path + ".cpp", "-o", path + ".so"], check=True)
            lib = self.libs[key] = ctypes.CDLL(path + ".so")
        return lib

    def module(self, code, typedefs, stem="kernels"):
        """``code`` (a RawModuleCache's code for one variant) built for the host: ``{kernel
        name: HostKernel}``; ``typedefs`` maps the variant's type names (T, S, M) to dtypes."""
        lib = self.compile(PRELUDE + code + launchers(code), stem)
        return {name: HostKernel(self, lib, name, params, threaded, typedefs)
                for name, params, threaded in kernels_of(code)}

    def cache(self, cache, ctype, stem="kernels"):
        """A RawModuleCache's variant ``ctype`` ("float" or "double") for the host."""
        dt = C_DTYPES[ctype]
        return self.module(cache.code(ctype), {"T": dt, "S": dt, "M": dt}, stem)


class HostKernel:
    """One kernel of a host build, called as a CuPy RawKernel: ``kernel(grid, block, args)``."""

    def __init__(self, host, lib, name, params, threaded, typedefs):
        self.host = host
        self.fn = getattr(lib, "host_launch_" + name)
        self.name, self.params, self.threaded = name, params, threaded
        self.types = dict(C_DTYPES, **typedefs)

    def _arg(self, value, param):
        ctype, pointer, pname = param
        want = np.dtype(self.types[ctype])
        where = "%s(%s)" % (self.name, pname)
        if pointer:
            if isinstance(value, np.uint64) and value == 0:
                return ctypes.c_void_p(None)
            if type(value).__name__ not in ("ndarray", "DeviceArray"):
                raise AssertionError("%s: a pointer needs an array, got %s"
                                     % (where, type(value).__name__))
            if not value.flags.c_contiguous or value.dtype != want:
                raise AssertionError("%s: a %s array, contiguous, is needed; got %s%s"
                                     % (where, want, value.dtype, "" if value.flags.c_contiguous
                                        else ", not contiguous"))
            address = value.ctypes.data if isinstance(value, np.ndarray) else value.data.ptr
            return ctypes.c_void_p(address)
        if not isinstance(value, np.generic) or value.dtype != want:
            raise AssertionError("%s: a NumPy %s scalar is needed (the C type %s), got %r"
                                 % (where, want, ctype, value))
        return CTYPES_OF[want](value.item())

    def __call__(self, grid, block, args, **kwargs):
        assert isinstance(grid, tuple) and isinstance(block, tuple), "grid and block: tuples"
        assert len(args) == len(self.params), "%s: %d arguments for %d parameters" % (
            self.name, len(args), len(self.params))
        gx, gy = (tuple(int(g) for g in grid) + (1,))[:2]
        bx = int(block[0])
        if self.host.grid_cap:
            gx = min(gx, self.host.grid_cap)
        assert 0 < bx <= 1024 and gx > 0 and gy > 0, "%s: grid %s block %s" % (self.name, grid,
                                                                              block)
        self.host.launches[self.name] = self.host.launches.get(self.name, 0) + 1
        self.fn(ctypes.c_uint(gx), ctypes.c_uint(gy), ctypes.c_uint(bx),
                ctypes.c_int(1 if self.threaded else 0),
                *[self._arg(a, p) for a, p in zip(args, self.params)])


class HostCuPy:
    """Just enough of CuPy for ops/gpu, the kernels run as host C++: ``RawModule`` /
    ``get_function``, ``ElementwiseKernel`` (a loop over the elements), NumPy's array
    functions."""

    def __init__(self, host):
        self.host = host
        self.cuda = type("cuda", (), {"runtime": type("runtime", (), {
            "getDevice": staticmethod(lambda: 0)})})
        for name in ("empty", "empty_like", "asarray", "ascontiguousarray", "zeros"):
            setattr(self, name, getattr(np, name))

    def RawModule(self, code, options=()):  # noqa: N802 (CuPy's name)
        typedef = re.match(r"\s*typedef (float|double) T;", code)
        assert typedef, "a RawModule's code starts with its typedef of T"
        dt = C_DTYPES[typedef.group(1)]
        kernels = self.host.module(code, {"T": dt, "S": dt, "M": dt}, "shim")

        class Module:
            def get_function(self, name):
                return kernels[name]
        return Module()

    def ElementwiseKernel(self, in_params, out_params, operation, name):  # noqa: N802
        ins = [p.split() for p in in_params.split(",")]
        outs = [p.split() for p in out_params.split(",")]
        host = self.host

        def kernel(*args):
            assert len(args) == len(ins) + len(outs), "%s: argument count" % name
            arrays = [a for a in args if isinstance(a, np.ndarray)]
            dt = arrays[0].dtype
            lib = host.compile(elementwise_source(ins, outs, operation, dt), "ew_" + name)
            n = outs and args[len(ins)].size
            conv = []
            for a, p in zip(args, ins + outs):
                t = p[-2]
                if isinstance(a, np.ndarray):
                    assert a.flags.c_contiguous and a.dtype == dt, "%s(%s)" % (name, p[-1])
                    conv.append(ctypes.c_void_p(a.ctypes.data))
                else:
                    assert t in ("int32", "bool"), "%s(%s): scalar of type %s" % (name, p[-1],
                                                                                  t)
                    conv.append(ctypes.c_int(int(a)) if t == "int32" else ctypes.c_bool(a))
            host.launches[name] = host.launches.get(name, 0) + 1
            lib.run(ctypes.c_longlong(n), *conv)
        return kernel


def elementwise_source(ins, outs, operation, dt):
    """An ElementwiseKernel as a host loop over ``i`` (the outputs' size)."""
    params, decls = [], []
    for p in ins:
        raw, (t, pname) = p[0] == "raw", p[-2:]
        if t == "T" and not raw:
            params.append("const T* %s_" % pname)
            decls.append("const T %s = %s_[i];" % (pname, pname))
        elif t == "T":
            params.append("const T* %s" % pname)
        else:
            params.append("%s %s" % ({"int32": "int", "bool": "bool"}[t], pname))
    for _, pname in outs:
        params.append("T* %s_" % pname)
        decls.append("T& %s = %s_[i];" % (pname, pname))
    return (PRELUDE + "typedef %s T;\nextern \"C\" void run(long long n, %s) {\n"
            "  for (long long i = 0; i < n; ++i) {\n    %s\n    %s\n  }\n}\n"
            % ({np.dtype(np.float32): "float", np.dtype(np.float64): "double"}[np.dtype(dt)],
               ", ".join(params), "\n    ".join(decls), operation))


def install_shim(host, modules, on_gpu_modules=(), is_cupy_modules=(), is_cupy=None):
    """CuPy replaced by :class:`HostCuPy` in ``modules`` (their ``cupy``), ``on_gpu`` made True
    in ``on_gpu_modules`` (NumPy arrays taken for CuPy's), ``is_cupy`` replaced by the one
    given in ``is_cupy_modules``; every RawModuleCache and LazyKernel of ``modules`` starts
    empty (and gets its own caches back with the undo). Returns the undo."""
    from pycaffe_lite.ops.gpu._util import LazyKernel, RawModuleCache

    shim = HostCuPy(host)
    saved = []

    def put(module, name, value):
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)

    for module in modules:
        if hasattr(module, "cupy"):
            put(module, "cupy", lambda: shim)
        for value in list(vars(module).values()):
            if isinstance(value, RawModuleCache):
                put(value, "_modules", {})
                put(value, "_failed", {})
            elif isinstance(value, LazyKernel):
                put(value, "_kernel", None)
    for module in on_gpu_modules:
        put(module, "on_gpu", lambda *a: True)
    for module in is_cupy_modules:
        put(module, "is_cupy", is_cupy)

    def restore():
        for module, name, value in reversed(saved):
            setattr(module, name, value)
    return restore
