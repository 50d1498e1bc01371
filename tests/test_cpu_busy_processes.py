"""The CPU engine seen from outside, in real processes (docs/performance.md, "Threads" and "On
a busy machine"): the thread budget that the environment, ``taskset`` and OpenBLAS's own
variables leave, and two training processes sharing the cores with the results each gets
alone."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREAD_VARIABLES = ("PYCAFFE_LITE_CPU_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "GOTO_NUM_THREADS", "OPENBLAS_CORETYPE")
HANG = 300  # seconds: a hang detector only


def _env(**settings):
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env["PYTHONPATH"] = ROOT
    env.update(settings)
    return env


# The thread budget as the process settled it, and the count NumPy's OpenBLAS reports.
BUDGET = r"""
import ctypes
import pycaffe_lite
from pycaffe_lite.ops import cpu
from pycaffe_lite.ops.cpu import _threads
n = cpu.threads()
functions = _threads._blas_functions()
print("BUDGET", n, functions[1]() if functions else "none")
"""


def _budget(**settings):
    proc = subprocess.run([sys.executable, "-c", BUDGET], capture_output=True, text=True,
                          env=_env(**settings), timeout=HANG)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = [s for s in proc.stdout.splitlines() if s.startswith("BUDGET")][-1].split()
    if line[2] == "none":
        pytest.skip("NumPy's BLAS here is not an OpenBLAS whose threads can be read")
    return int(line[1]), int(line[2]), proc.stderr


@pytest.mark.parametrize("name", ["OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS"])
@pytest.mark.parametrize("value", ["abc", "0", "-1", "2x"])
def test_a_nonsense_openblas_count_is_named_and_openblas_gets_the_budget(name, value):
    """OpenBLAS itself ignores such a value (its atoi reads 0 or less, or a count we would not
    read the same way) and starts a thread per CPU; the kernels' budget of 1 must still reach
    it, with a warning naming the variable, instead of the value passing for a choice."""
    kernels, blas, stderr = _budget(PYCAFFE_LITE_CPU_THREADS="1", **{name: value})
    assert (kernels, blas) == (1, 1)
    assert "%s=%r is not a positive whole number of threads" % (name, value) in stderr


def test_a_real_openblas_count_is_left_as_set():
    kernels, blas, stderr = _budget(PYCAFFE_LITE_CPU_THREADS="1", OPENBLAS_NUM_THREADS="2")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert kernels == 1 and blas == min(2, cpus)  # OpenBLAS caps its count at the CPUs
    assert "OPENBLAS_NUM_THREADS" not in stderr

