"""Shared by the tests of the compiled CPU kernels."""

import contextlib

import pytest

from pycaffe_lite.ops import cpu

needs_library = pytest.mark.skipif(
    not cpu.library_available(),
    reason="the C kernels were not built (%s)" % cpu.unavailable_reason())


@contextlib.contextmanager
def kernels(flag):
    """The compiled kernels on (True) or off (False) inside the block."""
    old = cpu.set_kernels_enabled(flag)
    try:
        yield
    finally:
        cpu.set_kernels_enabled(old)
