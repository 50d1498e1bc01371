"""Where arrays live and how they move: CPU (NumPy) or GPU (CuPy) mode.

This is the only module that imports CuPy, lazily and guarded, so the package installs, imports
and runs on machines without a GPU. A *device module* is anything with CuPy's array surface
(``asarray``, ``asnumpy``, ``get_array_module`` and the NumPy namespace); normally CuPy, and in
tests a simulated device (:mod:`pycaffe_lite.testing.simdevice`) that keeps device arrays apart
from host arrays so that the sync logic is exercised for real.
"""

import contextlib
import logging
import threading
import weakref

import numpy as np

from .errors import CaffeError, install_hint

log = logging.getLogger("pycaffe_lite")

CPU = "cpu"
GPU = "gpu"

_state = {
    "mode": CPU,
    "device_id": 0,
    "device_module": None,  # resolved lazily
    "rng": np.random.default_rng(),
    "seed": None,
    "device_streams": {},  # (device module, device id) -> its counter stream (key, offset)
}


class GPUUnavailableError(CaffeError):
    """GPU mode was asked for but no usable CUDA device or CuPy is present."""


def _import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise GPUUnavailableError(
            "GPU mode needs CuPy (%s): install the gpu extra (pip install '.[gpu]' in "
            "pycaffe-lite's source tree; docs/gpu.md lists its packages)" % exc
        ) from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver missing or broken
        raise GPUUnavailableError(
            "CuPy is installed but no CUDA device is usable: %s" % exc) from None
    if n == 0:
        raise GPUUnavailableError("CuPy is installed but no CUDA device was found")
    return cupy


def cupy_module():
    """The CuPy module, imported on first use (ImportError where it is missing). The GPU
    kernels (``ops/gpu``) ask for it only with CuPy arrays in hand, so it is loaded already."""
    import cupy
    return cupy


def cudnn_modules():
    """CuPy's cuDNN bindings ``(cupy.cudnn, cupy.cuda.cudnn)``, imported on first use; raises
    where CuPy or its cuDNN is missing (CuPy 14 has none)."""
    import cupy.cudnn as api
    from cupy.cuda import cudnn as lib
    return api, lib


def cudnn_frontend():
    """NVIDIA's cuDNN frontend (``import cudnn``, the ``nvidia-cudnn-frontend`` package), which
    loads the cuDNN 9 library; imported on first use, raises where either is missing."""
    import cudnn
    return cudnn


def device_memory():
    """GPU mode with CuPy: ``(bytes held by CuPy's memory pool and the captured CUDA graphs'
    pools, bytes in use)``; a pool keeps what it allocated, so the first is the peak of the
    process so far. None otherwise."""
    if mode() != GPU:
        return None
    mod = device_module()
    if not _is_cupy(mod):
        return None
    pools = [mod.get_default_memory_pool()] + [g.pool for g in list(_graphs)]
    return (sum(int(p.total_bytes()) for p in pools), sum(int(p.used_bytes()) for p in pools))


class MemoryPeak:
    """What :func:`track_device_memory` measured: ``peak`` is the most device bytes in use at
    once while its block ran (the arrays CuPy's memory pool has handed out, in its 512-byte
    units, and every captured CUDA graph's pool whole: what PyTorch's
    ``max_memory_allocated`` counts), ``held`` the most the pools held (in use or cached:
    PyTorch's ``max_memory_reserved``)."""

    __slots__ = ("peak", "held", "_pool")

    def __init__(self, pool):
        self._pool = pool
        self.peak = self.held = 0
        self.sample()

    def sample(self):
        """Take the pools' present figures into the peaks."""
        graphs = sum(int(g.pool.total_bytes()) for g in list(_graphs))
        used = int(self._pool.used_bytes()) + graphs
        held = int(self._pool.total_bytes()) + graphs
        if used > self.peak:
            self.peak = used
        if held > self.held:
            self.held = held


@contextlib.contextmanager
def track_device_memory():
    """Measure the device memory a block uses: yields a :class:`MemoryPeak` (read it after the
    block), or None where nothing can be measured (CPU mode, a device module without CuPy's
    memory pool, an allocator of one's own instead of the pool's). The pool's allocations go
    through a function that samples the pool after each one (the peak in use is always
    reached right after an allocation), in every thread; the previous allocator comes back
    afterwards. A replayed CUDA graph allocates nothing: its pool counts whole."""
    mod = device_module() if mode() == GPU else None
    get_pool = getattr(mod, "get_default_memory_pool", None)
    cuda = getattr(mod, "cuda", None)
    if get_pool is None or not hasattr(cuda, "set_allocator"):
        yield None
        return
    pool = get_pool()
    previous = cuda.get_allocator()
    if previous != pool.malloc and getattr(previous, "__self__", None) is not pool:
        log.info("Device memory is not measured: the allocator in use is not CuPy's default "
                 "memory pool")
        yield None
        return
    peak = MemoryPeak(pool)

    def malloc(size):
        memory = pool.malloc(size)
        peak.sample()
        return memory

    cuda.set_allocator(malloc)
    try:
        yield peak
    finally:
        cuda.set_allocator(previous)
        peak.sample()


def free_cached_device_memory():
    """Give the device memory that CuPy's pool caches but no array uses back to the driver
    (after a capture, whose graph has a pool of its own). Nothing to do elsewhere."""
    if mode() == GPU and _is_cupy(device_module()):
        device_module().get_default_memory_pool().free_all_blocks()


def capture_graph(fn):
    """``fn()`` captured into a CUDA graph (nothing runs while capturing) on a capture stream
    of its own, with a memory pool of its own for the temporaries ``fn`` allocates (the graph
    keeps it: no later allocation can take memory the graph writes). Returns an object whose
    ``launch()`` replays it on the current stream. The simulated device captures by recording
    (its ``capture_graph``). Raises what the capture raised."""
    mod = device_module()
    own = getattr(mod, "capture_graph", None)
    if own is not None:
        return own(fn)
    stream = mod.cuda.Stream(non_blocking=True)
    pool = mod.cuda.MemoryPool()
    with mod.cuda.using_allocator(pool.malloc):
        with stream:
            stream.begin_capture()
            try:
                fn()
            except BaseException:
                try:
                    stream.end_capture()
                except Exception:  # an invalidated capture says so here too
                    pass
                raise
            graph = stream.end_capture()
    captured = _DeviceGraph(graph, stream, pool)
    _graphs.add(captured)
    return captured


#: the live captured graphs (:func:`device_memory` counts their memory pools)
_graphs = weakref.WeakSet()


class _DeviceGraph:
    __slots__ = ("graph", "stream", "pool", "__weakref__")

    def __init__(self, graph, stream, pool):
        self.graph, self.stream, self.pool = graph, stream, pool

    def launch(self):
        self.graph.launch(stream=device_module().cuda.get_current_stream())


def gpu_available():
    """True when CuPy imports and sees at least one CUDA device."""
    try:
        _import_cupy()
    except GPUUnavailableError:
        return False
    return True


def device_module():
    """The module that holds device arrays (CuPy, or the simulated device in tests)."""
    mod = _state["device_module"]
    if mod is None:
        mod = _import_cupy()
        _state["device_module"] = mod
    return mod


def nccl():
    """CuPy's NCCL binding (``cupy.cuda.nccl``), for gradient reduction between GPUs."""
    mod = device_module()
    try:
        from cupy.cuda import nccl as binding
        if not binding.available:
            raise ImportError("cupy.cuda.nccl.available is False")
    except (ImportError, AttributeError) as exc:
        raise GPUUnavailableError(
            "NCCL is not usable by CuPy (%s): install it with %s"
            % (exc, install_hint("gpu", "nvidia-nccl-cu12"))) from None
    if not _is_cupy(mod):
        raise GPUUnavailableError("NCCL needs CuPy arrays, not %s" % mod.__name__)
    return binding


def use_device_module(module):
    """Replace the device module (``None`` goes back to CuPy). Returns the previous one."""
    old = _state["device_module"]
    _state["device_module"] = module
    _state["device_streams"] = {}  # the new module's streams start from the last seed
    return old


def set_mode_cpu():
    _state["mode"] = CPU


def set_mode_gpu():
    """Compute on the GPU (device :func:`device_id`) from now on."""
    mod = device_module()
    if _is_cupy(mod):
        count = mod.cuda.runtime.getDeviceCount()
        dev = _state["device_id"]
        if dev >= count:
            raise GPUUnavailableError("GPU %d does not exist: this machine has %d CUDA "
                                      "device(s), ids 0 to %d" % (dev, count, count - 1))
        mod.cuda.Device(dev).use()
    _state["mode"] = GPU


def _is_cupy(mod):
    """Whether the device module is CuPy itself (not the simulated device)."""
    return getattr(mod, "__name__", "") == "cupy"


def is_cupy_array(*arrays):
    """True when every array (None aside) is a CuPy ndarray; checked by type, without
    importing CuPy. False for no arrays."""
    found = False
    for a in arrays:
        if a is None:
            continue
        if not type(a).__module__.startswith("cupy"):
            return False
        found = True
    return found


def mode():
    return _state["mode"]


def set_device(device_id):
    """Compute on CUDA device ``device_id`` (from now on in GPU mode; at the next
    :func:`set_mode_gpu` in CPU mode). In GPU mode a device that does not exist raises
    GPUUnavailableError and the current one stays in use."""
    device_id = int(device_id)
    if device_id < 0:
        raise CaffeError("device id must be >= 0, got %d" % device_id)
    old, _state["device_id"] = _state["device_id"], device_id
    if _state["mode"] == GPU:
        try:
            set_mode_gpu()
        except GPUUnavailableError:
            _state["device_id"] = old
            raise


def device_id():
    return _state["device_id"]


def device_count():
    """The number of CUDA devices (0 without CuPy or a driver)."""
    try:
        return int(_import_cupy().cuda.runtime.getDeviceCount())
    except GPUUnavailableError:
        return 0


def device_properties(device_id=None):
    """What ``device_query`` prints about a GPU: ``{"id", "name", "total_memory" (bytes),
    "compute_capability" ("major.minor"), "multiprocessors", "clock_khz", "cuda_runtime",
    "cuda_driver", "cupy"}``. Raises GPUUnavailableError without a usable GPU. (cuDNN's version
    is :func:`pycaffe_lite.ops.gpu.cudnn.version`.)"""
    cp = _import_cupy()
    dev = _state["device_id"] if device_id is None else int(device_id)
    count = cp.cuda.runtime.getDeviceCount()
    if not 0 <= dev < count:
        raise GPUUnavailableError("GPU %d does not exist: this machine has %d CUDA device(s)"
                                  % (dev, count))
    props = cp.cuda.runtime.getDeviceProperties(dev)
    name = props["name"]
    return {
        "id": dev,
        "name": name.decode() if isinstance(name, bytes) else str(name),
        "total_memory": int(props["totalGlobalMem"]),
        "compute_capability": "%d.%d" % (props["major"], props["minor"]),
        "multiprocessors": int(props["multiProcessorCount"]),
        "clock_khz": int(props.get("clockRate", 0)),
        "cuda_runtime": _version_string(cp.cuda.runtime.runtimeGetVersion()),
        "cuda_driver": _version_string(cp.cuda.runtime.driverGetVersion()),
        "cupy": cp.__version__,
    }


def _version_string(v):
    v = int(v)
    return "%d.%d" % (v // 1000, (v % 1000) // 10)


def synchronize():
    """Wait for the GPU's queued work (for timing); nothing to do on the CPU."""
    if _state["mode"] == GPU:
        mod = device_module()
        if _is_cupy(mod):
            mod.cuda.Device(_state["device_id"]).synchronize()


# ---- host staging for the data layers --------------------------------------------------------
def pinned_empty(size, dtype):
    """A flat host array of ``size`` elements for loading data in GPU mode: page-locked memory
    from CuPy's pinned memory pool (fast, asynchronous uploads); a plain NumPy array on the CPU
    (or where the device module has no pinned memory)."""
    if _state["mode"] == GPU:
        mod = device_module()
        alloc = getattr(mod, "empty_pinned", None)  # the simulated device's
        if alloc is None and _is_cupy(mod):
            import cupyx
            alloc = cupyx.empty_pinned
        if alloc is not None:
            return alloc((int(size),), dtype=np.dtype(dtype))
    return np.empty(int(size), dtype)


_transfer = threading.local()


def upload(synced_arrays):
    """Copy the host side of each SyncedArray to the device from a loading thread, on that
    thread's own non-blocking CUDA stream, and wait for the copies there, so that the main
    thread finds the batch already on the device (Caffe's prefetch ``async_gpu_push``)."""
    mod = device_module()
    if not _is_cupy(mod):
        for a in synced_arrays:
            a.push_to_device(None)
        return
    with mod.cuda.Device(_state["device_id"]):
        stream = getattr(_transfer, "stream", None)
        if stream is None:
            stream = _transfer.stream = mod.cuda.Stream(non_blocking=True)
        for a in synced_arrays:
            a.push_to_device(stream)
        stream.synchronize()


def record_event():
    """An event recorded on the current stream (None off CuPy, whose work is done when
    issued), for :func:`wait_event` in another thread."""
    mod = device_module()
    if not _is_cupy(mod):
        return None
    event = mod.cuda.Event(disable_timing=True)
    event.record()
    return event


def wait_event(event):
    """Block this thread until the work queued before ``event`` is done (None: at once)."""
    if event is not None:
        event.synchronize()


def copy_to_device(dst, src, stream=None):
    """``dst`` (a device array) = ``src`` (a host array of its shape and dtype); on ``stream``
    when given (asynchronous from pinned memory)."""
    if stream is None:
        dst.set(src)
    else:
        dst.set(src, stream=stream)


def xp():
    """The array module of the current mode."""
    return np if _state["mode"] == CPU else device_module()


def get_array_module(*arrays):
    """NumPy or the device module, whichever owns the arrays (like cupy.get_array_module)."""
    mod = _state["device_module"]
    if mod is not None:
        return mod.get_array_module(*arrays)
    return np


def to_host(array):
    if type(array) is np.ndarray:
        return array
    return device_module().asnumpy(array)


def to_device(array):
    return device_module().asarray(array)


def set_random_seed(seed):
    """Seed every random stream the framework uses (fillers, dropout, data order): the host
    generator, and the device's counter streams (:func:`random_uniform`): the current
    device's in place (a captured CUDA graph that draws sees the new seed), the others'
    before their next draw; so the seed holds whether it is set before or after
    ``set_mode_gpu`` / ``set_device``."""
    _state["seed"] = int(seed)
    _state["rng"] = np.random.default_rng(int(seed))
    streams = _state["device_streams"]
    current = (id(_state["device_module"]), _state["device_id"])
    for key in list(streams):
        if key != current:
            del streams[key]
    if current in streams:
        k, offset, _ = streams[current]
        k[...] = _stream_key(seed)
        offset[...] = 0


def _stream_key(seed):
    return np.uint64((int(seed) * _GOLDEN + 1) % 2 ** 64)


# the counter stream's constants: the golden ratio's increment and splitmix64's finaliser
_GOLDEN = 0x9E3779B97F4A7C15
_MIX = (30, 0xBF58476D1CE4E5B9, 27, 0x94D049BB133111EB, 31)


def _device_stream(xp):
    """``(key, offset, xp)``: the current device's counter stream, two 0-d uint64 device
    arrays, made (from the last seed, or from the host's entropy) on its first draw."""
    where = (id(xp), _state["device_id"])
    stream = _state["device_streams"].get(where)
    if stream is None or stream[2] is not xp:
        seed = _state["seed"]
        if seed is None:
            seed = int(np.random.SeedSequence().entropy % 2 ** 63)
        stream = (xp.full((), _stream_key(seed), dtype=np.uint64),
                  xp.zeros((), dtype=np.uint64), xp)
        _state["device_streams"][where] = stream
    return stream


def rng():
    """The host random generator (a numpy Generator)."""
    return _state["rng"]


def random_uniform(shape, dtype, xp):
    """An array of ``shape`` of uniform random numbers in [0, 1) of ``dtype`` (float32 or
    float64), made where ``xp`` keeps its arrays.

    On the host (``xp`` is NumPy) they are drawn from :func:`rng`, whose state the solver
    snapshots. On the device (``xp`` is the device module) they come from a counter-based
    stream whose state lives in device memory: number ``j`` of the stream is splitmix64's
    finaliser of ``key + (offset + j) * golden`` (``key`` from :func:`set_random_seed`), its
    top 24 bits (float32) or 53 bits (float64) scaled to [0, 1), and each draw advances
    ``offset`` on the device. Nothing is copied from the host and no host value changes from
    one draw to the next, so a CUDA graph that captured a draw (Dropout in a training
    iteration) draws new numbers at each replay. The host's and the device's streams differ,
    so one seed gives different numbers in CPU and in GPU mode (as in Caffe, which draws
    from cuRAND on the GPU).
    """
    dtype = np.dtype(dtype)
    if dtype not in (np.float32, np.float64):
        raise CaffeError("random_uniform: dtype must be float32 or float64, got %s" % dtype)
    if xp is np:
        return _state["rng"].random(shape, dtype=dtype)
    key, offset, _ = _device_stream(xp)
    n = int(np.prod(shape, dtype=np.int64))
    z = (xp.arange(n, dtype=np.uint64) + offset) * np.uint64(_GOLDEN) + key
    for k in range(0, 4, 2):
        z ^= z >> np.uint64(_MIX[k])
        z *= np.uint64(_MIX[k + 1])
    z ^= z >> np.uint64(_MIX[4])
    offset += np.uint64(n)
    if dtype == np.float32:
        return ((z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)).reshape(shape)
    return ((z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53).reshape(shape)


def get_rng_state():
    return _state["rng"].bit_generator.state


def set_rng_state(state):
    _state["rng"].bit_generator.state = state


def get_device_rng_state():
    """``[key, offset]`` (ints) of the current device's counter stream (see
    :func:`random_uniform`) in GPU mode; None in CPU mode or before its first draw."""
    if _state["mode"] != GPU:
        return None
    stream = _state["device_streams"].get((id(device_module()), _state["device_id"]))
    if stream is None:
        return None
    return [int(to_host(stream[0])), int(to_host(stream[1]))]


def set_device_rng_state(state):
    """Put the current device's counter stream at ``state`` (:func:`get_device_rng_state`'s),
    in place: a captured CUDA graph that draws goes on from there. Nothing in CPU mode."""
    if _state["mode"] != GPU or state is None:
        return
    key, offset, _ = _device_stream(device_module())
    key[...] = np.uint64(state[0])
    offset[...] = np.uint64(state[1])
