"""An array with a host copy and a device copy, kept in sync lazily (Caffe's SyncedMemory).

States: ``UNINITIALIZED`` (nothing allocated), ``HEAD_AT_CPU`` (host is current, device stale),
``HEAD_AT_GPU`` (device is current, host stale) and ``SYNCED`` (both current). Reading a side
brings it up to date; asking for a side to write marks the other one stale.

A third side serves the channel-blocked inference path (:mod:`pycaffe_lite.net_blocked`):
``HEAD_AT_BLOCKED`` (the value lives only in ``blocked``, an object whose ``unblock(flat)``
writes it into a host array in the blob's own layout, until a host array exists: from then on
each blocked write goes through to it). Reading the host side converts it;
``blocked_current`` stays True until a side is asked for writing. ``version`` counts the
requests for writing (host or device), so a copy derived from the values (packed weights)
can tell that they may have changed.
"""

import numpy as np

from . import backend

UNINITIALIZED = "uninitialized"
HEAD_AT_CPU = "head_at_cpu"
HEAD_AT_GPU = "head_at_gpu"
HEAD_AT_BLOCKED = "head_at_blocked"
SYNCED = "synced"
#: the heads whose device copy is stale: a host write since the device last wrote
HOST_NEWER = (HEAD_AT_CPU, HEAD_AT_BLOCKED)


def upload_host_writes(arrays):
    """Bring up to the device each of ``arrays`` (SyncedArrays) written on the host since the
    device last wrote it: what a CUDA graph, which cannot copy from the host, reads before a
    launch."""
    for synced in arrays:
        if synced.head in HOST_NEWER:
            synced.gpu()


class SyncedArray:
    """A flat array of ``size`` elements of ``dtype`` with lazy host/device copies."""

    __slots__ = ("size", "dtype", "_cpu", "_gpu", "head", "blocked", "blocked_current",
                 "version")

    def __init__(self, size, dtype=np.float32):
        self.size = int(size)
        self.dtype = np.dtype(dtype)
        self._cpu = None
        self._gpu = None
        self.head = UNINITIALIZED
        self.blocked = None
        self.blocked_current = False
        self.version = 0

    def _to_cpu(self):
        if self.head == HEAD_AT_BLOCKED:
            if self._cpu is None:
                self._cpu = np.empty(self.size, self.dtype)
            self.blocked.unblock(self._cpu)
            self.head = HEAD_AT_CPU
        elif self.head == UNINITIALIZED:
            self._cpu = np.zeros(self.size, self.dtype)
            self.head = HEAD_AT_CPU
        elif self.head == HEAD_AT_GPU:
            host = backend.to_host(self._gpu)
            if self._cpu is None:
                self._cpu = np.array(host, dtype=self.dtype, copy=True)
            else:
                self._cpu[...] = host
            self.head = SYNCED

    def _to_gpu(self):
        if self.head == HEAD_AT_BLOCKED:
            self._to_cpu()
        if self.head == UNINITIALIZED:
            self._gpu = backend.device_module().zeros(self.size, self.dtype)
            self.head = HEAD_AT_GPU
        elif self.head == HEAD_AT_CPU:
            if self._gpu is None:
                self._gpu = backend.to_device(self._cpu)
            elif hasattr(self._gpu, "set"):  # CuPy: copy into the existing buffer
                self._gpu.set(self._cpu)
            else:
                self._gpu[...] = backend.to_device(self._cpu)
            self.head = SYNCED

    def cpu(self):
        """The host array for reading."""
        if self.head not in (HEAD_AT_CPU, SYNCED):
            self._to_cpu()
        return self._cpu

    def mutable_cpu(self):
        """The host array for writing: the device copy becomes stale."""
        self.blocked_current = False
        self.version += 1
        if self.head != HEAD_AT_CPU:
            self._to_cpu()
            self.head = HEAD_AT_CPU
        return self._cpu

    def gpu(self):
        if self.head not in (HEAD_AT_GPU, SYNCED):
            self._to_gpu()
        return self._gpu

    def mutable_gpu(self):
        self.blocked_current = False
        self.version += 1
        if self.head != HEAD_AT_GPU:
            self._to_gpu()
            self.head = HEAD_AT_GPU
        return self._gpu

    def device_written(self):
        """The device copy was written behind this object's back (a CUDA graph's replay):
        make it the current one."""
        if self._gpu is not None:
            self.head = HEAD_AT_GPU
            self.blocked_current = False

    def blocked_written(self, side):
        """The value was written in blocked layout into ``side`` (see the module's text): the
        device copy becomes stale; so does the host copy while there is none. Once a host array
        exists (a layer or a script has read the value) it is written through at once: a
        script may hold that array across forwards (``feat = net.blobs[name].data``), as
        Caffe's CPU blobs allow, and must see each new value in it."""
        self.blocked = side
        self.blocked_current = True
        if self._cpu is None:
            self.head = HEAD_AT_BLOCKED
        else:
            side.unblock(self._cpu)
            self.head = HEAD_AT_CPU

    def pin_host(self):
        """Move the host side into page-locked memory (GPU mode; see backend.pinned_empty),
        keeping its contents."""
        host = backend.pinned_empty(self.size, self.dtype)
        host[...] = self.cpu()
        self._cpu = host

    def push_to_device(self, stream=None):
        """Bring the device side up to date from the host on ``stream`` (the caller waits for
        it), as Caffe's async_gpu_push; both sides are current afterwards."""
        if self.head == HEAD_AT_BLOCKED:
            self._to_cpu()
        if self.head != HEAD_AT_CPU:
            return
        if self._gpu is None:
            self._gpu = backend.device_module().empty(self.size, self.dtype)
        backend.copy_to_device(self._gpu, self._cpu, stream)
        self.head = SYNCED

    def held_bytes(self):
        """(host bytes, device bytes) allocated now."""
        return (0 if self._cpu is None else self._cpu.nbytes,
                0 if self._gpu is None else self._gpu.nbytes)

    def read(self):
        """The current-mode array for reading."""
        return self.cpu() if backend.mode() == backend.CPU else self.gpu()

    def write(self):
        """The current-mode array for writing."""
        return self.mutable_cpu() if backend.mode() == backend.CPU else self.mutable_gpu()
