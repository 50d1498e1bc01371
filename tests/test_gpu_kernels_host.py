"""``tools/check_gpu_kernels.py`` in the suite: every CUDA kernel of ``pycaffe_lite/ops/gpu``
built for the host by g++ (CUDA's blocks and threads emulated, ``tools/gpu_host.py``) against
the NumPy code it replaces, and the Python side driven through a host stand-in for CuPy (the
solvers' one-launch update against the NumPy solvers, the layers that dispatch to the kernels
against themselves without). nvcc's PTX compilation where nvcc is installed. Also checks that
the checks fail on a deliberately broken kernel, so they cannot turn vacuous unnoticed."""

import os
import shutil
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if os.path.join(ROOT, "tools") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "tools"))

import check_gpu_kernels  # noqa: E402
import gpu_kernel_shim_checks as shim_checks  # noqa: E402
from gpu_host import Host  # noqa: E402

from pycaffe_lite.ops.gpu import _util  # noqa: E402
from pycaffe_lite.ops.gpu import im2col as g_im2col  # noqa: E402
from pycaffe_lite.ops.gpu import solver_updates as g_su  # noqa: E402

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("g++") is None,
                                 reason="g++ is not installed: the CUDA sources cannot be built "
                                        "for the host")]

CHECKS = {
    "raw kernels": check_gpu_kernels.check_raw_kernels,
    "bias and relu": check_gpu_kernels.check_bias_relu,
    "channels": shim_checks.check_channels,
    "fused chains": shim_checks.check_fused,
    "solver tables": shim_checks.check_solver_tables,
    "solver rules": shim_checks.check_solver_rules,
    "layers": shim_checks.check_layers_through_dispatch,
}


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    return Host(str(tmp_path_factory.mktemp("host_kernels")))


@pytest.mark.parametrize("name", list(CHECKS))
def test_the_kernels_built_for_the_host_match_numpy(host, name):
    checks = CHECKS[name](host)
    assert checks is None or checks > 0


def test_every_kernel_source_compiles_to_ptx(tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc is not on the PATH")
    assert check_gpu_kernels.check_nvcc(str(tmp_path)) == 0


def _broken(cache, old, new):
    assert old in cache.source
    return _util.RawModuleCache(cache.source.replace(old, new, 1), cache.names)


def test_a_solver_kernel_that_skips_chunks_fails_the_check(host, monkeypatch):
    monkeypatch.setattr(g_su, "_MODULE", _broken(g_su._MODULE, "c += gridDim.x)",
                                                 "c += gridDim.x + 1)"))
    with pytest.raises(AssertionError):
        shim_checks.check_solver_tables(host)


def test_a_solver_kernel_that_ignores_ok_fails_the_check(host, monkeypatch):
    monkeypatch.setattr(g_su, "_MODULE", _broken(g_su._MODULE, "if (ok != 0 && !*ok) return;",
                                                 ""))
    monkeypatch.setattr(shim_checks, "SOLVER_RULES", {"SGD": shim_checks.SOLVER_RULES["SGD"]})
    with pytest.raises(AssertionError, match="ok False"):
        shim_checks.check_solver_rules(host)


def test_a_broken_im2col_fails_the_layers_check(host, monkeypatch):
    monkeypatch.setattr(g_im2col, "_module", _broken(g_im2col._module, ": T(0);", ": T(0.5);"))
    monkeypatch.setattr(shim_checks, "LAYER_CASES", shim_checks.LAYER_CASES[:1])
    with pytest.raises(AssertionError, match="Convolution"):
        shim_checks.check_layers_through_dispatch(host)
