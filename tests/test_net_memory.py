"""Activation diffs of a Solver's train net sharing buffers (pycaffe_lite.net_memory).

Training with shared diffs must equal training without them bit for bit (same float32
arithmetic in the same order, only other storage), on the CPU and on the simulated device;
the plan's bytes are checked against a hand computation; a diff that another blob has
overwritten cannot be read; the switches keep every diff; a reshape plans again; parameter
diffs and data blobs' diffs are never shared.
"""

import logging

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.gpu_cases import CASES, _rng, case_ids, make_sources

import pycaffe_lite as caffe
from pycaffe_lite import backend, cli, net_memory
from pycaffe_lite.blob import Blob
from pycaffe_lite.layers import create_layer
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.syncedmem import SyncedArray
from pycaffe_lite.testing import layer_param
from pycaffe_lite.testing.simdevice import simulated_device

SOLVER = ('type: "SGD" base_lr: 0.05 momentum: 0.9 weight_decay: 0.0005 lr_policy: "fixed" '
          'random_seed: 7 max_iter: 100 display: 0 snapshot_after_train: false')
STEPS = 3


def _input(shape, name="data", label=(4,)):
    dims = " ".join("dim: %d" % d for d in shape)
    text = 'layer { name: "in" type: "Input" top: "%s" top: "label"\n' % name
    text += '  input_param { shape { %s } shape { %s } } }\n' % (
        dims, " ".join("dim: %d" % d for d in label))
    return text


def _conv(name, bottom, n, k=3, pad=1, top=None):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s"\n'
            '  convolution_param { num_output: %d kernel_size: %d pad: %d\n'
            '    weight_filler { type: "xavier" } bias_filler { type: "constant" value: 0.1 } } }\n'
            % (name, bottom, top or name, n, k, pad))


def _bn_chain(name, bottom, top=None):
    top = top or bottom
    return ('layer { name: "bn_%s" type: "BatchNorm" bottom: "%s" top: "%s" }\n'
            'layer { name: "sc_%s" type: "Scale" bottom: "%s" top: "%s"\n'
            '  scale_param { bias_term: true } }\n' % (name, bottom, top, name, top, top))


def _relu(name, blob):
    return 'layer { name: "%s" type: "ReLU" bottom: "%s" top: "%s" }\n' % (name, blob, blob)


def _head(bottom, classes=5):
    return ('layer { name: "gpool" type: "Pooling" bottom: "%s" top: "gpool"\n'
            '  pooling_param { pool: AVE global_pooling: true } }\n'
            'layer { name: "fc" type: "InnerProduct" bottom: "gpool" top: "fc"\n'
            '  inner_product_param { num_output: %d weight_filler { type: "xavier" } } }\n'
            'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label"'
            ' top: "loss" }\n' % (bottom, classes))


LENET = _input((4, 1, 12, 12)) + """
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 6 kernel_size: 2 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  inner_product_param { num_output: 16 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""

# ResNet's blocks: BatchNorm/Scale/ReLU in place (a fused chain), one BatchNorm not in place,
# a shortcut through a Split into an Eltwise sum
RESNET = (_input((4, 3, 8, 8)) + _conv("conv1", "data", 8) + _bn_chain("1", "conv1")
          + _relu("relu1", "conv1")
          + _conv("res_a", "conv1", 8) + _bn_chain("a", "res_a", "res_a_bn")
          + _relu("relu_a", "res_a_bn")
          + _conv("res_b", "res_a_bn", 8, k=1, pad=0) + _bn_chain("b", "res_b")
          + 'layer { name: "sum" type: "Eltwise" bottom: "conv1" bottom: "res_b" top: "sum" }\n'
          + _relu("relu_sum", "sum") + _head("sum"))

# GoogLeNet's inception: four branches into a Concat, LRN and Dropout
GOOGLENET = (_input((4, 3, 8, 8)) + _conv("conv1", "data", 8) + _relu("relu1", "conv1")
             + 'layer { name: "norm1" type: "LRN" bottom: "conv1" top: "norm1"\n'
               '  lrn_param { local_size: 3 alpha: 0.0001 beta: 0.75 } }\n'
             + _conv("b1", "norm1", 4, k=1, pad=0) + _relu("relu_b1", "b1")
             + _conv("b3r", "norm1", 4, k=1, pad=0) + _relu("relu_b3r", "b3r")
             + _conv("b3", "b3r", 6) + _relu("relu_b3", "b3")
             + 'layer { name: "bp" type: "Pooling" bottom: "norm1" top: "bp"\n'
               '  pooling_param { pool: MAX kernel_size: 3 stride: 1 pad: 1 } }\n'
             + _conv("bpp", "bp", 2, k=1, pad=0) + _relu("relu_bpp", "bpp")
             + 'layer { name: "cat" type: "Concat" bottom: "b1" bottom: "b3" bottom: "bpp"'
               ' top: "cat" }\n'
               'layer { name: "drop" type: "Dropout" bottom: "cat" top: "cat"\n'
               '  dropout_param { dropout_ratio: 0.3 } }\n'
             + _head("cat"))

# two losses (one weighted 0.5), Flatten (shares its bottom's diff), Sigmoid and TanH
TWO_LOSSES = (_input((4, 2, 4, 4), label=(4,))
              + 'layer { name: "tin" type: "Input" top: "target"\n'
                '  input_param { shape { dim: 4 dim: 3 } } }\n'
              + _conv("conv1", "data", 3)
              + 'layer { name: "flat" type: "Flatten" bottom: "conv1" top: "flat" }\n'
                'layer { name: "ip1" type: "InnerProduct" bottom: "flat" top: "ip1"\n'
                '  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }\n'
                'layer { name: "sig" type: "Sigmoid" bottom: "ip1" top: "ip1" }\n'
                'layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"\n'
                '  inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }\n'
                'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label"'
                ' top: "loss" }\n'
                'layer { name: "ip3" type: "InnerProduct" bottom: "ip1" top: "ip3"\n'
                '  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }\n'
                'layer { name: "tanh" type: "TanH" bottom: "ip3" top: "ip3" }\n'
                'layer { name: "l2" type: "EuclideanLoss" bottom: "ip3" bottom: "target"'
                ' top: "l2" loss_weight: 0.5 }\n')

NETS = {"lenet": LENET, "resnet": RESNET, "googlenet": GOOGLENET, "two_losses": TWO_LOSSES}


def _batches(net, steps, seed=3):
    """The inputs of each step: uniform data, integer labels, uniform targets."""
    rng = _rng(seed)
    out = []
    for _ in range(steps):
        batch = {}
        for name in net.inputs:
            shape = net.blobs[name].shape
            if name == "label":
                batch[name] = rng.integers(0, 5, shape).astype(np.float32)
            else:
                batch[name] = rng.uniform(-1, 1, shape).astype(np.float32)
        out.append(batch)
    return out


def make_solver(net_text, share, extra=""):
    """A solver of ``net_text`` with sharing on or off (None: as the environment says)."""
    if share is not None:
        net_memory.set_enabled(share)
    try:
        param = caffe_pb2.SolverParameter()
        text_format.Merge(SOLVER + " " + extra, param)
        text_format.Merge(net_text, param.net_param)
        return get_solver(param)
    finally:
        if share is not None:
            net_memory.set_enabled(None)


def train(net_text, share, steps=STEPS, extra=""):
    """Weights, param diffs and losses after ``steps`` steps, and the solver."""
    solver = make_solver(net_text, share, extra)
    losses = []
    for batch in _batches(solver.net, steps):
        for name, value in batch.items():
            solver.net.blobs[name].data[...] = value
        solver.step(1)
        losses.append(solver.smoothed_loss)
    weights = [(p.data.copy(), p.diff.copy()) for p in solver.net.learnable_params]
    return weights, losses, solver


def _assert_same(a, b):
    (wa, la, _), (wb, lb, _) = a, b
    assert la == lb
    assert len(wa) == len(wb)
    for (da, ga), (db, gb) in zip(wa, wb):
        np.testing.assert_array_equal(da, db)
        np.testing.assert_array_equal(ga, gb)


# ---- training equals training without sharing ----------------------------------------------
@pytest.mark.parametrize("name", sorted(NETS))
def test_training_with_shared_diffs_equals_training_without(name):
    shared = train(NETS[name], True)
    plain = train(NETS[name], False)
    _assert_same(shared, plain)
    sharing = net_memory.sharing_of(shared[2].net)
    assert net_memory.sharing_of(plain[2].net) is None
    plan = sharing.plan
    # the sharing is real: fewer buffers than shared groups, and fewer bytes
    assert len(plan.buffer_sizes) < len(plan.groups)
    assert plan.shared_bytes < plan.unshared_bytes
    a = net_memory.memory_report(shared[2].net)
    b = net_memory.memory_report(plain[2].net)
    assert a["diff"] == b["diff"] - plan.unshared_bytes + plan.shared_bytes
    assert a["data"] == b["data"] and a["params"] == b["params"]


@pytest.mark.parametrize("name", ["resnet", "googlenet", "two_losses"])
def test_training_with_shared_diffs_on_the_simulated_device(name):
    with simulated_device():
        backend.set_mode_gpu()
        try:
            shared = train(NETS[name], True)
            plain = train(NETS[name], False)
            report = net_memory.memory_report(shared[2].net, device=True)
            before = net_memory.memory_report(plain[2].net, device=True)
        finally:
            backend.set_mode_cpu()
    _assert_same(shared, plain)
    plan = net_memory.sharing_of(shared[2].net).plan
    assert report["diff"] == before["diff"] - plan.unshared_bytes + plan.shared_bytes
    assert report["diff"] < before["diff"]
    if "Dropout" in NETS[name]:
        return  # the device draws its own random numbers
    # and the device run gives the CPU's weights (same NumPy arithmetic underneath)
    cpu = train(NETS[name], True)
    for (d, _), (c, _) in zip(shared[0], cpu[0]):
        np.testing.assert_allclose(d, c, rtol=1e-5, atol=1e-6)


def test_iter_size_accumulates_the_same_with_shared_diffs():
    _assert_same(train(RESNET, True, extra="iter_size: 2"),
                 train(RESNET, False, extra="iter_size: 2"))


# ---- the plan -------------------------------------------------------------------------------
SMALL = _input((2, 3, 4, 4), label=(2,)) + """
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def _net(text):
    param = caffe_pb2.NetParameter()
    text_format.Merge(text, param)
    param.state.phase = caffe_pb2.TRAIN
    return caffe.Net.from_param(param)


def test_plan_of_a_small_net_equals_the_hand_computation():
    plan = net_memory.make_plan(_net(SMALL))
    # layers: 0 in, 1 conv, 2 relu (in place), 3 pool, 4 ip, 5 loss. Live ranges going down:
    # conv's diff 1..3 (written by pool, rewritten by relu, read by conv), pool's 3..4, ip's
    # 4..5. Sizes: conv 2*4*4*4 = 128, pool 2*4*2*2 = 32, ip 2*10 = 20 floats. Largest
    # first: conv -> buffer 0; pool meets conv (layer 3) -> buffer 1; ip meets pool (layer 4)
    # but not conv -> buffer 0. data and label (inputs, no backward) and loss (its loss
    # weight lives in its diff) keep their own.
    by_name = {g.names[0]: (g.lo, g.hi, g.size, g.buffer) for g in plan.groups}
    assert by_name == {"conv": (1, 3, 128, 0), "pool": (3, 4, 32, 1), "ip": (4, 5, 20, 0)}
    assert plan.buffer_sizes == [128, 32]
    assert plan.shared_bytes == (128 + 32) * 4
    assert plan.unshared_bytes == (128 + 32 + 20) * 4
    assert plan.buffer_of("conv") == plan.buffer_of("ip") == 0
    assert plan.buffer_of("data") is None and plan.buffer_of("loss") is None


def test_a_flatten_top_and_its_bottom_are_one_group():
    plan = net_memory.make_plan(_net(TWO_LOSSES))
    groups = {tuple(g.names) for g in plan.groups}
    assert ("conv1", "flat") in groups
    assert plan.buffer_of("l2") is None and plan.buffer_of("target") is None


def test_a_blob_no_layer_writes_keeps_its_diff():
    # pool's output goes to an Accuracy (no backward) and to the loss through a Split: the
    # Split's top to the Accuracy is never written, and the Split reads it: not shared
    text = SMALL + ('layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label"'
                    ' top: "acc" }\n')
    net = _net(text)
    plan = net_memory.make_plan(net)
    names = {n for g in plan.groups for n in g.names}
    to_acc = [n for n in net.blob_names if n.startswith("ip_") and n.endswith("_split_1")]
    assert to_acc and not names & set(to_acc) and "acc" not in names
    assert {"conv", "pool"} <= names


def test_data_blobs_and_pruned_blobs_never_allocate_a_diff():
    # conv1 learns nothing (lr_mult 0) and has no bottom to feed: its top needs no diff
    text = SMALL.replace('convolution_param', 'param { lr_mult: 0 } param { lr_mult: 0 }\n'
                         '  convolution_param')
    _, _, solver = train(text, True, steps=1)
    net = solver.net
    for name in ("data", "label", "conv"):
        assert net.blobs[name].synced_diff.held_bytes() == (0, 0), name
    assert net_memory.sharing_of(net).plan.buffer_of("conv") is None


def test_param_diffs_are_never_shared():
    _, _, solver = train(RESNET, True, steps=1)
    shared = {id(blob.synced_diff) for blob in solver.net.blobs.values()}
    for p in solver.net.param_blobs:
        assert isinstance(p.synced_diff, SyncedArray)
        assert id(p.synced_diff) not in shared


# ---- reading a reused diff ------------------------------------------------------------------
def test_reading_a_reused_diff_raises_and_the_last_writer_keeps_its_values():
    _, _, shared = train(SMALL, True, steps=2)
    _, _, plain = train(SMALL, False, steps=2)
    # going down, pool's backward wrote conv's diff last into buffer 0 (ip's before it)
    with pytest.raises(caffe.CaffeError) as err:
        shared.net.blobs["ip"].diff
    message = str(err.value)
    assert "'ip'" in message and "'conv'" in message
    assert "PYCAFFE_LITE_SHARE_DIFFS=0" in message and "set_share_diffs(False)" in message
    for read in ("cpu_diff", "read_diff", "write_diff"):
        with pytest.raises(caffe.CaffeError):
            getattr(shared.net.blobs["ip"], read)()
    for name in ("conv", "pool", "loss", "data"):
        np.testing.assert_array_equal(shared.net.blobs[name].diff, plain.net.blobs[name].diff)
    # a new backward pass takes the buffers over again
    shared.net.forward_backward()
    with pytest.raises(caffe.CaffeError):
        shared.net.blobs["ip"].diff


def test_diffs_can_be_read_during_the_backward_pass():
    _, _, solver = train(SMALL, True, steps=1)
    net = solver.net
    seen = {}

    def keep(i):
        rec = net.records[i]
        for blob, bid, down in zip(rec.bottoms, rec.bottom_ids, rec.bottom_need_backward):
            if down:
                seen[net.blob_names[bid]] = blob.diff.copy()

    net.after_backward(keep)
    net.forward_backward()
    _, _, plain = train(SMALL, False, steps=1)
    plain.net.forward_backward()
    assert set(seen) == {"conv", "pool", "ip"}
    for name, value in seen.items():
        np.testing.assert_array_equal(value, plain.net.blobs[name].diff)


def test_a_dead_diff_read_during_the_backward_pass_raises():
    _, _, solver = train(SMALL, True, steps=1)
    net = solver.net
    # after pool's backward (layer 3) conv's diff holds buffer 0: ip's range (4..5) is over
    net.after_backward(lambda i: net.blobs["ip"].diff if i == 2 else None)
    with pytest.raises(caffe.CaffeError, match="the diff of blob 'ip' is not kept"):
        net.forward_backward()


def test_a_partial_backward_never_reads_another_blobs_diff():
    _, _, solver = train(SMALL, True, steps=1)
    net = solver.net
    net.forward()
    # ip's layer reads ip's diff, which this pass (from ip down) never wrote: conv's values
    # fill its buffer since the last full backward
    with pytest.raises(caffe.CaffeError, match="'ip'.*'conv'"):
        net.backward(start="ip")
    # from the loss down every diff is written before it is read
    net.backward(start="loss")
    _, _, plain = train(SMALL, False, steps=1)
    plain.net.forward()
    plain.net.backward(start="loss")
    np.testing.assert_array_equal(net.blobs["conv"].diff, plain.net.blobs["conv"].diff)


# ---- the switches -----------------------------------------------------------------------------
def test_the_environment_variable_and_the_setting_keep_every_diff(monkeypatch):
    monkeypatch.setenv("PYCAFFE_LITE_SHARE_DIFFS", "0")
    assert not net_memory.enabled_by_default()
    _, _, solver = train(SMALL, None, steps=1)
    assert net_memory.sharing_of(solver.net) is None
    assert solver.net.blobs["ip"].diff.shape == (2, 10)
    monkeypatch.setenv("PYCAFFE_LITE_SHARE_DIFFS", "1")
    assert net_memory.enabled_by_default()
    old = caffe.set_share_diffs(False)
    try:
        assert old is True
        _, _, solver = train(SMALL, None, steps=1)
        assert net_memory.sharing_of(solver.net) is None
        solver.net.blobs["ip"].diff
    finally:
        caffe.set_share_diffs(None)


def test_nets_built_by_scripts_and_debug_nets_keep_every_diff():
    net = _net(SMALL)
    assert net_memory.sharing_of(net) is None
    net.forward_backward()
    for name in ("conv", "pool", "ip"):
        assert isinstance(net.blobs[name].synced_diff, SyncedArray)
    _, _, debug = train(SMALL, True, steps=1, extra="debug_info: true")
    assert net_memory.sharing_of(debug.net) is None
    forced = train("force_backward: true\n" + SMALL, True, steps=1)[2]
    assert net_memory.sharing_of(forced.net) is None


def test_detach_gives_every_blob_its_diff_back():
    _, _, solver = train(RESNET, True, steps=1)
    net = solver.net
    net_memory.detach(net)
    assert net_memory.sharing_of(net) is None
    assert "backward_from_to" not in vars(net)
    flat = {id(b.synced_diff) for b in net.blobs.values()}
    assert all(isinstance(b.synced_diff, SyncedArray) for b in net.blobs.values())
    assert len(flat) == len(net.blobs)  # ResNet's blobs share no diff among themselves
    solver.step(1)
    for name in net.blobs:
        net.blobs[name].diff


# ---- reshape ----------------------------------------------------------------------------------
def test_a_reshape_plans_again_and_training_stays_equal():
    def run(share):
        solver = make_solver(SMALL, share)
        net = solver.net
        sizes = []
        for batch_size in (2, 3, 3, 1):
            net.blobs["data"].reshape(batch_size, 3, 4, 4)
            net.blobs["label"].reshape(batch_size)
            rng = _rng(batch_size)
            net.blobs["data"].data[...] = rng.uniform(-1, 1, (batch_size, 3, 4, 4))
            net.blobs["label"].data[...] = rng.integers(0, 5, batch_size)
            solver.step(1)
            sharing = net_memory.sharing_of(net)
            if sharing is not None:
                sizes.append(list(sharing.plan.buffer_sizes))
        return [p.data.copy() for p in net.learnable_params], sizes, net

    shared, sizes, net = run(True)
    plain, _, _ = run(False)
    for a, b in zip(shared, plain):
        np.testing.assert_array_equal(a, b)
    # the plan follows the batch: conv is 64 floats an image, pool 16
    assert sizes == [[128, 32], [192, 48], [192, 48], [64, 16]]
    plan = net_memory.sharing_of(net).plan
    assert plan.shapes == tuple(b.shape for b in net._blobs)


# ---- the layer types trusted to overwrite their bottoms' diffs ------------------------------
@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return make_sources(tmp_path_factory.mktemp("mem_sources"))


def _backward_with_old_diffs(c, fill):
    """Bottom diffs after forward and backward of case ``c`` when they held ``fill`` before."""
    backend.set_random_seed(11)
    layer = create_layer(layer_param(c.text, c.phase), dtype=np.float32)
    bottom = []
    for a in c.bottoms:
        b = Blob(np.shape(a), np.float32)
        b.data[...] = a
        bottom.append(b)
    top = [Blob((), np.float32) for _ in range(c.tops)]
    layer.SetUp(bottom, top)
    if c.prepare is not None:
        c.prepare(layer)
    layer.Forward(bottom, top)
    down = list(c.down) if c.down is not None else [True] * len(bottom)
    top_storage = {id(t.synced_diff) for t in top}
    for b, d in zip(bottom, down):
        if d and id(b.synced_diff) not in top_storage:
            b.diff[...] = fill
    rng = _rng(5)
    for i, t in enumerate(top):
        if not layer.loss(i):
            t.diff[...] = rng.uniform(-1, 1, t.shape)
    layer.Backward(top, down, bottom)
    return [b.diff.copy() for b, d in zip(bottom, down) if d]


_PAIRS = [(c, i) for c, i in zip(CASES, case_ids())
          if c.type in net_memory.OVERWRITING_TYPES and not c.host_io]
OVERWRITING = [c for c, _ in _PAIRS]


@pytest.mark.parametrize("c", OVERWRITING, ids=[i for _, i in _PAIRS])
def test_layers_trusted_to_overwrite_never_read_the_old_bottom_diff(c):
    expected = _backward_with_old_diffs(c, 0.0)
    got = _backward_with_old_diffs(c, np.nan)
    for a, b in zip(expected, got):
        np.testing.assert_array_equal(b, a)


def _conv_text(kind, n, k, stride=1, pad=0, group=1):
    return ('type: "%s" convolution_param { num_output: %d kernel_size: %d stride: %d pad: %d '
            'group: %d weight_filler { type: "gaussian" std: 0.1 } }'
            % (kind, n, k, stride, pad, group))


# the kernel paths chosen by geometry: strided 1x1 (gaps no window covers), Winograd-sized 3x3,
# 7x7 stride 2, depthwise, a strided deconvolution, pooling with gaps and overlaps
GEOMETRIES = [
    (_conv_text("Convolution", 32, 1, stride=2), (2, 32, 28, 28)),
    (_conv_text("Convolution", 64, 3, pad=1), (2, 64, 56, 56)),
    (_conv_text("Convolution", 64, 3, stride=2, pad=1), (2, 64, 28, 28)),
    (_conv_text("Convolution", 16, 7, stride=2, pad=3), (2, 3, 32, 32)),
    (_conv_text("Convolution", 32, 3, stride=2, pad=1, group=32), (2, 32, 20, 20)),
    (_conv_text("Deconvolution", 8, 2, stride=2), (2, 16, 14, 14)),
    ('type: "Pooling" pooling_param { pool: MAX kernel_size: 1 stride: 2 }', (2, 8, 15, 15)),
    ('type: "Pooling" pooling_param { pool: AVE kernel_size: 2 stride: 3 }', (2, 8, 15, 15)),
    ('type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 }', (2, 16, 56, 56)),
    ('type: "InnerProduct" inner_product_param { num_output: 100 '
     'weight_filler { type: "gaussian" std: 0.1 } }', (8, 512, 2, 2)),
]


@pytest.mark.parametrize("text, shape", GEOMETRIES, ids=lambda v: str(v)[:40])
def test_every_kernel_path_overwrites_the_whole_bottom_diff(text, shape):
    def backward(fill):
        backend.set_random_seed(5)
        layer = create_layer(layer_param(text, caffe_pb2.TRAIN), dtype=np.float32)
        bottom, top = Blob(shape, np.float32), Blob((), np.float32)
        bottom.data[...] = _rng(0).uniform(-1, 1, shape)
        layer.SetUp([bottom], [top])
        layer.Forward([bottom], [top])
        bottom.diff[...] = fill
        top.diff[...] = _rng(1).uniform(-1, 1, top.shape)
        layer.Backward([top], [True], [bottom])
        return bottom.diff.copy()

    expected = backward(0.0)
    np.testing.assert_array_equal(backward(np.nan), expected)
    assert np.abs(expected).sum() > 0


def test_every_trusted_type_has_a_case_and_exists():
    caffe.layer_type_list()
    assert set(net_memory.OVERWRITING_TYPES) <= set(caffe.layer_type_list())
    assert {c.type for c in OVERWRITING} == set(net_memory.OVERWRITING_TYPES)


# ---- the time command -------------------------------------------------------------------------
def test_time_reports_the_blob_memory(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.prototxt").write_text(SMALL)
    caplog.set_level(logging.INFO, "pycaffe_lite")
    args = cli.build_parser().parse_args(["time", "--model", "net.prototxt",
                                          "--iterations", "1"])
    assert args.run(args) == 0
    report = args.blob_memory
    # after the passes: data of every blob (inputs 96 + 2, conv 128, pool 32, ip 20, loss 1)
    assert report["data"] == (96 + 2 + 128 + 32 + 20 + 1) * 4
    # diffs: the two shared buffers and the loss's own (inputs never get one)
    assert report["diff"] == (128 + 32 + 1) * 4
    assert report["diff_shared"] == 160 * 4 and report["diff_unshared"] == 180 * 4
    # params: conv 4*3*3*3 + 4, ip 10*16 + 10 (pool is 4*2*2 an image), data and diff
    assert report["params"] == 2 * (108 + 4 + 160 + 10) * 4
    assert "Blob memory: data 0.0 MiB, diffs 0.0 MiB (activation diffs shared: " in caplog.text


# ---- an in-place Scale after BatchNorm keeps no copy of its input ----------------------------
def _train_linked(linked, steps=STEPS):
    solver = make_solver(RESNET, True)
    scales = [layer for layer in solver.net.layers if layer.type == "Scale"]
    assert all(s.input_source is not None for s in scales)
    if not linked:
        for s in scales:
            s.input_source = None
    for batch in _batches(solver.net, steps):
        for name, value in batch.items():
            solver.net.blobs[name].data[...] = value
        solver.step(1)
    return solver


@pytest.mark.parametrize("where", ["cpu_layer_by_layer", "simulated_device"])
def test_a_scale_after_batchnorm_keeps_its_array_and_trains_the_same(where, monkeypatch):
    monkeypatch.setenv("PYCAFFE_LITE_TRAIN_FUSE", "0")
    with simulated_device():
        if where == "simulated_device":
            backend.set_mode_gpu()
        try:
            linked = _train_linked(True)
            plain = _train_linked(False)
            got = [(p.data.copy(), p.diff.copy()) for p in linked.net.learnable_params]
            want = [(p.data.copy(), p.diff.copy()) for p in plain.net.learnable_params]
        finally:
            backend.set_mode_cpu()
    for (a, b), (c, d) in zip(got, want):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)
    layers = linked.net.layer_dict
    for name in ("1", "a", "b"):
        bn, sc = layers["bn_" + name], layers["sc_" + name]
        assert not sc._temp_own and sc._temp.size == bn.x_norm.size
        # the same memory (a simulated device array keeps its values in ``_a``)
        assert np.shares_memory(getattr(sc._temp, "_a", sc._temp),
                                getattr(bn.x_norm, "_a", bn.x_norm))
        assert plain.net.layer_dict["sc_" + name]._temp_own


def test_a_blob_written_between_batchnorm_and_scale_is_copied(monkeypatch):
    monkeypatch.setenv("PYCAFFE_LITE_TRAIN_FUSE", "0")
    solver = make_solver(RESNET, True)
    net = solver.net
    for name, value in _batches(net, 1)[0].items():
        net.blobs[name].data[...] = value
    net.forward(end="bn_1")
    net.blobs["conv1"].data[...] *= 2  # the Scale's input is no longer BatchNorm's x_norm
    net.forward(start="sc_1")
    scale = net.layer_dict["sc_1"]
    assert scale._temp_own
    np.testing.assert_array_equal(scale._temp, 2 * net.layer_dict["bn_1"].x_norm.reshape(
        scale._temp.shape))


# ---- a real GPU (skipped elsewhere, with the reason) ---------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["resnet", "two_losses"])
def test_training_with_shared_diffs_on_a_gpu(name):
    backend.set_mode_gpu()
    try:
        shared = train(NETS[name], True)
        plain = train(NETS[name], False)
        a = net_memory.memory_report(shared[2].net, device=True)
        b = net_memory.memory_report(plain[2].net, device=True)
    finally:
        backend.set_mode_cpu()
    assert shared[1] == pytest.approx(plain[1], rel=1e-5)
    # cuDNN's filter gradients may sum in another order from run to run
    for (da, ga), (db, gb) in zip(shared[0], plain[0]):
        np.testing.assert_allclose(da, db, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ga, gb, rtol=1e-4, atol=1e-6)
    plan = net_memory.sharing_of(shared[2].net).plan
    assert a["diff"] == b["diff"] - plan.unshared_bytes + plan.shared_bytes < b["diff"]


@pytest.mark.gpu
def test_time_on_a_gpu_reports_the_device_bytes(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.prototxt").write_text(SMALL)
    caplog.set_level(logging.INFO, "pycaffe_lite")
    args = cli.build_parser().parse_args(["time", "--model", "net.prototxt",
                                          "--iterations", "1", "--gpu", "0"])
    try:
        assert args.run(args) == 0
    finally:
        backend.set_mode_cpu()
    assert args.blob_memory["diff"] == (128 + 32 + 1) * 4
    assert "Blob memory: " in caplog.text and "GPU memory: " in caplog.text
    # the peak of a timed pass: at least every blob's bytes (all live through the pass), at
    # most what the pools held
    memory = args.gpu_memory
    blobs = sum(args.blob_memory[k] for k in ("data", "diff", "params"))
    assert blobs <= memory["peak_used_bytes"] <= memory["peak_held_bytes"]
    assert "GPU memory of a timed pass: " in caplog.text


def test_a_dropped_solver_net_is_collected_without_the_cycle_collector():
    import gc
    import weakref

    solver = make_solver(SMALL, True)
    ref = weakref.ref(solver.net)
    assert net_memory.sharing_of(solver.net) is not None
    gc.disable()
    try:
        solver.close()
        del solver
        assert ref() is None
    finally:
        gc.enable()
