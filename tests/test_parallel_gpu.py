"""Data-parallel training on GPUs through NCCL (``@pytest.mark.gpu``: skipped where no GPU is
usable; the two-process test also needs two GPUs and the ``mpi`` extra)."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import backend
from pycaffe_lite import ranks
from pycaffe_lite.solvers import SGDSolver

from helpers.mpi import (make_lmdb, max_relative_difference, mpi_available, read_weights,
                         run_ranks, tiny_project)

pytestmark = pytest.mark.gpu


@pytest.fixture
def gpu_mode():
    backend.set_mode_gpu()
    yield
    backend.set_mode_cpu()
    ranks.reset()


def test_pycaffe_nccl_on_one_gpu_trains_as_without_it(tmp_path, gpu_mode):
    source = make_lmdb(tmp_path / "db", n=12)
    solvers = [SGDSolver(str(tiny_project(tmp_path / name, source))) for name in ("a", "b")]
    ranks.reset()
    nccl = caffe.NCCL(solvers[0], caffe.NCCL.new_uid())
    nccl.bcast()
    solvers[0].add_callback(nccl)
    if solvers[0].param.layer_wise_reduce:
        solvers[0].net.after_backward(nccl)
    for s in solvers:
        s.step(3)
    for name, blobs in solvers[1].net.params.items():
        for got, want in zip(solvers[0].net.params[name], blobs):
            np.testing.assert_allclose(got.data, want.data, rtol=1e-5, atol=1e-6)


def test_two_gpus_match_two_cpu_ranks(tmp_path):
    if backend.device_count() < 2 or not mpi_available():
        pytest.skip("needs two GPUs and the mpi extra")
    source = make_lmdb(tmp_path / "db", n=24)
    cpu = tiny_project(tmp_path / "cpu", source, max_iter=10, snapshot=10)
    gpu = tiny_project(tmp_path / "gpu", source, max_iter=10, snapshot=10)
    for solver, flags in ((cpu, []), (gpu, ["--gpu", "0,1"])):
        rc, out = run_ranks(2, ["train", "--solver", str(solver)] + flags, tmp_path)
        assert rc == 0, out
    got = read_weights(tmp_path / "gpu" / "snaps" / "solver_iter_10.caffemodel")
    want = read_weights(tmp_path / "cpu" / "snaps" / "solver_iter_10.caffemodel")
    assert max_relative_difference(got, want) <= 1e-3
