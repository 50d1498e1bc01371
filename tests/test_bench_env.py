"""benchmarks/bench_env.py, the header every benchmark prints: the BLAS kernel OpenBLAS runs
(read back from the library by threadpoolctl), the OpenBLAS pinning variables and a warning
when they are set. Checked in fresh interpreters, since OpenBLAS reads the variables when it
loads."""

import os
import subprocess
import sys

import pytest

BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "benchmarks")
PINNING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")

threadpoolctl = pytest.importorskip("threadpoolctl")


def header(**variables):
    env = {k: v for k, v in os.environ.items() if k not in PINNING}
    env.update(variables)
    code = "import bench_env; bench_env.report()"
    return subprocess.run([sys.executable, "-c", code], cwd=BENCHMARKS, env=env,
                          capture_output=True, text=True, check=True).stdout


def openblas_kernel(**variables):
    """The kernel threadpoolctl reports in a fresh interpreter (the reference)."""
    env = {k: v for k, v in os.environ.items() if k not in PINNING}
    env.update(variables)
    code = ("import numpy, threadpoolctl; print([i['architecture'] for i in "
            "threadpoolctl.threadpool_info() if i['internal_api'] == 'openblas'][0])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True)
    if out.returncode:
        pytest.skip("NumPy does not run on OpenBLAS here")
    return out.stdout.strip()


def test_unset_variables_no_warning_and_the_kernel_printed():
    text = header()
    assert "OPENBLAS_CORETYPE=(unset)  OPENBLAS_L2_SIZE=(unset)" in text
    assert "WARNING" not in text
    assert "kernel %s," % openblas_kernel() in text
    assert "load average (start):" in text


def test_pinned_kernel_is_reported_with_a_warning():
    pinned = dict(OPENBLAS_CORETYPE="Sandybridge", OPENBLAS_L2_SIZE="262144")
    kernel = openblas_kernel(**pinned)
    text = header(**pinned)
    assert "kernel %s," % kernel in text
    assert "OPENBLAS_CORETYPE=Sandybridge  OPENBLAS_L2_SIZE=262144" in text
    warning = [line for line in text.splitlines() if line.startswith("WARNING")]
    assert len(warning) == 1
    assert "OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE set" in warning[0]
    assert "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python" in warning[0]
