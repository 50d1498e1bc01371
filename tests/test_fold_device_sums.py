"""A folded TEST net's Eltwise SUMs in GPU mode (net_fold.DeviceSum): the weighted sum and the
ReLU in place on its top, if one follows, in one pass (ops.train_fused.sum_forward); in CPU
mode what ran before (the blocked steps or the layers).

On the simulated device: the sums' tops against the same arithmetic done here in NumPy on the
blobs the net computed (bit for bit), the net's output against the CPU's, the Eltwise and ReLU
layers' own forwards never called, a CUDA graph captured and replayed, and a forward that
starts at the ReLU (inside the pair) running the layers on their own.

The CPU's channel-blocked steps (net_blocked) take an Eltwise's ReLU, or a residual Eltwise
into a convolution's store (``keep_intermediates=False``); where a step runs its layer's own
forward instead (GPU mode), the layers it took must run theirs: every blob of the net in GPU
mode against the CPU's, with and without the one-pass sums; and every blob of the zoo's nets
loaded with weights (folded) in GPU mode against the CPU's, on the simulated device and on a
GPU.
"""

import contextlib

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import backend, net_fold
from pycaffe_lite.layers.common.eltwise_layer import EltwiseLayer
from pycaffe_lite.layers.neuron.relu_layer import ReLULayer
from pycaffe_lite.ops import train_fused
from pycaffe_lite.testing.simdevice import simulated_device


def _block(name, bottom, top, relu):
    text = ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" '
            'convolution_param { num_output: 4 kernel_size: 3 pad: 1 '
            'weight_filler { type: "gaussian" std: 0.4 } '
            'bias_filler { type: "gaussian" std: 0.3 } } }\n'
            'layer { name: "bn_%s" type: "BatchNorm" bottom: "%s" top: "%s" }\n'
            'layer { name: "sc_%s" type: "Scale" bottom: "%s" top: "%s" '
            'scale_param { bias_term: true filler { type: "gaussian" } '
            'bias_filler { type: "gaussian" } } }\n'
            % (name, bottom, top, name, top, top, name, top, top))
    if relu:
        text += 'layer { name: "relu_%s" type: "ReLU" bottom: "%s" top: "%s" }\n' % (
            name, top, top)
    return text


NET = ('name: "sums"\n'
       'layer { name: "data" type: "Input" top: "data" '
       'input_param { shape { dim: 2 dim: 4 dim: 6 dim: 5 } } }\n'
       + _block("a", "data", "a", True) + _block("b", "a", "b", False)
       + 'layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "sum" }\n'
       'layer { name: "relu_sum" type: "ReLU" bottom: "sum" top: "sum" }\n'
       + _block("c", "sum", "c", False)
       + 'layer { name: "mix" type: "Eltwise" bottom: "sum" bottom: "c" top: "mix" '
         'eltwise_param { coeff: 0.5 coeff: -1.5 } }\n'
       'layer { name: "ip" type: "InnerProduct" bottom: "mix" top: "ip" '
       'inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.2 } } }\n'
       'layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }\n')


pytestmark = pytest.mark.usefixtures("cuda_graphs_on")


@pytest.fixture
def files(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(NET)
    caffe.set_random_seed(4)
    net = caffe.Net(str(path), caffe.TEST)
    for layer in net.layers:
        if layer.type == "BatchNorm":
            layer.blobs[0].data[...] = np.linspace(-0.5, 0.5, 4)
            layer.blobs[1].data[...] = np.linspace(0.5, 2.0, 4)
            layer.blobs[2].data[...] = 1.0
    weights = str(tmp_path / "net.caffemodel")
    net.save(weights)
    x = np.random.default_rng(6).uniform(-1, 1, (2, 4, 6, 5)).astype(np.float32)
    return str(path), weights, x


def _counting(monkeypatch):
    calls = {"sum_forward": 0, "Eltwise": 0, "ReLU": 0}
    real_sum, real_elt, real_relu = (train_fused.sum_forward, EltwiseLayer.forward,
                                     ReLULayer.forward)

    def sum_forward(*args):
        calls["sum_forward"] += 1
        return real_sum(*args)

    def elt(self, bottom, top):
        calls["Eltwise"] += 1
        return real_elt(self, bottom, top)

    def relu(self, bottom, top):
        calls["ReLU"] += 1
        return real_relu(self, bottom, top)

    monkeypatch.setattr(train_fused, "sum_forward", sum_forward)
    monkeypatch.setattr(EltwiseLayer, "forward", elt)
    monkeypatch.setattr(ReLULayer, "forward", relu)
    return calls


def _run(files, passes=1, keep=True):
    path, weights, x = files
    net = caffe.Net(path, weights, caffe.TEST, keep_intermediates=keep)
    assert net.folding is not None
    for _ in range(passes):
        net.blobs["data"].data[...] = x
        net.forward_from_to()
    return net


def test_in_gpu_mode_each_sum_is_one_pass(files, monkeypatch):
    cpu = _run(files).blobs["prob"].data.copy()
    calls = _counting(monkeypatch)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        net = _run(files, passes=3)  # eager; captured and launched; launched
        assert (dev.graph_captures, dev.graph_launches) == (1, 2)
        blobs = {name: net.blobs[name].data.copy() for name in ("a", "b", "sum", "c", "mix",
                                                                "prob")}
    # the two sums at the eager forward, the capture and each launch (the simulated device
    # replays by running the captured code again); no Eltwise or ReLU layer ran on its own
    # (relu_a is folded into its convolution)
    assert calls == {"sum_forward": 2 * 4, "Eltwise": 0, "ReLU": 0}
    np.testing.assert_array_equal(blobs["sum"], np.maximum(blobs["a"] + blobs["b"], 0))
    mix = np.float32(0.5) * blobs["sum"]
    mix += -1.5 * blobs["c"]
    np.testing.assert_array_equal(blobs["mix"], mix)
    np.testing.assert_allclose(blobs["prob"], cpu, rtol=1e-5, atol=1e-6)


def test_in_cpu_mode_the_layers_or_the_blocked_steps_run(files, monkeypatch):
    calls = _counting(monkeypatch)
    net = _run(files)
    assert calls["sum_forward"] == 0
    blobs = {name: net.blobs[name].data for name in ("a", "b", "sum")}
    np.testing.assert_allclose(blobs["sum"], np.maximum(blobs["a"] + blobs["b"], 0),
                               rtol=1e-6, atol=1e-6)


def test_a_forward_that_starts_at_the_relu_runs_the_layers(files):
    with simulated_device():
        backend.set_mode_gpu()
        net = _run(files)
        values = np.linspace(-1, 1, net.blobs["sum"].count, dtype=np.float32)
        net.blobs["sum"].data[...] = values.reshape(net.blobs["sum"].shape)
        net.forward(start="relu_sum", end="relu_sum")
        got = net.blobs["sum"].data.copy()
    np.testing.assert_array_equal(got, np.maximum(values, 0).reshape(got.shape))


def _blobs(net):
    return {name: blob.data.copy() for name, blob in net.blobs.items()}


@pytest.mark.parametrize("keep", [True, False], ids=["keep_intermediates", "lean"])
@pytest.mark.parametrize("device_sums", [True, False], ids=["device_sums", "layers"])
def test_every_blob_in_gpu_mode_equals_the_cpus(files, monkeypatch, keep, device_sums):
    cpu_net = _run(files, keep=keep)
    if keep:  # the CPU's blocked steps took the first sum's ReLU
        assert [cpu_net.layer_names[p.absorbed[0]] for p in cpu_net.folding.blocked.pairs] \
            == ["relu_sum"]
    else:  # ... and the first sum (and its ReLU) into convolution b's store: b's top is
        # not computed
        pairs = cpu_net.folding.blocked.pairs
        assert [(cpu_net.layer_names[p.producer], [cpu_net.layer_names[i] for i in p.absorbed])
                for p in pairs] == [("b", ["bn_b", "sc_b", "sum", "relu_sum"])]
        assert "b" not in cpu_net.blobs
    cpu = _blobs(cpu_net)
    if not device_sums:  # the blocked steps' own fallbacks in GPU mode
        monkeypatch.setattr(net_fold, "find_sums", lambda net: [])
    with simulated_device():
        backend.set_mode_gpu()
        gpu = _blobs(_run(files, keep=keep))
    assert gpu.keys() == cpu.keys()
    assert gpu["sum"].min() == 0  # the ReLU ran
    for name in cpu:
        np.testing.assert_allclose(gpu[name], cpu[name], rtol=1e-5, atol=1e-5, err_msg=name)


# on the simulated device (every machine): the nets with residual sums, concatenations,
# depthwise convolutions; on a GPU the plain stacks too (their weights take 240 to 528 MB)
ZOO_NETS = ["googlenet", "mobilenet", "resnet50", "squeezenet1.1", "v1_small"]
GPU_ZOO_NETS = ZOO_NETS + ["alexnet", "caffenet", "vgg16"]


def _zoo_weights(folder, name):
    """(deploy, a weights file, an input) of a zoo net: its fillers' weights (random seed 2)
    with BatchNorm statistics drawn from seed 3, and the input drawn after them."""
    import os
    deploy = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "models", "zoo", name + "_deploy.prototxt")
    caffe.set_random_seed(2)
    net = caffe.Net(deploy, caffe.TEST)
    rng = np.random.default_rng(3)
    for layer in net.layers:
        if layer.type == "BatchNorm":
            c = layer.blobs[0].count
            layer.blobs[0].data[...] = rng.normal(0, 0.1, c)
            layer.blobs[1].data[...] = rng.uniform(0.5, 1.5, c)
            layer.blobs[2].data[...] = 1.0
    weights = str(folder / (name + ".caffemodel"))
    net.save(weights)
    os.chmod(weights, 0o444)  # shared by the module's tests: read only
    x = rng.uniform(-1, 1, net.blobs[net.inputs[0]].shape).astype(np.float32)
    x.flags.writeable = False
    return deploy, weights, x


@pytest.fixture(scope="module")
def zoo_weights(tmp_path_factory):
    """``get(name)``: :func:`_zoo_weights` of a zoo net, made once for the module's tests
    (both ``keep`` settings read the same file)."""
    made = {}

    def get(name):
        if name not in made:
            made[name] = _zoo_weights(tmp_path_factory.mktemp("zoo_weights"), name)
        return made[name]
    return get


def _zoo_cpu_and_device(zoo_weights, name, keep, device):
    """Every blob of a zoo net loaded as pycaffe scripts load a model, ``Net(deploy, weights,
    TEST)`` (folded), on the CPU and in GPU mode (three forwards: eager, captured, replayed)
    inside ``device()``; ``zoo_weights`` is the fixture's ``get``."""
    deploy, weights, x = zoo_weights(name)
    results = []
    for mode in ("cpu", "gpu"):
        with device() if mode == "gpu" else contextlib.nullcontext():
            if mode == "gpu":
                backend.set_mode_gpu()
            folded = caffe.Net(deploy, weights, caffe.TEST, keep_intermediates=keep)
            assert folded.folding is not None
            folded.blobs[folded.inputs[0]].data[...] = x
            for _ in range(3 if mode == "gpu" else 1):
                folded.forward_from_to()
            results.append(_blobs(folded))
            backend.set_mode_cpu()
    cpu, gpu = results
    assert gpu.keys() == cpu.keys()
    for blob in cpu:
        scale = max(float(np.abs(cpu[blob]).max()), 1e-6)
        np.testing.assert_allclose(gpu[blob], cpu[blob], rtol=1e-4, atol=1e-4 * scale,
                                   err_msg=blob)


@pytest.mark.slow
@pytest.mark.parametrize("keep", [True, False], ids=["keep_intermediates", "lean"])
@pytest.mark.parametrize("name", ZOO_NETS)
def test_a_folded_zoo_net_on_the_simulated_device_gives_the_cpus_blobs(zoo_weights, name, keep):
    _zoo_cpu_and_device(zoo_weights, name, keep, simulated_device)


@pytest.mark.gpu
@pytest.mark.parametrize("keep", [True, False], ids=["keep_intermediates", "lean"])
@pytest.mark.parametrize("name", GPU_ZOO_NETS)
def test_a_folded_zoo_net_on_a_gpu_gives_the_cpus_blobs(zoo_weights, cupy_device, name, keep):
    _zoo_cpu_and_device(zoo_weights, name, keep, contextlib.nullcontext)
