"""Shared test configuration: tests marked ``@pytest.mark.gpu`` need a real NVIDIA GPU with CuPy
and are skipped, with the reason, where ``pycaffe_lite.backend.gpu_available()`` is False.
(GPU mode itself is tested everywhere on the simulated device: tests/test_gpu_simulated.py.)"""

import pytest


def pytest_collection_modifyitems(config, items):
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu_items:
        return
    from pycaffe_lite import backend

    if backend.gpu_available():
        return
    try:
        backend.device_module()
    except backend.GPUUnavailableError as exc:
        reason = "needs an NVIDIA GPU with CuPy: %s" % exc
    else:  # a device module was installed by hand (the simulated one): not a GPU
        reason = "needs an NVIDIA GPU with CuPy"
    skip = pytest.mark.skip(reason=reason)
    for item in gpu_items:
        item.add_marker(skip)
