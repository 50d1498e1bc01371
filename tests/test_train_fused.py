"""BatchNorm -> Scale -> ReLU fused in a net (pycaffe_lite.net_train_fuse).

References: PyTorch's BatchNorm2d (training, and eval for global statistics) with a
per-channel scale, bias and ReLU, and autograd for the gradients; a hand computation of
Caffe's moving average; central differences for the fused backward; and the same net with
``PYCAFFE_LITE_TRAIN_FUSE=0`` (every layer on its own) for a ResNet-style net trained with SGD.
"""

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import net_train_fuse
from pycaffe_lite.ops import cpu
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver

torch = pytest.importorskip("torch")

needs_library = pytest.mark.skipif(not cpu.kernels_enabled(),
                                   reason="the compiled kernels were not built")

SHAPE = (4, 3, 5, 6)

CHAIN_NET = """
name: "chain" force_backward: true
layer { name: "in" type: "Input" top: "x" top: "t"
        input_param { shape { dim: 4 dim: 3 dim: 5 dim: 6 }
                      shape { dim: 4 dim: 3 dim: 5 dim: 6 } } }
layer { name: "copy" type: "Power" bottom: "x" top: "h" }
layer { name: "bn" type: "BatchNorm" bottom: "h" top: "h"
        batch_norm_param { moving_average_fraction: 0.9 eps: 0.001 %(global)s } }
layer { name: "sc" type: "Scale" bottom: "h" top: "h"
        scale_param { bias_term: true filler { type: "uniform" min: 0.5 max: 1.5 }
                      bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "relu" type: "ReLU" bottom: "h" top: "h" }
layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "t" top: "loss" }
"""


def chain_net(monkeypatch, fuse=True, dtype=np.float64, use_global=False):
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1" if fuse else "0")
    text = CHAIN_NET % {"global": "use_global_stats: true" if use_global else ""}
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    caffe.set_random_seed(5)
    return caffe.Net.from_param(param, dtype=dtype)


def counting(monkeypatch):
    """Count the fused kernels' calls."""
    calls = {"forward": 0, "backward": 0}
    for name in calls:
        real = getattr(cpu, "bn_train_" + name)

        def wrapped(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)
        monkeypatch.setattr(cpu, "bn_train_" + name, wrapped)
    return calls


def torch_chain(x, t, gamma, beta, eps, running=None):
    """PyTorch's BatchNorm2d (batch statistics, or ``running`` = (mean, var) in eval mode),
    scale, bias, ReLU and ½ mean-over-batch squared error; returns y, dx, dgamma, dbeta and
    the batch's mean and unbiased variance (momentum 1: the running buffers are the batch's)."""
    c = x.shape[1]
    bn = torch.nn.BatchNorm2d(c, eps=eps, momentum=1.0, affine=False).double()
    if running is not None:
        bn.running_mean[...] = torch.from_numpy(running[0])
        bn.running_var[...] = torch.from_numpy(running[1])
        bn.eval()
    xt = torch.tensor(x, requires_grad=True)
    g = torch.tensor(gamma, requires_grad=True)
    b = torch.tensor(beta, requires_grad=True)
    y = torch.relu(bn(xt) * g[None, :, None, None] + b[None, :, None, None])
    loss = ((y - torch.from_numpy(t)) ** 2).sum() / (2 * x.shape[0])
    loss.backward()
    return (y.detach().numpy(), xt.grad.numpy(), g.grad.numpy(), b.grad.numpy(),
            bn.running_mean.numpy().copy(), bn.running_var.numpy().copy())


@needs_library
def test_the_chain_is_found_and_fused(monkeypatch):
    net = chain_net(monkeypatch)
    assert [c.indices for c in net._train_fuse.chains] == [[2, 3, 4]]
    assert net._train_fuse.chains[0].backward_fused
    assert chain_net(monkeypatch, fuse=False)._train_fuse is None


@needs_library
def test_forward_backward_and_running_statistics_match_pytorch(monkeypatch):
    calls = counting(monkeypatch)
    net = chain_net(monkeypatch)
    gamma = net.params["sc"][0].data.copy()
    beta = net.params["sc"][1].data.copy()
    rng = np.random.default_rng(0)
    f, s = float(np.float32(0.9)), 0.0  # moving_average_fraction is a float field
    mean_sum = np.zeros(3)
    var_sum = np.zeros(3)
    dgamma_total = np.zeros(3)
    for it in range(3):
        x = rng.normal(0.5 * it, 1 + it, SHAPE)
        t = rng.normal(size=SHAPE)
        net.blobs["x"].data[...] = x
        net.blobs["t"].data[...] = t
        net.forward_backward()   # the param diffs are not cleared: they accumulate
        y, dx, dg, db, mean, var = torch_chain(x, t, gamma, beta, 1e-3)
        np.testing.assert_allclose(net.blobs["h"].data, y, rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(net.blobs["x"].diff, dx, rtol=1e-8, atol=1e-9)
        dgamma_total += dg
        np.testing.assert_allclose(net.params["sc"][0].diff, dgamma_total, rtol=1e-8,
                                   atol=1e-9)
        # Caffe's moving average, by hand from the batch's statistics
        s = s * f + 1
        mean_sum = mean_sum * f + mean
        var_sum = var_sum * f + var  # torch's running_var is the unbiased m/(m-1) one
        np.testing.assert_allclose(net.params["bn"][2].data, [s], rtol=1e-12)
        np.testing.assert_allclose(net.params["bn"][0].data, mean_sum, rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(net.params["bn"][1].data, var_sum, rtol=1e-10)
    assert calls == {"forward": 3, "backward": 3}


@needs_library
def test_global_statistics_match_pytorch_eval(monkeypatch):
    calls = counting(monkeypatch)
    net = chain_net(monkeypatch, use_global=True)
    rng = np.random.default_rng(1)
    net.params["bn"][0].data[...] = 2.5 * rng.normal(size=3)
    net.params["bn"][1].data[...] = 2.5 * rng.uniform(0.5, 2, 3)
    net.params["bn"][2].data[...] = 2.5
    x, t = rng.normal(size=SHAPE), rng.normal(size=SHAPE)
    net.blobs["x"].data[...] = x
    net.blobs["t"].data[...] = t
    net.forward_backward()
    running = (net.params["bn"][0].data / 2.5, net.params["bn"][1].data / 2.5)
    y, dx, dg, db, _, _ = torch_chain(x, t, net.params["sc"][0].data.copy(),
                                      net.params["sc"][1].data.copy(), 1e-3, running)
    np.testing.assert_allclose(net.blobs["h"].data, y, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(net.blobs["x"].diff, dx, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(net.params["sc"][0].diff, dg, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(net.params["sc"][1].diff, db, rtol=1e-8, atol=1e-9)
    assert net.params["bn"][2].data[0] == 2.5  # global statistics are not updated
    assert calls == {"forward": 1, "backward": 1}


@needs_library
def test_fused_backward_against_central_differences(monkeypatch):
    calls = counting(monkeypatch)
    net = chain_net(monkeypatch)
    rng = np.random.default_rng(2)
    x, t = rng.normal(size=SHAPE), rng.normal(size=SHAPE)
    net.blobs["t"].data[...] = t

    def loss(xv):
        net.blobs["x"].data[...] = xv
        return net.forward_from_to()

    loss(x)
    for blob in net.params["sc"]:
        blob.diff[...] = 0
    net.backward_from_to()
    analytic = {"x": net.blobs["x"].diff.copy(), "gamma": net.params["sc"][0].diff.copy(),
                "beta": net.params["sc"][1].diff.copy()}
    step = 1e-6
    numeric = np.zeros(SHAPE)
    for i in np.ndindex(*SHAPE):
        xp, xm = x.copy(), x.copy()
        xp[i] += step
        xm[i] -= step
        numeric[i] = (loss(xp) - loss(xm)) / (2 * step)
    np.testing.assert_allclose(analytic["x"], numeric, rtol=1e-5, atol=1e-7)
    for k, name in enumerate(("gamma", "beta")):
        data = net.params["sc"][k].data
        num = np.zeros(3)
        for c in range(3):
            keep = data[c]
            data[c] = keep + step
            up = loss(x)
            data[c] = keep - step
            down = loss(x)
            data[c] = keep
            num[c] = (up - down) / (2 * step)
        np.testing.assert_allclose(analytic[name], num, rtol=1e-5, atol=1e-7)
    assert calls["backward"] == 1 and calls["forward"] > 600


@needs_library
def test_a_cut_forward_or_a_hook_runs_the_layers_on_their_own(monkeypatch):
    calls = counting(monkeypatch)
    fused, plain = chain_net(monkeypatch), chain_net(monkeypatch, fuse=False)
    for k in range(2):
        plain.params["sc"][k].data[...] = fused.params["sc"][k].data
    x = np.random.default_rng(3).normal(size=SHAPE)
    for net in (fused, plain):
        net.blobs["x"].data[...] = x
        net.forward(end="bn")   # ends inside the chain: h holds BatchNorm's output
    assert calls["forward"] == 0
    np.testing.assert_allclose(fused.blobs["h"].data, plain.blobs["h"].data, rtol=1e-12)
    assert fused.blobs["h"].data.min() < 0  # not the ReLU's output
    seen = []
    fused.before_forward(seen.append)
    fused.forward()
    assert calls["forward"] == 0 and seen == list(range(6))


CONV_BLOCK = """
layer { name: "%(n)s" type: "Convolution" bottom: "%(b)s" top: "%(n)s"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "bn_%(n)s" type: "BatchNorm" bottom: "%(n)s" top: "%(n)s" }
layer { name: "scale_%(n)s" type: "Scale" bottom: "%(n)s" top: "%(n)s"
        scale_param { bias_term: true filler { type: "uniform" min: 0.5 max: 1.5 } } }
"""
RELU = 'layer { name: "relu_%(n)s" type: "ReLU" bottom: "%(n)s" top: "%(n)s" }\n'


def resnet_text():
    text = """name: "mini"
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 6 dim: 2 dim: 8 dim: 8 } shape { dim: 6 }
          data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 2 } } }
"""
    text += CONV_BLOCK % {"n": "c1", "b": "data"} + RELU % {"n": "c1"}
    text += CONV_BLOCK % {"n": "c2", "b": "c1"} + RELU % {"n": "c2"}
    text += CONV_BLOCK % {"n": "c3", "b": "c2"}
    text += """
layer { name: "sum" type: "Eltwise" bottom: "c1" bottom: "c3" top: "sum" }
layer { name: "relu_sum" type: "ReLU" bottom: "sum" top: "sum" }
layer { name: "pool" type: "Pooling" bottom: "sum" top: "pool"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
    return text


def train(tmp_path, monkeypatch, fuse, iter_size, steps=5):
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1" if fuse else "0")
    monkeypatch.setenv("PYCAFFE_LITE_SHARE_DIFFS", "0")  # every blob's diff is compared below
    path = tmp_path / ("net_%d_%d.prototxt" % (fuse, iter_size))
    path.write_text(resnet_text())
    param = caffe_pb2.SolverParameter()
    text_format.Merge('net: "%s" base_lr: 0.05 momentum: 0.9 weight_decay: 0.001 '
                      'lr_policy: "fixed" random_seed: 7 snapshot_after_train: false '
                      'iter_size: %d max_iter: %d' % (path, iter_size, steps), param)
    caffe.set_random_seed(7)
    solver = get_solver(param)
    solver.step(steps)
    net = solver.net
    # one more forward and backward, to compare the blobs' diffs and the param diffs too
    net.clear_param_diffs()
    net.forward_backward()
    return net


@needs_library
@pytest.mark.parametrize("iter_size", [1, 2])
def test_resnet_style_training_matches_the_layers_on_their_own(tmp_path, monkeypatch,
                                                              iter_size):
    calls = counting(monkeypatch)
    fused = train(tmp_path, monkeypatch, True, iter_size)
    assert [[fused.layer_names[i] for i in c.indices] for c in fused._train_fuse.chains] == [
        ["bn_c1", "scale_c1", "relu_c1"], ["bn_c2", "scale_c2", "relu_c2"],
        ["bn_c3", "scale_c3"]]
    used = dict(calls)
    plain = train(tmp_path, monkeypatch, False, iter_size)
    assert calls == used and used["forward"] == 3 * (5 * iter_size + 1)
    assert used["backward"] == used["forward"]
    for name in plain.params:
        for a, b in zip(fused.params[name], plain.params[name]):
            np.testing.assert_allclose(a.data, b.data, rtol=1e-4, atol=1e-6, err_msg=name)
            np.testing.assert_allclose(a.diff, b.diff, rtol=1e-3, atol=1e-6, err_msg=name)
    for name in plain.blobs:
        np.testing.assert_allclose(fused.blobs[name].data, plain.blobs[name].data, rtol=1e-4,
                                   atol=1e-5, err_msg=name)
        np.testing.assert_allclose(fused.blobs[name].diff, plain.blobs[name].diff, rtol=1e-3,
                                   atol=1e-6, err_msg=name)
    # the training moved the weights and statistics (the comparison is not of initial values)
    assert fused.params["bn_c1"][2].data[0] > 1


@needs_library
def test_param_diffs_accumulate_over_backwards(monkeypatch):
    net = chain_net(monkeypatch, dtype=np.float32)
    rng = np.random.default_rng(4)
    net.blobs["t"].data[...] = rng.normal(size=SHAPE)
    x = rng.normal(size=SHAPE)
    net.clear_param_diffs()
    net.blobs["x"].data[...] = x
    net.forward_backward()
    once = [b.diff.copy() for b in net.params["sc"]]
    net.blobs["x"].data[...] = x
    net.forward_backward()
    for blob, single in zip(net.params["sc"], once):
        np.testing.assert_allclose(blob.diff, 2 * single, rtol=1e-6)


@needs_library
def test_gpu_mode_runs_no_host_kernel(tmp_path, monkeypatch):
    """On device arrays (a simulated device) the chains take the device path
    (ops.train_fused, tests/test_train_fused_sim.py): no fused host kernel, no trip to the
    host, and the CPU's fused result to float rounding."""
    from pycaffe_lite import backend
    from pycaffe_lite.testing.simdevice import simulated_device

    calls = counting(monkeypatch)
    expected = train(tmp_path, monkeypatch, True, 1, steps=2)
    assert calls["forward"] > 0
    used = dict(calls)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            with dev.forbid("to_host"):
                got = train(tmp_path, monkeypatch, True, 1, steps=2)
            assert got._train_fuse is not None and calls == used
            values = {name: [backend.to_host(b.data) for b in blobs]
                      for name, blobs in got.params.items()}
        finally:
            backend.set_mode_cpu()
    for name, blobs in expected.params.items():
        for a, b in zip(blobs, values[name]):
            np.testing.assert_allclose(b, a.data, rtol=1e-4, atol=1e-6, err_msg=name)


NOT_IN_PLACE = """
name: "apart" force_backward: true
layer { name: "in" type: "Input" top: "x" top: "t"
        input_param { shape { dim: 4 dim: 3 dim: 5 dim: 6 }
                      shape { dim: 4 dim: 3 dim: 5 dim: 6 } } }
layer { name: "copy" type: "Power" bottom: "x" top: "h" }
layer { name: "bn" type: "BatchNorm" bottom: "h" top: "hb" }
%s
layer { name: "loss" type: "EuclideanLoss" bottom: "hb" bottom: "t" top: "loss" }
"""
AFTER = {"sc": """layer { name: "sc" type: "Scale" bottom: "hb" top: "hb"
        scale_param { bias_term: true filler { type: "uniform" min: 0.5 max: 1.5 } } }""",
         "relu": 'layer { name: "relu" type: "ReLU" bottom: "hb" top: "hb" }'}


@needs_library
@pytest.mark.parametrize("after", [("sc", "relu"), ("relu",), ("sc",), ()])
def test_batchnorm_not_in_place_then_scale_and_relu_in_place(monkeypatch, after):
    """BatchNorm writing a new blob: the bottom keeps its data, its diff is BatchNorm's
    gradient, and the top's diff is the Scale's (the ReLU's) bottom gradient, as layer by
    layer."""
    text = NOT_IN_PLACE % "\n".join(AFTER[k] for k in after)
    calls = counting(monkeypatch)
    nets = []
    for fuse in (True, False):
        monkeypatch.setenv(net_train_fuse.ENV_VAR, "1" if fuse else "0")
        param = text_format.Parse(text, caffe_pb2.NetParameter())
        param.state.phase = caffe.TRAIN
        caffe.set_random_seed(5)
        nets.append(caffe.Net.from_param(param, dtype=np.float64))
    fused, plain = nets
    assert [fused.layer_names[i] for i in fused._train_fuse.chains[0].indices] == \
        ["bn"] + list(after)
    rng = np.random.default_rng(6)
    x, t = rng.normal(size=SHAPE), rng.normal(size=SHAPE)
    for net in nets:
        for _ in range(2):
            net.blobs["x"].data[...] = x
            net.blobs["t"].data[...] = t
            net.forward_backward()
    assert calls == {"forward": 2, "backward": 2}
    for name in ("h", "hb"):
        np.testing.assert_allclose(fused.blobs[name].data, plain.blobs[name].data,
                                   rtol=1e-9, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(fused.blobs[name].diff, plain.blobs[name].diff,
                                   rtol=1e-9, atol=1e-12, err_msg=name)
    for name in plain.params:
        for a, b in zip(fused.params[name], plain.params[name]):
            np.testing.assert_allclose(a.data, b.data, rtol=1e-9, atol=1e-12, err_msg=name)
            np.testing.assert_allclose(a.diff, b.diff, rtol=1e-9, atol=1e-12, err_msg=name)
    assert np.abs(fused.blobs["hb"].diff - fused.blobs["h"].diff).max() > 1e-3


@needs_library
def test_no_fusion_with_a_loss_weight_in_the_chain_or_with_debug_info(monkeypatch):
    calls = counting(monkeypatch)
    text = CHAIN_NET % {"global": ""}
    # the ReLU's top as the loss itself (a top that other layers read would get a Split that
    # takes the weight)
    weighted = text.replace('top: "h" }\nlayer { name: "loss" type: "EuclideanLoss" bottom: "h" '
                            'bottom: "t" top: "loss" }', 'top: "h" loss_weight: 1 }')
    assert weighted != text
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")
    param = text_format.Parse(weighted, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    net = caffe.Net.from_param(param, dtype=np.float64)
    assert net.layer_dict["relu"].loss(0) == 1
    assert [net.layer_names[i] for i in net._train_fuse.chains[0].indices] == ["bn", "sc"]
    param = text_format.Parse(text, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    param.debug_info = True
    net = caffe.Net.from_param(param, dtype=np.float64)
    net.blobs["x"].data[...] = np.random.default_rng(7).normal(size=SHAPE)
    net.forward_backward()
    assert calls == {"forward": 0, "backward": 0}


@needs_library
def test_a_bottom_without_gradient_runs_the_backward_layer_by_layer(monkeypatch):
    """A BatchNorm told after the net was built not to compute its bottom's gradient: the
    layers' own backward (the top's diff then stays the Scale's bottom gradient)."""
    calls = counting(monkeypatch)
    fused, plain = chain_net(monkeypatch), chain_net(monkeypatch, fuse=False)
    x = np.random.default_rng(8).normal(size=SHAPE)
    for net in (fused, plain):
        for k in range(2):
            net.params["sc"][k].data[...] = fused.params["sc"][k].data
        net.records[net.layer_index("bn")].bottom_need_backward[0] = False
        net.blobs["x"].data[...] = x
        net.forward_backward()
    assert calls == {"forward": 1, "backward": 0}
    for name in ("h", "x"):
        np.testing.assert_allclose(fused.blobs[name].diff, plain.blobs[name].diff, rtol=1e-9,
                                   atol=1e-12, err_msg=name)
    for a, b in zip(fused.params["sc"], plain.params["sc"]):
        np.testing.assert_allclose(a.diff, b.diff, rtol=1e-9, atol=1e-12)
