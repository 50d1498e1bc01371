"""Training iterations captured into a CUDA graph and replayed (solvers/train_graph.py), on the
simulated device: every machine runs these.

The simulated capture (pycaffe_lite/testing/simgraph.py) is as strict as a real one where it
matters: no host crossing while capturing or replaying, the device memory put back after the
capture (a real capture runs nothing), and every host scalar handed to a device operation
checked at each replay against its captured value (a real replay uses the captured one). A
training run with graphs must then give, bit for bit, the weights and solver state of the
same run layer by layer: both run the same NumPy arithmetic underneath.
"""

import threading

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.graph_runs import run_steps
from helpers.gpu_cases import LENET, _labels, _u

from pycaffe_lite import backend
from pycaffe_lite.errors import CaffeError, NumericError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.syncedmem import SyncedArray
from pycaffe_lite.testing import simgraph
from pycaffe_lite.testing.simdevice import HostTransferError, simulated_device

RESNET_BLOCK = """
name: "resnet_block"
layer { name: "data" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 4 channels: 3 height: 8 width: 8 } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
          weight_filler { type: "msra" } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1"
        scale_param { bias_term: true } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
          weight_filler { type: "msra" } } }
layer { name: "bn2" type: "BatchNorm" bottom: "conv2" top: "conv2" }
layer { name: "scale2" type: "Scale" bottom: "conv2" top: "conv2"
        scale_param { bias_term: true } }
layer { name: "sum" type: "Eltwise" bottom: "conv1" bottom: "conv2" top: "sum" }
layer { name: "relu2" type: "ReLU" bottom: "sum" top: "sum" }
layer { name: "pool" type: "Pooling" bottom: "sum" top: "pool"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""

INCEPTION = """
name: "concat_lrn"
layer { name: "data" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 4 channels: 2 height: 8 width: 8 } }
layer { name: "a" type: "Convolution" bottom: "data" top: "a"
        convolution_param { num_output: 3 kernel_size: 1 weight_filler { type: "xavier" } } }
layer { name: "b" type: "Convolution" bottom: "data" top: "b"
        convolution_param { num_output: 2 kernel_size: 3 pad: 1
          weight_filler { type: "xavier" } } }
layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "cat" }
layer { name: "norm" type: "LRN" bottom: "cat" top: "norm" lrn_param { local_size: 3 } }
layer { name: "tanh" type: "TanH" bottom: "norm" top: "norm" }
layer { name: "pool" type: "Pooling" bottom: "norm" top: "pool"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
layer { name: "l2" type: "EuclideanLoss" bottom: "fc" bottom: "fc" top: "l2"
        loss_weight: 0.5 }
"""

NETS = {"lenet": (LENET, (1, 12, 12), 8), "resnet_block": (RESNET_BLOCK, (3, 8, 8), 4),
        "inception": (INCEPTION, (2, 8, 8), 4)}

RULES = {
    "SGD": 'type: "SGD" momentum: 0.9 weight_decay: 0.0005',
    "Nesterov": 'type: "Nesterov" momentum: 0.9 weight_decay: 0.001',
    "AdaGrad": 'type: "AdaGrad" delta: 1e-6 weight_decay: 0.0005',
    "RMSProp": 'type: "RMSProp" rms_decay: 0.95 delta: 1e-6',
    "AdaDelta": 'type: "AdaDelta" momentum: 0.95 delta: 1e-6 base_lr: 1.0',
    "Adam": 'type: "Adam" momentum: 0.9 momentum2: 0.999 delta: 1e-8 '
            'regularization_type: "L1" weight_decay: 0.001',
}
ITERS = 7


def make_solver(net, rule, tmp_path, extra="", data=None):
    text, shape, batch = NETS[net]
    param = caffe_pb2.SolverParameter()
    # "step" with stepsize 2: the rate changes while the graph replays
    text_format.Merge('base_lr: 0.05 lr_policy: "step" gamma: 0.5 stepsize: 2 ' + RULES[rule]
                      + ' random_seed: 5 max_iter: 100 display: 0 snapshot_after_train: false '
                      'snapshot_prefix: "%s" %s' % (tmp_path / "snap", extra), param)
    text_format.Merge(text, param.net_param)
    solver = get_solver(param)
    n = 4 * batch if data is None else len(data)
    images = _u((n,) + shape, 11, 0.0, 1.0) if data is None else data
    if "MemoryData" in text:
        solver.net.set_input_arrays(images, _labels(n, 10, 12))
    return solver


def state_of(solver):
    return [p.data.copy() for p in solver.net.learnable_params] + \
        [backend.to_host(h).copy() for h in solver.history]


def run(net, rule, tmp_path, graphs, iters=ITERS, extra="", before=None):
    """``(weights and history after iters steps, losses, device counters)`` in GPU mode on a
    simulated device, with CUDA graphs on or off."""
    return run_steps(lambda: make_solver(net, rule, tmp_path, extra), state_of, graphs, iters,
                     before)


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("net", sorted(NETS))
def test_a_replayed_training_run_equals_the_layer_by_layer_one(net, tmp_path):
    eager, eager_losses, dev0, _ = run(net, "SGD", tmp_path, graphs=False)
    replayed, losses, dev, solver = run(net, "SGD", tmp_path, graphs=True)
    assert (dev0.graph_captures, dev0.graph_launches) == (0, 0)
    assert dev.graph_captures == 1  # the first iteration warms up, the second is captured
    assert dev.graph_launches == ITERS - 1
    assert solver.train_graph.replays == ITERS - 1
    assert_same(replayed, eager)
    assert losses == eager_losses


@pytest.mark.parametrize("rule", sorted(RULES))
def test_every_rule_replays_with_this_iterations_rates(rule, tmp_path):
    eager, _, _, _ = run("lenet", rule, tmp_path, graphs=False)
    replayed, _, dev, solver = run("lenet", rule, tmp_path, graphs=True)
    assert dev.graph_launches == ITERS - 1
    assert solver.lr == pytest.approx(solver.param.base_lr * 0.5 ** ((ITERS - 1) // 2))
    assert_same(replayed, eager)


def test_the_device_update_matches_the_cpu_solver(tmp_path):
    """The update's device arithmetic (table of rates, one pass per param) against the CPU
    solver's NumPy steps, which compute the same formulas in another order."""
    cpu = make_solver("lenet", "Nesterov", tmp_path)
    cpu.step(ITERS)
    expected = state_of(cpu)
    got, _, _, _ = run("lenet", "Nesterov", tmp_path, graphs=True)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_gradient_clipping_trains_layer_by_layer(tmp_path):
    extra = "clip_gradients: 1.0"
    eager, _, _, _ = run("lenet", "SGD", tmp_path, graphs=False, extra=extra, iters=4)
    got, _, dev, solver = run("lenet", "SGD", tmp_path, graphs=True, extra=extra, iters=4)
    assert dev.graph_captures == 0
    assert solver.why_not_at_end == "gradient clipping decides on the host"
    assert_same(got, eager)


@pytest.mark.parametrize("rule", ["SGD", "Adam"])
def test_iter_size_replays_a_graph_per_pass_and_one_for_the_update(rule, tmp_path):
    """iter_size 3: the first pass (diffs cleared), the next passes (each after its data
    layers), the update: three graphs, captured once, launched 1 + 2 + 1 times an
    iteration."""
    extra = "iter_size: 3"
    eager, eager_losses, _, _ = run("lenet", rule, tmp_path, graphs=False, extra=extra,
                                    iters=4)
    got, losses, dev, solver = run("lenet", rule, tmp_path, graphs=True, extra=extra, iters=4)
    assert dev.graph_captures == 3
    assert dev.graph_launches == 3 * 4
    assert solver.train_graph.replays == 3
    assert_same(got, eager)
    assert losses == eager_losses


def test_callbacks_keep_training_layer_by_layer(tmp_path):
    _, _, dev, solver = run("lenet", "SGD", tmp_path, graphs=True, iters=3,
                            before=lambda s: s.add_callback(lambda: None, lambda: None))
    assert dev.graph_captures == 0 and solver.why_not_at_end == "the solver has callbacks"


def test_dropout_draws_a_new_mask_at_each_replay(tmp_path):
    """Dropout's mask comes from the device's counter stream, whose position lives in device
    memory: each replay draws the numbers the layer-by-layer iteration draws."""
    text = LENET.replace('layer { name: "ip2"', 'layer { name: "drop" type: "Dropout" '
                         'bottom: "ip1" top: "ip1" }\nlayer { name: "ip2"')
    NETS["dropout"] = (text, (1, 12, 12), 8)
    masks = []
    try:
        eager, _, _, _ = run("dropout", "SGD", tmp_path, graphs=False)
        got, _, dev, _ = run("dropout", "SGD", tmp_path, graphs=True)
        with simulated_device():
            backend.set_mode_gpu()
            try:
                solver = make_solver("dropout", "SGD", tmp_path)
                drop = solver.net.layer_dict["drop"]
                for _ in range(4):
                    solver.step(1)
                    masks.append(backend.to_host(drop.factor) != 0)
            finally:
                backend.set_mode_cpu()
    finally:
        del NETS["dropout"]
    assert dev.graph_launches == ITERS - 1
    assert_same(got, eager)
    assert all(not np.array_equal(masks[i], masks[i + 1]) for i in range(3))
    assert 0.3 < np.mean(masks) < 0.7  # dropout_ratio 0.5


def test_display_iterations_run_layer_by_layer_between_replays(tmp_path):
    eager, _, _, _ = run("lenet", "SGD", tmp_path, graphs=False, extra="display: 3")
    got, _, dev, _ = run("lenet", "SGD", tmp_path, graphs=True, extra="display: 3")
    # iterations 0, 3 and 6 display (layer by layer), 1 warms up, 2 is captured
    assert dev.graph_captures == 1
    assert dev.graph_launches == ITERS - 4
    assert_same(got, eager)


def test_a_host_write_between_iterations_reaches_the_replay(tmp_path):
    """Net surgery between steps: the graph reads the weights from the device, so a value
    written on the host goes up before the next launch."""
    def surgery(solver):
        solver.step(3)
        w = solver.net.params["ip2"][0]
        w.data[...] *= 0.5
        solver.net.params["conv1"][1].data[...] = 0.25

    eager, _, _, _ = run("lenet", "SGD", tmp_path, graphs=False, before=surgery)
    got, _, dev, _ = run("lenet", "SGD", tmp_path, graphs=True, before=surgery)
    assert dev.graph_launches == 3 + ITERS - 1
    assert_same(got, eager)


def test_a_restored_state_replays_as_layer_by_layer(tmp_path):
    def snapshot_and_restore(solver):
        solver.step(3)
        solver.snapshot()
        solver.step(2)
        solver.restore(str(tmp_path / "snap_iter_3.solverstate"))

    eager, _, _, _ = run("lenet", "Adam", tmp_path, graphs=False, before=snapshot_and_restore)
    got, _, dev, solver = run("lenet", "Adam", tmp_path, graphs=True,
                              before=snapshot_and_restore)
    assert solver.iter == 3 + ITERS
    assert_same(got, eager)


def test_moved_buffers_are_captured_again(tmp_path):
    """Steps in CPU mode move the solver's history to the host and back: the graph holding
    the old device arrays is not replayed; the next iteration warms up, the one after is
    captured again."""
    def cpu_steps(solver):
        solver.step(3)
        backend.set_mode_cpu()
        solver.step(1)
        backend.set_mode_gpu()

    eager, _, _, _ = run("lenet", "SGD", tmp_path, graphs=False, before=cpu_steps)
    got, _, dev, solver = run("lenet", "SGD", tmp_path, graphs=True, before=cpu_steps)
    assert dev.graph_captures == 2
    assert dev.graph_launches == 2 + ITERS - 1
    assert_same(got, eager)


def test_a_bad_label_in_a_replayed_iteration_raises_and_leaves_the_weights(tmp_path):
    with simulated_device():
        backend.set_mode_gpu()
        try:
            solver = make_solver("lenet", "SGD", tmp_path)
            labels = _labels(32, 10, 12)
            labels[20] = 10  # batch 2 (iteration 2, replayed) holds class 10 of 10
            solver.net.set_input_arrays(_u((32, 1, 12, 12), 11, 0.0, 1.0), labels)
            solver.step(2)
            before = state_of(solver)
            with pytest.raises(CaffeError, match=r"loss.*label value 10 is out of range"):
                solver.step(1)
            assert solver.train_graph.replays == 2  # the capture's launch, then this one
            assert_same(state_of(solver), before)
        finally:
            backend.set_mode_cpu()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the infinite inputs, on purpose
@pytest.mark.parametrize("iter_size", [1, 2])
def test_a_non_finite_loss_in_a_replayed_iteration_stops_before_its_update(iter_size,
                                                                           tmp_path):
    images = _u((32 * iter_size, 1, 12, 12), 11, 0.0, 1.0)
    # batch 3 (iteration 3, replayed) or batch 7 (iteration 3's second pass)
    images[8 * (4 * iter_size - 1):8 * 4 * iter_size] = np.inf
    with simulated_device():
        backend.set_mode_gpu()
        try:
            solver = make_solver("lenet", "SGD", tmp_path, data=images,
                                 extra="iter_size: %d" % iter_size)
            solver.step(3)
            assert solver.train_graph.replays == 2
            before = state_of(solver)
            with pytest.raises(NumericError, match="Iteration 3"):
                solver.step(1)
            assert_same(state_of(solver), before)
        finally:
            backend.set_mode_cpu()


# ---- the simulated capture itself -----------------------------------------------------------
def test_a_simulated_capture_runs_nothing_and_a_launch_runs_it():
    with simulated_device() as dev:
        a = dev.zeros(3, np.float32)
        graph = dev.capture_graph(lambda: a.__iadd__(1))
        np.testing.assert_array_equal(backend.to_host(a), [0, 0, 0])
        graph.launch()
        graph.launch()
        np.testing.assert_array_equal(backend.to_host(a), [2, 2, 2])


def test_a_host_scalar_that_changes_after_the_capture_fails_the_replay():
    with simulated_device() as dev:
        a = dev.zeros(3, np.float32)
        rate = [0.5]
        graph = dev.capture_graph(lambda: a.__iadd__(np.float32(rate[0])))
        graph.launch()
        rate[0] = 0.25  # a real replay would still add 0.5
        with pytest.raises(simgraph.GraphReplayError, match=r"0\.25.* was np.float32\(0\.5\)"):
            graph.launch()
        table = dev.zeros((), np.float32)  # the way that works: the value in device memory
        graph = dev.capture_graph(lambda: a.__iadd__(table))
        table[...] = 3  # outside the graph (a copy before the launch)
        graph.launch()
        np.testing.assert_array_equal(backend.to_host(a), [3.5, 3.5, 3.5])


def _meanwhile(work):
    """``(wait, thread)``: ``wait()``, called inside a capture or launch, lets ``thread`` (a
    stand-in for a data layer's loading thread) run ``work()`` and waits until it has."""
    go, done = threading.Event(), threading.Event()

    def run_work():
        go.wait()
        work()
        done.set()

    def wait():
        go.set()
        assert done.wait(60)
    return wait, threading.Thread(target=run_work)


def test_another_threads_upload_during_a_capture_is_not_undone():
    """A real capture runs nothing, but a loading thread's copy into device memory made
    meanwhile is made: the simulation puts back only what the capturing thread did."""
    with simulated_device() as dev:
        a = dev.zeros(3, np.float32)
        batch = dev.zeros(3, np.float32)
        wait, loader = _meanwhile(lambda: batch.set(np.full(3, 5, np.float32)))
        loader.start()
        dev.capture_graph(lambda: (a.__iadd__(1), wait()))
        loader.join()
        np.testing.assert_array_equal(backend.to_host(a), [0, 0, 0])
        np.testing.assert_array_equal(backend.to_host(batch), [5, 5, 5])


def test_another_threads_host_write_during_a_launch_keeps_its_bookkeeping():
    """A replay runs no Python: a loading thread that writes a batch's host side while the
    graph runs leaves that batch marked host-newer, and its upload after the launch copies it
    (the simulation once put the batch's old "synced" mark back, the upload copied nothing and
    the next iteration trained on the previous batch)."""
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            batch = SyncedArray(3)
            batch.mutable_cpu()[...] = 1
            batch.push_to_device()
            a = dev.zeros(3, np.float32)
            during_launch = []
            wait, loader = _meanwhile(lambda: batch.mutable_cpu().__setitem__(Ellipsis, 7))
            graph = dev.capture_graph(
                lambda: (a.__iadd__(1), during_launch and during_launch[0]()))
            during_launch.append(wait)
            loader.start()
            graph.launch()
            loader.join()
            batch.push_to_device()  # the loading thread's upload
            np.testing.assert_array_equal(backend.to_host(batch.gpu()), [7, 7, 7])
            np.testing.assert_array_equal(backend.to_host(a), [1, 1, 1])
        finally:
            backend.set_mode_cpu()


def test_a_capture_that_reads_the_host_fails():
    with simulated_device() as dev:
        a = dev.ones(3, np.float32)
        with pytest.raises(HostTransferError, match="scalar_sync"):
            dev.capture_graph(lambda: float(a.sum()))


INPUT_FED = LENET.replace(
    '''layer { name: "data" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 8 channels: 1 height: 12 width: 12 } }''',
    '''layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 8 dim: 1 dim: 12 dim: 12 } shape { dim: 8 } } }''')


def test_a_script_that_feeds_each_batch_from_python_replays_with_it(tmp_path):
    """pycaffe's way: write the Input blobs from NumPy before each step; each value goes up
    into the buffer the graph reads."""
    assert INPUT_FED != LENET
    NETS["input_fed"] = (INPUT_FED, (1, 12, 12), 8)
    images, labels = _u((5, 8, 1, 12, 12), 21, 0.0, 1.0), _labels(40, 10, 22).reshape(5, 8)

    def feed_and_step(solver):
        for k in range(5):
            solver.net.blobs["data"].data[...] = images[k]
            solver.net.blobs["label"].data[...] = labels[k]
            solver.step(1)

    try:
        eager, _, _, _ = run("input_fed", "SGD", tmp_path, graphs=False, iters=0,
                             before=feed_and_step)
        got, _, dev, _ = run("input_fed", "SGD", tmp_path, graphs=True, iters=0,
                             before=feed_and_step)
    finally:
        del NETS["input_fed"]
    assert (dev.graph_captures, dev.graph_launches) == (1, 4)
    assert_same(got, eager)


def test_a_prefetching_data_layer_feeds_the_replays(tmp_path):
    """An LMDB Data layer (prefetch threads, batches pushed to the device from pinned memory)
    copies each batch into its own buffer, which the graph reads: the replayed run equals the
    layer-by-layer one over more batches than the prefetch queue holds."""
    from helpers.mpi import make_lmdb

    source = make_lmdb(tmp_path / "db", n=40, shape=(1, 6, 6), classes=10, seed=3)
    NETS["lmdb"] = (LENET.replace(
        '''layer { name: "data" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 8 channels: 1 height: 12 width: 12 } }''',
        '''layer { name: "data" type: "Data" top: "data" top: "label"
        data_param { source: "%s" batch_size: 4 backend: LMDB } }''' % source).replace(
        "kernel_size: 3", "kernel_size: 3 pad: 1"), (1, 6, 6), 4)

    try:
        eager, eager_losses, _, s1 = run("lmdb", "SGD", tmp_path, graphs=False, iters=12)
        got, losses, dev, s2 = run("lmdb", "SGD", tmp_path, graphs=True, iters=12)
    finally:
        del NETS["lmdb"]
    for solver in (s1, s2):
        solver.close()  # the prefetch threads and the database
    assert (dev.graph_captures, dev.graph_launches) == (1, 11)
    assert_same(got, eager)
    assert losses == eager_losses
