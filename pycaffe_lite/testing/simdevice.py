"""A simulated device for CPU-only machines.

Device arrays are instances of :class:`DeviceArray` (a distinct ndarray subclass) created only
through ``asarray``/``zeros``; ``asnumpy`` copies back. Every host<->device transfer is counted,
so tests can check the sync state machine moves data when it must and only then. Use::

    with simulated_device() as dev:
        backend.set_mode_gpu()
        ...
        assert dev.to_device == 1
"""

import contextlib
import types

import numpy as np

from .. import backend


class DeviceArray(np.ndarray):
    """An array that lives on the simulated device."""


class SimulatedDevice(types.SimpleNamespace):
    def __init__(self):
        super().__init__(to_device=0, to_host=0)

    def __getattr__(self, name):  # the rest of the NumPy namespace
        return getattr(np, name)

    def asarray(self, a, dtype=None):
        if isinstance(a, DeviceArray) and (dtype is None or a.dtype == dtype):
            return a
        self.to_device += 1
        return np.array(a, dtype=dtype, copy=True).view(DeviceArray)

    def asnumpy(self, a):
        if not isinstance(a, DeviceArray):
            return np.asarray(a)
        self.to_host += 1
        return np.array(a.view(np.ndarray), copy=True)

    def zeros(self, shape, dtype=np.float32):
        return np.zeros(shape, dtype).view(DeviceArray)

    def get_array_module(self, *arrays):
        return self if any(isinstance(a, DeviceArray) for a in arrays) else np


@contextlib.contextmanager
def simulated_device():
    dev = SimulatedDevice()
    old = backend.use_device_module(dev)
    old_mode = backend.mode()
    try:
        yield dev
    finally:
        backend.set_mode_cpu() if old_mode == backend.CPU else None
        backend.use_device_module(old)
