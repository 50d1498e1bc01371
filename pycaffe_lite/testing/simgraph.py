"""CUDA graphs on the simulated device (:mod:`.simdevice`).

A real capture records the work without running it and cannot copy between host and device
or synchronise; its replay runs the recorded work with no Python in between, so every value
the host passed to a kernel (a scalar argument) is the one it had at capture time. Simulated:

- a capture runs the work once with every host crossing forbidden (what would cross raises
  :class:`~pycaffe_lite.testing.simdevice.HostTransferError` where it happens, as a real
  capture fails there), notes every host scalar handed to a device operation, and then puts
  every device array that existed before it back as it was (a real capture runs nothing);
- ``launch()`` runs the work again under the same rule and compares each host scalar with the
  one noted at capture: one that changed raises :class:`GraphReplayError` at the line that
  passed it (a real replay would have used the captured value). So does a replay whose Python
  asks for other device operations than the capture did (each operation's name is noted in
  order: a branch taken on a host value that changed since, say; a real replay runs the
  captured operations whatever the Python would decide now). The Python it runs again
  leaves the bookkeeping of every :class:`~pycaffe_lite.syncedmem.SyncedArray` that existed
  at capture as it found it (which copy is current, the write count): a real replay runs no
  Python, so whatever the graph writes must be marked current by its caller
  (``device_written``), as it must be on a GPU.

Other threads (the data layers' loading threads) go on meanwhile, as they do beside a real
capture or replay: what they write into device memory during a capture (:func:`host_write`)
stays written, and the bookkeeping of the SyncedArrays they change during a launch stays as they
left it.

The device counts both (``graph_captures``, ``graph_launches``).
"""

import contextlib
import gc
import threading

import numpy as np

from ..syncedmem import SyncedArray

#: a SyncedArray's bookkeeping, which only Python changes (a real replay runs none)
_BOOKKEEPING = ("head", "version", "blocked_current", "blocked")


class GraphReplayError(AssertionError):
    """A replayed (simulated) CUDA graph would not compute what the Python code asked for:
    a host value given to a kernel changed since the capture, or the Python asked for other
    operations."""


class _Scalars:
    """The host scalars one thread gives device operations, and the operations' names, noted
    (a capture) or checked (a replay: ``expected`` and ``expected_ops``, the capture's) in
    order."""

    def __init__(self, where, expected=None, expected_ops=None):
        self.values = [] if expected is None else None
        self.ops = [] if expected_ops is None else None
        self.where = where
        self.expected = expected
        self.expected_ops = expected_ops
        self.position = self.op_position = 0

    def op(self, name):
        if self.expected_ops is None:
            self.ops.append(name)
            return
        k = self.op_position
        self.op_position += 1
        old = self.expected_ops[k] if k < len(self.expected_ops) else "nothing more"
        if old != name:
            raise GraphReplayError("the replay asks for device operation %s at %s where the "
                                   "capture ran %s (operation %d): a replayed CUDA graph runs "
                                   "the captured operations, whatever the Python decides now"
                                   % (name, self.where(), old, k + 1))

    def see(self, value):
        where = self.where  # the caller's ``file:line``, asked only for an error
        if self.expected is None:
            self.values.append(value)
            return
        k = self.position
        self.position += 1
        if k >= len(self.expected):
            raise GraphReplayError("the replay gave a device operation more host values than "
                                   "the capture did (%r at %s)" % (value, where()))
        old = self.expected[k]
        if not _same(old, value):
            raise GraphReplayError("host value %r at %s was %r when the graph was captured: "
                                   "a replayed CUDA graph uses the captured value"
                                   % (value, where(), old))


def _same(a, b):
    if type(a) is not type(b):
        return False
    if isinstance(a, (float, np.floating)) and np.isnan(a) and np.isnan(b):
        return True
    return a == b


def note(dev, value):
    """``value`` (a host scalar given to a device operation), noted or checked when this
    thread captures or replays a graph; returned unchanged."""
    scalars = getattr(dev._local, "graph_scalars", None)
    if scalars is not None and isinstance(value, (bool, int, float, np.number, np.bool_)):
        scalars.see(value)
    return value


def operation(dev, name):
    """Device operation ``name`` (a ufunc, a function, an array method), noted or checked
    when this thread captures or replays a graph."""
    scalars = getattr(dev._local, "graph_scalars", None)
    if scalars is not None:
        scalars.op(name)


def device_buffers(dev):
    """The host buffers under every live device array of ``dev``, each once (the arrays' bases:
    views share their base's buffer)."""
    roots = {}
    for obj in gc.get_objects():
        if type(obj) is dev.ndarray and obj._dev is dev:
            root = obj._a
            while isinstance(root.base, np.ndarray):
                root = root.base
            roots[id(root)] = root
    return list(roots.values())


def _device_memory(dev):
    """``[(buffer, copy)]`` of the memory under every live device array of ``dev``: the live
    buffers its memory pool counts (simmemory notes each array's buffer as the array is made),
    so that a capture costs the device's arrays, not a walk over every object of the
    interpreter as :func:`device_buffers` takes."""
    return [(root, root.copy()) for root, _, _ in dev._memory.live() if root.flags.writeable]


def _synced_arrays():
    # type(), not isinstance(): the latter asks some modules' objects for ``__class__``,
    # which may warn (torch's deprecated attributes)
    return [obj for obj in gc.get_objects() if type(obj) is SyncedArray]


# Launches under way: thread id -> the ids of the SyncedArrays other threads changed meanwhile.
# One re-entrant lock orders every change made during a launch with the launches' putting back.
_launches = {}
_launches_lock = threading.RLock()


def _noting_setattr(obj, name, value):
    me = threading.get_ident()
    with _launches_lock:
        for thread, touched in _launches.items():
            if thread != me:
                touched.add(id(obj))
        object.__setattr__(obj, name, value)


@contextlib.contextmanager
def _others_changes():
    """Yields the set that fills with the ids of the SyncedArrays whose attributes a thread
    other than this one sets inside the block; the caller puts its own changes back while
    holding ``_launches_lock``, so that none of theirs lands in between."""
    touched = set()
    with _launches_lock:
        _launches[threading.get_ident()] = touched
        SyncedArray.__setattr__ = _noting_setattr
    try:
        yield touched
    finally:
        with _launches_lock:
            del _launches[threading.get_ident()]
            if not _launches:
                del SyncedArray.__setattr__


def host_write(dev, buffer, host):
    """``buffer[...] = host``: a host-to-device copy into ``dev``'s memory. Made by another
    thread while one captures a graph on ``dev``, it is noted, so that the capture's putting
    back of the memory it found leaves this write in place."""
    with dev._lock:
        buffer[...] = host
        capture = getattr(dev, "_capture", None)
        if capture is not None and capture[0] != threading.get_ident():
            capture[1].append((buffer, buffer.copy()))


class SimulatedGraph:
    def __init__(self, dev, fn, kinds, scalars, ops, where, synced):
        self._dev, self._fn, self._kinds, self._scalars = dev, fn, kinds, scalars
        self._ops, self._where, self._synced = ops, where, synced

    def launch(self):
        check = _Scalars(self._where, self._scalars, self._ops)
        self._dev._local.graph_scalars = check
        with _others_changes() as touched:
            kept = [(s, [getattr(s, name) for name in _BOOKKEEPING]) for s in self._synced]
            try:
                with self._dev.forbid(*self._kinds):
                    self._fn()
            finally:
                self._dev._local.graph_scalars = None
                with _launches_lock:
                    for s, values in kept:
                        if id(s) not in touched:  # another thread's change stays
                            for name, value in zip(_BOOKKEEPING, values):
                                setattr(s, name, value)
        if check.op_position != len(self._ops):
            raise GraphReplayError("the replay asked for %d device operations, the capture "
                                   "ran %d" % (check.op_position, len(self._ops)))
        if check.position != len(self._scalars):
            raise GraphReplayError("the replay gave device operations %d host values, the "
                                   "capture %d: it ran other operations"
                                   % (check.position, len(self._scalars)))
        self._dev.graph_launches += 1


def capture(dev, fn, kinds, where):
    """``fn`` captured on ``dev``; ``where()`` names the caller's ``file:line``."""
    others, saved = [], []  # (buffer, contents) other threads wrote meanwhile (host_write)
    with dev._lock:
        dev._capture = (threading.get_ident(), others)
    try:
        saved = _device_memory(dev)
        scalars = _Scalars(where)
        dev._local.graph_scalars = scalars
        try:
            with dev.forbid(*kinds):
                fn()
        finally:
            dev._local.graph_scalars = None
    finally:
        with dev._lock:
            for root, copy in saved:  # a real capture runs nothing...
                np.copyto(root, copy)
            for buffer, contents in others:  # ...and other threads' copies are made
                np.copyto(buffer, contents)
            dev._capture = None
    dev.graph_captures += 1
    return SimulatedGraph(dev, fn, kinds, scalars.values, scalars.ops, where, _synced_arrays())


__all__ = ["GraphReplayError", "SimulatedGraph", "capture", "host_write", "note"]
