"""NVCaffe's float16 nets (pycaffe_lite/net_types.py, solvers/mixed.py) in CUDA graphs: the
captured training iteration (solvers/train_graph.py) and the captured TEST forward
(cuda_graphs.py), on the simulated device (NumPy underneath: float16 arrays are real float16).

The simulated capture forbids every host crossing and checks at each replay that every host
scalar handed to a device operation is the captured one, so a replayed run computes what a
real graph would. The reference is the same run with graphs off: layer by layer, the update
through ``mixed.apply_update`` (the masters swapped into the learnable params, the host's
NumPy steps of the solver); a replayed run must equal it bit for bit: weights, float32
masters, history, losses. The float16 weights are also checked to be their masters rounded,
and the TEST forward against the float32 net on the CPU within float16 rounding.
"""

import contextlib

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.graph_runs import run_steps
from helpers.gpu_cases import LENET, _labels, _u
from test_train_graphs import RESNET_BLOCK

import pycaffe_lite as caffe
from pycaffe_lite import backend, cuda_graphs, net_types
from pycaffe_lite.errors import NumericError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing.simdevice import simulated_device

F16 = np.float16
ITERS = 7
HALF = 'default_forward_type: FLOAT16 default_backward_type: FLOAT16\n'
# one float16 layer between float32 ones: converted copies on both sides of it
MIXED_LAYER = 'convolution_param { num_output: 6 kernel_size: 2'
NETS = {  # the text, an image's shape
    "float16": (HALF + LENET, (1, 12, 12)),
    "mixed": (LENET.replace(MIXED_LAYER, 'forward_type: FLOAT16 backward_type: FLOAT16\n'
                            '        ' + MIXED_LAYER), (1, 12, 12)),
    # BatchNorm in place on float16 blobs, its statistics float32 params
    "resnet_block": (HALF + RESNET_BLOCK, (3, 8, 8)),
}
RULES = {
    "SGD": 'type: "SGD" momentum: 0.9 weight_decay: 0.0005',
    "Adam": 'type: "Adam" momentum: 0.9 momentum2: 0.999 delta: 1e-4 weight_decay: 0.001',
    "Nesterov": 'type: "Nesterov" momentum: 0.9 weight_decay: 0.001',
}


@pytest.fixture(autouse=True)
def cpu_afterwards():
    yield
    backend.set_mode_cpu()


def make_solver(net, rule="SGD", extra="", net_extra="", images=None):
    param = caffe_pb2.SolverParameter()
    # "step" with stepsize 2: the rate changes while the graph replays
    text_format.Merge('base_lr: 0.05 lr_policy: "step" gamma: 0.5 stepsize: 2 ' + RULES[rule]
                      + ' random_seed: 5 max_iter: 100 display: 0 snapshot_after_train: false '
                      + extra, param)
    text, shape = NETS[net]
    text_format.Merge(net_extra + text, param.net_param)
    solver = get_solver(param)
    images = _u((32,) + shape, 11, 0.0, 1.0) if images is None else images
    solver.net.set_input_arrays(images, _labels(len(images), 10, 12))
    return solver


def state_of(solver):
    """The float16 (or float32) weights, the float32 masters and the history (host copies)."""
    masters = net_types.of(solver.net).masters or {}
    return [p.data.copy() for p in solver.net.learnable_params] + \
        [masters[k].data.copy() for k in sorted(masters)] + \
        [backend.to_host(h).copy() for h in solver.history]


def run(net, rule, graphs, iters=ITERS, before=None, **kwargs):
    """``(state after iters steps, losses, device, solver)`` in GPU mode on a simulated
    device, with CUDA graphs on or off."""
    return run_steps(lambda: make_solver(net, rule, **kwargs), state_of, graphs, iters, before)


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert x.dtype == y.dtype
        np.testing.assert_array_equal(x, y)


def assert_halves_are_the_masters_rounded(solver):
    types = net_types.of(solver.net)
    halves = types.halves(solver.net)
    assert halves
    for k, _, _ in halves:
        half = solver.net.learnable_params[k].data
        assert half.dtype == F16
        np.testing.assert_array_equal(half, types.masters[k].data.astype(F16))


@pytest.mark.parametrize("net, rule, scale", [
    ("float16", "SGD", 1), ("float16", "Adam", 64), ("mixed", "SGD", 8),
    ("mixed", "Nesterov", 1), ("resnet_block", "SGD", 32)])
def test_a_replayed_float16_training_run_equals_the_layer_by_layer_one(net, rule, scale):
    net_extra = "global_grad_scale: %s\n" % scale
    eager, eager_losses, dev0, solver0 = run(net, rule, False, net_extra=net_extra)
    got, losses, dev, solver = run(net, rule, True, net_extra=net_extra)
    assert (dev0.graph_captures, dev0.graph_launches) == (0, 0)
    assert solver.why_not_at_end == ""
    assert dev.graph_captures == 1  # the first iteration warms up, the second is captured
    assert dev.graph_launches == ITERS - 1
    assert solver.train_graph.replays == ITERS - 1
    assert_same(got, eager)
    assert losses == eager_losses
    assert all(np.isfinite(losses))
    assert_halves_are_the_masters_rounded(solver)
    # it trained: the masters hold values finer than float16 (updates summed in float32),
    # and the weights moved from their initial values
    masters = net_types.of(solver.net).masters
    assert masters and any(not np.array_equal(m.data, m.data.astype(F16).astype(np.float32))
                           for m in masters.values())
    first = make_solver_weights(net, net_extra)
    assert any(not np.array_equal(a, b) for a, b in zip(first, got))
    if net == "mixed":  # one float16 layer's params, the others' float32
        dtypes = [p.dtype for p in solver.net.learnable_params]
        assert dtypes.count(F16) == 2 and dtypes.count(np.float32) == 6


def make_solver_weights(net, net_extra):
    with simulated_device():
        backend.set_mode_gpu()
        try:
            return [p.data.copy() for p in make_solver(net, net_extra=net_extra)
                    .net.learnable_params]
        finally:
            backend.set_mode_cpu()


def test_iter_size_replays_the_float16_update_graph():
    """iter_size 2: the passes and the update (on the masters) are three graphs."""
    extra, net_extra = "iter_size: 2", "global_grad_scale: 16\n"
    eager, eager_losses, _, _ = run("float16", "SGD", False, iters=4, extra=extra,
                                    net_extra=net_extra)
    got, losses, dev, solver = run("float16", "SGD", True, iters=4, extra=extra,
                                   net_extra=net_extra)
    assert dev.graph_captures == 3
    assert dev.graph_launches == 3 * 3
    assert_same(got, eager)
    assert losses == eager_losses
    assert_halves_are_the_masters_rounded(solver)


def test_display_iterations_and_net_surgery_between_replays():
    """A display iteration (layer by layer, mixed.apply_update) between replays, and a
    float16 weight written from Python: the master takes it before the next launch."""
    def surgery(solver):
        solver.step(3)
        w = solver.net.params["ip2"][0]
        w.data[...] *= F16(0.5)
        solver.net.params["conv1"][1].data[...] = 0.25

    kwargs = dict(extra="display: 4", net_extra="global_grad_scale: 8\n", before=surgery)
    eager, _, _, _ = run("float16", "SGD", False, **kwargs)
    got, _, dev, solver = run("float16", "SGD", True, **kwargs)
    assert dev.graph_captures == 1
    # iterations 0, 4 and 8 display, 1 warms up, 2 is captured: 3, 5, 6, 7, 9 replay
    assert dev.graph_launches == 6
    assert_same(got, eager)
    assert_halves_are_the_masters_rounded(solver)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the infinite inputs, on purpose
@pytest.mark.parametrize("iter_size", [1, 2])
def test_a_non_finite_loss_in_a_replayed_iteration_leaves_halves_and_masters(iter_size):
    images = _u((32 * iter_size, 1, 12, 12), 11, 0.0, 1.0)
    # batch 3 (iteration 3, replayed) or batch 7 (iteration 3's second pass)
    images[8 * (4 * iter_size - 1):8 * 4 * iter_size] = np.inf
    old = cuda_graphs.set_enabled(True)
    try:
        with simulated_device():
            backend.set_mode_gpu()
            solver = make_solver("float16", images=images, extra="iter_size: %d" % iter_size,
                                 net_extra="global_grad_scale: 4\n")
            solver.step(3)
            assert solver.train_graph.replays == 2
            before = state_of(solver)
            assert len(before) == 3 * 8  # halves, masters, history
            with pytest.raises(NumericError, match="Iteration 3"):
                solver.step(1)
            assert_same(state_of(solver), before)
    finally:
        cuda_graphs.set_enabled(old)


@pytest.mark.parametrize("iter_size", [1, 2])
def test_an_adaptive_scale_is_computed_inside_the_replayed_iteration(iter_size):
    """global_grad_scale_adaptive: the next scale is computed on the device, in the graph;
    the replays read the scale each iteration left (as layer by layer)."""
    net_extra = "global_grad_scale: 2\nglobal_grad_scale_adaptive: true\n"
    extra = "iter_size: %d" % iter_size

    def build():
        return make_solver("float16", extra=extra, net_extra=net_extra)

    def with_scale(solver):
        return state_of(solver) + [np.array(net_types.of(solver.net).current_scale())]

    scales = []

    def record_scales(solver):  # a callback: this (reference) run is layer by layer
        types = net_types.of(solver.net)
        solver.add_callback(lambda: scales.append(types.current_scale()), lambda: None)

    eager, eager_losses, dev0, _ = run_steps(build, with_scale, False, ITERS, record_scales)
    got, losses, dev, solver = run_steps(build, with_scale, True, ITERS)
    assert dev0.graph_captures == 0 and solver.why_not_at_end == ""
    assert dev.graph_captures == (1 if iter_size == 1 else 3)
    assert solver.train_graph.replays == ITERS - 1
    # the scale moved every iteration: a graph holding one scale would differ from here on
    assert scales[0] == 2 and len(set(scales)) == ITERS
    assert_same(got, eager)
    assert losses == eager_losses
    assert got[-1] != 2
    assert_halves_are_the_masters_rounded(solver)


def test_hooks_of_ones_own_keep_a_float16_net_layer_by_layer():
    seen = []
    _, _, dev, solver = run("float16", "SGD", True, iters=3,
                            before=lambda s: s.net.after_forward(seen.append))
    assert (dev.graph_captures, solver.why_not_at_end) == (0, "the net has hooks")
    assert len(seen) == 3 * len(solver.net.layers)
    net = solver.net
    assert net_types.user_hooks(net)
    net._hooks["after_forward"].clear()  # the net's own conversions stay: no hooks of one's own
    assert not net_types.user_hooks(net) and any(net._hooks.values())


# ---- the TEST forward ------------------------------------------------------------------------
DEPLOY = HALF + LENET.replace(
    '''layer { name: "data" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 8 channels: 1 height: 12 width: 12 } }''',
    '''layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 8 dim: 1 dim: 12 dim: 12 } } }''').replace(
    '''layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }''',
    '''layer { name: "prob" type: "Softmax" bottom: "ip2" top: "prob" }''')


def _test_outputs(tmp_path, batches, graphs, weights=None, device=True):
    """The TEST net's ``prob`` for each batch, its weights, the device and the net; with
    ``weights``, the float32 net on the CPU with these weights. ``device``: on the simulated
    device (else on the current device module)."""
    path = tmp_path / "deploy.prototxt"
    path.write_text(DEPLOY)
    old = cuda_graphs.set_enabled(graphs)
    try:
        with (simulated_device() if device else contextlib.nullcontext()) as dev:
            if weights is None:
                backend.set_mode_gpu()
            caffe.set_random_seed(3)
            net = caffe.Net(str(path), caffe.TEST)
            for p, w in zip(net.learnable_params, weights or ()):
                p.data[...] = w
            out = []
            for x in batches:
                net.blobs["data"].data[...] = x
                net.forward()
                out.append(net.blobs["prob"].data.copy())
            return out, [p.data.copy() for p in net.learnable_params], dev, net
    finally:
        cuda_graphs.set_enabled(old)
        backend.set_mode_cpu()


def test_a_float16_test_net_replays_its_forward_as_the_eager_one(tmp_path):
    batches = [_u((8, 1, 12, 12), 30 + s, 0.0, 1.0) for s in range(4)]
    eager, _, dev0, _ = _test_outputs(tmp_path, batches, False)
    got, weights, dev, net = _test_outputs(tmp_path, batches, True)
    assert (dev0.graph_captures, dev0.graph_launches) == (0, 0)
    assert (dev.graph_captures, dev.graph_launches) == (1, 3)
    assert net._cuda_graphs.replays == 3
    assert net.blobs["conv1"].dtype == F16 and net.blobs["prob"].dtype == np.float32
    assert net_types.of(net).copies()  # the conversions are in the graph
    for a, b in zip(got, eager):
        np.testing.assert_array_equal(a, b)
    assert not np.array_equal(got[0], got[1])  # each replay read its own batch
    # the same weights in float32 on the CPU: within float16 rounding
    assert all(w.dtype == F16 for w in weights)
    cpu, _, _, _ = _test_outputs(tmp_path, batches, False, [w.astype(np.float32)
                                                            for w in weights])
    for a, b in zip(got, cpu):
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-3)


# ---- on a real GPU ---------------------------------------------------------------------------
@pytest.mark.gpu
def test_a_replayed_float16_training_run_on_a_gpu_follows_the_eager_one(cupy_device):
    """CUDA graphs on CuPy: the same kernels on the same buffers (cuDNN's filter gradient may
    sum in another order from one call to the next: float16's rounding apart)."""
    runs = {}
    for graphs in (False, True):
        old = cuda_graphs.set_enabled(graphs)
        try:
            backend.set_mode_gpu()
            solver = make_solver("float16", "SGD", net_extra="global_grad_scale: 64\n")
            solver.step(ITERS)
            runs[graphs] = state_of(solver), solver.train_graph
        finally:
            cuda_graphs.set_enabled(old)
            backend.set_mode_cpu()
    (eager, _), (got, graph) = runs[False], runs[True]
    assert graph.captures == 1 and graph.replays == ITERS - 1
    assert len(got) == len(eager) == 3 * 8
    for a, b in zip(got, eager):
        np.testing.assert_allclose(a.astype(np.float32), b.astype(np.float32), rtol=1e-2,
                                   atol=1e-3)
    assert_halves_are_the_masters_rounded(solver)


@pytest.mark.gpu
def test_a_float16_test_net_on_a_gpu_replays_its_forward_exactly(cupy_device, tmp_path):
    batches = [_u((8, 1, 12, 12), 40 + s, 0.0, 1.0) for s in range(4)]
    eager, _, _, _ = _test_outputs(tmp_path, batches, False, device=False)
    got, _, _, net = _test_outputs(tmp_path, batches, True, device=False)
    assert net._cuda_graphs.replays == 3
    for a, b in zip(got, eager):
        np.testing.assert_array_equal(a, b)
