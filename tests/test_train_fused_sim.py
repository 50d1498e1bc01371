"""The fused training chains in GPU mode (pycaffe_lite.net_train_fuse, ops.train_fused), on the
simulated device: BatchNorm -> Scale -> ReLU and Eltwise SUM -> ReLU trained with SGD against
the same net on the CPU with every layer on its own (``PYCAFFE_LITE_TRAIN_FUSE=0``), with no
device value read on the host inside a forward or backward.

The CUDA kernels of ops/gpu/fused.py are checked here too, without a GPU: their source,
compiled as C++ for the host (one thread per block, the grid walked block by block), against
the generic code and a float64 NumPy computation of the layers' formulas
(tests/test_gpu_fused.py runs them on a real GPU).
"""

import contextlib
import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import backend, net_train_fuse
from pycaffe_lite.ops import train_fused
from pycaffe_lite.ops.gpu import fused as gpu_fused
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


def net_text(global_c2=False):
    """A ResNet-style net, 5 channels (odd) of 7 x 5: chains in place and not, with and
    without the Scale's bias and the ReLU, one on global statistics; a residual Eltwise SUM
    with coefficients and its ReLU, and a three-bottom SUM without one."""
    text = """name: "block" force_backward: true
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 4 dim: 3 dim: 7 dim: 5 } shape { dim: 4 }
          data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
"""
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


def train(tmp_path, monkeypatch, fuse, steps, iter_size=1, global_c2=False, dev=None):
    """``steps`` SGD steps, then one more forward and backward with the param diffs cleared;
    returns {blob or param name: host arrays} and the net."""
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1" if fuse else "0")
    path = tmp_path / ("net_%d.prototxt" % fuse)
    path.write_text(net_text(global_c2))
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
    if dev is not None:
        with dev.forbid("to_host"):  # (the loss layer checks its labels: a scalar read)
            net.forward_backward()
    else:
        net.forward_backward()
    got = {}
    for name, blob in net.blobs.items():
        got["blob " + name] = (backend.to_host(blob.read_data()), backend.to_host(
            blob.read_diff()))
    for name, blobs in net.params.items():
        for k, blob in enumerate(blobs):
            got["param %s %d" % (name, k)] = (backend.to_host(blob.read_data()),
                                              backend.to_host(blob.read_diff()))
    return got, net


def on_device(run):
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            return run(dev)
        finally:
            backend.set_mode_cpu()


@pytest.mark.parametrize("iter_size,global_c2", [(1, False), (2, True)])
def test_training_on_the_device_matches_the_cpu_layers_on_their_own(tmp_path, monkeypatch,
                                                                    iter_size, global_c2):
    expected, plain = train(tmp_path, monkeypatch, False, 3, iter_size, global_c2)
    assert plain._train_fuse is None
    calls = counting(monkeypatch)
    got, net = on_device(lambda dev: train(tmp_path, monkeypatch, True, 3, iter_size,
                                           global_c2, dev))
    fusion = net._train_fuse
    assert [[net.layer_names[i] for i in c.indices] for c in fusion.chains] == [
        ["bn_c1", "scale_c1", "relu_c1"], ["bn_c2", "scale_c2", "relu_c2"],
        ["bn_c3", "scale_c3"]]
    assert [[net.layer_names[i] for i in c.indices] for c in fusion.sums] == [
        ["sum", "relu_sum"], ["sum3"]]
    passes = 3 * iter_size + 1
    assert calls == {"bn_forward": 3 * passes, "bn_backward": 3 * passes,
                     "sum_forward": 2 * passes, "sum_backward": 2 * passes}
    assert set(got) == set(expected)
    for name, (data, diff) in expected.items():
        np.testing.assert_allclose(got[name][0], data, rtol=1e-4, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(got[name][1], diff, rtol=1e-3, atol=1e-6, err_msg=name)
    # the steps moved the weights and statistics; the ReLUs cut something
    assert expected["param bn_c1 2"][0][0] > 1
    assert (expected["blob sum"][0] == 0).any() and (expected["blob sum"][0] > 0).any()
    # BatchNorm not in place: its top's diff is the Scale's bottom gradient, not its own
    assert np.abs(expected["blob c2n"][1] - expected["blob c2"][1]).max() > 1e-4


def test_a_layer_by_layer_backward_after_a_fused_forward(monkeypatch):
    """What each layer keeps from a fused forward on the device lets its own backward run:
    backwards that end or start inside a chain run the layers one by one."""
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")
    param = text_format.Parse(net_text(), caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN

    def run(dev=None):
        caffe.set_random_seed(3)
        net = caffe.Net.from_param(param)
        net.forward()
        net.backward(end="scale_c1")
        net.backward(start="bn_c1")
        return {k: backend.to_host(net.blobs[k].read_diff()) for k in ("data", "c1")}, \
            [backend.to_host(b.read_diff()) for b in net.params["scale_c1"]]

    expected = run()
    calls = counting(monkeypatch)
    got = on_device(run)
    assert calls == {"bn_forward": 3, "bn_backward": 0, "sum_forward": 2, "sum_backward": 0}
    for k in expected[0]:
        np.testing.assert_allclose(got[0][k], expected[0][k], rtol=1e-4, atol=1e-6)
    for a, b in zip(got[1], expected[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert np.abs(expected[1][0]).max() > 0


# ---- the CUDA source run on the host ---------------------------------------------------------
PRELUDE = r"""
#include <cmath>
using std::sqrt;
struct Dim3 { unsigned int x, y, z; };
static Dim3 blockIdx = {0, 0, 0}, blockDim = {1, 1, 1}, threadIdx = {0, 0, 0},
    gridDim = {1, 1, 1};
extern "C" void set_block(unsigned int x, unsigned int y, unsigned int gx, unsigned int gy) {
    blockIdx.x = x; blockIdx.y = y; gridDim.x = gx; gridDim.y = gy;
}
#define __global__
#define __device__
#define __shared__ static
#define __syncthreads()
"""


class HostKernels:
    """fused.py's kernels compiled for the host: a call runs every block of its grid in turn
    (one thread each: the block sums' tree has one level, the grid-stride loops cover
    everything)."""

    def __init__(self, tmp_path, dtype):
        ctype = {np.float32: "float", np.float64: "double"}[dtype]
        src = tmp_path / ("fused_%s.cpp" % ctype)
        src.write_text(PRELUDE + "typedef %s T;\n" % ctype + gpu_fused._SOURCE)
        lib = tmp_path / ("fused_%s.so" % ctype)
        subprocess.run(["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC", str(src), "-o",
                        str(lib)], check=True)
        self.lib = ctypes.CDLL(str(lib))
        self.dtype = dtype

    def __call__(self, name, grid, *args):
        fn = getattr(self.lib, name)
        conv = []
        for a in args:
            if a is None or (isinstance(a, np.uint64) and a == 0):  # a null pointer
                conv.append(ctypes.c_void_p(None))
            elif isinstance(a, np.ndarray):
                assert a.flags.c_contiguous
                conv.append(ctypes.c_void_p(a.ctypes.data))
            elif isinstance(a, np.int32):
                conv.append(ctypes.c_int(int(a)))
            elif isinstance(a, np.int64):
                conv.append(ctypes.c_longlong(int(a)))
            elif isinstance(a, np.float64):
                conv.append(ctypes.c_double(float(a)))
            else:
                raise TypeError("kernel argument of type %s" % type(a))
        gx, gy = grid
        for y in range(gy):
            for x in range(gx):
                self.lib.set_block(x, y, gx, gy)
                fn(*conv)


@pytest.fixture
def host_kernels(tmp_path, monkeypatch):
    """fused.py's launches sent to the host build of its kernels, for float32 and float64."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed: the CUDA source cannot be built for the host")
    libs = {}

    def kernels(dtype):
        if dtype not in libs:
            libs[dtype] = HostKernels(tmp_path, dtype)
        return libs[dtype]

    class Module:
        def function(self, name, ctype):
            lib = kernels(np.float32 if ctype == "float" else np.float64)
            return lambda grid, block, args: lib(name, grid, *args)

    def launch(function, n, args):
        if int(n) > 0:
            function((int(n), 1), (1,), args)  # one thread per block: a block per item

    monkeypatch.setattr(gpu_fused, "_MODULE", Module())
    monkeypatch.setattr(gpu_fused, "launch", launch)
    monkeypatch.setattr(gpu_fused, "BLOCK", 1)
    monkeypatch.setattr(gpu_fused, "global_statistics", _global_statistics)
    # ops.train_fused's dispatch answers with ``forced``'s setting (host arrays stand for CuPy
    # arrays there)
    monkeypatch.setattr(train_fused, "_kernels", lambda *arrays: _FORCE["on"])
    return kernels


def _global_statistics(mean_sum, var_sum, weight, eps, mean, std):
    """channels.bn_global (tests/test_gpu_fused.py runs it on a GPU), as NumPy."""
    s = weight[0]
    factor = 1 / s if s != 0 else 0
    mean[...] = mean_sum * factor
    std[...] = np.sqrt(var_sum * factor + mean.dtype.type(eps))


def reference_forward(x, gamma, beta, eps, relu, mean=None, var=None):
    """The layers' formulas in float64: x_hat, y, and the batch's mean and variance."""
    x = x.astype(np.float64)
    if mean is None:
        mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    xhat = (x - mean[:, None]) / np.sqrt(var + eps)[:, None]
    y = xhat * (1 if gamma is None else gamma[:, None]) + (0 if beta is None else beta[:, None])
    return xhat, (np.maximum(y, 0) if relu else y), mean, var


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,relu,bias,global_stats", [
    ((3, 5, 7), True, True, False), ((2, 3, 1), False, False, False),
    ((4, 1, 300), True, False, False), ((3, 5, 7), True, True, True),
    ((2, 7, 9), False, True, True)])
def test_the_cuda_chain_kernels_built_for_the_host(host_kernels, dtype, shape, relu, bias,
                                                   global_stats):
    rng = np.random.default_rng(sum(shape))
    n, c, s = shape
    x = (rng.normal(3.0, 2.0, shape)).astype(dtype)  # a mean far from 0: the shifted sums
    gamma = rng.uniform(0.5, 1.5, c).astype(dtype)
    beta = rng.uniform(-0.5, 0.5, c).astype(dtype) if bias else None
    eps, f = 1e-3, 0.9
    running = [rng.uniform(0.5, 2, c).astype(dtype) for _ in range(2)] + \
        [np.array([2.0], dtype)]
    m = n * s
    rtol, atol = (2e-5, 1e-5) if dtype == np.float32 else (1e-11, 1e-12)
    # the kernels (forced onto the host build) and the generic code, on the same inputs
    outs = {}
    for path in ("kernels", "generic"):
        work = train_fused.Workspace()
        run = [r.copy() for r in running]
        y, xhat = np.empty_like(x), np.empty_like(x)
        with forced(path == "kernels"):
            std = train_fused.bn_forward(x, y, xhat, gamma, beta, run, global_stats, eps, f,
                                         relu, work).copy()
        dy = rng.normal(size=shape).astype(dtype) if path == "kernels" else outs["kernels"][
            "dy"]
        dx, dtop = np.empty_like(x), np.empty_like(x)
        dgamma, dbeta = np.full(c, 0.25, dtype), None if beta is None else np.full(c, -1, dtype)
        with forced(path == "kernels"):
            train_fused.bn_backward(dy, y, xhat, std, gamma, dgamma, dbeta, dx, dtop,
                                    global_stats, relu, work)
        outs[path] = dict(y=y, xhat=xhat, std=std, running=run, dy=dy, dx=dx, dtop=dtop,
                          dgamma=dgamma, dbeta=dbeta)
    k, g = outs["kernels"], outs["generic"]
    for name in ("y", "xhat", "std", "dx", "dtop", "dgamma", "dbeta"):
        if k[name] is not None:
            np.testing.assert_allclose(k[name], g[name], rtol=rtol, atol=atol, err_msg=name)
    for a, b in zip(k["running"], g["running"]):
        np.testing.assert_allclose(a, b, rtol=rtol, atol=atol)
    # float64 references of the formulas
    if global_stats:
        mean, var = running[0] / 2.0, running[1] / 2.0
        xhat, y, _, _ = reference_forward(x, gamma, beta, eps, relu, mean, var)
    else:
        xhat, y, mean, var = reference_forward(x, gamma, beta, eps, relu)
        np.testing.assert_allclose(k["running"][0], f * running[0] + mean, rtol=rtol, atol=atol)
        np.testing.assert_allclose(k["running"][1], f * running[1] + var * m / (m - 1),
                                   rtol=rtol, atol=atol)
        np.testing.assert_allclose(k["running"][2], [f * 2 + 1], rtol=rtol)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(k["y"], y, **tol)
    dz = k["dy"] * (y > 0) if relu else k["dy"].astype(np.float64)
    np.testing.assert_allclose(k["dgamma"], 0.25 + (dz * xhat).sum(axis=(0, 2)), **tol)
    if bias:
        np.testing.assert_allclose(k["dbeta"], -1 + dz.sum(axis=(0, 2)), **tol)
    dxh = dz * gamma[:, None]
    np.testing.assert_allclose(k["dtop"], dxh, **tol)
    if not global_stats:
        dxh = dxh - dxh.mean(axis=(0, 2))[:, None] - \
            (dxh * xhat).mean(axis=(0, 2))[:, None] * xhat
    np.testing.assert_allclose(k["dx"], dxh / np.sqrt(var + eps)[:, None], **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("coeffs,relu", [([1, 1], True), ([0.5, -2, 1], True),
                                         ([1, 3, -1, 0.25], False), ([2, 1], False)])
def test_the_cuda_sum_kernels_built_for_the_host(host_kernels, dtype, coeffs, relu):
    rng = np.random.default_rng(len(coeffs))
    shape = (3, 4, 5)
    xs = [rng.normal(size=shape).astype(dtype) for _ in coeffs]
    dy0 = rng.normal(size=shape).astype(dtype)
    outs = {}
    for path in ("kernels", "generic"):
        y, dy = np.empty(shape, dtype), dy0.copy()
        dxs = [np.empty(shape, dtype) for _ in coeffs]
        dxs[1] = None  # a bottom without a gradient
        with forced(path == "kernels"):
            train_fused.sum_forward(xs, coeffs, y, relu)
            train_fused.sum_backward(dy, y, coeffs, dxs, relu)
        outs[path] = (y, dy, dxs)
    for a, b in zip(outs["kernels"][:2], outs["generic"][:2]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(outs["kernels"][2], outs["generic"][2]):
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)
    y = sum(c * x.astype(np.float64) for c, x in zip(coeffs, xs))
    y = np.maximum(y, 0) if relu else y
    np.testing.assert_allclose(outs["kernels"][0], y, rtol=1e-6, atol=1e-6)
    dz = dy0 * (outs["kernels"][0] > 0) if relu else dy0
    np.testing.assert_array_equal(outs["kernels"][1], dz)
    for d, c in zip(outs["kernels"][2], coeffs):
        if d is not None:
            np.testing.assert_allclose(d, c * dz.astype(np.float64), rtol=1e-6)



_FORCE = {"on": False}


@contextlib.contextmanager
def forced(on):
    """Inside, ops.train_fused takes the kernels (``on``) or its generic code."""
    _FORCE["on"] = on
    try:
        yield
    finally:
        _FORCE["on"] = False
