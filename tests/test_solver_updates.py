"""Every update rule against hand computations over several iterations.

The tiny linear net of ``helpers.solver`` is trained by each solver for a few iterations; the
same iterations are recomputed here in float64 NumPy from the formulas (lr policy, gradient
clipping, iter_size averaging, L2/L1 weight decay with decay_mult, lr_mult, the rule itself)
and the weights and the solver's history must agree.
"""

import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.solvers import (AdaDeltaSolver, AdaGradSolver, AdamSolver, NesterovSolver,
                                  RMSPropSolver, SGDSolver, get_solver)
from pycaffe_lite.testing.simdevice import simulated_device
from helpers.solver import batches, feed, grads, params_of, solver_param

LR_MULT = (1.0, 2.0)
DECAY_MULT = (1.0, 0.0)


def inv_rate(base_lr, gamma, power, it):
    return base_lr * (1.0 + gamma * it) ** (-power)


def reference(rule, cfg, data, W0, b0, iters):
    """Train the tiny net ``iters`` iterations by the formulas; returns (params, state)."""
    params = [W0.copy(), b0.copy()]
    st = {k: [np.zeros_like(p) for p in params] for k in ("h", "u")}
    iter_size = cfg.get("iter_size", 1)
    for it in range(iters):
        g = [np.zeros_like(p) for p in params]
        for k in range(iter_size):
            x, y = data[(it * iter_size + k) % len(data)]
            _, dW, db = grads(params[0], params[1], x, y)
            g[0] += dW
            g[1] += db
        clip = cfg.get("clip_gradients", -1)
        if clip >= 0:
            norm = np.sqrt(sum((gi ** 2).sum() for gi in g))
            if norm > clip:
                g = [gi * (clip / norm) for gi in g]
        g = [gi / iter_size for gi in g]
        rate = inv_rate(cfg["base_lr"], cfg["gamma"], cfg["power"], it)
        for i in range(2):
            wd = cfg.get("weight_decay", 0.0) * DECAY_MULT[i]
            if cfg.get("regularization_type", "L2") == "L2":
                g[i] = g[i] + wd * params[i]
            else:
                g[i] = g[i] + wd * np.sign(params[i])
            lr = rate * LR_MULT[i]
            m = cfg.get("momentum", 0.0)
            h, u = st["h"], st["u"]
            if rule == "SGD":
                h[i] = m * h[i] + lr * g[i]
                step = h[i]
            elif rule == "Nesterov":
                old = h[i]
                h[i] = m * h[i] + lr * g[i]
                step = (1 + m) * h[i] - m * old
            elif rule == "AdaGrad":
                h[i] = h[i] + g[i] ** 2
                step = lr * g[i] / (np.sqrt(h[i]) + cfg["delta"])
            elif rule == "RMSProp":
                d = cfg["rms_decay"]
                h[i] = d * h[i] + (1 - d) * g[i] ** 2
                step = lr * g[i] / (np.sqrt(h[i]) + cfg["delta"])
            elif rule == "AdaDelta":
                h[i] = m * h[i] + (1 - m) * g[i] ** 2
                s = g[i] * np.sqrt((u[i] + cfg["delta"]) / (h[i] + cfg["delta"]))
                u[i] = m * u[i] + (1 - m) * s ** 2
                step = lr * s
            elif rule == "Adam":
                b1, b2, t = m, cfg["momentum2"], it + 1
                h[i] = b1 * h[i] + (1 - b1) * g[i]
                u[i] = b2 * u[i] + (1 - b2) * g[i] ** 2
                step = lr * np.sqrt(1 - b2 ** t) / (1 - b1 ** t) * h[i] / (np.sqrt(u[i]) +
                                                                          cfg["delta"])
            params[i] = params[i] - step
    return params, st


CASES = {
    "SGD": (SGDSolver, dict(momentum=0.9, weight_decay=0.01)),
    "SGD-L1": (SGDSolver, dict(momentum=0.5, weight_decay=0.05, regularization_type="L1")),
    "Nesterov": (NesterovSolver, dict(momentum=0.9, weight_decay=0.01)),
    "AdaGrad": (AdaGradSolver, dict(weight_decay=0.01, delta=1e-3)),
    "RMSProp": (RMSPropSolver, dict(weight_decay=0.01, delta=1e-4, rms_decay=0.9)),
    "AdaDelta": (AdaDeltaSolver, dict(momentum=0.95, weight_decay=0.01, delta=1e-6)),
    "Adam": (AdamSolver, dict(momentum=0.9, momentum2=0.999, weight_decay=0.01, delta=1e-8)),
}


def _solver_text(cfg, type_name):
    fields = dict(cfg)
    text = 'type: "%s" lr_policy: "inv" max_iter: 100 ' % type_name
    for key, value in fields.items():
        if key in ("regularization_type",):
            text += '%s: "%s" ' % (key, value)
        else:
            text += "%s: %r " % (key, value)
    return text


def _run_case(name, iters=3, **extra):
    cls, cfg = CASES[name]
    cfg = dict(cfg, base_lr=0.1, gamma=0.5, power=0.75, **extra)
    rule = name.split("-")[0]
    solver = cls(solver_param(_solver_text(cfg, rule)))
    data = batches(5, seed=3)
    feed(solver.net, data)
    W0, b0 = params_of(solver)
    solver.step(iters)
    expected, state = reference(rule, cfg, data, W0, b0, iters)
    return solver, expected, state


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule_matches_hand_computation(name):
    solver, (W, b), state = _run_case(name)
    got_W, got_b = params_of(solver)
    # the weights really moved, and by the computed amounts
    assert solver.iter == 3
    np.testing.assert_allclose(got_W, W, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, b, rtol=2e-5, atol=1e-6)
    rule = name.split("-")[0]
    n = 2
    if rule in ("SGD", "Nesterov", "AdaGrad", "RMSProp"):
        assert len(solver.history) == n
        for i in range(n):
            np.testing.assert_allclose(solver.history[i], state["h"][i], rtol=2e-5, atol=1e-7)
    else:  # AdaDelta and Adam keep two histories per param, the second set after the first
        assert len(solver.history) == 2 * n
        for i in range(n):
            np.testing.assert_allclose(solver.history[i], state["h"][i], rtol=2e-5, atol=1e-7)
            np.testing.assert_allclose(solver.history[n + i], state["u"][i], rtol=2e-5,
                                       atol=1e-9)
    names = solver.state_names
    assert list(solver.state) == list(names)
    assert all(len(v) == n for v in solver.state.values())


@pytest.mark.parametrize("name", ["SGD", "Adam"])
def test_iter_size_averages_gradients_over_passes(name):
    solver, (W, b), _ = _run_case(name, iter_size=2)
    got_W, got_b = params_of(solver)
    np.testing.assert_allclose(got_W, W, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, b, rtol=2e-5, atol=1e-6)


def test_clip_gradients_scales_the_global_norm(caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    solver, (W, b), _ = _run_case("SGD", clip_gradients=0.05)
    got_W, got_b = params_of(solver)
    np.testing.assert_allclose(got_W, W, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, b, rtol=2e-5, atol=1e-6)
    assert "Gradient clipping: scaling down gradients (L2 norm" in caplog.text


def test_sgd_first_step_by_hand():
    """One explicit SGD step: W1 = W0 - lr * (dW + wd * W0), b1 = b0 - 2 lr * db."""
    param = solver_param('base_lr: 0.1 lr_policy: "fixed" momentum: 0.9 weight_decay: 0.01')
    solver = SGDSolver(param)
    (x, y), = batches(1, seed=7)
    feed(solver.net, [(x, y)])
    W0, b0 = params_of(solver)
    solver.step(1)
    _, dW, db = grads(W0, b0, x, y)
    W1, b1 = params_of(solver)
    np.testing.assert_allclose(W1, W0 - 0.1 * (dW + 0.01 * W0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(b1, b0 - 0.2 * db, rtol=1e-5, atol=1e-7)
    # the diffs hold the update that was applied (Caffe's ApplyUpdate leaves it there)
    np.testing.assert_allclose(solver.net.params["ip"][0].diff, W0 - W1, rtol=1e-4, atol=1e-7)


def test_update_is_float32_in_place():
    solver = SGDSolver(solver_param('base_lr: 0.1 lr_policy: "fixed" momentum: 0.9 '
                                    'weight_decay: 0.01'))
    feed(solver.net, batches(2))
    blob = solver.net.params["ip"][0]
    data_before = blob.data
    history_ids = [id(h) for h in solver.history]
    solver.step(2)
    assert blob.data.dtype == np.float32 and blob.diff.dtype == np.float32
    assert np.shares_memory(data_before, blob.data)
    assert [id(h) for h in solver.history] == history_ids
    assert all(h.dtype == np.float32 for h in solver.history)


def test_apply_update_by_hand_with_set_diffs():
    """pycaffe usage: fill the diffs yourself, then apply_update()."""
    solver = SGDSolver(solver_param('base_lr: 0.5 lr_policy: "fixed"'))
    W, bias = solver.net.params["ip"]
    W0, b0 = W.data.copy(), bias.data.copy()
    W.diff[...] = 1.0
    bias.diff[...] = -1.0
    solver.apply_update()
    np.testing.assert_allclose(W.data, W0 - 0.5)
    np.testing.assert_allclose(bias.data, b0 + 1.0)  # lr_mult 2


@pytest.mark.parametrize("cls,text,message", [
    (AdaGradSolver, "momentum: 0.9", "momentum cannot be used with AdaGrad"),
    (RMSPropSolver, "momentum: 0.9", "momentum cannot be used with RMSProp"),
    (RMSPropSolver, "rms_decay: 1.0", "rms_decay should lie between 0 and 1"),
    # Adam's correction sqrt(1 - beta2^t) / (1 - beta1^t): beta1 = 1 divides by zero, a beta2
    # over 1 takes the root of a negative number
    (AdamSolver, "momentum: 1.0", "Adam's momentum \\(beta1\\) must lie in \\[0, 1\\), got 1"),
    (AdamSolver, "momentum: 0.9 momentum2: 1.5",
     "Adam's momentum2 \\(beta2\\) must lie in \\[0, 1\\), got 1.5"),
    (AdamSolver, "momentum: -0.1", "Adam's momentum \\(beta1\\) must lie in"),
    (SGDSolver, 'weight_decay: 0.1 regularization_type: "L3"', "unknown regularization_type"),
])
def test_rule_sanity_checks(cls, text, message):
    with pytest.raises(CaffeError, match=message):
        cls(solver_param('base_lr: 0.1 lr_policy: "fixed" ' + text))


@pytest.mark.parametrize("type_name,cls", [
    ("SGD", SGDSolver), ("Nesterov", NesterovSolver), ("AdaGrad", AdaGradSolver),
    ("RMSProp", RMSPropSolver), ("AdaDelta", AdaDeltaSolver), ("Adam", AdamSolver)])
def test_get_solver_follows_type(type_name, cls):
    solver = get_solver(solver_param('type: "%s" base_lr: 0.1 lr_policy: "fixed"' % type_name))
    assert type(solver) is cls and solver.type == type_name


def test_legacy_solver_type_enum_is_upgraded():
    solver = get_solver(solver_param('solver_type: ADAM base_lr: 0.1 lr_policy: "fixed"'))
    assert type(solver) is AdamSolver


def test_unknown_type_names_the_choices():
    with pytest.raises(CaffeError, match="did you mean 'Adam'"):
        get_solver(solver_param('type: "adam" base_lr: 0.1 lr_policy: "fixed"'))


def test_updates_run_in_gpu_mode_on_device_arrays():
    """In GPU mode the state and the update live on the device (simulated here)."""
    with simulated_device():
        backend.set_mode_gpu()
        try:
            solver, (W, b), _ = _run_case("Adam")
            assert all(type(h).__name__ == "DeviceArray" for h in solver.history)
            got_W, got_b = params_of(solver)
        finally:
            backend.set_mode_cpu()
    np.testing.assert_allclose(got_W, W, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(got_b, b, rtol=2e-5, atol=1e-6)
