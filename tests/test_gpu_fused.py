"""The fused training chains' CUDA kernels (pycaffe_lite/ops/gpu/fused.py) on a real GPU
(``@pytest.mark.gpu``: skipped, with the reason, where there is none), against the same nets on
the CPU with every layer on its own (``PYCAFFE_LITE_TRAIN_FUSE=0``).

Tolerances: float32 ``rtol=1e-4, atol=1e-5`` for values, ``rtol=1e-3`` for a trained net's
diffs (as tests/test_gpu_cupy.py: the GPU sums in another order, in double); float64
``rtol=1e-10, atol=1e-12``. A chain captured in a CUDA graph and replayed gives, bit for bit,
what it gives eagerly (the reductions add in a fixed order).

float16 nets (NVCaffe's FLOAT16 types: the half kernels, float16 data with float32 statistics)
against the same net in float64 on the CPU and in float16 layer by layer on the GPU, within
float16 rounding: each array's relative L2 error (a ReLU that cuts a value within rounding of
0 in one run and not in the other moves one element of a diff by its size, so elementwise
bounds would not hold); and a ResNet-style float16 net against its float32 twin.
"""

import os
import subprocess
import sys

import numpy as np
import pytest
from helpers.fused_nets import (RESNET_CHAINS, RESNET_SUMS, assert_replayed_as_eager,
                                assert_same, chain_text, eager_and_replayed, resnet_text,
                                run_net, sum_text, train)
from test_float16_fused import float32_twin_check

from pycaffe_lite import backend, net_train_fuse
from pycaffe_lite.ops.gpu import _util
from pycaffe_lite.ops.gpu import fused as gpu_fused

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cupy_device")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = {np.float32: (1e-4, 1e-5), np.float64: (1e-10, 1e-12)}


@pytest.fixture
def launches(monkeypatch):
    """Count the calls of ops/gpu/fused.py's launching functions."""
    calls = dict.fromkeys(["batch_statistics", "global_statistics", "chain_apply",
                           "chain_backward", "sum_forward", "sum_backward"], 0)
    for name in calls:
        real = getattr(gpu_fused, name)

        def wrapped(*args, _real=real, _name=name):
            calls[_name] += 1
            return _real(*args)
        monkeypatch.setattr(gpu_fused, name, wrapped)
    return calls


def on_gpu(run):
    backend.set_mode_gpu()
    try:
        return run()
    finally:
        backend.set_mode_cpu()


def test_every_cuda_source_compiles_with_nvrtc():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "check_cuda_sources.py"),
                        "-v"], capture_output=True, text=True, cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=ROOT))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ok  pycaffe_lite.ops.gpu.fused._MODULE (T=double)" in r.stdout
    assert "ok  pycaffe_lite.ops.gpu.fused._MODULE (T=half)" in r.stdout
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    try:
        import check_cuda_sources
    finally:
        sys.path.pop(0)
    broken = _util.RawModuleCache('extern "C" __global__ void f(T* a) { a[0] = b; }', ["f"])
    failures = check_cuda_sources.check(check_cuda_sources.load_nvrtc(),
                                        [("m", "broken", broken)])
    assert len(failures) == 2 and "m.broken (T=float)" in failures[0]


SHAPES = [(2, 3, 7, 5), (3, 17, 9, 11), (8, 3, 40, 41), (5, 2, 1, 1), (2, 4, 300)]
OPTIONS = [dict(), dict(global_stats=True), dict(in_place=False), dict(relu=False, bias=False),
           dict(scale=False, in_place=False)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o) or "default")
def test_chain_kernels_match_the_cpu_layers(monkeypatch, launches, dtype, shape, options):
    text = chain_text(shape, **options)
    c = shape[1]
    stats = (np.linspace(-1, 1, c) * 2.5, np.linspace(0.5, 2, c) * 2.5, [2.5])
    expected, _ = run_net(text, monkeypatch, False, dtype, stats=stats)
    got, net = on_gpu(lambda: run_net(text, monkeypatch, True, dtype, stats=stats))
    assert len(net._train_fuse.chains) == 1
    statistics = "global_statistics" if options.get("global_stats") else "batch_statistics"
    assert launches[statistics] == 2 and launches["chain_apply"] == 2
    assert launches["chain_backward"] == 2
    assert_same(got, expected, *TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("coeffs,relu", [([1, 1], True), ([0.5, -2, 1], True),
                                         ([1, 3, -1, 0.25], False), ([2, 1], False),
                                         ([1, 1, 1, 1, 1], True)])
def test_sum_kernels_match_the_cpu_layers(monkeypatch, launches, dtype, coeffs, relu):
    text = sum_text((3, 5, 7, 9), coeffs, relu)
    expected, _ = run_net(text, monkeypatch, False, dtype)
    got, net = on_gpu(lambda: run_net(text, monkeypatch, True, dtype))
    kernel = 2 if len(coeffs) <= gpu_fused.MAX_SUM_BOTTOMS else 0  # more: the generic code
    assert launches["sum_forward"] == kernel and launches["sum_backward"] == kernel
    assert_same(got, expected, *TOL[dtype])


@pytest.mark.parametrize("global_c2", [False, True])
def test_a_resnet_block_trains_on_the_gpu_as_on_the_cpu(tmp_path, monkeypatch, launches,
                                                        global_c2):
    expected, _ = train(tmp_path, monkeypatch, False, 4, global_c2=global_c2,
                        shape=(6, 3, 15, 13))
    got, net = on_gpu(lambda: train(tmp_path, monkeypatch, True, 4, global_c2=global_c2,
                                    shape=(6, 3, 15, 13)))
    fusion = net._train_fuse
    assert [[net.layer_names[i] for i in c.indices] for c in fusion.chains] == RESNET_CHAINS
    assert [[net.layer_names[i] for i in c.indices] for c in fusion.sums] == RESNET_SUMS
    assert launches["chain_apply"] == 3 * 5 and launches["sum_backward"] == 2 * 5
    assert_same(got, expected, 1e-4, 1e-5, diff_rtol=1e-3)


def test_kernels_off_run_the_generic_code_on_cupy(monkeypatch, launches):
    text = chain_text((3, 5, 6, 7))
    expected, _ = run_net(text, monkeypatch, False)
    old = _util.set_kernels_enabled(False)
    try:
        got, _ = on_gpu(lambda: run_net(text, monkeypatch, True))
    finally:
        _util.set_kernels_enabled(old)
    assert sum(launches.values()) == 0
    assert_same(got, expected, *TOL[np.float32])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_chain_replays_from_a_cuda_graph_bit_for_bit(monkeypatch, launches, dtype):
    text = chain_text((4, 7, 33, 35))

    def run():
        _, net = run_net(text, monkeypatch, True, dtype, passes=1)
        return eager_and_replayed(net)

    eager, replayed = on_gpu(run)
    # run_net's, the eager one's and the capture's (a replay calls no Python)
    assert launches["chain_apply"] == 3
    assert_replayed_as_eager(eager, replayed)
    assert net_train_fuse.enabled_by_default()


def test_a_resnet_text_runs_without_fusion_too(tmp_path, monkeypatch, launches):
    """PYCAFFE_LITE_TRAIN_FUSE=0 on the GPU: the layers' own kernels, the same values."""
    assert "Eltwise" in resnet_text()
    fused, _ = on_gpu(lambda: train(tmp_path, monkeypatch, True, 2))
    plain, net = on_gpu(lambda: train(tmp_path, monkeypatch, False, 2))
    assert net._train_fuse is None
    assert_same(plain, fused, 1e-4, 1e-5, diff_rtol=1e-3)


# ---- float16 nets: the half kernels ------------------------------------------------------------
HALF = "default_forward_type: FLOAT16 default_backward_type: FLOAT16\n"


def half_chain_text(shape, **options):
    """:func:`chain_text` in float16: the layer before the chain a float16 Bias (adding 0.5,
    as the float32 text's Power; not learned), so that the chain in place on its top is
    float16 too."""
    power = 'type: "Power" bottom: "x" top: "h" power_param { shift: 0.5 }'
    text = chain_text(shape, **options)
    assert text.count(power) == 1
    return HALF + text.replace(power, 'type: "Bias" bottom: "x" top: "h" param { lr_mult: 0 } '
                               'bias_param { filler { type: "constant" value: 0.5 } }')


def relative_errors(got, expected):
    """{"NAME data"/"NAME diff": relative L2 error of ``got`` against ``expected``} (both
    :func:`helpers.fused_nets.values`), in float64."""
    errors = {}
    for name, pair in expected.items():
        for what, a, b in zip(("data", "diff"), got[name], pair):
            a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
            norm = np.linalg.norm(b)
            errors[name + " " + what] = np.linalg.norm(a - b) / norm if norm else \
                np.abs(a).max(initial=0)
    return errors


@pytest.mark.parametrize("shape", [(2, 3, 7, 5), (3, 17, 9, 11), (8, 3, 40, 41), (2, 4, 300)],
                         ids=str)
@pytest.mark.parametrize("options", OPTIONS, ids=lambda o: "-".join(o) or "default")
def test_half_chain_kernels_match_float64_and_the_float16_layers(monkeypatch, launches, shape,
                                                                 options):
    text = half_chain_text(shape, **options)
    c = shape[1]
    stats = (np.linspace(-1, 1, c) * 2.5, np.linspace(0.5, 2, c) * 2.5, [2.5])
    exact, _ = run_net(text, monkeypatch, False, np.float64, stats=stats)  # CPU: float64
    layers, plain = on_gpu(lambda: run_net(text, monkeypatch, False, stats=stats))
    assert plain._train_fuse is None and sum(launches.values()) == 0
    got, net = on_gpu(lambda: run_net(text, monkeypatch, True, stats=stats))
    assert len(net._train_fuse.chains) == 1
    top = "h" if options.get("in_place", True) else "hb"
    assert net.blobs[top].dtype == np.float16 and net.params["bn"][0].dtype == np.float32
    statistics = "global_statistics" if options.get("global_stats") else "batch_statistics"
    assert launches[statistics] == 2 and launches["chain_apply"] == 2
    assert launches["chain_backward"] == 2
    # float16 data, the float math rounded once: near the float64 values; the float16 layers
    # round after every operation (and sum in float16): near, not equal. (The Bias's gradient
    # is left out: with batch statistics BatchNorm's output does not move with a shift of its
    # input, so it is 0 but for rounding.)
    for reference, bound in ((exact, 5e-3), (layers, 2e-2)):
        errors = relative_errors(got, reference)
        errors = {k: v for k, v in errors.items() if k != "param copy 0 diff"}
        assert max(errors.values()) < bound, sorted(errors.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.parametrize("coeffs,relu", [([1, 1], True), ([0.5, -2, 1], True),
                                         ([1, 3, -1, 0.25], False), ([2, 1], False)])
def test_half_sum_kernels_match_float64_and_the_float16_layers(monkeypatch, launches, coeffs,
                                                               relu):
    text = HALF + sum_text((3, 5, 7, 9), coeffs, relu)
    exact, _ = run_net(text, monkeypatch, False, np.float64)
    layers, _ = on_gpu(lambda: run_net(text, monkeypatch, False))
    got, net = on_gpu(lambda: run_net(text, monkeypatch, True))
    assert net.blobs["s"].dtype == np.float16
    assert launches["sum_forward"] == 2 and launches["sum_backward"] == 2
    errors = relative_errors(got, exact)
    assert max(errors.values()) < 3e-3, sorted(errors.items(), key=lambda kv: -kv[1])[:3]
    errors = relative_errors(got, layers)
    assert max(errors.values()) < 5e-3, sorted(errors.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.parametrize("net", ["float16", "mixed"])
def test_a_float16_net_with_the_half_kernels_follows_its_float32_twin(monkeypatch, launches,
                                                                       net):
    float32_twin_check(lambda run: on_gpu(run), monkeypatch, net)
    assert launches["chain_apply"] == 3 and launches["sum_backward"] == 2


def test_a_half_chain_replays_from_a_cuda_graph_bit_for_bit(monkeypatch, launches):
    text = half_chain_text((4, 7, 33, 35))

    def run():
        _, net = run_net(text, monkeypatch, True, passes=1)
        assert net.blobs["h"].dtype == np.float16
        return eager_and_replayed(net)

    eager, replayed = on_gpu(run)
    assert launches["chain_apply"] == 3
    assert_replayed_as_eager(eager, replayed)
