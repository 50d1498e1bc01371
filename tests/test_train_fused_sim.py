"""The fused training chains in GPU mode (pycaffe_lite.net_train_fuse, ops.train_fused), on the
simulated device: BatchNorm -> Scale -> ReLU and Eltwise SUM -> ReLU trained with SGD against
the same net on the CPU with every layer on its own (``PYCAFFE_LITE_TRAIN_FUSE=0``), with no
device value read on the host inside a forward or backward.

The CUDA kernels of ops/gpu/fused.py are checked here too, without a GPU: their source,
compiled as C++ for the host (one thread per block, the grid walked block by block), against
the generic code and a float64 NumPy computation of the layers' formulas
(tests/test_gpu_fused.py runs them on a real GPU). Their float16 variant is built with a host
``cuda_fp16.h`` of the harness's own (``__half`` over GCC's ``_Float16``) and checked against
the float64 formulas within float16 rounding, against the float16 generic code, and in a
float16 net against the same net in float32.
"""

import contextlib
import ctypes
import shutil
import subprocess

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.fused_nets import (RESNET_CHAINS, RESNET_SUMS, assert_replayed_as_eager,
                                assert_same, chain_text, counting, eager_and_replayed,
                                on_simulated_device, resnet_text, run_net, sum_text, train)

import pycaffe_lite as caffe
from pycaffe_lite import backend, net_train_fuse
from pycaffe_lite.ops import train_fused
from pycaffe_lite.ops.gpu import channels as gpu_channels
from pycaffe_lite.ops.gpu import fused as gpu_fused
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing.simdevice import DeviceArray
from test_float16_fused import float32_twin_check

def forbid_to_host(dev):
    # (the loss layer checks its labels: a scalar read, as Caffe's reads the loss)
    return lambda: dev.forbid("to_host")


@pytest.mark.parametrize("iter_size,global_c2", [(1, False), (2, True)])
def test_training_on_the_device_matches_the_cpu_layers_on_their_own(tmp_path, monkeypatch,
                                                                    iter_size, global_c2):
    expected, plain = train(tmp_path, monkeypatch, False, 3, iter_size, global_c2)
    assert plain._train_fuse is None
    calls = counting(monkeypatch)
    captures = []

    def run(dev):
        result = train(tmp_path, monkeypatch, True, 3, iter_size, global_c2,
                       forbid_to_host(dev))
        captures.append(dev.graph_captures)
        return result

    got, net = on_simulated_device(run)
    fusion = net._train_fuse
    assert [[net.layer_names[i] for i in c.indices] for c in fusion.chains] == RESNET_CHAINS
    assert [[net.layer_names[i] for i in c.indices] for c in fusion.sums] == RESNET_SUMS
    # a simulated capture of a training iteration (solvers/train_graph.py) runs each pass it
    # holds once more: one graph for the whole iteration, or (iter_size 2) the first pass, the
    # next passes and the update
    assert captures == [1 if iter_size == 1 else 3]
    passes = 3 * iter_size + 1 + (1 if iter_size == 1 else 2)
    assert calls == {"bn_forward": 3 * passes, "bn_backward": 3 * passes,
                     "sum_forward": 2 * passes, "sum_backward": 2 * passes}
    assert_same(got, expected, 1e-4, 1e-6, diff_rtol=1e-3)
    # the steps moved the weights and statistics; the ReLUs cut something
    assert expected["param bn_c1 2"][0][0] > 1
    assert (expected["blob sum"][0] == 0).any() and (expected["blob sum"][0] > 0).any()
    # BatchNorm not in place: its top's diff is the Scale's bottom gradient, not its own
    assert np.abs(expected["blob c2n"][1] - expected["blob c2"][1]).max() > 1e-4


def test_a_layer_by_layer_backward_after_a_fused_forward(monkeypatch):
    """What each layer keeps from a fused forward on the device lets its own backward run:
    backwards that end or start inside a chain run the layers one by one."""
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")
    param = text_format.Parse(resnet_text(), caffe_pb2.NetParameter())
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
    got = on_simulated_device(run)
    assert calls == {"bn_forward": 3, "bn_backward": 0, "sum_forward": 2, "sum_backward": 0}
    for k in expected[0]:
        np.testing.assert_allclose(got[0][k], expected[0][k], rtol=1e-4, atol=1e-6)
    for a, b in zip(got[1], expected[1]):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)
    assert np.abs(expected[1][0]).max() > 0


CHAIN_CASES = [dict(), dict(in_place=False), dict(global_stats=True), dict(relu=False),
               dict(bias=False, in_place=False), dict(scale=False), dict(scale=False,
                                                                         relu=False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("options", CHAIN_CASES, ids=lambda o: "-".join(o) or "default")
def test_one_chain_on_the_device_matches_the_cpu_layers(monkeypatch, options, dtype):
    text = chain_text((3, 5, 4, 3), **options)
    stats = (np.linspace(-1, 1, 5) * 2.5, np.linspace(0.5, 2, 5) * 2.5, [2.5])
    expected, _ = run_net(text, monkeypatch, False, dtype, stats=stats)
    calls = counting(monkeypatch)
    got, net = on_simulated_device(lambda dev: run_net(text, monkeypatch, True, dtype,
                                                       stats=stats))
    assert len(net._train_fuse.chains) == 1 and calls["bn_forward"] == 2
    assert calls["bn_backward"] == 2
    tol = (1e-5, 1e-6) if dtype == np.float32 else (1e-10, 1e-12)
    assert_same(got, expected, *tol)


@pytest.mark.parametrize("coeffs,relu", [([1, 1], True), ([0.5, -2, 1], True),
                                         ([1, 3, -1, 0.25, 2], False), ([2, 1], False)])
def test_one_sum_on_the_device_matches_the_cpu_layers(monkeypatch, coeffs, relu):
    text = sum_text((2, 3, 4, 5), coeffs, relu)
    expected, _ = run_net(text, monkeypatch, False)
    calls = counting(monkeypatch)
    got, net = on_simulated_device(lambda dev: run_net(text, monkeypatch, True))
    assert [len(s.indices) for s in net._train_fuse.sums] == [1 + relu]
    assert calls["sum_forward"] == 2 and calls["sum_backward"] == 2
    assert_same(got, expected, 1e-6, 1e-7)
    if relu:  # the top's diff is the ReLU's gradient: zero where the ReLU cut
        data, diff = got["blob s"]
        assert (data == 0).any() and (diff[data == 0] == 0).all()


IN_PLACE_SUM = """name: "s" force_backward: true
layer { name: "in" type: "Input" top: "x0" top: "x1" top: "t"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 3 } shape { dim: 2 dim: 3 } } }
layer { name: "sum" type: "Eltwise" bottom: "x0" bottom: "x1" top: "x0" }
layer { name: "loss" type: "EuclideanLoss" bottom: "x0" bottom: "t" top: "loss" }
"""


def test_an_eltwise_in_place_is_not_fused(monkeypatch):
    monkeypatch.setenv(net_train_fuse.ENV_VAR, "1")
    param = text_format.Parse(IN_PLACE_SUM, caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    assert caffe.Net.from_param(param)._train_fuse is None
    param = text_format.Parse(IN_PLACE_SUM.replace('top: "x0" }', 'top: "s" }').replace(
        'bottom: "x0" bottom: "t"', 'bottom: "s" bottom: "t"'), caffe_pb2.NetParameter())
    param.state.phase = caffe.TRAIN
    assert caffe.Net.from_param(param)._train_fuse is not None


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
template <class V> V __shfl_down_sync(unsigned int, V, int) { return V(0); }
#define __global__
#define __device__
#define __shared__ static
#define __syncthreads()
"""
# kernels with one thread per item and no grid-stride loop: a block each on the host
PER_ITEM = {"chain_stats", "chain_grad_sums", "bn_global"}
# cuda_fp16.h for the host: __half holds GCC's _Float16 (x86-64, GCC 12 on), whose conversion
# from float rounds to nearest even, as __float2half_rn and NumPy's astype(float16) do
HOST_FP16 = r"""
#pragma once
struct __half { _Float16 v; };
inline float __half2float(__half h) { return (float)h.v; }
inline __half __float2half_rn(float f) { __half h; h.v = (_Float16)f; return h; }
"""


class HostKernels:
    """A module's CUDA source compiled for the host: a call runs every block of its grid in
    turn, one thread each (the block sums' tree has one level; a grid-stride loop covers
    everything from one block)."""

    def __init__(self, tmp_path, module, cache, ctype):
        stem = "%s_%s" % (module.__name__.rsplit(".", 1)[1], ctype)
        include = tmp_path / "include"
        include.mkdir(exist_ok=True)
        (include / "cuda_fp16.h").write_text(HOST_FP16)
        src = tmp_path / (stem + ".cpp")
        src.write_text(PRELUDE + cache.code(ctype))
        lib = tmp_path / (stem + ".so")
        subprocess.run(["g++", "-O1", "-ffp-contract=off", "-shared", "-fPIC",
                        "-I" + str(include), str(src), "-o", str(lib)], check=True)
        self.lib = ctypes.CDLL(str(lib))

    def __call__(self, name, grid, *args):
        fn = getattr(self.lib, name)
        conv = []
        for a in args:
            if a is None or (isinstance(a, np.uint64) and a == 0):  # a null pointer
                conv.append(ctypes.c_void_p(None))
            elif isinstance(a, np.ndarray):
                assert a.flags.c_contiguous
                conv.append(ctypes.c_void_p(a.ctypes.data))
            elif isinstance(a, DeviceArray):  # its buffer's address, as CuPy passes it
                assert a.flags.c_contiguous
                conv.append(ctypes.c_void_p(a.data.ptr))
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


class _HostFunction:
    def __init__(self, lib, name):
        self.lib, self.name = lib, name

    def __call__(self, grid, block, args):
        self.lib(self.name, grid, *args)


@pytest.fixture(scope="module")
def host_libs(tmp_path_factory):
    """The host builds of this module's tests, by (module name, C type), and their folder."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not installed: the CUDA source cannot be built for the host")
    return {}, tmp_path_factory.mktemp("host_cuda")


@pytest.fixture
def host_kernels(host_libs, monkeypatch):
    """ops/gpu/fused.py's (and channels.py's) launches sent to the host build of their
    kernels; ops.train_fused takes them inside ``forced(True)`` (on host or simulated device
    arrays, which stand for CuPy's there)."""
    libs, tmp_path = host_libs

    class Module:
        def __init__(self, module):
            self.module, self.cache = module, module._MODULE

        def function(self, name, ctype):
            key = (self.module.__name__, ctype)
            if key not in libs:
                libs[key] = HostKernels(tmp_path, self.module, self.cache, ctype)
            return _HostFunction(libs[key], name)

    def launch(function, n, args):
        if int(n) > 0:
            function((int(n) if function.name in PER_ITEM else 1, 1), (1,), args)

    for module in (gpu_fused, gpu_channels):
        monkeypatch.setattr(module, "_MODULE", Module(module))
        monkeypatch.setattr(module, "launch", launch)
    monkeypatch.setattr(gpu_fused, "BLOCK", 1)
    monkeypatch.setattr(train_fused, "_kernels", lambda *arrays: _FORCE["on"])
    return libs


@pytest.fixture(scope="module")
def host_half(host_libs):
    """The host's C++ compiler has ``_Float16`` (x86-64, GCC 12 on), for the float16 builds."""
    tmp_path = host_libs[1]
    src = tmp_path / "float16_check.cpp"
    src.write_text("_Float16 h(float f) { return (_Float16)f; }\n")
    r = subprocess.run(["g++", "-c", str(src), "-o", str(tmp_path / "float16_check.o")],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("g++ has no _Float16 here (x86-64 and GCC 12 or later needed): %s"
                    % r.stderr.strip()[:200])


def reference_forward(x, gamma, beta, eps, relu, mean=None, var=None):
    """The layers' formulas in float64: x_hat, y, and the batch's mean and variance."""
    x = x.astype(np.float64)
    if mean is None:
        mean, var = x.mean(axis=(0, 2)), x.var(axis=(0, 2))
    xhat = (x - mean[:, None]) / np.sqrt(var + eps)[:, None]
    y = xhat * (1 if gamma is None else gamma[:, None]) + (0 if beta is None else beta[:, None])
    return xhat, (np.maximum(y, 0) if relu else y), mean, var


#: (shape, relu, bias, global_stats) of the chain kernels built for the host: every branch of
#: the kernels (one channel, one element per channel, global statistics)
CHAIN_CASES = [
    ((3, 5, 7), True, True, False), ((2, 3, 1), False, False, False),
    ((4, 1, 300), True, False, False), ((3, 5, 7), True, True, True),
    ((2, 7, 9), False, True, True)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,relu,bias,global_stats", CHAIN_CASES)
def test_the_cuda_chain_kernels_built_for_the_host(host_kernels, dtype, shape, relu, bias,
                                                   global_stats):
    n, c, s = shape
    eps, f = 1e-3, 0.9
    m = n * s
    rtol, atol = (2e-5, 1e-5) if dtype == np.float32 else (1e-11, 1e-12)
    # the kernels (forced onto the host build) and the generic code, on the same inputs
    outs, inp = _bn_paths(shape, relu, bias, global_stats, sum(shape), dtype, dtype)
    x, gamma, beta, running = inp["x"], inp["gamma"], inp["beta"], inp["running"]
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
    dz = inp["dy"] * (y > 0) if relu else inp["dy"].astype(np.float64)
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



def _bn_paths(shape, relu, bias, global_stats, seed, dtype=np.float16, stat_dtype=np.float32):
    """The BatchNorm -> Scale -> ReLU forward and backward on ``dtype`` data (the Scale's
    params and diffs too; BatchNorm's running sums ``stat_dtype``: float32 for float16 data,
    as in a float16 net) through the kernels and through the generic code, on the same
    inputs; and the inputs."""
    rng = np.random.default_rng(seed)
    n, c, s = shape
    x = rng.normal(3.0, 2.0, shape).astype(dtype)  # a mean far from 0: the shifted sums
    gamma = rng.uniform(0.5, 1.5, c).astype(dtype)
    beta = rng.uniform(-0.5, 0.5, c).astype(dtype) if bias else None
    running = [rng.uniform(0.5, 2, c).astype(stat_dtype) for _ in range(2)] + \
        [np.array([2.0], stat_dtype)]
    dy = rng.normal(size=shape).astype(dtype)
    outs = {}
    for path in ("kernels", "generic"):
        work = train_fused.Workspace()
        run = [r.copy() for r in running]
        y, xhat = np.empty_like(x), np.empty_like(x)
        with forced(path == "kernels"):
            std = train_fused.bn_forward(x, y, xhat, gamma, beta, run, global_stats, 1e-3, 0.9,
                                         relu, work).copy()
        dx, dtop = np.empty_like(x), np.empty_like(x)
        dgamma = np.full(c, 0.25, dtype)
        dbeta = None if beta is None else np.full(c, -1, dtype)
        with forced(path == "kernels"):
            train_fused.bn_backward(dy, y, xhat, std, gamma, dgamma, dbeta, dx, dtop,
                                    global_stats, relu, work)
        outs[path] = dict(y=y, xhat=xhat, std=std, running=run, dx=dx, dtop=dtop,
                          dgamma=dgamma, dbeta=dbeta)
    return outs, dict(x=x, gamma=gamma, beta=beta, running=running, dy=dy)


def _close(got, want, rel, name, scale=None):
    """Within ``rel`` of ``want``'s largest magnitude (or of ``scale``: the terms' that cancel
    in it), elementwise (float16 keeps 11 bits: a rounding is 4.9e-4 of the value)."""
    want = np.asarray(want, np.float64)
    scale = np.abs(want).max() if scale is None else scale
    np.testing.assert_allclose(np.asarray(got, np.float64), want, rtol=rel,
                               atol=rel * max(scale, 1e-30), err_msg=name)


@pytest.mark.parametrize("shape,relu,bias,global_stats", CHAIN_CASES)
def test_the_half_chain_kernels_built_for_the_host(host_kernels, host_half, shape, relu, bias,
                                                   global_stats):
    outs, inp = _bn_paths(shape, relu, bias, global_stats, sum(shape))
    k, g = outs["kernels"], outs["generic"]
    assert ("pycaffe_lite.ops.gpu.fused", "half") in host_kernels  # the half build ran
    # the dtypes of a float16 net: data and the Scale's diffs float16, statistics float32
    for name in ("y", "xhat", "dx", "dtop", "dgamma"):
        assert k[name].dtype == np.float16, name
    assert k["std"].dtype == np.float32 and all(r.dtype == np.float32 for r in k["running"])
    n, c, s = shape
    m = n * s
    x, gamma, beta, dy = inp["x"], inp["gamma"], inp["beta"], inp["dy"]
    mean_sum, var_sum, weight = (r.astype(np.float64) for r in inp["running"])
    if global_stats:
        mean, var = mean_sum / weight[0], var_sum / weight[0]
        xhat, y, _, _ = reference_forward(x, gamma, beta, 1e-3, relu, mean, var)
    else:
        xhat, y, mean, var = reference_forward(x, gamma, beta, 1e-3, relu)
        # float32 running sums from the double sums of the float16 data
        np.testing.assert_allclose(k["running"][0], 0.9 * mean_sum + mean, rtol=1e-6,
                                   atol=1e-6)
        np.testing.assert_allclose(k["running"][1], 0.9 * var_sum + var * m / (m - 1),
                                   rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(k["running"][2], [0.9 * 2 + 1], rtol=1e-7)
    np.testing.assert_allclose(k["std"], np.sqrt(var + 1e-3), rtol=1e-6)
    # every float16 value: the float math rounded once (the stored x_hat, then y from it in
    # float)
    _close(k["xhat"], xhat, 1e-3, "xhat")
    _close(k["y"], y, 1e-3, "y")
    # the backward from the kernels' own y and x_hat (float16), as the layers would take them
    xh = k["xhat"].astype(np.float64)
    dz = dy * (k["y"] > 0) if relu else dy.astype(np.float64)
    _close(k["dgamma"], 0.25 + (dz * xh).sum(axis=(0, 2)), 2e-3, "dgamma")
    if bias:
        _close(k["dbeta"], -1 + dz.sum(axis=(0, 2)), 2e-3, "dbeta")
    dxh = dz * gamma[:, None]
    _close(k["dtop"], dxh, 1e-3, "dtop")
    if not global_stats:
        dxh = dxh - dxh.mean(axis=(0, 2))[:, None] - \
            (dxh * xh).mean(axis=(0, 2))[:, None] * xh
    terms = np.abs(dz * gamma[:, None] / np.sqrt(var + 1e-3)[:, None]).max()
    _close(k["dx"], dxh / np.sqrt(var + 1e-3)[:, None], 2e-3, "dx", terms)
    # the generic code computes in float16 as the layers do: the same values to a few
    # float16 roundings
    for name in ("y", "xhat", "std", "dx", "dtop", "dgamma", "dbeta"):
        if k[name] is not None:
            _close(g[name], k[name], 1e-2, name, terms if name == "dx" else None)
    for a, b in zip(g["running"], k["running"]):
        _close(a, b, 2e-3, "running")


@pytest.mark.parametrize("coeffs,relu", [([1, 1], True), ([0.5, -2, 1], True),
                                         ([1, 3, -1, 0.25], False), ([2, 1], False)])
def test_the_half_sum_kernels_built_for_the_host(host_kernels, host_half, coeffs, relu):
    rng = np.random.default_rng(len(coeffs) + 10)
    shape = (3, 4, 5)
    xs = [rng.normal(size=shape).astype(np.float16) for _ in coeffs]
    dy0 = rng.normal(size=shape).astype(np.float16)
    outs = {}
    for path in ("kernels", "generic"):
        y, dy = np.empty(shape, np.float16), dy0.copy()
        dxs = [np.empty(shape, np.float16) for _ in coeffs]
        dxs[1] = None  # a bottom without a gradient
        with forced(path == "kernels"):
            train_fused.sum_forward(xs, coeffs, y, relu)
            train_fused.sum_backward(dy, y, coeffs, dxs, relu)
        outs[path] = (y, dy, dxs)
    assert ("pycaffe_lite.ops.gpu.fused", "half") in host_kernels
    y, dz, dxs = outs["kernels"]
    # the weighted sum in float, rounded once: the float64 sum rounded to float16
    ref = sum(c * x.astype(np.float64) for c, x in zip(coeffs, xs))
    ref = np.maximum(ref, 0) if relu else ref
    np.testing.assert_array_equal(y, ref.astype(np.float16))
    np.testing.assert_array_equal(dz, dy0 * (y > 0) if relu else dy0)
    for d, c in zip(dxs, coeffs):
        if d is not None:
            np.testing.assert_array_equal(d, (c * dz.astype(np.float64)).astype(np.float16))
    # the generic code rounds after each product and sum, as the float16 layers do
    gy, gdz, gdxs = outs["generic"]
    _close(gy, y, 4e-3, "y")
    for a, b in zip(gdxs, dxs):
        assert (a is None) == (b is None)
        if a is not None:
            same = (gy > 0) == (y > 0)  # where both ReLUs agree
            _close(a[same], b[same], 4e-3, "dx")


_FORCE = {"on": False}


@contextlib.contextmanager
def forced(on):
    """Inside, ops.train_fused takes the kernels (``on``) or its generic code."""
    old, _FORCE["on"] = _FORCE["on"], on
    try:
        yield
    finally:
        _FORCE["on"] = old


def test_the_chain_runs_inside_a_simulated_cuda_graph(monkeypatch):
    """Captured (no host crossing allowed) and replayed, the chain gives what it gives
    eagerly."""
    text = chain_text((3, 5, 4, 3))
    calls = counting(monkeypatch)

    def run(dev):
        _, net = run_net(text, monkeypatch, True, passes=1)
        eager, replayed = eager_and_replayed(net)
        return eager, replayed, dev.graph_captures, dev.graph_launches

    eager, replayed, captures, launches = on_simulated_device(run)
    assert (captures, launches) == (2, 2) and calls["bn_forward"] == 1 + 1 + 2
    assert_replayed_as_eager(eager, replayed)
    assert np.abs(eager["param sc 0"][1]).max() > 0


# ---- the kernel path end to end: simulated device arrays, kernels built for the host ---------
@pytest.fixture
def kernel_path(host_kernels):
    with forced(True):
        yield


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape,options", [
    ((3, 5, 4, 3), dict()), ((2, 3, 7), dict(global_stats=True)),
    ((4, 2, 5, 5), dict(in_place=False)), ((3, 4, 2, 3), dict(relu=False, bias=False)),
    ((2, 3, 3, 3), dict(scale=False, in_place=False))], ids=str)
def test_chain_kernel_path_on_the_simulated_device(monkeypatch, kernel_path, dtype, shape,
                                                   options):
    text = chain_text(shape, **options)
    c = shape[1]
    stats = (np.linspace(-1, 1, c) * 2.5, np.linspace(0.5, 2, c) * 2.5, [2.5])
    with forced(False):
        expected, _ = run_net(text, monkeypatch, False, dtype, stats=stats)
    calls = counting(monkeypatch)
    got, _ = on_simulated_device(lambda dev: run_net(text, monkeypatch, True, dtype,
                                                     stats=stats))
    assert calls["bn_forward"] == 2 and calls["bn_backward"] == 2
    tol = (1e-5, 1e-6) if dtype == np.float32 else (1e-10, 1e-12)
    assert_same(got, expected, *tol)


@pytest.mark.parametrize("coeffs,relu", [([0.5, -2, 1], True), ([1, 3, -1, 0.25], False)])
def test_sum_kernel_path_on_the_simulated_device(monkeypatch, kernel_path, coeffs, relu):
    text = sum_text((2, 3, 4, 5), coeffs, relu)
    with forced(False):
        expected, _ = run_net(text, monkeypatch, False)
    got, _ = on_simulated_device(lambda dev: run_net(text, monkeypatch, True))
    assert_same(got, expected, 1e-6, 1e-7)


def test_resnet_training_kernel_path_on_the_simulated_device(tmp_path, monkeypatch,
                                                             kernel_path):
    with forced(False):
        expected, _ = train(tmp_path, monkeypatch, False, 3, global_c2=True)
    got, _ = on_simulated_device(lambda dev: train(tmp_path, monkeypatch, True, 3,
                                                   global_c2=True, guard=forbid_to_host(dev)))
    assert_same(got, expected, 1e-4, 1e-6, diff_rtol=1e-3)


def test_graph_replay_kernel_path_on_the_simulated_device(monkeypatch, kernel_path):
    text = chain_text((3, 5, 4, 3))

    def run(dev):
        _, net = run_net(text, monkeypatch, True, passes=1)
        return eager_and_replayed(net)

    eager, replayed = on_simulated_device(run)
    assert_replayed_as_eager(eager, replayed)


@pytest.mark.parametrize("net", ["float16", "mixed"])
def test_float16_net_kernel_path_follows_the_float32_net(monkeypatch, kernel_path, host_half,
                                                         net):
    """A float16 (and a mixed) net's forward and backward with the half kernels built for the
    host (and the float ones for the mixed net's float32 chain) against the same net in
    float32 on the CPU (tests/test_gpu_fused.py runs the same check on a GPU)."""
    float32_twin_check(on_simulated_device, monkeypatch, net)


# ---- a kernel variant that does not compile ------------------------------------------------
def test_a_variant_that_does_not_compile_is_logged_once_and_the_generic_code_runs(
        monkeypatch, caplog):
    """A GPU whose NVRTC cannot compile the half variant (no ``cuda_fp16.h`` on its path):
    one warning with the compiler's reason, then False without compiling again; the float
    variant still compiles and loads."""
    from pycaffe_lite.ops.gpu import _util

    compiled = []

    class Module:
        def __init__(self, code, options):
            compiled.append(code)
            if "cuda_fp16.h" in code:
                raise RuntimeError("catastrophic error: cannot open source file "
                                   "\"cuda_fp16.h\"\n(the rest of the log)")

        def get_function(self, name):
            return name

    fake = type("FakeCuPy", (), {"RawModule": Module, "cuda": type(
        "cuda", (), {"runtime": type("runtime", (), {"getDevice": staticmethod(lambda: 0)})})})
    monkeypatch.setattr(_util, "cupy", lambda: fake)
    cache = _util.RawModuleCache(gpu_fused._MODULE.source, gpu_fused._MODULE.names,
                                 prelude=gpu_fused._MODULE.prelude,
                                 ctypes=gpu_fused._MODULE.ctypes)
    with caplog.at_level("WARNING", logger="pycaffe_lite"):
        assert cache.compiles("half") is False
        assert cache.compiles("half") is False
        assert cache.compiles("float") is True
        assert cache.compiles("float") is True
    assert len(compiled) == 2  # half once, float once (then cached)
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "half kernels" in warnings[0] and "chain_sums" in warnings[0] and \
        'cannot open source file "cuda_fp16.h"' in warnings[0] and \
        "the rest of the log" not in warnings[0]
    assert cache.function("sum_forward", "float") == "sum_forward"


def test_the_chains_take_the_kernels_only_where_their_variant_compiled(monkeypatch):
    monkeypatch.setattr(train_fused._util, "on_gpu", lambda *arrays: True)
    x, stats = np.zeros((2, 3, 4), np.float16), np.zeros(3, np.float32)
    asked = []

    def compiles(ctype):
        asked.append(ctype)
        return ctype != "half"

    monkeypatch.setattr(gpu_fused, "compiles", compiles)
    assert not train_fused._kernels((x, x), (stats,))
    assert train_fused._kernels((x.astype(np.float32),), (stats,))
    assert not train_fused._kernels((x,), (stats.astype(np.float16),))  # no such variant
    assert asked == ["half", "float"]
