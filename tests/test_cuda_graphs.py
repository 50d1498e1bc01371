"""CUDA graphs of TEST forwards (pycaffe_lite/cuda_graphs.py) on the simulated device, on every
machine: when a forward is captured and replayed, that a replay gives the eager (and the CPU)
results and leaves the tops current on the device, a new input shape, the switches, and a
capture that fails. The simulated capture forbids every host crossing (a real capture cannot
make one), so the zoo nets here also show that their layers are device-only at TEST.
tests/test_gpu_cupy.py replays real CUDA graphs on a GPU."""

import logging
import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import backend, cuda_graphs, syncedmem
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.layer import Layer
from pycaffe_lite.registry import register_layer
from pycaffe_lite.testing.simdevice import simulated_device

ZOO = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models", "zoo")

NET = """name: "small"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 12 dim: 12 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1
                            weight_filler { type: "gaussian" std: 0.5 }
                            bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv"
        scale_param { bias_term: true filler { type: "gaussian" }
                      bias_filler { type: "gaussian" } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""


pytestmark = pytest.mark.usefixtures("cuda_graphs_on")


def _net(tmp_path, text=NET, name="net.prototxt"):
    path = tmp_path / name
    path.write_text(text)
    caffe.set_random_seed(3)
    net = caffe.Net(str(path), caffe.TEST)
    for i, layer in enumerate(net.layers):  # BatchNorm statistics that are not trivial
        if layer.type == "BatchNorm":
            layer.blobs[0].data[...] = np.linspace(-0.5, 0.5, layer.blobs[0].count)
            layer.blobs[1].data[...] = np.linspace(0.5, 2.0, layer.blobs[1].count)
            layer.blobs[2].data[...] = 1.0
    return net


def _inputs(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _cpu_outputs(tmp_path, batches, text=NET):
    net = _net(tmp_path, text)
    out = []
    for x in batches:
        net.blobs["data"].reshape(*x.shape)
        net.blobs["data"].data[...] = x
        net.forward_from_to()
        out.append(net.blobs["prob"].data.copy())
    return out


def test_the_second_forward_is_captured_and_later_ones_replay_it(tmp_path):
    batches = [_inputs((2, 3, 12, 12), s) for s in range(4)]
    want = _cpu_outputs(tmp_path, batches)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        net = _net(tmp_path)
        got = []
        for x in batches:
            net.blobs["data"].data[...] = x  # a host write: uploaded before each replay
            net.forward_from_to()
            got.append(net.blobs["prob"].data.copy())  # copied down: the replay wrote it
        # first forward eager (warm-up), second captured and replayed, then replays
        assert (dev.graph_captures, dev.graph_launches) == (1, 3)
        net.forward_from_to()  # the host copy read above is stale again
        assert net.blobs["prob"].data_state == syncedmem.HEAD_AT_GPU
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_a_new_input_shape_warms_up_again_then_captures_again(tmp_path):
    small, big = _inputs((2, 3, 12, 12), 1), _inputs((3, 3, 12, 12), 2)
    want = _cpu_outputs(tmp_path, [small, big, small])
    with simulated_device() as dev:
        backend.set_mode_gpu()
        net = _net(tmp_path)
        got = []
        for x in [small] * 3 + [big] * 3 + [small]:
            net.blobs["data"].reshape(*x.shape)
            net.blobs["data"].data[...] = x
            net.forward_from_to()
            got.append(net.blobs["prob"].data.copy())
        # each shape: eager, capture + replay, replay; then the first shape eager again
        assert (dev.graph_captures, dev.graph_launches) == (2, 4)
    for g, w in zip((got[2], got[5], got[6]), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _saved_weights(tmp_path, seed, name):
    """A .caffemodel of NET's params drawn with ``seed`` (BatchNorm statistics not trivial)."""
    caffe.set_random_seed(seed)
    net = caffe.Net(str(tmp_path / "net.prototxt"), caffe.TEST)
    for layer in net.layers:
        if layer.type == "BatchNorm":
            layer.blobs[0].data[...] = np.linspace(-0.5, 0.5, layer.blobs[0].count) * seed
            layer.blobs[1].data[...] = np.linspace(0.5, 2.0, layer.blobs[1].count)
            layer.blobs[2].data[...] = 1.0
    path = str(tmp_path / name)
    net.save(path)
    return path


def _cpu_prob(tmp_path, weights, x):
    net = caffe.Net(str(tmp_path / "net.prototxt"), weights, caffe.TEST)
    net.blobs["data"].data[...] = x
    net.forward_from_to()
    return net.blobs["prob"].data.copy()


def test_params_written_between_replays_reach_the_graph(tmp_path):
    """Net surgery between replays: the new values go up into the buffers the graph reads
    (the graph is not captured again); the result is the CPU net's with the same surgery."""
    x = _inputs((2, 3, 12, 12), 5)

    def surgery(net):
        net.params["conv"][0].data[...] *= -0.5
        net.params["bn"][0].data[...] += 0.25
        net.params["ip"][1].data[...] = 3.0

    cpu = _net(tmp_path)
    surgery(cpu)
    cpu.blobs["data"].data[...] = x
    cpu.forward_from_to()
    with simulated_device() as dev:
        backend.set_mode_gpu()
        net = _net(tmp_path)
        net.blobs["data"].data[...] = x
        for _ in range(3):  # eager, captured, replayed
            net.forward_from_to()
        before = net.blobs["prob"].data.copy()
        surgery(net)
        net.forward_from_to()
        assert (dev.graph_captures, dev.graph_launches) == (1, 3)
        got = net.blobs["prob"].data.copy()
    assert not np.allclose(got, before)
    np.testing.assert_allclose(got, cpu.blobs["prob"].data, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("how", ["copy_from", "share_with"])
def test_new_weights_in_a_folded_net_are_captured_again(tmp_path, how):
    """A net built with weights runs folded (its folded copies are private): ``copy_from``
    folds again and ``share_with`` replaces the params' storage, so the graph of the old
    copies is dropped: one eager forward, then a new capture, the new weights' results."""
    _net(tmp_path)  # writes net.prototxt
    first, second = (_saved_weights(tmp_path, s, "w%d.caffemodel" % s) for s in (1, 2))
    x = _inputs((2, 3, 12, 12), 6)
    want_first, want_second = _cpu_prob(tmp_path, first, x), _cpu_prob(tmp_path, second, x)
    assert not np.allclose(want_first, want_second)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        net = caffe.Net(str(tmp_path / "net.prototxt"), first, caffe.TEST)
        assert net.folding is not None
        net.blobs["data"].data[...] = x
        for _ in range(3):
            net.forward_from_to()
        np.testing.assert_allclose(net.blobs["prob"].data, want_first, rtol=1e-5, atol=1e-6)
        if how == "copy_from":
            net.copy_from(second)
        else:
            net.share_with(caffe.Net(str(tmp_path / "net.prototxt"), second, caffe.TEST))
        got = []
        for _ in range(3):  # eager, captured again, replayed
            net.forward_from_to()
            got.append(net.blobs["prob"].data.copy())
        assert (dev.graph_captures, dev.graph_launches) == (2, 4)
    for g in got:
        np.testing.assert_allclose(g, want_second, rtol=1e-5, atol=1e-6)


def test_running_sums_a_replayed_test_forward_writes_reach_the_host(tmp_path):
    """BatchNorm without use_global_stats in a TEST net updates its running sums in each
    forward: read from Python after each replay (which, as a real one, runs no Python that
    would mark them current), they are the ones the eager forwards give."""
    text = NET.replace('name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }',
                       'name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" '
                       'batch_norm_param { use_global_stats: false } }')
    assert text != NET
    batches = [_inputs((2, 3, 12, 12), s) for s in range(5)]
    runs = {}
    for graphs in (False, True):
        cuda_graphs.set_enabled(graphs)
        with simulated_device() as dev:
            backend.set_mode_gpu()
            net = _net(tmp_path, text)
            seen = []
            for x in batches:
                net.blobs["data"].data[...] = x
                net.forward_from_to()
                seen.append([b.data.copy() for b in net.params["bn"]] +
                            [net.blobs["prob"].data.copy()])
            runs[graphs] = seen, dev.graph_launches
    assert runs[True][1] == 4 and runs[False][1] == 0
    for eager, replayed in zip(runs[False][0], runs[True][0]):
        for a, b in zip(eager, replayed):
            np.testing.assert_array_equal(b, a)
    assert runs[True][0][-1][2][0] > runs[True][0][1][2][0]  # the sums moved


def test_off_switches_and_the_cases_that_always_run_eagerly(tmp_path):
    with simulated_device() as dev:
        backend.set_mode_gpu()
        net = _net(tmp_path)
        caffe.set_cuda_graph(False)
        for _ in range(3):
            net.forward_from_to()
        assert dev.graph_captures == 0
        caffe.set_cuda_graph(True)
        assert cuda_graphs.why_not(net, 0, len(net.layers) - 2) == "a partial forward"
        net.before_forward(lambda i: None)
        assert cuda_graphs.why_not(net, 0, len(net.layers) - 1) == "the net has hooks"
        (tmp_path / "train").mkdir()
        train = caffe.Net(str(tmp_path / "net.prototxt"), caffe.TRAIN)
        assert cuda_graphs.why_not(train, 0, len(train.layers) - 1) == "a TRAIN net"
        loss = NET + 'layer { name: "l" type: "Accuracy" bottom: "ip" bottom: "lab" top: "a" ' \
            'top: "per_class" }\n'
        loss = loss.replace('top: "data"', 'top: "data" top: "lab"').replace(
            "dim: 12 } }", "dim: 12 } shape { dim: 2 } }")
        acc = _net(tmp_path, loss, "acc.prototxt")
        assert cuda_graphs.why_not(acc, 0, len(acc.layers) - 1) == ""  # device counts only
        hinge = _net(tmp_path, loss.replace('"Accuracy"', '"HingeLoss"').replace(
            ' top: "per_class"', ""), "hinge.prototxt")
        assert cuda_graphs.why_not(hinge, 0, len(hinge.layers) - 1) == (
            "layer 'l' (HingeLoss) is not of a type known to run on the device alone"
            " (cuda_graphs.CAPTURABLE)")
    backend.set_mode_cpu()
    assert cuda_graphs.why_not(net, 0, len(net.layers) - 1) == "CPU mode"


@register_layer("HostPeekForGraphTest")
class HostPeek(Layer):
    """Copies its bottom, reading one value on the host as it goes (a real capture fails
    there)."""

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        self.seen = float(bottom[0].read_data().sum())
        top[0].write_data()[...] = bottom[0].read_data()


def test_a_failed_capture_is_logged_once_and_the_net_runs_eagerly(tmp_path, monkeypatch,
                                                                  caplog):
    monkeypatch.setattr(cuda_graphs, "CAPTURABLE",
                        cuda_graphs.CAPTURABLE | {"HostPeekForGraphTest"})
    text = NET.replace('bottom: "ip" top: "prob"', 'bottom: "peek" top: "prob"').replace(
        'layer { name: "prob"', 'layer { name: "peek" type: "HostPeekForGraphTest" '
        'bottom: "ip" top: "peek" }\nlayer { name: "prob"')
    batches = [_inputs((2, 3, 12, 12), s) for s in range(3)]
    want = _cpu_outputs(tmp_path, batches, text)
    with simulated_device() as dev, caplog.at_level(logging.WARNING, logger="pycaffe_lite"):
        backend.set_mode_gpu()
        net = _net(tmp_path, text)
        got = []
        for x in batches:
            net.blobs["data"].data[...] = x
            net.forward_from_to()
            got.append(net.blobs["prob"].data.copy())
        assert (dev.graph_captures, dev.graph_launches) == (0, 0)
        assert cuda_graphs.why_not(net, 0, len(net.layers) - 1).startswith("its capture failed")
    lines = [r.getMessage() for r in caplog.records if "CUDA graph capture" in r.getMessage()]
    assert len(lines) == 1 and "Net 'small'" in lines[0] and "HostTransferError" in lines[0]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["squeezenet1.1", "googlenet", "resnet50"])
def test_zoo_deploy_nets_capture_without_a_host_crossing(name):
    path = os.path.join(ZOO, name + "_deploy.prototxt")
    caffe.set_random_seed(0)
    cpu = caffe.Net(path, caffe.TEST)
    x = _inputs(cpu.blobs[cpu.inputs[0]].shape, 5)
    cpu.blobs[cpu.inputs[0]].data[...] = x
    cpu.forward_from_to()
    want = cpu.blobs[cpu.outputs[0]].data.copy()
    with simulated_device() as dev:
        backend.set_mode_gpu()
        caffe.set_random_seed(0)
        net = caffe.Net(path, caffe.TEST)
        for src, dst in zip(cpu.layers, net.layers):
            for a, b in zip(src.blobs, dst.blobs):
                b.data[...] = a.data
        net.blobs[net.inputs[0]].data[...] = x
        for _ in range(2):
            net.forward_from_to()
        assert (dev.graph_captures, dev.graph_launches) == (1, 1)
        got = net.blobs[net.outputs[0]].data.copy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


# ---- a TEST net with data layers and losses --------------------------------------------------
SCORED = """name: "scored"
layer { name: "data" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 4 channels: 3 height: 6 width: 6 } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3
                            weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" }
"""


def _scored_run(tmp_path, graphs, labels, per_class=False):
    """(loss, accuracy) of each of 6 forwards of a MemoryData TEST net over 3 batches (and
    the per-class accuracies with ``per_class``), on the simulated device; the device's
    (captures, launches)."""
    path = tmp_path / "scored.prototxt"
    text = SCORED.replace('top: "acc"', 'top: "acc" top: "per_class"') if per_class else SCORED
    path.write_text(text)
    cuda_graphs.set_enabled(graphs)
    images = np.random.default_rng(4).uniform(0, 1, (12, 3, 6, 6)).astype(np.float32)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        caffe.set_random_seed(2)
        net = caffe.Net(str(path), caffe.TEST)
        net.set_input_arrays(images, labels)
        out = []
        for _ in range(6):
            loss = net.forward_from_to()
            out.append((loss, float(net.blobs["acc"].data)))
            if per_class:
                out.append(tuple(net.blobs["per_class"].data))
        return out, (dev.graph_captures, dev.graph_launches)


@pytest.mark.parametrize("per_class", [False, True])
def test_a_test_net_with_data_layers_and_losses_replays_its_forward(tmp_path, per_class):
    """The data layer runs eagerly before each replay (a new batch each time), the loss comes
    back in one read, the accuracy (and each class's) from its tops."""
    labels = (np.arange(12) % 5).astype(np.float32)
    eager, counts = _scored_run(tmp_path, False, labels, per_class)
    got, graph_counts = _scored_run(tmp_path, True, labels, per_class)
    assert counts == (0, 0) and graph_counts == (1, 5)
    assert got == eager
    step = 2 if per_class else 1
    losses = [got[k][0] for k in range(0, 3 * step, step)]
    assert len(set(losses)) == 3  # three batches, three losses
    assert got[:3 * step] == got[3 * step:]


def test_a_bad_label_in_a_replayed_test_forward_raises_the_layers_error(tmp_path):
    labels = (np.arange(12) % 5).astype(np.float32)
    labels[9] = 7.0  # in the third batch (the first replay after the capture's)
    with pytest.raises(CaffeError, match=r"loss.*label value 7 is out of range"):
        _scored_run(tmp_path, True, labels)
