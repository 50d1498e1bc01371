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


def conv_plan(itemsize=4, workspace_bytes=1 << 26, **geometry):
    """A :class:`~pycaffe_lite.ops.conv.ConvPlan` (engine CAFFE) over the
    :class:`~pycaffe_lite.ops.conv.ConvGeometry` of the keyword arguments (stride and
    dilation 1 and one group unless given)."""
    from pycaffe_lite.ops import conv

    rank = len(geometry["kernel"])
    geometry.setdefault("stride", (1,) * rank)
    geometry.setdefault("dilation", (1,) * rank)
    geometry.setdefault("group", 1)
    return conv.ConvPlan(conv.ConvGeometry(**geometry), itemsize, workspace_bytes)


def switch_reads(variable, code):
    """What ``code`` prints in a fresh interpreter with ``variable`` set to 0 and to 1 (a
    kernel's environment switch is read at import)."""
    got = []
    for value in ("0", "1"):
        env = dict(os.environ, **{variable: value})
        got.append(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                                  text=True, check=True).stdout.strip())
    return got
