"""NVCaffe's (NVIDIA/caffe 0.17) solver options: the learning rate's ramp-up and min_lr, the
momentum and weight decay policies, LARC (scale, clip, turbo), each against a hand computation
of a few iterations of a tiny linear net, written here in float64 NumPy from the formulas of
the fork's src/caffe/solvers/sgd_solver.cpp (GetLearningRate, GetMomentum, GetWeightDecay,
GetLocalRate, ComputeUpdateValue) and sgd_solver.cu (the fused update: history = momentum *
history + local_rate * (g + decay * w)); the fork's published solver files; bad values."""

import logging
import math
import os

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite import backend
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2, protoio
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing.simdevice import simulated_device

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")

# x (4 x 3) -> ip1 (2 outputs) -> ip2 (1 output) -> EuclideanLoss against y. ip1's bias has
# lr_mult 2 and no decay, ip2's weight lr_mult 0.5, ip2's bias is frozen (lr_mult 0).
NET = """
name: "tiny"
layer { name: "data" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 4 channels: 3 height: 1 width: 1 } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.7 }
                              bias_filler { type: "uniform" min: -0.5 max: 0.5 } } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        param { lr_mult: 0.5 decay_mult: 1 } param { lr_mult: 0 decay_mult: 1 }
        inner_product_param { num_output: 1 weight_filler { type: "gaussian" std: 0.7 }
                              bias_filler { type: "constant" value: 0.3 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""
LR_MULTS = (1.0, 2.0, 0.5, 0.0)
DECAY_MULTS = (1.0, 0.0, 1.0, 1.0)
X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.5], [-1.0, 0.75, 1.0], [0.2, -0.3, 0.4]])
Y = np.array([1.0, -2.0, 0.5, 3.0])


def make_solver(tmp_path, settings, kind="SGD"):
    param = caffe_pb2.SolverParameter()
    text_format.Merge('type: "%s" random_seed: 3 display: 0 snapshot_after_train: false '
                      'snapshot_prefix: "%s" ' % (kind, tmp_path / "snap") + settings, param)
    text_format.Merge(NET, param.net_param)
    path = tmp_path / "solver.prototxt"
    path.write_text(text_format.MessageToString(param))
    solver = get_solver(str(path))
    solver.net.set_input_arrays(X.reshape(4, 3, 1, 1).astype(np.float32),
                                Y.astype(np.float32))
    return solver


def weights(solver):
    return [p.data.astype(np.float64).copy() for p in solver.net.learnable_params]


def history(solver):
    return [backend.to_host(h).astype(np.float64).copy() for h in solver.history]


# ---- the reference: the fork's formulas in float64 ------------------------------------------
def gradients(w):
    """dLoss/dparam of the tiny net, loss = sum((out - y)^2) / (2 N)."""
    w1, b1, w2, b2 = w
    n = X.shape[0]
    h = X @ w1.T + b1
    out = (h @ w2.T + b2)[:, 0]
    d_out = ((out - Y) / n)[:, None]
    dh = d_out @ w2
    return [dh.T @ X, dh.sum(0), d_out.T @ h, d_out.sum(0)]


def field(s, name, default):
    return s.get(name, default)


def ref_rate(s, it):
    base, min_lr = s["base_lr"], field(s, "min_lr", 0.0)
    if it < field(s, "rampup_interval", 0):
        alpha = it / s["rampup_interval"]
        rate = field(s, "rampup_lr", 0.0) + (base - field(s, "rampup_lr", 0.0)) * alpha ** 2
    elif s["lr_policy"] == "fixed":
        rate = base
    elif s["lr_policy"] == "step":
        rate = base * s["gamma"] ** (it // s["stepsize"])
    elif s["lr_policy"] == "poly":
        rate = (base - min_lr) * (1 - it / s["max_iter"]) ** s["power"] + min_lr
    else:
        raise AssertionError(s["lr_policy"])
    return max(rate, min_lr)


def ref_momentum(s, it, rate):
    m = field(s, "momentum", 0.0)
    policy = field(s, "momentum_policy", "fixed")
    if policy == "poly":
        return m + (field(s, "max_momentum", 0.99) - m) * \
            (it / s["max_iter"]) ** field(s, "momentum_power", 1.0)
    if policy == "opt":
        m = (1 - 0.5 * math.sqrt(rate)) ** 2
        return min(m, s["max_momentum"]) if "max_momentum" in s else m
    return m


def ref_decay(s, it):
    wd = field(s, "weight_decay", 0.0)
    if field(s, "weight_decay_policy", "fixed") == "poly":
        return wd + (field(s, "max_weight_decay", 0.0) - wd) * \
            (it / s["max_iter"]) ** field(s, "weight_decay_power", 1.0)
    return wd


def reference(s, w, iters, it0=0, hist=None, corr=None):
    """``(weights, histories, correlations)`` after ``iters`` iterations from ``w``."""
    w = [a.copy() for a in w]
    hist = [np.zeros_like(a) for a in w] if hist is None else [a.copy() for a in hist]
    corr = [0.0] * len(w) if corr is None else list(corr)
    for it in range(it0, it0 + iters):
        rate = ref_rate(s, it)
        m = ref_momentum(s, it, rate)
        wd = ref_decay(s, it)
        for i, g in enumerate(gradients(w)):
            local = LR_MULTS[i]
            if s.get("larc"):
                g_norm, w_norm = np.linalg.norm(g), np.linalg.norm(w[i])
                larc = 1.0
                if g_norm > 0 and w_norm > 0:
                    larc = (1 - m) * s.get("larc_eta", 0.001) * w_norm / g_norm
                if s.get("larc_turbo"):
                    h_norm = np.linalg.norm(hist[i])
                    c = 0.0
                    if g_norm > 0 and h_norm > 0:
                        c = float(np.sum(g * hist[i])) / (g_norm * h_norm)
                    corr[i] = 0.95 * corr[i] + 0.05 * c
                    larc -= 0.9 * corr[i]
                if local > 0:
                    local = larc
                if s.get("larc_policy", "scale") == "clip":
                    local = min(rate, local)
                else:
                    local = rate * local
            else:
                local = rate * local
            if s.get("regularization_type") == "WD":  # sgd_solver.cu SGDWdUpdateAllAndClear
                hist[i] = m * hist[i] + local * g
                w[i] = w[i] - (hist[i] + wd * DECAY_MULTS[i] * local * w[i])
                continue
            hist[i] = m * hist[i] + local * (g + wd * DECAY_MULTS[i] * w[i])
            w[i] = w[i] - hist[i]
    return w, hist, corr


def settings_text(s):
    out = []
    for k, v in s.items():
        if isinstance(v, str):
            out.append('%s: "%s"' % (k, v))
        elif isinstance(v, bool):
            out.append("%s: %s" % (k, "true" if v else "false"))
        else:
            out.append("%s: %r" % (k, v))
    return " ".join(out)


def assert_close(got, expected, rtol=2e-5, atol=1e-7):
    assert len(got) == len(expected)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.ravel(), b.ravel(), rtol=rtol, atol=atol)


def run_against_reference(tmp_path, s, iters=5):
    solver = make_solver(tmp_path, settings_text(s))
    w0 = weights(solver)
    solver.step(iters)
    w, hist, corr = reference(s, w0, iters)
    assert_close(weights(solver), w)
    assert_close(history(solver), hist)
    return solver, w0, corr


# ---- the learning rate ----------------------------------------------------------------------
@pytest.mark.parametrize("s", [
    # ramp-up from rampup_lr, then poly down to min_lr
    dict(base_lr=0.4, lr_policy="poly", power=2.0, max_iter=10, min_lr=0.05,
         rampup_interval=4, rampup_lr=0.1),
    # ramp-up from 0 (rampup_lr unset) is raised to min_lr at iteration 0
    dict(base_lr=0.3, lr_policy="fixed", min_lr=0.02, rampup_interval=5),
    # step falls below min_lr and stays there
    dict(base_lr=0.5, lr_policy="step", gamma=0.1, stepsize=3, min_lr=0.01),
])
def test_learning_rate_rampup_and_min_lr(tmp_path, s):
    solver = make_solver(tmp_path, settings_text(s))
    rates = []
    for it in range(12):
        solver.iter = it
        rates.append(solver.lr)
    np.testing.assert_allclose(rates, [ref_rate(s, it) for it in range(12)], rtol=1e-6)
    assert min(rates) == pytest.approx(s["min_lr"], rel=1e-6)


def test_rampup_and_min_lr_train_as_the_reference(tmp_path):
    run_against_reference(tmp_path, dict(base_lr=0.2, lr_policy="poly", power=1.0,
                                         max_iter=6, min_lr=0.05, rampup_interval=3,
                                         rampup_lr=0.02, momentum=0.9, weight_decay=0.01))


def test_poly_rate_by_hand():
    # base_lr 1, min_lr 0.2, power 2, max_iter 10, iteration 5: 0.8 * 0.5^2 + 0.2 = 0.4
    from pycaffe_lite.solvers.lr_policy import learning_rate
    p = caffe_pb2.SolverParameter(base_lr=1.0, lr_policy="poly", power=2.0, max_iter=10,
                                  min_lr=0.2)
    assert learning_rate(p, 5, type("S", (), {"current_step": 0})()) == pytest.approx(0.4)


# ---- momentum and weight decay policies -----------------------------------------------------
@pytest.mark.parametrize("s", [
    dict(base_lr=0.1, lr_policy="fixed", max_iter=8, momentum=0.5, momentum_policy="poly",
         max_momentum=0.95, momentum_power=2.0, weight_decay=0.01),
    dict(base_lr=0.09, lr_policy="step", gamma=0.5, stepsize=2, momentum_policy="opt",
         weight_decay=0.001),
    dict(base_lr=0.09, lr_policy="fixed", momentum_policy="opt", max_momentum=0.6),
], ids=["poly", "opt", "opt_max"])
def test_momentum_policy_trains_as_the_reference(tmp_path, s):
    solver, _, _ = run_against_reference(tmp_path, s)
    # opt at rate 0.09: (1 - 0.15)^2 = 0.7225; capped at 0.6 where max_momentum is set
    solver.iter = 0
    expected = 0.6 if "max_momentum" in s and s["momentum_policy"] == "opt" else \
        ref_momentum(s, 0, s["base_lr"])
    assert solver.momentum(solver.lr) == pytest.approx(expected, rel=1e-6)


def test_weight_decay_poly_trains_as_the_reference(tmp_path):
    s = dict(base_lr=0.1, lr_policy="fixed", max_iter=5, momentum=0.8, weight_decay=0.01,
             weight_decay_policy="poly", max_weight_decay=0.5, weight_decay_power=1.5)
    solver, _, _ = run_against_reference(tmp_path, s)
    solver.iter = 4  # 0.01 + 0.49 * 0.8^1.5
    assert solver.weight_decay() == pytest.approx(0.01 + 0.49 * 0.8 ** 1.5, rel=1e-6)


# ---- decoupled weight decay (regularization_type "WD") -------------------------------------
WD = dict(base_lr=0.2, lr_policy="step", gamma=0.5, stepsize=2, momentum=0.9,
          weight_decay=0.3, regularization_type="WD")


def test_decoupled_weight_decay_trains_as_the_reference(tmp_path):
    # it was refused: 'unknown regularization_type "WD"'
    solver, w0, _ = run_against_reference(tmp_path, WD)
    # the decay stays out of the history: after one iteration the history is the rate times
    # the gradient alone, and the weights moved by it and by rate * decay * w (decay_mult 1)
    one = make_solver(tmp_path, settings_text(WD))
    one.step(1)
    g = gradients(w0)
    np.testing.assert_allclose(history(one)[0], 0.2 * g[0], rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(weights(one)[0], w0[0] - 0.2 * g[0] - 0.2 * 0.3 * w0[0],
                               rtol=1e-5, atol=1e-8)
    # (ip1's bias has decay_mult 0: the gradient step alone; lr_mult 2)
    np.testing.assert_allclose(weights(one)[1], w0[1] - 0.4 * g[1], rtol=1e-5, atol=1e-8)


def test_decoupled_weight_decay_with_larc_and_the_decay_policy(tmp_path):
    s = dict(LARC["scale"], regularization_type="WD", weight_decay=0.05, max_iter=5,
             weight_decay_policy="poly", max_weight_decay=0.25)
    run_against_reference(tmp_path, s)


def test_decoupled_weight_decay_on_the_simulated_gpu_is_eager_and_matches(tmp_path):
    got, hist, dev = _graph_run(tmp_path, WD, graphs=True)
    assert dev.graph_captures == 0
    solver = make_solver(tmp_path, settings_text(WD))
    w, h, _ = reference(WD, weights(solver), 6)
    assert_close(got, w)
    assert_close(hist, h)


@pytest.mark.parametrize("kind", ["Adam", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta"])
def test_wd_in_the_other_solvers_is_their_l1_decay(tmp_path, kind):
    # the fork's adam / nesterov / adagrad / rmsprop / adadelta kernels take
    # reg_L2 = (regularization_type == "L2") and otherwise add decay * sign(w): "WD" trains
    # there as "L1" does
    # (AdaDelta's steps are about sqrt(delta) in size: its usual base_lr 1 and a larger delta)
    extra = 'lr_policy: "fixed" weight_decay: 0.2 '
    extra += "base_lr: 1 delta: 0.001 " if kind == "AdaDelta" else "base_lr: 0.05 "
    extra += "momentum: 0.9 " if kind in ("Nesterov", "AdaDelta", "Adam") else ""
    runs = []
    for kind_of_decay in ("WD", "L1", "L2"):
        solver = make_solver(tmp_path, extra + 'regularization_type: "%s"' % kind_of_decay,
                             kind)
        solver.step(4)
        runs.append(weights(solver))
    assert_close(runs[0], runs[1], rtol=0, atol=0)
    assert any(not np.array_equal(a, b) for a, b in zip(runs[0], runs[2]))


# ---- LARC -----------------------------------------------------------------------------------
LARC = {
    "scale": dict(base_lr=0.5, lr_policy="fixed", momentum=0.9, weight_decay=0.01, larc=True,
                  larc_policy="scale", larc_eta=0.02),
    # clip: the LARC rate where it is below base_lr, base_lr elsewhere (eta 5: both happen)
    "clip": dict(base_lr=0.05, lr_policy="poly", power=2.0, max_iter=50, momentum=0.9,
                 weight_decay=0.0005, larc=True, larc_policy="clip", larc_eta=5.0),
    "turbo": dict(base_lr=0.3, lr_policy="fixed", momentum=0.9, weight_decay=0.001,
                  larc=True, larc_turbo=True, larc_policy="scale", larc_eta=0.05),
}


@pytest.mark.parametrize("name", sorted(LARC))
def test_larc_trains_as_the_reference(tmp_path, name):
    solver, w0, corr = run_against_reference(tmp_path, LARC[name])
    if name == "turbo":
        np.testing.assert_allclose(solver.larc_corr, corr, rtol=1e-4, atol=1e-7)


def test_larc_turbo_correlation_after_two_iterations(tmp_path):
    """Iteration 0 has no history (correlation term 0); at iteration 1 the history is the
    first step, along nearly the same gradient: c = 0.95 * 0 + 0.05 * cos ~ 0.05; the frozen
    param (no gradient) keeps 0."""
    solver = make_solver(tmp_path, settings_text(LARC["turbo"]))
    solver.step(1)
    assert solver.larc_corr == [0.0] * 4
    solver.step(1)
    assert all(0.049 < c <= 0.05 for c in solver.larc_corr[:3])
    assert solver.larc_corr[3] == 0.0


def test_larc_clip_takes_both_branches(tmp_path):
    """The clip case above is not decided by one side alone: at iteration 0 some param's
    LARC rate is below base_lr and some above."""
    s = LARC["clip"]
    w = make_solver(tmp_path, settings_text(s)).net.learnable_params
    w0 = [p.data.astype(np.float64) for p in w]
    rates = [(1 - 0.9) * 5.0 * np.linalg.norm(a) / np.linalg.norm(g)
             for a, g in zip(w0[:3], gradients(w0)[:3])]
    assert min(rates) < s["base_lr"] < max(rates)


def test_larc_rate_replaces_lr_mult(tmp_path):
    """lr_mult 1 and 2 on the same weights give the same LARC step (the fork sets local_lr to
    the LARC rate, not times it); lr_mult 0 stays frozen."""
    s = dict(base_lr=0.5, lr_policy="fixed", larc=True, larc_policy="scale", larc_eta=0.1)
    solver = make_solver(tmp_path, settings_text(s))
    w0 = weights(solver)
    solver.step(1)
    g = gradients(w0)
    for i in (0, 1, 2):
        expected = 0.5 * 0.1 * np.linalg.norm(w0[i]) / np.linalg.norm(g[i]) * g[i]
        np.testing.assert_allclose(w0[i] - weights(solver)[i], expected, rtol=2e-5)
    np.testing.assert_array_equal(weights(solver)[3], w0[3])


def test_larc_on_the_simulated_gpu_runs_layer_by_layer_and_matches_the_cpu(tmp_path, caplog):
    s = LARC["turbo"]
    cpu = make_solver(tmp_path, settings_text(s))
    cpu.step(5)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        gpu = make_solver(tmp_path, settings_text(s))
        with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
            gpu.step(5)
        assert dev.graph_captures == 0
        assert gpu.train_graph.why_not() == \
            "LARC computes each param's rate from its norms on the host"
        got, hist = weights(gpu), history(gpu)
    told = [r for r in caplog.records if "not in a CUDA graph" in r.getMessage()]
    assert len(told) == 1 and "LARC" in told[0].getMessage()
    assert_close(got, weights(cpu), rtol=1e-6, atol=1e-8)
    assert_close(hist, history(cpu), rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(gpu.larc_corr, cpu.larc_corr, rtol=1e-5, atol=1e-8)


def _graph_run(tmp_path, s, graphs):
    from pycaffe_lite import cuda_graphs
    old = cuda_graphs.set_enabled(graphs)
    try:
        with simulated_device() as dev:
            backend.set_mode_gpu()
            solver = make_solver(tmp_path, settings_text(s))
            solver.step(6)
            return weights(solver), history(solver), dev
    finally:
        cuda_graphs.set_enabled(old)


def test_momentum_poly_replays_in_a_cuda_graph_with_each_iterations_momentum(tmp_path):
    s = dict(base_lr=0.1, lr_policy="fixed", max_iter=6, momentum=0.5,
             momentum_policy="poly", max_momentum=0.99, weight_decay=0.01)
    eager, eager_hist, _ = _graph_run(tmp_path, s, graphs=False)
    got, hist, dev = _graph_run(tmp_path, s, graphs=True)
    assert dev.graph_captures == 1 and dev.graph_launches == 5  # iteration 0 warms up
    assert_close(got, eager, rtol=0, atol=0)
    assert_close(hist, eager_hist, rtol=0, atol=0)
    solver = make_solver(tmp_path, settings_text(s))
    w, h, _ = reference(s, weights(solver), 6)
    assert_close(got, w)


def test_weight_decay_poly_on_the_simulated_gpu_is_eager_and_matches(tmp_path):
    s = dict(base_lr=0.1, lr_policy="fixed", max_iter=6, momentum=0.9, weight_decay=0.0,
             weight_decay_policy="poly", max_weight_decay=0.3)
    got, _, dev = _graph_run(tmp_path, s, graphs=True)
    assert dev.graph_captures == 0
    solver = make_solver(tmp_path, settings_text(s))
    w, _, _ = reference(s, weights(solver), 6)
    assert_close(got, w)


# ---- snapshots ------------------------------------------------------------------------------
def test_restore_keeps_the_history_and_starts_larc_turbo_from_zero(tmp_path):
    """NVCaffe's .solverstate holds the history only (SnapshotSolverStateToBinaryProto); its
    running correlations start again from 0 in a solver that restores one (PreSolve)."""
    s = dict(LARC["turbo"], snapshot=2)
    solver = make_solver(tmp_path, settings_text(s))
    w0 = weights(solver)
    solver.step(2)
    w2, h2, corr2 = reference(s, w0, 2)
    assert min(corr2[:3]) > 0.04
    state = str(tmp_path / "snap_iter_2.solverstate")
    resumed = make_solver(tmp_path, settings_text(s))
    resumed.restore(state)
    assert resumed.iter == 2 and resumed.larc_corr == [0.0] * 4
    resumed.step(2)
    w, hist, _ = reference(s, w2, 2, it0=2, hist=h2, corr=None)
    assert_close(weights(resumed), w)
    assert_close(history(resumed), hist)
    # and not the uninterrupted run's (its correlations carried on)
    w_on, _, _ = reference(s, w2, 2, it0=2, hist=h2, corr=corr2)
    assert max(np.abs(a - b).max() for a, b in zip(w, w_on)) > 1e-4


# ---- NVCaffe's own solver files ---------------------------------------------------------------
def _fork_file(name, tmp_path, drop=()):
    param = protoio.read_solver_param(os.path.join(REAL, name))
    param.ClearField("net")
    param.ClearField("test_iter")
    param.ClearField("test_interval")
    for f in drop:
        param.ClearField(f)
    param.snapshot_prefix = str(tmp_path / "snap")
    text_format.Merge(NET, param.net_param)
    return param


def _settings_of(param):
    s = {k: getattr(param, k) for k in (
        "base_lr", "lr_policy", "power", "max_iter", "momentum", "weight_decay")}
    for k in ("min_lr", "rampup_interval", "rampup_lr", "momentum_policy", "max_momentum",
              "momentum_power", "larc", "larc_policy", "larc_eta", "larc_turbo"):
        if param.HasField(k):
            s[k] = getattr(param, k)
    return s


@pytest.mark.parametrize("name, expected", [
    ("nvcaffe_resnet50_solver.prototxt",
     dict(larc=True, larc_policy="clip", lr_policy="poly", max_iter=500000)),
    ("nvcaffe_alexnet_bn_solver_8K.prototxt",
     dict(larc=True, rampup_interval=600, rampup_lr=1.0, base_lr=10.0)),
    ("nvcaffe_alexnet_solver_larc_turbo.prototxt",
     dict(larc_turbo=True, momentum_policy="poly", max_momentum=0.95, min_lr=1e-5,
          larc_eta=0.05)),
])
def test_the_forks_solver_files_train_as_the_reference(tmp_path, name, expected):
    drop = ("solver_data_type",) if "turbo" in name else ()  # FLOAT16: refused (below)
    param = _fork_file(name, tmp_path, drop)
    s = _settings_of(param)
    for k, v in expected.items():
        assert s[k] == pytest.approx(v) if isinstance(v, float) else s[k] == v
    solver = get_solver(param)
    solver.net.set_input_arrays(X.reshape(4, 3, 1, 1).astype(np.float32),
                                Y.astype(np.float32))
    w0 = weights(solver)
    solver.step(3)
    w, hist, _ = reference(s, w0, 3)
    assert_close(history(solver), hist, rtol=1e-4, atol=1e-10)
    assert_close(weights(solver), w)


def test_the_larc_turbo_file_as_published_stops_at_its_float16_solver_type(tmp_path):
    param = _fork_file("nvcaffe_alexnet_solver_larc_turbo.prototxt", tmp_path)
    with pytest.raises(CaffeError, match="solver_data_type: FLOAT16"):
        get_solver(param)


# ---- bad values -----------------------------------------------------------------------------
F = 'lr_policy: "fixed" max_iter: 10 '


@pytest.mark.parametrize("settings, kind, match", [
    (F + 'momentum_policy: "cosine"', "SGD", r":\d+: momentum_policy: unknown policy \"cosine\""),
    (F + 'momentum_policy: "poly" momentum: 0.9', "Nesterov",
     r":\d+: momentum_policy: .*SGD solver only.*type: \"Nesterov\""),
    ('lr_policy: "fixed" momentum_policy: "poly"', "SGD",
     r"momentum_policy: \"poly\" needs max_iter > 0"),
    (F + 'larc: true', "Adam", r":\d+: larc: .*SGD solver only.*type: \"Adam\""),
    (F + 'larc: true momentum: 0.9', "Nesterov", r":\d+: larc: .*type: \"Nesterov\""),
    (F + 'larc: true larc_policy: "clamp"', "SGD",
     r":\d+: larc_policy: unknown LARC policy \"clamp\""),
    (F + 'larc: true larc_eta: 0', "SGD", r":\d+: larc_eta: must be > 0"),
    (F + 'weight_decay_policy: "step"', "SGD", r":\d+: weight_decay_policy: unknown policy"),
    ('lr_policy: "fixed" weight_decay_policy: "poly"', "AdaGrad",
     r"weight_decay_policy: \"poly\" needs max_iter > 0"),
    (F + 'min_lr: -0.1', "SGD", r"min_lr must be >= 0"),
    ('lr_policy: "poly" power: 1 max_iter: 10 min_lr: 0.5', "SGD",
     r"base_lr \(0.1\) must be >= min_lr \(0.5\)"),
    (F + 'rampup_interval: -3', "SGD", r"rampup_interval must be >= 0"),
    (F + 'rampup_interval: 3 burn_in: 2', "SGD", r"two warm-ups"),
])
def test_bad_values_are_refused(tmp_path, settings, kind, match):
    with pytest.raises(CaffeError, match=match):
        make_solver(tmp_path, "base_lr: 0.1 " + settings, kind)


def test_the_error_names_the_file_and_the_line(tmp_path):
    path = tmp_path / "s.prototxt"
    net = caffe_pb2.NetParameter()
    text_format.Merge(NET, net)
    path.write_text('base_lr: 0.1\nlr_policy: "fixed"\n# larc_policy: "scale"\nlarc: true\n'
                    'larc_policy: "none"\nnet_param {\n%s}\n' % text_format.MessageToString(net))
    with pytest.raises(CaffeError) as info:
        get_solver(str(path))
    assert str(info.value).startswith('%s:5: larc_policy: unknown LARC policy "none"' % path)


def test_the_error_names_the_file(tmp_path):
    path = tmp_path / "s.prototxt"
    net = caffe_pb2.NetParameter()
    text_format.Merge(NET, net)
    path.write_text('base_lr: 0.1\nlr_policy: "fixed"\nmin_lr: -1\nnet_param {\n%s}\n'
                    % text_format.MessageToString(net))
    with pytest.raises(CaffeError) as info:
        get_solver(str(path))
    assert str(info.value).startswith('%s: min_lr must be >= 0 (got -1)' % path)


def test_options_the_solver_reads_pass_for_every_type(tmp_path):
    """Ramp-up, min_lr and the weight decay policy are read by every NVCaffe solver (its
    GetLearningRate and local_decay); momentum_policy "fixed" and larc: false too."""
    for kind in ("SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam"):
        extra = "momentum: 0.9" if kind in ("Nesterov", "AdaDelta", "Adam") else ""
        solver = make_solver(tmp_path, 'base_lr: 0.1 lr_policy: "fixed" max_iter: 10 '
                             'min_lr: 0.01 rampup_interval: 2 weight_decay: 0.1 '
                             'weight_decay_policy: "poly" max_weight_decay: 0.2 '
                             'momentum_policy: "fixed" larc: false ' + extra, kind)
        assert solver.lr == pytest.approx(0.01)  # the ramp-up's 0, raised to min_lr
        solver.iter = 5
        assert solver.weight_decay() == pytest.approx(0.15)
