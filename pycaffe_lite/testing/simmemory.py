"""The simulated device's memory (:mod:`.simdevice`): CuPy's memory-pool surface over the
NumPy buffers under its device arrays, so that :func:`pycaffe_lite.backend.track_device_memory`
counts on a machine without a GPU.

Every device array of the simulation is a view of one NumPy buffer (the root: the array at the
end of its ``base`` chain). The first device array over a root allocates it from the pool,
through the allocator in use (``cuda.get_allocator()``, CuPy's hook), in the pool's 512-byte
units; the root's collection, once no array views it any more, gives the bytes back. That is
how CuPy's pool sees a device array's memory: one block per allocation, held while any view of
it lives. What NumPy allocates for itself inside an operation and drops before returning (no
device array ever wraps it) is not counted; on a GPU those are a kernel's registers or
cuDNN's workspace.

The pool's ``total_bytes()`` (what CuPy's pool holds, in use or cached) is the most it ever had
in use: a pool that reuses every freed byte. ``free_all_blocks()`` brings it down to what is
in use now.

:meth:`Memory.live` lists the live roots (their bytes and, with ``sites=True`` given when the
device was made, where each was allocated): what a count of the device's memory is made of.
"""

import threading
import traceback
import weakref

import numpy as np

#: CuPy's memory pool rounds every allocation up to this many bytes
UNIT = 512


class _Block:
    """The pool's allocation under one root buffer: its bytes go back when it is collected."""

    __slots__ = ("pool", "size")

    def __init__(self, pool, size):
        self.pool, self.size = pool, size

    def __del__(self):
        with self.pool._lock:
            self.pool.used -= self.size


class SimulatedPool:
    """CuPy's ``MemoryPool`` as :func:`~pycaffe_lite.backend.track_device_memory` sees it."""

    def __init__(self):
        self.used = self.held = 0
        self._lock = threading.RLock()  # a block collected inside malloc gives back its bytes

    def malloc(self, size):
        n = -(-int(size) // UNIT) * UNIT
        with self._lock:
            self.used += n
            if self.used > self.held:
                self.held = self.used
        return _Block(self, n)

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.held

    def free_all_blocks(self):
        with self._lock:
            self.held = self.used


class _Cuda:
    """``cupy.cuda``'s allocator hook: ``get_allocator`` / ``set_allocator``."""

    def __init__(self, pool):
        self._pool = pool
        self._allocator = pool.malloc

    def get_allocator(self):
        return self._allocator

    def set_allocator(self, allocator=None):
        self._allocator = self._pool.malloc if allocator is None else allocator


def _root(buffer):
    while isinstance(buffer.base, np.ndarray):
        buffer = buffer.base
    return buffer


class Memory:
    """The roots under a simulated device's arrays and the pool they were allocated from."""

    def __init__(self, sites=False):
        self.pool = SimulatedPool()
        self.cuda = _Cuda(self.pool)
        self._blocks = {}  # id(root) -> (weakref to the root, its block, where allocated)
        self._lock = threading.Lock()
        self._sites = sites

    def note(self, buffer):
        """``buffer`` is under a device array: its root is allocated if it is new."""
        root = _root(buffer)
        key = id(root)
        if key in self._blocks:
            return
        with self._lock:
            if key in self._blocks:
                return
            self._blocks[key] = None
        site = _site() if self._sites else None
        block = self.cuda.get_allocator()(root.nbytes) if root.nbytes else None
        self._blocks[key] = (weakref.ref(root), block, site)
        weakref.finalize(root, self._blocks.pop, key, None)

    def live(self):
        """``[(root, bytes as the pool counts them, site)]`` of every live root (``site``:
        ``file:line`` of the allocation's caller, or None)."""
        out = []
        for ref, block, site in list(v for v in self._blocks.values() if v is not None):
            root = ref()
            if root is not None:
                out.append((root, block.size if block is not None else 0, site))
        return out


def _site():
    """``file:line`` of the innermost frame in pycaffe_lite outside the simulation."""
    for frame in reversed(traceback.extract_stack(limit=24)[:-2]):
        name = frame.filename.replace("\\", "/")
        if "/pycaffe_lite/" in name and "/testing/sim" not in name:
            return "%s:%d" % (name.split("/pycaffe_lite/", 1)[1], frame.lineno)
    return "?"


def attach(device, sites=False):
    """Give ``device`` (a :class:`~.simdevice.SimulatedDevice`) its memory: ``_memory``,
    ``cuda`` (the allocator hook) and ``get_default_memory_pool()``."""
    device._memory = Memory(sites)
    device.cuda = device._memory.cuda
    device.get_default_memory_pool = lambda: device._memory.pool


__all__ = ["Memory", "SimulatedPool", "UNIT", "attach"]
