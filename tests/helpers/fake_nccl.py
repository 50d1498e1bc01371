"""CuPy's NCCL surface as :class:`pycaffe_lite.parallel.comm.NCCLComm` uses it, on the host, for
machines without a GPU: what a collective does to the buffer is not simulated (the tests here
are about waiting), only when it completes.

- :class:`FakeStream`: a CUDA stream whose work completes when ``released`` is set (set from
  the start, unless the stream was made while :data:`STATE` ``hang`` is true: a peer that never
  joins the collective);
- :class:`FakeEvent`: ``record(stream)``, ``done`` (counted in ``looks``), ``synchronize()``
  (blocks until the stream is released);
- :class:`FakeCommunicator`: ``allReduce``/``bcast`` record their calls, ``abort()`` records
  itself (and prints a line, for tests of whole processes); with :data:`STATE` ``hang_init``
  its construction never returns (rank 1 stops itself with SIGSTOP, the others wait), as
  ``ncclCommInitRank`` when a rank never joins;
- :func:`install`: puts the fakes where ``backend.nccl()`` and ``backend.device_module()`` are
  looked up (a test uses ``monkeypatch`` instead).
"""

import os
import signal
import threading
import types

import numpy as np

STATE = {"hang": False, "hang_init": False}


class FakeStream:
    def __init__(self, non_blocking=False):
        self.released = threading.Event()
        if not STATE["hang"]:
            self.released.set()
        self.ptr = id(self)
        self.waited_on = []

    def wait_event(self, event):
        self.waited_on.append(event)

    def record(self, event=None):
        event = FakeEvent() if event is None else event
        event.record(self)
        return event


class FakeEvent:
    def __init__(self, block=False, disable_timing=False, interprocess=False):
        self.stream = None
        self.looks = 0
        self.syncs = 0

    def record(self, stream=None):
        self.stream = stream if stream is not None else _CURRENT

    @property
    def done(self):
        self.looks += 1
        return self.stream.released.is_set()

    def synchronize(self):
        self.syncs += 1
        self.stream.released.wait()


_CURRENT = FakeStream()
_CURRENT.released.set()


class FakePointer:
    def __init__(self, ptr):
        self.ptr = ptr


class FakeDeviceArray:
    """A device buffer as NCCL sees it: a pointer, a size, a dtype; ``get()`` gives the
    host values (NCCL's effect is not simulated)."""

    def __init__(self, host):
        self.host = np.ascontiguousarray(host)
        self.data = FakePointer(self.host.ctypes.data)
        self.size = self.host.size
        self.nbytes = self.host.nbytes
        self.dtype = self.host.dtype

    def get(self):
        return self.host.copy()


class FakeCommunicator:
    def __init__(self, ndev, uid, rank):
        if STATE.get("hang_init"):  # rank 1 freezes in ncclCommInitRank, the others wait
            if rank == 1:
                os.kill(os.getpid(), signal.SIGSTOP)
            else:
                threading.Event().wait()
        self.ndev, self.uid, self.rank = ndev, uid, rank
        self.calls = []
        self.aborted = 0

    def allReduce(self, sendbuf, recvbuf, count, datatype, op, stream):
        self.calls.append(("allReduce", count, datatype, op, stream))

    def bcast(self, buff, count, datatype, root, stream):
        self.calls.append(("bcast", count, datatype, root, stream))

    def abort(self):
        self.aborted += 1
        print("fake ncclCommAbort on rank %d" % self.rank, flush=True)


nccl = types.SimpleNamespace(
    NcclCommunicator=FakeCommunicator, NCCL_FLOAT32=7, NCCL_FLOAT64=8, NCCL_SUM=0, NCCL_MAX=2,
    get_unique_id=lambda: b"fake-nccl-unique-id")

cupy = types.SimpleNamespace(
    cuda=types.SimpleNamespace(Stream=FakeStream, Event=FakeEvent,
                               get_current_stream=lambda: _CURRENT),
    asarray=FakeDeviceArray)


def install():
    """Make ``backend.nccl()`` and ``backend.device_module()`` give these fakes (for a
    process of its own: a script run under a launcher)."""
    from pycaffe_lite import backend
    backend.nccl = lambda: nccl
    backend.device_module = lambda: cupy
