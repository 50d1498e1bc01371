"""Shared by the tests of the compiled CPU kernels."""

import contextlib
import os
import subprocess
import sys

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


def switch_reads(variable, code):
    """What ``code`` prints in a fresh interpreter with ``variable`` set to 0 and to 1 (a
    kernel's environment switch is read at import)."""
    got = []
    for value in ("0", "1"):
        env = dict(os.environ, **{variable: value})
        got.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, check=True).stdout.strip())
    return got
