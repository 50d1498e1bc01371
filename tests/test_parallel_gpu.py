"""Data-parallel training on GPUs through NCCL (``@pytest.mark.gpu``: skipped where no GPU is
usable; the two-process test also needs two GPUs and the ``mpi`` extra), and NCCL's waits under
the collective timeout on one GPU."""

import threading

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import backend
from pycaffe_lite import ranks
from pycaffe_lite.parallel.comm import NCCLComm
from pycaffe_lite.parallel.watchdog import CollectiveTimeoutError
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


# NVCaffe's float16 on the GPUs: the float16 gradients are reduced in float32
FLOAT16_TYPES = "default_forward_type: FLOAT16 default_backward_type: FLOAT16 " \
    "global_grad_scale: 8\n"


@pytest.mark.parametrize("types, rtol", [("", 1e-3), (FLOAT16_TYPES, 3e-2)],
                         ids=["float32", "float16"])
def test_two_gpus_match_two_cpu_ranks(tmp_path, types, rtol):
    if backend.device_count() < 2 or not mpi_available():
        pytest.skip("needs two GPUs and the mpi extra")
    source = make_lmdb(tmp_path / "db", n=24)
    cpu = tiny_project(tmp_path / "cpu", source, max_iter=10, snapshot=10)
    gpu = tiny_project(tmp_path / "gpu", source, max_iter=10, snapshot=10)
    net = gpu.parent / "solver_net.prototxt"
    net.write_text(types + net.read_text())
    for solver, flags in ((cpu, []), (gpu, ["--gpu", "0,1"])):
        rc, out = run_ranks(2, ["train", "--solver", str(solver)] + flags, tmp_path)
        assert rc == 0, out
    got = read_weights(tmp_path / "gpu" / "snaps" / "solver_iter_10.caffemodel")
    want = read_weights(tmp_path / "cpu" / "snaps" / "solver_iter_10.caffemodel")
    assert max_relative_difference(got, want) <= rtol


def test_nccl_waits_on_one_gpu_complete_under_the_collective_timeout(gpu_mode):
    cp = backend.device_module()
    comm = NCCLComm(NCCLComm.new_uid(), 0, 1)
    comm.set_timeout(60)
    comm.note("iteration 1")
    values = np.arange(1000, dtype=np.float32) * 0.5
    buf = cp.asarray(values)
    comm.allreduce(buf)  # the sum over one rank
    np.testing.assert_array_equal(cp.asnumpy(buf), values)
    other = cp.full(10, 3.0, cp.float64)
    comm.bcast(other, 0)
    np.testing.assert_array_equal(cp.asnumpy(other), np.full(10, 3.0))
    assert comm.agree(4) == 4
    handle = comm.start_allreduce(buf)
    handle.wait()
    assert handle.test()
    np.testing.assert_array_equal(cp.asnumpy(buf), values)
    assert comm.watch.count == 4 and comm.watch.polls >= 4 and comm.watch.fired is None
    comm.close()


class RecordingAbort:
    """The real NCCL communicator, its ``abort()`` counted."""

    def __init__(self, inner):
        self.inner = inner
        self.aborts = 0

    def abort(self):
        self.aborts += 1
        self.inner.abort()


def test_a_wait_on_a_blocked_stream_ends_with_ncclcommabort(gpu_mode):
    """A stream held by a host function until the test releases it stands for a collective
    that never completes: the watched wait looks at a real CUDA event recorded after it, aborts
    the (idle) NCCL communicator for real and raises. (No NCCL kernel is left running: aborting
    one that a peer never joins needs two GPUs.)"""
    cp = backend.device_module()
    comm = NCCLComm(NCCLComm.new_uid(), 0, 1)
    comm.set_timeout(0.5)
    recording = comm.watch.comm = RecordingAbort(comm.comm)
    release = threading.Event()
    blocked = cp.cuda.Stream(non_blocking=True)
    blocked.launch_host_func(lambda arg: release.wait(120), None)
    event = cp.cuda.Event(disable_timing=True)
    event.record(blocked)
    try:
        with pytest.raises(CollectiveTimeoutError) as info:
            comm.watch.wait(event, "a wait on a blocked stream")
        assert not event.done  # the stream was still held when the wait gave up
    finally:
        release.set()
        blocked.synchronize()
    assert event.done and recording.aborts == 1
    assert "(--collective_timeout 0.5) for a wait on a blocked stream" in str(info.value)
