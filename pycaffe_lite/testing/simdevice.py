"""A simulated device for CPU-only machines: CuPy's array surface, with host memory underneath.

It stands in for the GPU so that GPU mode (the blob sync state machine, the xp-generic layer
code, the solvers' device-side state) runs and is tested where no GPU is present. It is honest
about the boundary between host and device, the way CuPy is:

- device arrays are :class:`DeviceArray` objects, *not* NumPy arrays: each holds a private
  NumPy buffer that only this module touches. They support CuPy's surface (attributes, methods,
  operators, indexing, ``xp.<function>`` and NumPy functions through ``__array_ufunc__`` /
  ``__array_function__``) and return device arrays (reductions give 0-d arrays, as in CuPy);
- what CuPy refuses, this refuses: mixing a host ``numpy.ndarray`` into a device computation
  (``TypeError``), assigning one into a device array (``ValueError``), and any implicit
  conversion to NumPy (``numpy.asarray(device_array)`` raises ``TypeError``);
- every crossing is counted and logged: ``to_device`` (``asarray``/``array``/``set`` of host
  data and host index arrays), ``to_host`` (``asnumpy``/``get``/``tolist``) and
  ``scalar_syncs`` (``float()``/``int()``/``bool()``/``item()`` of a device scalar, boolean-mask
  indexing and ``nonzero``-like calls, which CuPy answers by synchronising with the host);
- :meth:`SimulatedDevice.forbid` makes chosen kinds of crossing raise :class:`HostTransferError`
  at the line that caused them (e.g. no device->host copy inside a training step).

Use::

    with simulated_device() as dev:
        backend.set_mode_gpu()
        ...
        assert dev.to_device == 1
        with dev.forbid("to_host"):
            solver.step(3)
"""

import collections
import contextlib
import threading
import traceback
import types

import numpy as np
from numpy.lib.mixins import NDArrayOperatorsMixin

from .. import backend
from . import simapi, simgraph, simmemory
from .simapi import _DeviceRandom

TO_DEVICE = "to_device"
TO_HOST = "to_host"
SCALAR = "scalar_sync"
KINDS = (TO_DEVICE, TO_HOST, SCALAR)

# NumPy functions whose output size depends on the data: CuPy synchronises for them.
_SYNCING_FUNCTIONS = frozenset(["nonzero", "flatnonzero", "argwhere", "unique", "compress",
                                "extract"])
# ndarray attributes that expose host memory: a device array has none of them.
_HOST_ONLY_ATTRIBUTES = frozenset(["ctypes", "tofile", "__array_interface__",
                                   "__array_struct__", "data"])

Transfer = collections.namedtuple("Transfer", "kind nbytes what where thread")


class HostTransferError(AssertionError):
    """A host<->device crossing happened where :meth:`SimulatedDevice.forbid` forbade it."""


def _caller():
    """``file:line`` of the first frame outside this module and NumPy (for the log)."""
    for frame in reversed(traceback.extract_stack(limit=16)[:-1]):
        name = frame.filename.replace("\\", "/")
        if name.endswith(("testing/simdevice.py", "testing/simgraph.py")) or "/numpy/" in name:
            continue
        return "%s:%d" % (name.rsplit("/", 2)[-1] if "/" in name else name, frame.lineno)
    return "?"


def _host_array_error(obj):
    return TypeError("Unsupported type %s: a host numpy.ndarray cannot be mixed into a device "
                     "computation; move it with xp.asarray() first" % type(obj))


class _Pointer:
    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr


class DeviceArray(NDArrayOperatorsMixin):
    """An array in (simulated) device memory; see the module doc for what it allows."""

    __slots__ = ("_a", "_dev", "__weakref__")
    __hash__ = None

    def __init__(self, buffer, device):
        # internal: ``buffer`` (a NumPy array) becomes this array's device memory, uncopied
        object.__setattr__(self, "_a", buffer)
        object.__setattr__(self, "_dev", device)
        device._memory.note(buffer)  # the memory pool's count (simmemory)

    # ---- plain attributes ----------------------------------------------------------------
    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    itemsize = property(lambda self: self._a.itemsize)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: DeviceArray(self._a.T, self._dev))
    # like CuPy's ``MemoryPointer``: ``.data.ptr`` is the address of the first element
    data = property(lambda self: _Pointer(self._a.__array_interface__["data"][0]))

    @shape.setter
    def shape(self, value):
        self._a.shape = value

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        for i in range(len(self._a)):
            yield self[i]

    def __repr__(self):
        return "DeviceArray(%s)" % np.array2string(self._a, separator=", ")

    __str__ = __repr__

    # ---- host crossings ------------------------------------------------------------------
    def __array__(self, dtype=None, copy=None):
        raise TypeError("Implicit conversion to a NumPy array is not allowed (device array of "
                        "shape %s). Use .get() or xp.asnumpy() to copy it to the host explicitly"
                        % (self.shape,))

    def _scalar(self, what):
        if self._a.size != 1:
            raise ValueError("%s of a device array of shape %s: only size-1 arrays convert to "
                             "Python scalars" % (what, self.shape))
        self._dev._record(SCALAR, self._a.itemsize, what)
        return self._a.reshape(()).item()

    def __float__(self):
        return float(self._scalar("float()"))

    def __int__(self):
        return int(self._scalar("int()"))

    def __complex__(self):
        return complex(self._scalar("complex()"))

    def __bool__(self):
        return bool(self._scalar("bool()"))

    def item(self):
        return self._scalar("item()")

    def __format__(self, spec):
        if self._a.size == 1:
            return format(self._scalar("format()"), spec)
        return format(self.get(), spec)

    def get(self, stream=None, order="C", out=None):
        """A host copy (CuPy's ``ndarray.get``)."""
        self._dev._record(TO_HOST, self._a.nbytes, "get()")
        host = np.array(self._a, copy=True, order=order)
        if out is not None:
            out[...] = host
            return out
        return host

    def tolist(self):
        self._dev._record(TO_HOST, self._a.nbytes, "tolist()")
        return self._a.tolist()

    def set(self, arr, stream=None):
        """Copy a host array into this one (CuPy's ``ndarray.set``: same shape and dtype)."""
        if isinstance(arr, DeviceArray):
            raise TypeError("set() takes a host numpy.ndarray, got a device array")
        arr = np.asarray(arr)
        if arr.shape != self.shape:
            raise ValueError("Shape mismatch. Old shape: %s, new shape: %s"
                             % (self.shape, arr.shape))
        if arr.dtype != self.dtype:
            raise TypeError("{} array cannot be set to {} array".format(arr.dtype, self.dtype))
        self._dev._record(TO_DEVICE, arr.nbytes, "set()")
        simgraph.host_write(self._dev, self._a, arr)

    # ---- NumPy protocols -------------------------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        return self._dev._apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func, types_, args, kwargs):
        simapi.check_function(func, kwargs)
        return self._dev._call(func, args, kwargs, func.__name__)

    # ---- indexing --------------------------------------------------------------------------
    def __getitem__(self, key):
        key = self._dev._index(key)
        result = self._a[key]
        if not isinstance(result, np.ndarray):
            result = np.asarray(result)
        return DeviceArray(result, self._dev)

    def __setitem__(self, key, value):
        key = self._dev._index(key, setting=True)
        if isinstance(value, DeviceArray):
            value = value._a
        elif isinstance(value, np.ndarray):
            if value.ndim:
                raise ValueError("non-scalar numpy.ndarray cannot be used for fill (assigning a "
                                 "host array of shape %s into a device array)" % (value.shape,))
        elif isinstance(value, (list, tuple)):
            raise TypeError("cannot assign a host %s into a device array" % type(value).__name__)
        simgraph.operation(self._dev, "setitem")
        self._a[key] = simgraph.note(self._dev, value)

    # ---- methods -----------------------------------------------------------------------------
    def __getattr__(self, name):
        if name in _HOST_ONLY_ATTRIBUTES:
            raise AttributeError("'%s' is host memory: a device array has no '%s'"
                                 % (type(self).__name__, name))
        entry = simapi.check_ndarray(name)
        attr = getattr(self._a, name)
        if isinstance(attr, np.ndarray):
            return DeviceArray(attr, self._dev)
        if not callable(attr):
            return attr
        dev = self._dev

        def method(*args, **kwargs):
            simapi.check_keywords("cupy.ndarray." + name, entry, kwargs)
            if name in _SYNCING_FUNCTIONS:
                dev._record(SCALAR, 8, name + "()")
            simgraph.operation(dev, "ndarray." + name)
            args = dev._unwrap(args, name)
            kwargs = dev._unwrap(kwargs, name)
            return dev._wrap(attr(*args, **kwargs), scalars=True)

        method.__name__ = name
        return method

    def __copy__(self):
        return DeviceArray(self._a.copy(), self._dev)

    def __deepcopy__(self, memo):
        return DeviceArray(self._a.copy(), self._dev)

    def __reduce__(self):
        raise TypeError("a simulated device array cannot be pickled; copy it to the host first")


class _Ufunc:
    """``xp.<ufunc>``: a NumPy ufunc on device arrays, returning device arrays."""

    def __init__(self, ufunc, dev):
        self._ufunc = ufunc
        self._dev = dev
        self.__name__ = ufunc.__name__

    def __call__(self, *args, **kwargs):
        return self._dev._apply_ufunc(self._ufunc, "__call__", args, kwargs, force=True)

    def __getattr__(self, name):
        attr = getattr(self._ufunc, name)
        simapi.check_ufunc_method(self.__name__, name)
        if name in ("reduce", "accumulate", "outer", "at", "reduceat"):
            dev, ufunc = self._dev, self._ufunc
            return lambda *a, **k: dev._apply_ufunc(ufunc, name, a, k, force=True)
        return attr


class _Namespace:
    """A NumPy submodule (``linalg``, ``fft``) seen from the device."""

    def __init__(self, module, dev):
        self._module = module
        self._dev = dev

    def __getattr__(self, name):
        where = "cupy." + self._module.__name__.split(".")[-1]
        entry = simapi.check_name(where, name) if where in simapi.api() else None
        attr = getattr(self._module, name)
        if callable(attr) and not isinstance(attr, type):
            dev = self._dev

            def call(*a, **k):
                simapi.check_keywords(where + "." + name, entry, k)
                return dev._call(attr, a, k, name, creation=True)
            return call
        return attr


class SimulatedDevice:
    """The device module of the simulation (what ``backend.device_module()`` returns).

    Counters: ``to_device``, ``to_host``, ``scalar_syncs``, ``pinned_allocations``;
    ``transfers`` holds one :data:`Transfer` per crossing (kind, bytes, what, ``file:line`` of
    the caller, thread name).
    """

    __name__ = "pycaffe_lite.testing.simdevice"
    ndarray = DeviceArray

    def __init__(self):
        self.to_device = self.to_host = self.scalar_syncs = 0
        self.pinned_allocations = self.graph_captures = self.graph_launches = 0
        self.transfers = []
        self._lock = threading.Lock()
        self._local = threading.local()  # forbid() applies to the thread that entered it
        self._cache = {}
        self.random = _DeviceRandom(self)
        simmemory.attach(self)  # CuPy's memory pool and allocator hook

    def capture_graph(self, fn):
        """A CUDA graph's capture, simulated (see :mod:`.simgraph`)."""
        return simgraph.capture(self, fn, KINDS, _caller)

    # ---- bookkeeping -----------------------------------------------------------------------
    def _forbidden(self):
        counts = getattr(self._local, "forbidden", None)
        if counts is None:
            counts = self._local.forbidden = collections.Counter()
        return counts

    def _record(self, kind, nbytes, what):
        where = _caller()
        thread = threading.current_thread().name
        if self._forbidden()[kind]:
            raise HostTransferError("forbidden %s (%s, %d bytes) at %s"
                                    % (kind, what, nbytes, where))
        with self._lock:
            counter = {TO_DEVICE: "to_device", TO_HOST: "to_host"}.get(kind, "scalar_syncs")
            setattr(self, counter, getattr(self, counter) + 1)
            self.transfers.append(Transfer(kind, int(nbytes), what, where, thread))

    def counts(self):
        """``{kind: count}`` of the crossings so far."""
        return {TO_DEVICE: self.to_device, TO_HOST: self.to_host, SCALAR: self.scalar_syncs}

    @contextlib.contextmanager
    def forbid(self, *kinds):
        """Inside the block, a crossing of one of ``kinds`` (``"to_host"``, ``"to_device"``,
        ``"scalar_sync"``) by this thread raises :class:`HostTransferError` where it happens
        (data-loading threads go on uploading)."""
        forbidden = self._forbidden()
        for k in kinds:
            if k not in KINDS:
                raise ValueError("unknown transfer kind %r (use one of %s)" % (k, KINDS))
            forbidden[k] += 1
        try:
            yield self
        finally:
            for k in kinds:
                forbidden[k] -= 1

    @contextlib.contextmanager
    def recording(self):
        """Collect the crossings of the block: yields a list that fills with Transfers."""
        start = len(self.transfers)
        collected = []
        try:
            yield collected
        finally:
            collected.extend(self.transfers[start:])

    # ---- conversions -----------------------------------------------------------------------
    def _unwrap(self, obj, what):
        if isinstance(obj, DeviceArray):
            return obj._a
        if isinstance(obj, np.ndarray):
            raise _host_array_error(obj)
        if isinstance(obj, (list, tuple)):
            return type(obj)(self._unwrap(o, what) for o in obj)
        if isinstance(obj, dict):
            return {k: self._unwrap(v, what) for k, v in obj.items()}
        return simgraph.note(self, obj)

    def _wrap(self, obj, scalars):
        if isinstance(obj, np.ndarray):
            return DeviceArray(obj, self)
        if isinstance(obj, np.generic) and scalars:
            return DeviceArray(np.asarray(obj), self)
        if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
            return tuple(self._wrap(o, scalars) for o in obj)
        if isinstance(obj, list):
            return [self._wrap(o, scalars) for o in obj]
        return obj

    @staticmethod
    def _has_device(obj):
        if isinstance(obj, DeviceArray):
            return True
        if isinstance(obj, (list, tuple)):
            return any(SimulatedDevice._has_device(o) for o in obj)
        if isinstance(obj, dict):
            return any(SimulatedDevice._has_device(o) for o in obj.values())
        return False

    def _index(self, key, setting=False):
        parts = key if isinstance(key, tuple) else (key,)
        out = []
        for k in parts:
            if isinstance(k, DeviceArray):
                if k.dtype == np.bool_ and not setting:
                    self._record(SCALAR, 8, "boolean-mask indexing")
                out.append(k._a)
            elif isinstance(k, (np.ndarray, list)):
                arr = np.asarray(k)
                self._record(TO_DEVICE, arr.nbytes, "host index array")
                out.append(arr)
            else:
                out.append(k)
        return tuple(out) if isinstance(key, tuple) else out[0]

    def _apply_ufunc(self, ufunc, method, inputs, kwargs, force=False):
        args = []
        for x in inputs:
            if isinstance(x, DeviceArray):
                args.append(x._a)
            elif isinstance(x, (np.ndarray, list, tuple)) and not (method == "at" and
                                                                   len(args) == 1):
                raise _host_array_error(x) if isinstance(x, np.ndarray) else \
                    TypeError("Unsupported type %s in a device ufunc" % type(x))
            elif method == "at" and len(args) == 1:
                args.append(self._index(x))
            else:
                args.append(simgraph.note(self, x))
        out = kwargs.get("out")
        kwargs = {k: (self._unwrap(v, ufunc.__name__) if k != "out" else v)
                  for k, v in kwargs.items()}
        if out is not None:
            outs = out if isinstance(out, tuple) else (out,)
            for o in outs:
                if not isinstance(o, DeviceArray):
                    raise TypeError("the output of a device ufunc must be a device array, got "
                                    "%s" % type(o))
            kwargs = dict(kwargs, out=tuple(o._a for o in outs))
        if not force and not any(isinstance(x, DeviceArray) for x in inputs) and out is None:
            return NotImplemented
        simapi.check_ufunc_method(ufunc.__name__, method)
        simgraph.operation(self, ufunc.__name__ + ("" if method == "__call__" else "." + method))
        result = getattr(ufunc, method)(*args, **kwargs)
        if method == "at":
            return None
        if out is not None:
            return outs[0] if len(outs) == 1 else outs
        return self._wrap(result, scalars=True)

    def _call(self, func, args, kwargs, name, creation=False):
        if name in _SYNCING_FUNCTIONS:
            self._record(SCALAR, 8, name + "()")
        on_device = creation or self._has_device(args) or self._has_device(kwargs)
        simgraph.operation(self, name)
        result = func(*self._unwrap(args, name), **self._unwrap(kwargs, name))
        if creation and not isinstance(result, (np.ndarray, np.generic, tuple, list)):
            return result
        return self._wrap(result, scalars=on_device)

    # ---- CuPy's module surface ---------------------------------------------------------------
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        cached = self._cache.get(name)
        if cached is not None:
            return cached
        entry = simapi.check_name("cupy", name)
        attr = getattr(np, name)
        if isinstance(attr, np.ufunc):
            value = _Ufunc(attr, self)
        elif isinstance(attr, types.ModuleType):
            value = _Namespace(attr, self)
        elif isinstance(attr, type) or not callable(attr):
            return attr
        else:
            dev = self

            def value(*args, **kwargs):
                simapi.check_keywords("cupy." + name, entry, kwargs)
                return dev._call(attr, args, kwargs, name, creation=True)

            value.__name__ = name
        self._cache[name] = value
        return value

    def asarray(self, a, dtype=None, order=None):
        if isinstance(a, DeviceArray):
            if dtype is None or a.dtype == np.dtype(dtype):
                return a
            return DeviceArray(a._a.astype(dtype), self)
        host = np.asarray(a, dtype=dtype)
        self._record(TO_DEVICE, host.nbytes, "asarray()")
        return DeviceArray(np.array(host, copy=True, order=order or "K"), self)

    def array(self, obj, dtype=None, copy=True, order="K", ndmin=0):
        if isinstance(obj, DeviceArray):
            arr = np.array(obj._a, dtype=dtype, copy=copy, order=order, ndmin=ndmin)
            return DeviceArray(arr, self)
        host = np.array(obj, dtype=dtype, order=order, ndmin=ndmin)
        self._record(TO_DEVICE, host.nbytes, "array()")
        return DeviceArray(np.array(host, copy=True), self)

    def ascontiguousarray(self, a, dtype=None):
        if isinstance(a, DeviceArray):
            return DeviceArray(np.ascontiguousarray(a._a, dtype=dtype), self)
        return self.asarray(np.ascontiguousarray(a, dtype=dtype))

    def asnumpy(self, a, stream=None, order="C", out=None):
        if not isinstance(a, DeviceArray):
            return np.asarray(a, order=order)
        return a.get(order=order, out=out)

    def empty_pinned(self, shape, dtype=float):
        """Page-locked host memory (cupyx.empty_pinned): here a NumPy array, counted."""
        with self._lock:
            self.pinned_allocations += 1
        return np.empty(shape, dtype)

    def get_array_module(self, *arrays):
        return self if any(isinstance(a, DeviceArray) for a in arrays) else np

    def copyto(self, dst, src, casting="same_kind", where=True):
        if not isinstance(dst, DeviceArray):
            raise TypeError("copyto: the destination must be a device array")
        if isinstance(src, np.ndarray):
            raise _host_array_error(src)
        simgraph.operation(self, "copyto")
        np.copyto(dst._a, self._unwrap(src, "copyto"), casting=casting,
                  where=self._unwrap(where, "copyto"))


def copy_to_host(array):
    """A host copy of a device array (counted), or ``array`` itself if it is on the host."""
    return backend.to_host(array)


@contextlib.contextmanager
def simulated_device():
    """Make a fresh :class:`SimulatedDevice` the device module for the block (yields it).
    The previous mode and device module come back afterwards."""
    dev = SimulatedDevice()
    old = backend.use_device_module(dev)
    old_mode = backend.mode()
    try:
        yield dev
    finally:
        if old_mode == backend.CPU:
            backend.set_mode_cpu()
        backend.use_device_module(old)


__all__ = ["DeviceArray", "SimulatedDevice", "HostTransferError", "simulated_device",
           "copy_to_host", "Transfer", "TO_DEVICE", "TO_HOST", "SCALAR"]


def cpu_and_simulated_gpu(run):
    """``(run() in CPU mode, run() in GPU mode on a simulated device, that device)``: the
    scaffold of a CPU/GPU parity test on machines without a GPU."""
    cpu = run()
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            gpu = run()
        finally:
            backend.set_mode_cpu()
    return cpu, gpu, dev
