"""GPU mode on the simulated device: CUDA graph replays against layer-by-layer runs and CPU
mode, where a replay once silently computed something else than the eager iteration.

The reference of each training run is the same run in CPU mode (NumPy's float32 arithmetic,
the update's steps on the host) or the same run with graphs off; the simulated capture is as
strict as a real one (:mod:`pycaffe_lite.testing.simgraph`).
"""

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.gpu_cases import LENET, _labels, _u
from test_gpu_simulated import _fake_cupy

from pycaffe_lite import backend, cuda_graphs
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing import simgraph
from pycaffe_lite.testing.simdevice import simulated_device


# ---- the simulated replay itself ---------------------------------------------------------------
def test_a_replay_whose_python_takes_another_branch_fails():
    """A real replay runs the captured operations: a Python branch on a host value that
    changed since the capture is not taken again. The simulated replay, which runs the
    Python again, refuses to follow it (it used to compute the new branch silently)."""
    with simulated_device() as dev:
        a = dev.ones(3, np.float32)
        out = dev.zeros(3, np.float32)
        mode = ["L2"]

        def work():
            out[...] = dev.sign(a) if mode[0] == "L1" else a * 2

        graph = dev.capture_graph(work)
        graph.launch()
        np.testing.assert_array_equal(out.get(), [2, 2, 2])
        mode[0] = "L1"
        with pytest.raises(simgraph.GraphReplayError,
                           match=r"device operation sign at .*test_gpu_sim_sweep.py.* where the "
                                 r"capture ran multiply"):
            graph.launch()
        mode[0] = "L2"
        graph.launch()  # the captured branch again: fine
        np.testing.assert_array_equal(out.get(), [2, 2, 2])


def test_a_replay_that_skips_an_operation_fails():
    with simulated_device() as dev:
        a = dev.ones(3, np.float32)
        steps = [2]

        def work():
            for _ in range(steps[0]):
                a.__iadd__(1)

        graph = dev.capture_graph(work)
        graph.launch()
        steps[0] = 1
        with pytest.raises(simgraph.GraphReplayError, match="asked for 1 device operations, "
                                                             "the capture ran 2"):
            graph.launch()


# ---- solver settings a script changes between steps --------------------------------------------
IMAGES = _u((64, 1, 12, 12), 21, 0.0, 1.0)
LABELS = _labels(64, 10, 22)
STEPS = 6


def _solver(rule):
    param = caffe_pb2.SolverParameter()
    text_format.Merge('base_lr: 0.05 lr_policy: "fixed" type: "%s" momentum: 0.9 '
                      'weight_decay: 0.001 random_seed: 5 display: 0 max_iter: 100 '
                      'snapshot_after_train: false' % rule, param)
    text_format.Merge(LENET, param.net_param)  # a MemoryData layer: a new batch each pass
    solver = get_solver(param)
    solver.net.set_input_arrays(IMAGES, LABELS)
    return solver


def _train(rule, change, gpu, graphs=True):
    """The weights after STEPS steps, ``change(solver.param)`` after the third; in GPU mode
    on a simulated device (graphs on or off) or in CPU mode."""
    def steps():
        solver = _solver(rule)
        for k in range(STEPS):
            if k == 3:
                change(solver.param)
            solver.step(1)
        return [p.data.copy() for p in solver.net.learnable_params]

    if not gpu:
        return steps()
    old = cuda_graphs.set_enabled(graphs)
    try:
        with simulated_device():
            backend.set_mode_gpu()
            try:
                return steps()
            finally:
                backend.set_mode_cpu()
    finally:
        cuda_graphs.set_enabled(old)


CHANGES = {
    "weight_decay": lambda p: setattr(p, "weight_decay", 0.2),
    "regularization_type": lambda p: setattr(p, "regularization_type", "L1"),
    "iter_size": lambda p: setattr(p, "iter_size", 2),
}


@pytest.mark.parametrize("rule", ["SGD", "Adam"])
@pytest.mark.parametrize("what", sorted(CHANGES))
def test_a_solver_setting_changed_between_steps_reaches_the_device_update(what, rule):
    """CPU mode reads weight_decay, regularization_type and iter_size at every iteration; the
    device update kept the decays it first built its tables with, and a captured iteration
    kept its passes and its kind of decay."""
    cpu = _train(rule, CHANGES[what], gpu=False)
    unchanged = _train(rule, lambda p: None, gpu=False)
    assert any(not np.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(cpu, unchanged))
    eager = _train(rule, CHANGES[what], gpu=True, graphs=False)
    replayed = _train(rule, CHANGES[what], gpu=True, graphs=True)
    for a, b, c in zip(cpu, eager, replayed):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(c, b)


# ---- device selection ---------------------------------------------------------------------------
def test_a_device_that_does_not_exist_leaves_the_current_one_in_use(monkeypatch):
    """In GPU mode, set_device(n) for a device the machine lacks raised, but kept n as the
    device: set_mode_gpu() then failed again and device_id() named the missing device."""
    mod, used = _fake_cupy(count=2)  # a stand-in CuPy with two devices
    monkeypatch.setattr(backend, "_import_cupy", lambda: mod)
    old = backend.use_device_module(None)
    try:
        backend.set_device(1)
        backend.set_mode_gpu()
        with pytest.raises(backend.GPUUnavailableError, match="GPU 2 does not exist: this "
                                                              "machine has 2 CUDA device"):
            backend.set_device(2)
        assert backend.device_id() == 1 and backend.mode() == backend.GPU
        backend.set_mode_gpu()  # device 1 again
        assert used == [1, 1]
    finally:
        backend.set_mode_cpu()
        backend.set_device(0)
        backend.use_device_module(old)


# ---- resuming a GPU run ------------------------------------------------------------------------
DROPOUT = LENET.replace('layer { name: "ip2"', 'layer { name: "drop" type: "Dropout" '
                        'bottom: "ip1" top: "ip1" }\nlayer { name: "ip2"')


def _dropout_solver(tmp_path):
    param = caffe_pb2.SolverParameter()
    text_format.Merge('base_lr: 0.05 lr_policy: "fixed" type: "SGD" momentum: 0.9 '
                      'random_seed: 5 display: 0 max_iter: 100 snapshot_after_train: false '
                      'snapshot_prefix: "%s"' % (tmp_path / "snap"), param)
    text_format.Merge(DROPOUT, param.net_param)
    solver = get_solver(param)
    solver.net.set_input_arrays(IMAGES, LABELS)
    return solver


@pytest.mark.parametrize("graphs", [True, False], ids=["captured", "layer_by_layer"])
def test_a_resumed_gpu_run_with_dropout_continues_the_uninterrupted_one(graphs, tmp_path):
    """Dropout draws its masks on the device from a counter stream; a snapshot kept only the
    host generator's state, so a run restored in a new process drew the masks of its first
    iterations again and drifted from the uninterrupted run (CPU mode resumed exactly)."""
    def in_gpu_mode(work):  # a fresh simulated device: a new process's
        old = cuda_graphs.set_enabled(graphs)
        try:
            with simulated_device():
                backend.set_mode_gpu()
                try:
                    return work()
                finally:
                    backend.set_mode_cpu()
        finally:
            cuda_graphs.set_enabled(old)

    def uninterrupted():
        solver = _dropout_solver(tmp_path)
        solver.step(6)
        return [p.data.copy() for p in solver.net.learnable_params]

    def first_half():
        solver = _dropout_solver(tmp_path)
        solver.step(3)
        solver.snapshot()

    def resumed():
        solver = _dropout_solver(tmp_path)
        solver.restore(str(tmp_path / "snap_iter_3.solverstate"))
        solver.step(3)
        return [p.data.copy() for p in solver.net.learnable_params]

    want = in_gpu_mode(uninterrupted)
    in_gpu_mode(first_half)
    got = in_gpu_mode(resumed)
    for a, b in zip(want, got):
        np.testing.assert_array_equal(b, a)


def test_ranks_restoring_one_gpu_snapshot_draw_masks_of_their_own(tmp_path):
    """Every rank of a data-parallel run restores rank 0's snapshot, device stream included;
    the ranks other than 0 then derive a stream of their own (as they do the host's), so
    their dropout masks are not rank 0's."""
    from pycaffe_lite import ranks
    from pycaffe_lite.parallel import derive_rank_random_state

    with simulated_device():
        backend.set_mode_gpu()
        try:
            solver = _dropout_solver(tmp_path)
            solver.step(2)
            solver.snapshot()
            masks = []
            ranks.set_solver_count(3)
            for rank in (0, 1, 2):
                ranks.set_solver_rank(rank)
                solver.restore(str(tmp_path / "snap_iter_2.solverstate"))
                derive_rank_random_state(solver)
                solver.net.forward_from_to()
                masks.append(backend.to_host(solver.net.layer_dict["drop"].factor) != 0)
        finally:
            ranks.reset()
            backend.set_mode_cpu()
    assert not np.array_equal(masks[0], masks[1])
    assert not np.array_equal(masks[1], masks[2])
    assert not np.array_equal(masks[0], masks[2])
