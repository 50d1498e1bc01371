"""Convolution -> ReLU in training nets (net_train_fuse.ConvChain): the ReLU in place on a
convolution's top right after it runs in the convolution's output pass.

References: the same net with ``PYCAFFE_LITE_TRAIN_FUSE=0`` (every layer on its own), trained
with SGD on the CPU (bit for bit: the same bias-and-clip pass computes both) and on the
simulated device (GPU mode, CUDA graphs captured and replayed); and a float64 convolution
computed here for the first fused layer's output.
"""

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import backend, net_train_fuse
from pycaffe_lite.layers.neuron.relu_layer import ReLULayer
from pycaffe_lite.layers.vision.conv_layer import ConvolutionLayer
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing.simdevice import simulated_device


def conv(name, bottom, top, n, k, pad=0, extra=""):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" '
            'convolution_param { num_output: %d kernel_size: %d pad: %d %s '
            'weight_filler { type: "gaussian" std: 0.3 } '
            'bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }\n'
            % (name, bottom, top, n, k, pad, extra))


def relu(name, bottom, top, slope=None):
    param = " relu_param { negative_slope: %g }" % slope if slope is not None else ""
    return 'layer { name: "%s" type: "ReLU" bottom: "%s" top: "%s"%s }\n' % (
        name, bottom, top, param)


NET = ('name: "convs" force_backward: true\n'
       'layer { name: "data" type: "Input" top: "data" top: "label" input_param { '
       'shape { dim: 4 dim: 3 dim: 9 dim: 8 } shape { dim: 4 } } }\n'
       + conv("c1", "data", "c1", 6, 3, 1) + relu("r1", "c1", "c1")
       + conv("c2", "c1", "c2", 6, 3, 1, "bias_term: false") + relu("r2", "c2", "c2")
       + conv("c3", "c2", "c3", 4, 1) + relu("r3", "c3", "r3")          # not in place
       + conv("c4", "r3", "c4", 4, 3) + relu("r4", "c4", "c4", 0.1)     # leaky
       + 'layer { name: "pool" type: "Pooling" bottom: "c4" top: "pool" '
         'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n'
       + conv("c5", "pool", "c5", 4, 3, 1, "group: 2") + relu("r5", "c5", "c5")
       + 'layer { name: "ip" type: "InnerProduct" bottom: "c5" top: "ip" '
         'inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }\n'
       'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" '
       'top: "loss" }\n')

CHAINS = [["c1", "r1"], ["c2", "r2"], ["c5", "r5"]]


def _batch(net, k):
    rng = np.random.default_rng(100 + k)
    net.blobs["data"].data[...] = rng.uniform(-1, 1, net.blobs["data"].shape)
    net.blobs["label"].data[...] = rng.integers(0, 3, 4)


def train(tmp_path, monkeypatch, fuse, steps=3, head=""):
    """``steps`` SGD steps of ``head`` + NET; returns (every param's data and diff, every
    blob's data, the net)."""
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1" if fuse else "0")
    path = tmp_path / ("net_%d.prototxt" % fuse)
    path.write_text(head + NET)
    param = caffe_pb2.SolverParameter()
    text_format.Merge('net: "%s" base_lr: 0.1 momentum: 0.9 weight_decay: 0.001 '
                      'lr_policy: "fixed" random_seed: 3 snapshot_after_train: false '
                      'max_iter: %d' % (path, steps), param)
    caffe.set_random_seed(3)
    solver = get_solver(param)
    net = solver.net
    for k in range(steps):
        _batch(net, k)
        solver.step(1)
    params = [(p.data.copy(), p.diff.copy()) for p in net.learnable_params]
    blobs = {name: b.data.copy() for name, b in net.blobs.items()}
    return params, blobs, net


def assert_same(a, b):
    (pa, ba), (pb, bb) = a, b
    for (da, ga), (db, gb) in zip(pa, pb):
        np.testing.assert_array_equal(da, db)
        np.testing.assert_array_equal(ga, gb)
    assert ba.keys() == bb.keys()
    for name in ba:
        np.testing.assert_array_equal(ba[name], bb[name], err_msg=name)


def test_the_chains_are_convolutions_with_their_in_place_relu(tmp_path, monkeypatch):
    _, _, net = train(tmp_path, monkeypatch, True, steps=0)
    fusion = net._train_fuse
    assert [[net.layer_names[i] for i in c.indices] for c in fusion.convs] == CHAINS
    assert not fusion.chains and not fusion.sums


def test_a_convolution_class_with_a_forward_of_its_own_is_not_chained(tmp_path, monkeypatch):
    class Mine(ConvolutionLayer):
        def forward(self, bottom, top):  # no relu=: the promise is not inherited
            return ConvolutionLayer.forward(self, bottom, top)

    class MineWithRelu(ConvolutionLayer):
        takes_relu = True

        def forward(self, bottom, top, relu=False):
            return ConvolutionLayer.forward(self, bottom, top, relu)

    _, _, net = train(tmp_path, monkeypatch, True, steps=0)
    assert net_train_fuse._forward_takes_relu(net.layer_dict["c1"])
    for cls, chained in ((Mine, False), (MineWithRelu, True)):
        layer = net.layer_dict["c1"]
        layer.__class__ = cls
        assert net_train_fuse._forward_takes_relu(layer) is chained
        found = [[net.layer_names[i] for i in c] for c in net_train_fuse.find_conv_relus(net)]
        assert (["c1", "r1"] in found) is chained
        layer.__class__ = ConvolutionLayer


def test_fused_training_equals_the_layers_on_their_own(tmp_path, monkeypatch):
    plain = train(tmp_path, monkeypatch, False)
    assert plain[2]._train_fuse is None
    relus, convs = [], []
    real_relu, real_conv = ReLULayer.forward, ConvolutionLayer.forward

    def counted_relu(self, bottom, top):
        relus.append(self.layer_param.name)
        return real_relu(self, bottom, top)

    def counted_conv(self, bottom, top, relu=False):
        convs.append((self.layer_param.name, relu))
        return real_conv(self, bottom, top, relu)

    monkeypatch.setattr(ReLULayer, "forward", counted_relu)
    monkeypatch.setattr(ConvolutionLayer, "forward", counted_conv)
    fused = train(tmp_path, monkeypatch, True)
    assert_same(fused[:2], plain[:2])
    # three steps: the chained ReLUs never ran on their own, their convolutions clipped
    assert sorted(set(relus)) == ["r3", "r4"] and len(relus) == 6
    assert convs.count(("c1", True)) == convs.count(("c5", True)) == 3
    assert ("c1", False) not in convs and convs.count(("c3", False)) == 3
    # the ReLU's output is there, and the non-chained leaky ReLU kept its negative values
    assert fused[1]["c1"].min() == 0 and fused[1]["c4"].min() < 0


def test_the_fused_forward_against_a_float64_convolution(tmp_path, monkeypatch):
    _, _, net = train(tmp_path, monkeypatch, True, steps=0)
    _batch(net, 0)
    net.forward()
    x = net.blobs["data"].data.astype(np.float64)
    w, b = (p.data.astype(np.float64) for p in net.params["c1"])
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((4, 6, 9, 8))
    for i in range(3):
        for j in range(3):
            want += np.einsum("nchw,oc->nohw", padded[:, :, i:i + 9, j:j + 8], w[:, :, i, j])
    want = np.maximum(want + b[None, :, None, None], 0)
    np.testing.assert_allclose(net.blobs["c1"].data, want, rtol=1e-5, atol=1e-5)


def test_a_forward_that_ends_inside_a_chain_runs_the_layers(tmp_path, monkeypatch):
    _, _, net = train(tmp_path, monkeypatch, True, steps=0)
    _batch(net, 0)
    net.forward(end="c1")  # the convolution alone: its values before the ReLU
    before = net.blobs["c1"].data.copy()
    assert before.min() < 0
    net.forward(start="r1")
    np.testing.assert_array_equal(net.blobs["c1"].data, np.maximum(before, 0))


def test_on_the_simulated_device_with_cuda_graphs(tmp_path, monkeypatch):
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            plain = train(tmp_path, monkeypatch, False)
            captures, launches = dev.graph_captures, dev.graph_launches
            fused = train(tmp_path, monkeypatch, True)
            graph = fused[2]
            # the second step captured, the third replayed: the fused forward is in the graph
            assert dev.graph_captures == captures + 1 and dev.graph_launches > launches
        finally:
            backend.set_mode_cpu()
    assert [[graph.layer_names[i] for i in c.indices] for c in graph._train_fuse.convs] == \
        CHAINS
    assert_same(fused[:2], plain[:2])


def test_float16_nets_on_the_simulated_device(tmp_path, monkeypatch):
    """NVCaffe's float16 (storage float16, loss scaling, float32 masters): the fused
    convolutions equal the layers on their own, CUDA graphs included."""
    head = ("default_forward_type: FLOAT16 default_backward_type: FLOAT16 "
            "default_forward_math: FLOAT default_backward_math: FLOAT global_grad_scale: 8\n")
    with simulated_device():
        backend.set_mode_gpu()
        try:
            plain = train(tmp_path, monkeypatch, False, head=head)
            fused = train(tmp_path, monkeypatch, True, head=head)
        finally:
            backend.set_mode_cpu()
    net = fused[2]
    assert net.blobs["c1"].data.dtype == np.float16
    assert [[net.layer_names[i] for i in c.indices] for c in net._train_fuse.convs] == CHAINS
    assert_same(fused[:2], plain[:2])


def test_float64_nets_fuse_too(monkeypatch):
    param = text_format.Parse(NET, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    nets = []
    for fuse in ("1", "0"):
        monkeypatch.setenv(net_train_fuse.ENV_VAR, fuse)
        caffe.set_random_seed(3)
        net = caffe.Net.from_param(param, dtype=np.float64)
        _batch(net, 1)
        net.forward_backward()
        nets.append(net)
    fused, plain = nets
    assert fused._train_fuse is not None and plain._train_fuse is None
    for name in fused.blobs:
        np.testing.assert_array_equal(fused.blobs[name].data, plain.blobs[name].data)
        np.testing.assert_array_equal(fused.blobs[name].diff, plain.blobs[name].diff)


@pytest.mark.gpu
def test_on_a_gpu_as_on_the_cpu(tmp_path, monkeypatch, cupy_device):
    """cuDNN's convolutions with the bias and ReLU fused (or its bias pass), and CUDA graphs,
    against the CPU's layers on their own."""
    expected = train(tmp_path, monkeypatch, False)
    backend.set_mode_gpu()
    try:
        params, blobs, net = train(tmp_path, monkeypatch, True)
    finally:
        backend.set_mode_cpu()
    assert [[net.layer_names[i] for i in c.indices] for c in net._train_fuse.convs] == CHAINS
    for (d, g), (de, ge) in zip(params, expected[0]):
        np.testing.assert_allclose(d, de, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(g, ge, rtol=1e-3, atol=1e-5)
    for name in blobs:
        np.testing.assert_allclose(blobs[name], expected[1][name], rtol=1e-4, atol=1e-5,
                                   err_msg=name)
