"""Where arrays live and how they move: CPU (NumPy) or GPU (CuPy) mode.

This is the only module that imports CuPy, lazily and guarded, so the package installs, imports
and runs on machines without a GPU. A *device module* is anything with CuPy's array surface
(``asarray``, ``asnumpy``, ``get_array_module`` and the NumPy namespace); normally CuPy, and in
tests a simulated device (:mod:`pycaffe_lite.testing.simdevice`) that keeps device arrays apart
from host arrays so that the sync logic is exercised for real.
"""

import numpy as np

from .errors import CaffeError

CPU = "cpu"
GPU = "gpu"

_state = {
    "mode": CPU,
    "device_id": 0,
    "device_module": None,  # resolved lazily
    "rng": np.random.default_rng(),
    "seed": None,
}


class GPUUnavailableError(CaffeError):
    """GPU mode was asked for but no usable CUDA device or CuPy is present."""


def _import_cupy():
    try:
        import cupy
    except ImportError as exc:
        raise GPUUnavailableError(
            "GPU mode needs CuPy: install it with pip install 'pycaffe-lite[gpu]' (%s)" % exc
        ) from None
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver missing or broken
        raise GPUUnavailableError(
            "CuPy is installed but no CUDA device is usable: %s" % exc) from None
    if n == 0:
        raise GPUUnavailableError("CuPy is installed but no CUDA device was found")
    return cupy


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


def use_device_module(module):
    """Replace the device module (``None`` goes back to CuPy). Returns the previous one."""
    old = _state["device_module"]
    _state["device_module"] = module
    return old


def set_mode_cpu():
    _state["mode"] = CPU


def set_mode_gpu():
    mod = device_module()
    if hasattr(mod, "cuda") and hasattr(mod.cuda, "Device"):
        mod.cuda.Device(_state["device_id"]).use()
    _state["mode"] = GPU


def mode():
    return _state["mode"]


def set_device(device_id):
    device_id = int(device_id)
    if device_id < 0:
        raise CaffeError("device id must be >= 0, got %d" % device_id)
    _state["device_id"] = device_id
    if _state["mode"] == GPU:
        set_mode_gpu()


def device_id():
    return _state["device_id"]


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
    """Seed every random stream the framework uses (fillers, dropout, data order)."""
    _state["seed"] = int(seed)
    _state["rng"] = np.random.default_rng(int(seed))
    mod = _state["device_module"]
    if mod is not None and hasattr(mod, "random"):
        mod.random.seed(int(seed))


def rng():
    """The host random generator (a numpy Generator)."""
    return _state["rng"]


def get_rng_state():
    return _state["rng"].bit_generator.state


def set_rng_state(state):
    _state["rng"].bit_generator.state = state
