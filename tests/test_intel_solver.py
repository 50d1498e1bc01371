"""Intel Caffe's (intel/caffe) solver options: the linear warm-up, the "multifixed" policy
(stagelr, stageiter), LARS (local_lr_auto, local_gw_ratio), disabled_update, test_offset and
the solver's engine, each against a hand computation of a few iterations of the tiny linear
net of test_nvcaffe_solver.py, written here in float64 NumPy from the fork's
src/caffe/solvers/sgd_solver.cpp (GetWarmUpLR, GetLearningRate, GetLocalRate, SGDFusion: the
CPU update of its default builds) and src/caffe/solver.cpp (Step, Solve: disabled_update,
test_offset; InitTrainNet: engine); the fork's published solver files; bad values."""

import logging
import os

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite import backend
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2, protoio
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing.simdevice import simulated_device

from test_nvcaffe_solver import (DECAY_MULTS, LR_MULTS, NET, X, Y, assert_close,  # noqa: E402
                                 gradients, history, make_solver, settings_text, weights)

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


# ---- the reference: the fork's formulas in float64 ------------------------------------------
def ref_rate(s, it):
    base = s["base_lr"]
    warmup = s.get("warmup_iter", 0)
    if warmup > 0 and it < warmup:  # GetWarmUpLR: a straight line, the policy not consulted
        start = s.get("warmup_start_lr", 0.0)
        return (it * base + (warmup - it) * start) / warmup
    policy = s["lr_policy"]
    if policy == "fixed":
        return base
    if policy == "multistep":
        return base * s.get("gamma", 1.0) ** sum(it >= v for v in s.get("stepvalue", ()))
    if policy == "poly":
        return base * (1 - it / s["max_iter"]) ** s["power"]
    if policy == "multifixed":
        for lr, until in zip(s["stagelr"], s["stageiter"]):
            if it <= until:
                return lr
        return s["stagelr"][-1]
    raise AssertionError(policy)


def lars(s, w, g):
    """GetLocalRate with local_lr_auto: local_gw_ratio * |w| / (|g| + weight_decay * |w|),
    1 where a norm is 0 (weight_decay the solver's, whatever the param's decay_mult)."""
    w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
    if w_norm > 0 and g_norm > 0:
        return s.get("local_gw_ratio", 0.001) * w_norm / \
            (g_norm + s.get("weight_decay", 0.0) * w_norm)
    return 1.0


def reference(s, w, iters, it0=0):
    """``(weights, histories)`` after ``iters`` iterations of the fork's SGD from ``w``."""
    w = [a.copy() for a in w]
    hist = [np.zeros_like(a) for a in w]
    m, wd = s.get("momentum", 0.0), s.get("weight_decay", 0.0)
    for it in range(it0, it0 + iters):
        if s.get("disabled_update"):
            continue
        rate = ref_rate(s, it)
        for i, g in enumerate(gradients(w)):
            if LR_MULTS[i] == 0:  # ApplyUpdate returns before anything for lr_mult 0
                continue
            local = lars(s, w[i], g) if s.get("local_lr_auto") else LR_MULTS[i]
            hist[i] = m * hist[i] + rate * local * (g + wd * DECAY_MULTS[i] * w[i])
            w[i] = w[i] - hist[i]
    return w, hist


def run_against_reference(tmp_path, s, iters=5, kind="SGD"):
    solver = make_solver(tmp_path, settings_text(s), kind)
    w0 = weights(solver)
    solver.step(iters)
    w, hist = reference(s, w0, iters)
    assert_close(weights(solver), w)
    assert_close(history(solver), hist)
    return solver, w0


# ---- the warm-up and multifixed -------------------------------------------------------------
RATES = {
    # from warmup_start_lr up to base_lr, then multistep (a step inside the warm-up is not
    # taken until the warm-up ends, as the fork's policy is not consulted until then)
    "multistep": dict(base_lr=0.8, lr_policy="multistep", stepvalue=[6, 9], gamma=0.1,
                      warmup_iter=5, warmup_start_lr=0.1),
    "poly": dict(base_lr=3.0, lr_policy="poly", power=2.0, max_iter=12, warmup_iter=4,
                 warmup_start_lr=1.0),
    # the default warmup_start_lr: 0 at iteration 0
    "from_zero": dict(base_lr=0.5, lr_policy="fixed", warmup_iter=4),
    # multifixed: stagelr[k] up to and including stageiter[k]; base_lr is not read
    "multifixed": dict(base_lr=9.0, lr_policy="multifixed", stagelr=[0.001, 0.01, 0.002],
                       stageiter=[2, 6, 8]),
    "warmup_multifixed": dict(base_lr=0.05, lr_policy="multifixed", stagelr=[0.02, 0.004],
                              stageiter=[6, 9], warmup_iter=3, warmup_start_lr=0.01),
}


@pytest.mark.parametrize("name", sorted(RATES))
def test_learning_rate_schedule(tmp_path, name):
    s = RATES[name]
    solver = make_solver(tmp_path, settings_text(s))
    rates = []
    for it in range(12):  # in order: multistep's step counter moves as the fork's
        solver.iter = it
        rates.append(solver.get_learning_rate())
    np.testing.assert_allclose(rates, [ref_rate(s, it) for it in range(12)], rtol=1e-6)


def test_schedules_by_hand(tmp_path):
    # warm-up 0.1 -> 0.8 over 5 iterations: iteration 2 is (2 * 0.8 + 3 * 0.1) / 5 = 0.38
    solver = make_solver(tmp_path, settings_text(RATES["multistep"]))
    solver.iter = 2
    assert solver.lr == pytest.approx(0.38, rel=1e-6)
    # multifixed: iteration 2 is still the first stage, 3 the second, 20 the last
    solver = make_solver(tmp_path, settings_text(RATES["multifixed"]))
    got = []
    for it in (2, 3, 6, 7, 20):
        solver.iter = it
        got.append(solver.get_learning_rate())
    np.testing.assert_allclose(got, [0.001, 0.01, 0.01, 0.002, 0.002], rtol=1e-6)


@pytest.mark.parametrize("name", ["multistep", "poly", "warmup_multifixed"])
def test_warmup_trains_as_the_reference(tmp_path, name):
    # a stable step on the tiny net
    s = dict(RATES[name], momentum=0.9, weight_decay=0.01, base_lr=0.2, warmup_start_lr=0.02)
    run_against_reference(tmp_path, s, iters=7)


def test_warmup_with_nesterov_follows_the_rate(tmp_path):
    """The warm-up is the learning rate of every solver type (GetLearningRate)."""
    s = dict(base_lr=0.1, lr_policy="fixed", warmup_iter=3, warmup_start_lr=0.02)
    solver = make_solver(tmp_path, settings_text(s), "Nesterov")
    got = []
    for it in range(4):
        solver.iter = it
        got.append(solver.lr)
    np.testing.assert_allclose(got, [0.02, 0.02 + 0.08 / 3, 0.02 + 0.16 / 3, 0.1], rtol=1e-6)


# ---- LARS -----------------------------------------------------------------------------------
LARS = {
    "ratio": dict(base_lr=2.0, lr_policy="fixed", momentum=0.9, weight_decay=0.01,
                  local_lr_auto=True, local_gw_ratio=0.02),
    "warmup_poly": dict(base_lr=4.0, lr_policy="poly", power=2.0, max_iter=20, momentum=0.9,
                        weight_decay=0.0005, local_lr_auto=True, warmup_iter=3,
                        warmup_start_lr=1.0),
}


@pytest.mark.parametrize("name", sorted(LARS))
def test_lars_trains_as_the_reference(tmp_path, name):
    run_against_reference(tmp_path, LARS[name])


def test_lars_rate_by_hand(tmp_path):
    """One step without momentum: each param moves by base_lr * ratio * |w| / (|g| + wd |w|)
    times (g + wd * decay_mult * w); lr_mult 1, 2 and 0.5 all give way to that rate, the
    frozen bias stays; ip1's bias (decay_mult 0) still has weight_decay in the denominator."""
    s = dict(base_lr=0.5, lr_policy="fixed", weight_decay=0.1, local_lr_auto=True,
             local_gw_ratio=0.05)
    solver = make_solver(tmp_path, settings_text(s))
    w0 = weights(solver)
    solver.step(1)
    g = gradients(w0)
    for i in (0, 1, 2):
        wn, gn = np.linalg.norm(w0[i]), np.linalg.norm(g[i])
        step = 0.5 * 0.05 * wn / (gn + 0.1 * wn) * (g[i] + 0.1 * DECAY_MULTS[i] * w0[i])
        np.testing.assert_allclose(w0[i] - weights(solver)[i], step, rtol=2e-5)
    np.testing.assert_array_equal(weights(solver)[3], w0[3])


def test_lars_on_the_simulated_gpu_runs_layer_by_layer_and_matches_the_cpu(tmp_path, caplog):
    s = LARS["warmup_poly"]
    cpu = make_solver(tmp_path, settings_text(s))
    cpu.step(5)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        gpu = make_solver(tmp_path, settings_text(s))
        with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
            gpu.step(5)
        assert dev.graph_captures == 0
        assert "LARS" in gpu.train_graph.why_not()
        got, hist = weights(gpu), history(gpu)
    told = [r for r in caplog.records if "not in a CUDA graph" in r.getMessage()]
    assert len(told) == 1 and "LARS" in told[0].getMessage()
    assert_close(got, weights(cpu), rtol=1e-6, atol=1e-8)
    assert_close(hist, history(cpu), rtol=1e-5, atol=1e-9)


def test_warmup_replays_in_a_cuda_graph(tmp_path):
    """The warm-up changes the rate alone, uploaded each iteration: the iterations are
    captured, and the replays give the reference."""
    from pycaffe_lite import cuda_graphs
    s = dict(base_lr=0.2, lr_policy="poly", power=1.0, max_iter=10, momentum=0.9,
             weight_decay=0.01, warmup_iter=4, warmup_start_lr=0.05)
    old = cuda_graphs.set_enabled(True)
    try:
        with simulated_device() as dev:
            backend.set_mode_gpu()
            solver = make_solver(tmp_path, settings_text(s))
            w0 = weights(solver)
            solver.step(6)
            got = weights(solver)
            assert dev.graph_captures == 1 and dev.graph_launches == 5
    finally:
        cuda_graphs.set_enabled(old)
    w, _ = reference(s, w0, 6)
    assert_close(got, w)


# ---- disabled_update, test_offset, engine ---------------------------------------------------
def test_disabled_update_keeps_the_weights(tmp_path, caplog):
    s = dict(base_lr=0.1, lr_policy="fixed", momentum=0.9, disabled_update=True, display=1)
    solver = make_solver(tmp_path, settings_text(s))
    w0 = weights(solver)
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        solver.step(3)
    assert solver.iter == 3
    assert_close(weights(solver), w0, rtol=0, atol=0)
    assert all(not h.any() for h in history(solver))
    # the loss of the unchanged weights, and the rate still logged (PrintLearningRate)
    out = X @ w0[0].T + w0[1]
    out = (out @ w0[2].T + w0[3])[:, 0]
    assert solver.smoothed_loss == pytest.approx(np.sum((out - Y) ** 2) / 8, rel=1e-5)
    assert any("Iteration 2, lr = 0.1" in r.getMessage() for r in caplog.records)
    # the gradients were computed (the update alone is skipped)
    g = gradients(w0)
    np.testing.assert_allclose(solver.net.learnable_params[0].diff, g[0], rtol=1e-5)


def test_disabled_update_on_the_simulated_gpu(tmp_path):
    s = dict(base_lr=0.1, lr_policy="fixed", momentum=0.9, disabled_update=True)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        solver = make_solver(tmp_path, settings_text(s))
        w0 = weights(solver)
        solver.step(4)
        assert dev.graph_captures == 0
        assert_close(weights(solver), w0, rtol=0, atol=0)


@pytest.mark.parametrize("offset, interval, init, expected", [
    (2, 4, True, [2, 6, 10]),        # 10: the test after the last iteration (Solve)
    (1, 4, True, [1, 5, 9]),
    (4, 4, True, [0, 4, 8]),         # (0 - 4) % 4 == 0: at 0 where test_initialization
    (4, 4, False, [4, 8]),
    (0, 5, False, [5, 10]),
    (-3, 5, False, [2, 7]),
])
def test_test_offset_shifts_the_tests(tmp_path, offset, interval, init, expected):
    s = dict(base_lr=0.01, lr_policy="fixed", max_iter=10, test_interval=interval,
             test_offset=offset, test_initialization=init, test_iter=[1])
    solver = make_solver(tmp_path, settings_text(s))
    done = []
    solver.test_all = lambda: done.append(solver.iter)
    solver.solve()
    ref = [it for it in range(10) if (it - offset) % interval == 0 and (it > 0 or init)]
    ref += [10] if (10 - offset) % interval == 0 else []
    assert done == ref == expected


@pytest.mark.parametrize("engine", ["MKLDNN", "MKL2017", "CAFFE"])
def test_solver_engine_reaches_the_layers_and_changes_nothing(tmp_path, caplog, engine):
    s = dict(base_lr=0.1, lr_policy="fixed", momentum=0.9, weight_decay=0.01, engine=engine)
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        solver, _ = run_against_reference(tmp_path, s, iters=3)
    assert [layer.engine for layer in solver.net.param.layer] == [engine] * 4
    assert any("engine \"%s\"" % engine in r.getMessage() and "Intel Caffe" in r.getMessage()
               for r in caplog.records)


def test_solver_engine_takes_the_place_of_the_nets(tmp_path):
    """The fork's InitTrainNet sets the net's engine to the solver's."""
    s = dict(base_lr=0.1, lr_policy="fixed", engine="CAFFE")
    param = caffe_pb2.SolverParameter()
    text_format.Merge(settings_text(s) + ' snapshot_prefix: "%s"' % (tmp_path / "s"), param)
    text_format.Merge(NET, param.net_param)
    param.net_param.engine = "MKLDNN"
    solver = get_solver(param)
    assert [layer.engine for layer in solver.net.param.layer] == ["CAFFE"] * 4


# ---- Intel Caffe's own solver files -----------------------------------------------------------
def _fork_file(name, tmp_path):
    param = protoio.read_solver_param(os.path.join(REAL, name))
    param.ClearField("net")
    param.ClearField("test_iter")
    param.ClearField("test_interval")
    param.snapshot_prefix = str(tmp_path / "snap")
    text_format.Merge(NET, param.net_param)
    return param


def _settings_of(param):
    s = {k: getattr(param, k) for k in ("base_lr", "lr_policy", "momentum", "weight_decay",
                                        "power", "max_iter", "gamma")}
    for k in ("warmup_iter", "warmup_start_lr", "local_lr_auto", "local_gw_ratio"):
        if param.HasField(k):
            s[k] = getattr(param, k)
    for k in ("stepvalue", "stagelr", "stageiter"):
        s[k] = list(getattr(param, k))
    return s


@pytest.mark.parametrize("name, expected, it0", [
    ("intel_resnet50_benchmark_solver.prototxt",
     dict(lr_policy="multistep", warmup_iter=3125, warmup_start_lr=0.1, base_lr=0.8), 0),
    ("intel_alexnet_bn_32nodes_solver.prototxt",
     dict(local_lr_auto=True, local_gw_ratio=0.001, warmup_iter=400, base_lr=33.0,
          lr_policy="poly"), 0),
    # the rates of stages 1 and 2 (stageiter 1000), from iteration 998
    ("intel_yolov2_solver.prototxt",
     dict(lr_policy="multifixed", stageiter=[1000, 40000, 60000, 80000]), 998),
    ("intel_resnet50_4nodes_4s_solver.prototxt",
     dict(warmup_iter=5004, lr_policy="multistep"), 0),
])
def test_the_forks_solver_files_train_as_the_reference(tmp_path, name, expected, it0):
    param = _fork_file(name, tmp_path)
    s = _settings_of(param)
    for k, v in expected.items():
        assert s[k] == pytest.approx(v) if isinstance(v, float) else s[k] == v
    solver = get_solver(param)
    solver.net.set_input_arrays(X.reshape(4, 3, 1, 1).astype(np.float32),
                                Y.astype(np.float32))
    solver.iter = it0
    w0 = weights(solver)
    solver.step(4)
    w, hist = reference(s, w0, 4, it0=it0)
    assert_close(history(solver), hist, rtol=1e-4, atol=1e-10)
    assert_close(weights(solver), w, rtol=1e-4, atol=1e-7)


def test_the_forks_test_offset_file_tests_on_its_schedule(tmp_path):
    """resnet50_4nodes_4s: test_interval 1251, test_offset 0, no test at iteration 0; run from
    iteration 1249 to 1253 (max_iter lowered): one test, at 1251."""
    name = "intel_resnet50_4nodes_4s_solver.prototxt"
    param = protoio.read_solver_param(os.path.join(REAL, name))
    assert param.HasField("test_offset") and param.test_offset == 0
    assert param.test_interval == 1251 and not param.test_initialization
    param.ClearField("net")
    param.snapshot_prefix = str(tmp_path / "snap")
    param.max_iter, param.snapshot, param.test_iter[:] = 1253, 0, [1]
    text_format.Merge(NET, param.net_param)
    solver = get_solver(param)
    solver.net.set_input_arrays(X.reshape(4, 3, 1, 1).astype(np.float32),
                                Y.astype(np.float32))
    done = []
    solver.test_all = lambda: done.append(solver.iter)
    solver.iter = 1249
    solver.solve()
    assert solver.iter == 1253 and done == [1251]


# ---- bad values -----------------------------------------------------------------------------
F = 'lr_policy: "fixed" max_iter: 10 '


@pytest.mark.parametrize("settings, kind, match", [
    (F + "warmup_iter: -2", "SGD", r":\d+: warmup_iter: must be >= 0"),
    (F + "warmup_iter: 3 warmup_start_lr: -0.5", "SGD", r":\d+: warmup_start_lr: must be >= 0"),
    (F + "warmup_iter: 3 rampup_interval: 4", "SGD", r":\d+: warmup_iter: .*two warm-ups"),
    (F + "warmup_iter: 3 burn_in: 4", "SGD", r":\d+: warmup_iter: .*two warm-ups"),
    (F + "local_lr_auto: true", "Adam", r":\d+: local_lr_auto: .*SGD solver only.*\"Adam\""),
    (F + "local_lr_auto: true momentum: 0.9", "Nesterov", r":\d+: local_lr_auto: .*Nesterov"),
    (F + "local_lr_auto: true local_gw_ratio: 0", "SGD", r":\d+: local_gw_ratio: must be > 0"),
    (F + "local_lr_auto: true larc: true", "SGD", r":\d+: local_lr_auto: .*larc"),
    (F + 'engine: "TPU"', "SGD", r":\d+: engine: unknown engine \"TPU\""),
    ('lr_policy: "multifixed" stagelr: 0.1 stagelr: 0.2 stageiter: 5', "SGD",
     r":\d+: stageiter: .*2 stagelr.*1 stageiter"),
    ('lr_policy: "multifixed"', "SGD", r"solver.prototxt: stagelr: .*at least one stage"),
    ('lr_policy: "multifixed" stagelr: 0.1 stagelr: 0.2 stageiter: 5 stageiter: 3', "SGD",
     r":\d+: stageiter: .*increasing"),
    ('lr_policy: "multifixed" stagelr: -0.1 stageiter: 5', "SGD",
     r":\d+: stagelr: must be >= 0"),
])
def test_bad_values_are_refused(tmp_path, settings, kind, match):
    with pytest.raises(CaffeError, match=match):
        make_solver(tmp_path, "base_lr: 0.1 " + settings, kind)


def test_the_error_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "s.prototxt"
    net = caffe_pb2.NetParameter()
    text_format.Merge(NET, net)
    path.write_text('base_lr: 0.1\nlr_policy: "fixed"\n# warmup_iter: 3\nwarmup_iter: 3\n'
                    'warmup_start_lr: -1\nnet_param {\n%s}\n' % text_format.MessageToString(net))
    with pytest.raises(CaffeError) as info:
        get_solver(str(path))
    assert str(info.value).startswith("%s:5: warmup_start_lr: must be >= 0" % path)
