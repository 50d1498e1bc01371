"""Data-parallel training of NVCaffe float16 nets (pycaffe_lite.parallel.reducer with
pycaffe_lite.solvers.mixed), on the simulated device, two ranks as two threads of one process
joined by a communicator that adds their buffers as NCCL does (and, as NCCL's reductions here,
takes float32 and float64 buffers only):

- the float16 gradients are reduced in float32: after one SGD step both ranks hold the same
  weights, and they are the masters' update with the two ranks' float16 gradients averaged by
  hand in float32 (then stored in float16, as the reduced diff is), divided by the loss scale;
- a mixed net (float16 and float32 layers) trains the same way;
- ``bcast()`` gives rank 1 rank 0's float32 master weights, not their float16 rounding.
"""

import threading

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite import backend, net_types
from pycaffe_lite.parallel.reducer import DataParallel
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing.simdevice import simulated_device
from test_float16 import SMALL  # conv, pool, relu, ip (layer 4), softmax loss; float16

F16, F32 = np.float16, np.float32
GUARD_S = 600  # only against a hang: the barrier is passed as soon as both ranks arrive
SCALE, RATE = 8, 0.05



@pytest.fixture(autouse=True)
def cpu_afterwards():
    yield
    backend.set_mode_cpu()


class _Group:
    """What the ranks share: a barrier and a slot per rank."""

    def __init__(self, size):
        self.size = size
        self.barrier = threading.Barrier(size, timeout=GUARD_S)
        self.slots = [None] * size


class ThreadComm:
    """One rank of a :class:`_Group`: in-place sums and broadcasts of device buffers."""

    on_device = True
    name = "threads"

    def __init__(self, group, rank):
        self.group, self.rank, self.size = group, rank, group.size
        self.dtypes = []

    def _check(self, buf):
        self.dtypes.append(np.dtype(buf.dtype))
        assert buf.dtype in (F32, np.float64), "NCCL here adds float32 or float64, not %s" \
            % buf.dtype

    def start_allreduce(self, buf):
        self.allreduce(buf)
        return self

    def allreduce(self, buf):
        self._check(buf)
        g = self.group
        g.slots[self.rank] = buf.copy()
        g.barrier.wait()
        total = g.slots[0]
        for other in g.slots[1:]:
            total = total + other  # rank order: every rank adds the same way
        g.barrier.wait()
        buf[...] = total

    def bcast(self, buf, root=0):
        self._check(buf)
        g = self.group
        if self.rank == root:
            g.slots[root] = buf.copy()
        g.barrier.wait()
        buf[...] = g.slots[root]
        g.barrier.wait()

    def agree(self, code):
        return code

    def test(self):
        return True

    def wait(self):
        pass


def _solver(ip_type, seed):
    sp = caffe_pb2.SolverParameter()
    text_format.Parse(SMALL % {"extra": "global_grad_scale: %d" % SCALE}, sp.net_param)
    if ip_type:  # a mixed net: the inner product in float32 after float16 layers
        sp.net_param.layer[4].forward_type = ip_type
        sp.net_param.layer[4].backward_type = ip_type
    sp.base_lr, sp.lr_policy, sp.max_iter = RATE, "fixed", 10
    sp.random_seed = 7  # the same fillers on both ranks
    solver = get_solver(sp)
    rng = np.random.default_rng(seed)  # each rank its own batch
    solver.net.blobs["data"].data[...] = rng.standard_normal((4, 2, 6, 6))
    solver.net.blobs["label"].data[...] = rng.integers(0, 5, 4)
    return solver


def _host_state(solver):
    """(learnable params' data, float32 weights: a float16 param's master) on the host."""
    params = solver.net.learnable_params
    masters = net_types.of(solver.net).masters or {}
    return ([p.data.copy() for p in params],
            [masters[k].data.copy() if k in masters else p.data.astype(F32)
             for k, p in enumerate(params)])


def _run_ranks(ip_type, attach, size=2):
    """Two solvers joined in threads: ``attach(solver, comm)`` on each rank, then one step.
    Returns per rank (the gradients before the reduction, the weights before the step,
    the state after it, the comm)."""
    group = _Group(size)
    results, errors = [None] * size, []

    def rank_main(rank):
        try:
            solver = _solver(ip_type, seed=rank)
            comm = ThreadComm(group, rank)
            before = {}

            def record():  # runs before the reduction: the rank's own gradients
                params = solver.net.learnable_params
                before["grads"] = [p.diff.copy() for p in params]
                before["weights"] = _host_state(solver)[1]
            solver.add_callback(lambda: None, record)
            attach(solver, comm)
            solver.step(1)
            results[rank] = (before["grads"], before["weights"], _host_state(solver), comm)
        except BaseException as exc:  # the other rank must not wait for this one forever
            errors.append(exc)
            group.barrier.abort()

    with simulated_device():
        backend.set_mode_gpu()
        threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return results


def _data_parallel(solver, comm):
    DataParallel(solver, comm, layer_wise=False).attach()


@pytest.mark.parametrize("ip_type", [None, caffe_pb2.FLOAT], ids=["float16", "mixed"])
def test_float16_gradients_are_averaged_in_float32(ip_type):
    (g0, w0, after0, comm0), (g1, w1, after1, _) = _run_ranks(ip_type, _data_parallel)
    halves = [g.dtype == F16 for g in g0]
    assert halves == ([True] * 4 if not ip_type else [True, True, False, False])
    assert set(comm0.dtypes) == {np.dtype(F32)}
    for k in range(len(g0)):
        np.testing.assert_array_equal(w0[k], w1[k])  # the same start on both ranks
        assert not np.array_equal(g0[k], g1[k])       # each rank its own batch
        # the mean in float32, stored in the diff's own type; then the solver's float32 update
        mean = ((g0[k].astype(F32) + g1[k].astype(F32)) * F32(0.5)).astype(g0[k].dtype)
        expected = w0[k] - (mean.astype(F32) * F32(1.0 / SCALE)) * F32(RATE)
        for data, weights in (after0, after1):
            np.testing.assert_array_equal(weights[k], expected)
            np.testing.assert_array_equal(data[k], expected.astype(data[k].dtype))


def test_bcast_gives_every_rank_rank_0s_float32_master_weights():
    def attach(solver, comm):
        with net_types.master_weights(solver.net) as swapped:
            if comm.rank == 0:  # float32 weights float16 cannot hold (as from a .caffemodel)
                for _, half, master in swapped:
                    data = master.data
                    data += F32(1e-4) * np.sign(data)
        DataParallel(solver, comm, layer_wise=False).bcast()

    (_, w0, _, _), (_, w1, _, _) = _run_ranks(None, attach)
    assert any(not np.array_equal(w, w.astype(F16).astype(F32)) for w in w0)
    for a, b in zip(w0, w1):
        np.testing.assert_array_equal(a, b)
