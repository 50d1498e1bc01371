"""Nets with fused training chains (pycaffe_lite.net_train_fuse) for tests/test_train_fused_sim.py
(simulated device) and tests/test_gpu_fused.py (a real GPU): a ResNet-style block trained with
SGD, small chain and sum nets, and their runs returning every blob's and param's values."""

import contextlib

import numpy as np
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import backend, net_train_fuse
from pycaffe_lite.ops import train_fused
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing.simdevice import SimulatedDevice, simulated_device

CONV = """
layer { name: "%(n)s" type: "Convolution" bottom: "%(b)s" top: "%(n)s"
        convolution_param { num_output: 5 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "gaussian" std: 0.3 } } }
"""
BN = """
layer { name: "bn_%(n)s" type: "BatchNorm" bottom: "%(n)s" top: "%(t)s"
        batch_norm_param { moving_average_fraction: 0.9 %(extra)s } }
"""
SCALE = """
layer { name: "scale_%(n)s" type: "Scale" bottom: "%(t)s" top: "%(t)s"
        scale_param { bias_term: %(bias)s filler { type: "uniform" min: 0.5 max: 1.5 }
                      bias_filler { type: "uniform" min: -0.3 max: 0.3 } } }
"""
RELU = 'layer { name: "relu_%(n)s" type: "ReLU" bottom: "%(t)s" top: "%(t)s" }\n'


def block(name, bottom, top=None, bias="true", relu=True, extra=""):
    d = {"n": name, "b": bottom, "t": top or name, "bias": bias, "extra": extra}
    return CONV % d + BN % d + SCALE % d + (RELU % d if relu else "")


def resnet_text(global_c2=False, shape=(4, 3, 7, 5)):
    """A ResNet-style net, 5 channels (odd): chains in place and not, with and without the
    Scale's bias and the ReLU, one on global statistics if asked; a residual Eltwise SUM with
    coefficients and its ReLU, and a three-bottom SUM without one."""
    dims = " ".join("dim: %d" % d for d in shape)
    text = """name: "block" force_backward: true
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { %s } shape { dim: %d }
          data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
""" % (dims, shape[0])
    text += block("c1", "data")
    text += block("c2", "c1", top="c2n", extra="use_global_stats: true" if global_c2 else "")
    text += block("c3", "c2n", bias="false", relu=False)
    text += """
layer { name: "sum" type: "Eltwise" bottom: "c1" bottom: "c3" top: "sum"
        eltwise_param { coeff: 1 coeff: -0.5 } }
layer { name: "relu_sum" type: "ReLU" bottom: "sum" top: "sum" }
layer { name: "sum3" type: "Eltwise" bottom: "sum" bottom: "c2n" bottom: "c1" top: "sum3"
        eltwise_param { coeff: 0.5 coeff: 1 coeff: 2 } }
layer { name: "pool" type: "Pooling" bottom: "sum3" top: "pool"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
    return text


RESNET_CHAINS = [["bn_c1", "scale_c1", "relu_c1"], ["bn_c2", "scale_c2", "relu_c2"],
                 ["bn_c3", "scale_c3"]]
RESNET_SUMS = [["sum", "relu_sum"], ["sum3"]]


def counting(monkeypatch):
    """Count the calls of ops.train_fused's four functions (net_train_fuse calls them through
    the module); on a simulated device each runs with every host crossing forbidden."""
    calls = dict.fromkeys(["bn_forward", "bn_backward", "sum_forward", "sum_backward"], 0)
    for name in calls:
        real = getattr(train_fused, name)

        def wrapped(*args, _real=real, _name=name):
            calls[_name] += 1
            dev = backend.device_module() if backend.mode() == backend.GPU else None
            if not isinstance(dev, SimulatedDevice):
                return _real(*args)
            with dev.forbid("to_host", "to_device", "scalar_sync"):
                return _real(*args)
        monkeypatch.setattr(train_fused, name, wrapped)
    return calls


def values(net):
    """{"blob NAME" / "param LAYER K": (data, diff) on the host}."""
    got = {}
    for name, blob in net.blobs.items():
        got["blob " + name] = (backend.to_host(blob.read_data()),
                               backend.to_host(blob.read_diff()))
    for name, blobs in net.params.items():
        for k, blob in enumerate(blobs):
            got["param %s %d" % (name, k)] = (backend.to_host(blob.read_data()),
                                              backend.to_host(blob.read_diff()))
    return got


def train(tmp_path, monkeypatch, fuse, steps, iter_size=1, global_c2=False, guard=None,
          shape=(4, 3, 7, 5)):
    """``steps`` SGD steps of :func:`resnet_text`, then one more forward and backward with the
    param diffs cleared (inside ``guard()`` when given); returns (:func:`values`, the net)."""
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1" if fuse else "0")
    path = tmp_path / ("net_%d.prototxt" % fuse)
    path.write_text(resnet_text(global_c2, shape))
    param = caffe_pb2.SolverParameter()
    text_format.Merge('net: "%s" base_lr: 0.05 momentum: 0.9 weight_decay: 0.001 '
                      'lr_policy: "fixed" random_seed: 7 snapshot_after_train: false '
                      'iter_size: %d max_iter: %d' % (path, iter_size, steps), param)
    caffe.set_random_seed(7)
    solver = get_solver(param)
    net = solver.net
    if global_c2:  # stored statistics: mean_sum, var_sum over a weight of 2.5
        rng = np.random.default_rng(11)
        stats = net.params["bn_c2"]
        stats[0].data[...] = 2.5 * rng.normal(0, 0.5, 5)
        stats[1].data[...] = 2.5 * rng.uniform(0.5, 2, 5)
        stats[2].data[...] = 2.5
    solver.step(steps)
    net.clear_param_diffs()
    with (guard() if guard is not None else contextlib.nullcontext()):
        net.forward_backward()
    return values(net), net


def on_simulated_device(run):
    """``run(dev)`` in GPU mode on a fresh simulated device."""
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            return run(dev)
        finally:
            backend.set_mode_cpu()


# ---- one chain, one sum -------------------------------------------------------------------------
CHAIN = """name: "chain" force_backward: true
layer { name: "in" type: "Input" top: "x" top: "t"
        input_param { shape { %(dims)s } shape { %(dims)s } } }
layer { name: "copy" type: "Power" bottom: "x" top: "h" power_param { shift: 0.5 } }
layer { name: "bn" type: "BatchNorm" bottom: "h" top: "%(top)s"
        batch_norm_param { moving_average_fraction: 0.8 eps: 0.001 %(global)s } }
%(scale)s
%(relu)s
layer { name: "loss" type: "EuclideanLoss" bottom: "%(top)s" bottom: "t" top: "loss" }
"""
SUM = """name: "sum" force_backward: true
layer { name: "in" type: "Input" %(tops)s
        input_param { %(shapes)s shape { %(dims)s } } }
layer { name: "sum" type: "Eltwise" %(bottoms)s top: "s" eltwise_param { %(coeffs)s } }
%(relu)s
layer { name: "loss" type: "EuclideanLoss" bottom: "s" bottom: "t" top: "loss" }
"""


def chain_text(shape, global_stats=False, scale=True, bias=True, relu=True, in_place=True):
    top = "h" if in_place else "hb"
    return CHAIN % {
        "dims": " ".join("dim: %d" % d for d in shape), "top": top,
        "global": "use_global_stats: true" if global_stats else "",
        "scale": ('layer { name: "sc" type: "Scale" bottom: "%s" top: "%s" scale_param { '
                  'bias_term: %s filler { type: "uniform" min: 0.5 max: 1.5 } bias_filler { '
                  'type: "uniform" min: -0.5 max: 0.5 } } }'
                  % (top, top, "true" if bias else "false")) if scale else "",
        "relu": ('layer { name: "relu" type: "ReLU" bottom: "%s" top: "%s" }' % (top, top))
        if relu else ""}


def sum_text(shape, coeffs, relu=True):
    k = len(coeffs)
    dims = " ".join("dim: %d" % d for d in shape)
    return SUM % {
        "tops": " ".join('top: "x%d"' % i for i in range(k)) + ' top: "t"',
        "shapes": " ".join("shape { %s }" % dims for _ in range(k)), "dims": dims,
        "bottoms": " ".join('bottom: "x%d"' % i for i in range(k)),
        "coeffs": " ".join("coeff: %g" % c for c in coeffs),
        "relu": 'layer { name: "relu" type: "ReLU" bottom: "s" top: "s" }' if relu else ""}


def run_net(text, monkeypatch, fuse, dtype=np.float32, passes=2, stats=None, guard=None):
    """Build the net (TRAIN), fill its inputs with fixed random values, run ``passes``
    forward-backwards (the param diffs accumulate, the statistics move); returns
    (:func:`values`, the net). ``stats``: the BatchNorm "bn"'s stored (mean_sum, var_sum,
    weight) to start from."""
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1" if fuse else "0")
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    caffe.set_random_seed(5)
    net = caffe.Net.from_param(param, dtype=dtype)
    if stats is not None:
        for blob, value in zip(net.params["bn"], stats):
            blob.data[...] = value
    rng = np.random.default_rng(17)
    inputs = {name: rng.normal(0.7, 1.5, net.blobs[name].shape) for name in net.inputs}
    for _ in range(passes):
        for name, value in inputs.items():
            net.blobs[name].data[...] = value
        with (guard() if guard is not None else contextlib.nullcontext()):
            net.forward_backward()
    return values(net), net


def assert_same(got, expected, rtol, atol, diff_rtol=None):
    assert set(got) == set(expected)
    for name, (data, diff) in expected.items():
        np.testing.assert_allclose(got[name][0], data, rtol=rtol, atol=atol, err_msg=name)
        np.testing.assert_allclose(got[name][1], diff, rtol=diff_rtol or rtol, atol=atol,
                                   err_msg=name)


# ---- a chain captured in a CUDA graph ----------------------------------------------------------
def _sync(net):
    """Every blob's and param's data and diff current on the device (reading syncs them)."""
    for blob in list(net.blobs.values()) + [b for bs in net.params.values() for b in bs]:
        blob.read_data()
        blob.read_diff()


def eager_and_replayed(net):
    """For :func:`chain_text`'s net (in place) with an Eltwise-free chain ``bn``: the fused
    chain's forward and backward run eagerly, then captured as two graphs
    (``backend.capture_graph``) and replayed from the same state; returns both
    :func:`values`. The loss layer runs eagerly between them."""
    chain = net._train_fuse.chains[0]
    stats = [backend.to_host(b.read_data()).copy() for b in net.params["bn"]]

    def prep():
        for blob, value in zip(net.params["bn"], stats):
            blob.data[...] = value
        for blob in net.params["sc"]:
            blob.diff[...] = 0
        net.forward(start="copy", end="copy")
        _sync(net)

    def loss():
        net.forward(start="loss", end="loss")
        net.backward(start="loss", end="loss")
        _sync(net)

    def forward():
        chain.forward(None, None)

    def backward():
        chain.backward(None, None, None)

    prep()
    forward()
    loss()
    backward()
    eager = values(net)
    prep()
    fwd = backend.capture_graph(forward)  # (a simulated capture runs it: prepare again)
    prep()
    fwd.launch()
    loss()
    bwd = backend.capture_graph(backward)
    loss()
    for blob in net.params["sc"]:
        blob.diff[...] = 0
    _sync(net)
    bwd.launch()
    return eager, values(net)


def assert_replayed_as_eager(eager, replayed):
    """:func:`eager_and_replayed`'s two results equal, data and diff of every blob."""
    for name, (data, diff) in eager.items():
        np.testing.assert_array_equal(replayed[name][0], data, err_msg=name)
        np.testing.assert_array_equal(replayed[name][1], diff, err_msg=name)
