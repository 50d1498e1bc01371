"""The fused training chains (pycaffe_lite/net_train_fuse.py, ops/train_fused.py) in NVCaffe
float16 nets (pycaffe_lite/net_types.py), on the simulated device (NumPy underneath: float16
arrays are real float16).

A float16 ResNet-style net, and a mixed one (float16 chains, a float32 chain reading a
converted copy of a float16 convolution, Eltwise SUMs with converted bottoms), trained with SGD
and loss scaling: the run with the fused chains equals the run with every layer on its own
(``PYCAFFE_LITE_TRAIN_FUSE=0``) bit for bit (weights, float32 masters, BatchNorm statistics,
every blob's data and diff), since the generic code of ops/train_fused.py computes what the
layers compute one after the other; the fused path really ran (the chains' forwards and
backwards called, BatchNorm's, Scale's and Eltwise's own never). A hook of one's own still
keeps the layers on their own; a chain member reading a converted copy ends the chain. A
replayed CUDA graph of a float16 iteration with the chains fused equals the eager iteration.
Which arrays the half kernels take; and :func:`float32_twin_check`, a float16 net with the
half kernels against the same net in float32 on the CPU, which tests/test_train_fused_sim.py
(the kernels built for the host) and tests/test_gpu_fused.py (a GPU) run.
"""

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.fused_nets import (RESNET_CHAINS, RESNET_SUMS, counting, on_simulated_device,
                                resnet_text, values)
from helpers.graph_runs import run_steps

import pycaffe_lite as caffe
from pycaffe_lite import backend, cuda_graphs, net_train_fuse, net_types
from pycaffe_lite.blob import Blob
from pycaffe_lite.ops.gpu import _util
from pycaffe_lite.ops.gpu import fused as gpu_fused
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver

F16, F32 = np.dtype(np.float16), np.dtype(np.float32)
# float16 storage; cuDNN accumulates the convolutions in float32 (NVCaffe's math types)
HALF = ("default_forward_type: FLOAT16 default_backward_type: FLOAT16 "
        "default_forward_math: FLOAT default_backward_math: FLOAT\n")
SHAPE = (4, 3, 7, 5)


@pytest.fixture(autouse=True)
def cpu_afterwards():
    yield
    backend.set_mode_cpu()


def _typed(text, layer, ftype):
    head = 'layer { name: "%s" type: ' % layer
    assert text.count(head) == 1
    return text.replace(head, 'layer { name: "%s" forward_type: %s backward_type: %s '
                        'forward_math: FLOAT backward_math: FLOAT type: ' % (layer, ftype, ftype))


def mixed_text(global_c2=False):
    """resnet_text in float32 but for the convolutions c1, c2 and the SUM "sum" in float16: the
    chain of c1 is float16 (in place on c1), bn_c2 (not in place) reads a float32 copy of c2,
    "sum" float16 copies of its bottoms (c1 through a float32 Split, c3)."""
    text = resnet_text(global_c2, SHAPE)
    for layer in ("c1", "c2", "sum"):
        text = _typed(text, layer, "FLOAT16")
    return text


NETS = {"float16": lambda global_c2: HALF + resnet_text(global_c2, SHAPE), "mixed": mixed_text}


def make_solver(net, scale=8, global_c2=False):
    param = caffe_pb2.SolverParameter()
    text_format.Merge('base_lr: 0.05 momentum: 0.9 weight_decay: 0.001 lr_policy: "fixed" '
                      'random_seed: 7 max_iter: 100 display: 0 snapshot_after_train: false',
                      param)
    text = NETS[net](global_c2)
    assert ("use_global_stats" in text) == global_c2
    text_format.Merge("global_grad_scale: %s\n" % scale + text, param.net_param)
    solver = get_solver(param)
    if global_c2:  # stored statistics of bn_c2: mean_sum, var_sum over a weight of 2.5
        rng = np.random.default_rng(11)
        stats = solver.net.params["bn_c2"]
        stats[0].data[...] = 2.5 * rng.normal(0, 0.5, 5)
        stats[1].data[...] = 2.5 * rng.uniform(0.5, 2, 5)
        stats[2].data[...] = 2.5
    return solver


def state(solver):
    """Every blob's and param's data and diff, and the float32 masters (host copies)."""
    got = values(solver.net)
    masters = net_types.of(solver.net).masters or {}
    for k in sorted(masters):
        got["master %d" % k] = (masters[k].data.copy(), masters[k].diff.copy())
    return got


def train(monkeypatch, net, fuse, steps=3, **kwargs):
    """``steps`` SGD steps in GPU mode on a simulated device (CUDA graphs off: every pass
    eager), then one more forward and backward with the param diffs cleared: (:func:`state`,
    the net, the layers' own BatchNorm, Scale and Eltwise forwards and backwards that ran in
    that last pass)."""
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1" if fuse else "0")
    monkeypatch.setitem(cuda_graphs._settings, "enabled", False)

    def run(dev):
        solver = make_solver(net, **kwargs)
        solver.step(steps)
        solver.net.clear_param_diffs()
        own = own_calls(monkeypatch, solver.net)
        solver.net.forward_backward()
        return state(solver), solver.net, own
    return on_simulated_device(run)


def own_calls(monkeypatch, net):
    """Count the BatchNorm, Scale and Eltwise layers' own Forward and Backward calls."""
    calls = {}
    for layer in net.layers:
        if layer.type in ("BatchNorm", "Scale", "Eltwise"):
            for method in ("Forward", "Backward"):
                key = "%s %s" % (layer.type, method)
                calls.setdefault(key, 0)

                def wrapped(*args, _real=getattr(layer, method), _key=key):
                    calls[_key] += 1
                    return _real(*args)
                monkeypatch.setattr(layer, method, wrapped)
    return calls


def assert_identical(got, expected):
    assert set(got) == set(expected)
    for name, (data, diff) in expected.items():
        assert got[name][0].dtype == data.dtype, name
        np.testing.assert_array_equal(got[name][0], data, err_msg=name)
        np.testing.assert_array_equal(got[name][1], diff, err_msg=name)


@pytest.mark.parametrize("net,global_c2", [("float16", False), ("float16", True),
                                           ("mixed", False), ("mixed", True)])
def test_fused_training_equals_the_layers_on_their_own(monkeypatch, net, global_c2):
    expected, plain, _ = train(monkeypatch, net, False, global_c2=global_c2)
    assert plain._train_fuse is None
    calls = counting(monkeypatch)
    got, fused, own = train(monkeypatch, net, True, global_c2=global_c2)
    fusion = fused._train_fuse
    assert [[fused.layer_names[i] for i in c.indices] for c in fusion.chains] == RESNET_CHAINS
    assert [[fused.layer_names[i] for i in c.indices] for c in fusion.sums] == RESNET_SUMS
    # the fused path ran: 3 steps and the last pass, 3 chains and 2 sums each; the layers'
    # own forwards and backwards never (in the last pass)
    assert calls == {"bn_forward": 12, "bn_backward": 12, "sum_forward": 8, "sum_backward": 8}
    assert own and not any(own.values())
    assert_identical(got, expected)
    # float16 where asked, BatchNorm's statistics float32
    assert expected["blob c1"][0].dtype == F16 and expected["blob sum"][0].dtype == F16
    assert expected["param bn_c1 0"][0].dtype == F32
    assert expected["param scale_c1 0"][0].dtype == F16
    assert expected["blob c3"][0].dtype == (F16 if net == "float16" else F32)
    # it trained: the statistics moved, the ReLUs cut, gradients reached the first layer
    assert expected["param bn_c1 2"][0][0] > 1
    assert (expected["blob sum"][0] == 0).any() and (expected["blob sum"][0] > 0).any()
    assert np.abs(expected["param c1 0"][1]).max() > 0


def test_the_mixed_net_converts_around_the_fused_chains(monkeypatch):
    """bn_c2 (float32) reads a converted copy of c2 (float16): the copy is written before the
    fused forward and its gradient converted into c2's diff after the fused backward."""
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")

    def run(dev):
        net = make_solver("mixed").net
        types = net_types.of(net)
        (j, src, copy), = types.shadows[net.layer_names.index("bn_c2")]
        assert src is net.blobs["c2"] and src.dtype == F16 and copy.dtype == F32
        assert net._train_fuse.chains[1].bottom is copy
        sums = net.layer_names.index("sum")
        assert [c.dtype for _, _, c in types.shadows[sums]] == [F16, F16]  # (c1 via a Split)
        net.forward_backward()
        return [backend.to_host(a) for a in (src.read_data(), copy.read_data(),
                                              src.read_diff(), copy.read_diff())]

    c2, copy, c2_diff, copy_diff = on_simulated_device(run)
    np.testing.assert_array_equal(copy, c2.astype(F32))
    np.testing.assert_array_equal(c2_diff, copy_diff.astype(F16))
    assert np.abs(c2_diff).max() > 0 and np.abs(c2).max() > 0


def test_a_hook_of_ones_own_keeps_the_layers_on_their_own(monkeypatch):
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")
    calls = counting(monkeypatch)

    def run(dev):
        solver = make_solver("float16")
        net = solver.net
        assert net_train_fuse.forwards(net, 0, len(net.layers) - 1)
        assert not net_types.user_hooks(net) and any(net._hooks.values())
        seen = []
        net.after_forward(seen.append)
        assert net_train_fuse.forwards(net, 0, len(net.layers) - 1) == {}
        assert net_train_fuse.backwards(net, len(net.layers) - 1, 0) == {}
        own = own_calls(monkeypatch, net)
        net.forward_backward()
        return seen, own, len(net.layers)

    seen, own, count = on_simulated_device(run)
    assert seen == list(range(count))
    assert not any(calls.values())
    assert own["BatchNorm Forward"] == 3 and own["Eltwise Backward"] == 2


def test_a_chain_member_reading_a_converted_copy_ends_the_chain(monkeypatch):
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")

    def run(dev):
        net = make_solver("float16").net
        before = net_train_fuse.find_chains(net)
        relu = net.records[net.layer_names.index("relu_c1")]
        relu.bottoms = [Blob(relu.tops[0].shape, np.float32)]  # as a converted copy would be
        return before, net_train_fuse.find_chains(net), net.layer_names

    before, after, names = on_simulated_device(run)
    assert [[names[i] for i in c] for c in before] == RESNET_CHAINS
    assert [[names[i] for i in c] for c in after] == [["bn_c1", "scale_c1"]] + RESNET_CHAINS[1:]


def test_a_replayed_float16_iteration_with_fused_chains_equals_the_eager_one(monkeypatch):
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")
    calls = counting(monkeypatch)
    iters = 5

    def build():
        solver = make_solver("float16", scale=16)
        fusion = solver.net._train_fuse
        assert fusion is not None and len(fusion.chains) == 3
        return solver

    eager, eager_losses, dev0, _ = run_steps(build, state, False, iters)
    eager_calls = dict(calls)
    got, losses, dev, solver = run_steps(build, state, True, iters)
    assert dev0.graph_captures == 0 and dev.graph_captures == 1
    assert solver.train_graph.replays == iters - 1
    # every pass ran the fused chains: eagerly, and in the graphs' run the warm-up, the
    # simulated capture (which runs the work once more, then puts it back) and each simulated
    # replay (which runs it again, checking it does what the capture did)
    assert eager_calls == {"bn_forward": 3 * iters, "bn_backward": 3 * iters,
                           "sum_forward": 2 * iters, "sum_backward": 2 * iters}
    assert calls["bn_forward"] - eager_calls["bn_forward"] == 3 * (iters + 1)
    assert calls["sum_backward"] - eager_calls["sum_backward"] == 2 * (iters + 1)
    assert_identical(got, eager)
    assert losses == eager_losses and all(np.isfinite(losses))


def float32_twin_check(on_device, monkeypatch, net):
    """One forward and backward of the float16 (or mixed) net ``net`` with the fused chains,
    in GPU mode (``on_device(run)``: a GPU, or the simulated device with the kernels built for
    the host), against the same net in float32 on the CPU from the same (float16) weights and
    input: within float16 rounding (the float16 layers on their own are further off: their
    BatchNorm sums in float16, and a convolution's weight gradient through BatchNorm cancels).
    """
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")
    calls = counting(monkeypatch)

    def run(dev=None):
        n = make_solver(net).net
        weights = {k: [backend.to_host(b.read_data()).astype(np.float32) for b in bs]
                   for k, bs in n.params.items()}
        own = own_calls(monkeypatch, n)
        n.forward_backward()
        return weights, values(n), own

    weights, got, own = on_device(run)
    assert calls == {"bn_forward": 3, "bn_backward": 3, "sum_forward": 2, "sum_backward": 2}
    assert not any(own.values())
    param = text_format.Parse(resnet_text(shape=SHAPE), caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    ref = caffe.Net.from_param(param)  # CPU mode: float32 throughout
    for k, blobs in ref.params.items():
        for blob, value in zip(blobs, weights[k]):
            blob.data[...] = value
    ref.blobs["data"].data[...] = got["blob data"][0]
    ref.blobs["label"].data[...] = got["blob label"][0]
    ref.forward(start="c1")
    ref.clear_param_diffs()
    ref.backward()

    def rel(a, b):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        return np.linalg.norm(a - b) / np.linalg.norm(b)

    for name in ("c1", "c2n", "c3", "sum", "sum3", "ip"):
        assert rel(got["blob " + name][0], ref.blobs[name].data) < 3e-3, name
    # the gradients carry the loss scale (global_grad_scale 8)
    for name in ("c1", "c2", "c3", "scale_c1", "scale_c2", "scale_c3", "ip"):
        for k, blob in enumerate(ref.params[name]):
            assert rel(got["param %s %d" % (name, k)][1], 8 * blob.diff) < 5e-3, (name, k)
    for name in ("bn_c1", "bn_c2", "bn_c3"):
        for k, blob in enumerate(ref.params[name]):
            assert rel(got["param %s %d" % (name, k)][0], blob.data) < 3e-3, (name, k)
    assert np.abs(ref.params["c1"][0].diff).max() > 0


def test_which_arrays_the_half_kernels_take():
    """ops/gpu/fused.py's variants: float16 data with float32 per-channel arrays ("half"),
    float32 and float64 throughout; other mixes (and float16 for every other kernel) none."""
    f16, f32, f64 = (np.zeros(3, d) for d in (np.float16, np.float32, np.float64))
    assert _util.storage_and_wide([f16, f16, None], [f32, f32]) == "half"
    assert _util.storage_and_wide([f16]) == "half"
    assert _util.storage_and_wide([f32, f32], [f32]) == "float"
    assert _util.storage_and_wide([f64], [f64]) == "double"
    assert _util.storage_and_wide([f16], [f16]) is None  # float16 statistics: generic code
    assert _util.storage_and_wide([f16, f32], [f32]) is None
    assert _util.storage_and_wide([f32], [f64]) is None
    assert _util.kernel_dtype(f16) is None and _util.kernel_dtype(f16, f32) is None
    assert gpu_fused._MODULE.ctypes == ("float", "double", "half")
