"""Darknet's [net] training settings to a Caffe solver; the learning-rate schedule against
Darknet's get_current_rate written out here."""

import math
import types

import numpy as np
import pytest

from pycaffe_lite.proto import protoio
from pycaffe_lite.darknet import DarknetError, DarknetWarning, parse_cfg, solver_from_cfg
from pycaffe_lite.darknet.convert import darknet2caffe
from pycaffe_lite.solvers.lr_policy import learning_rate

YOLO_NET = """\
[net]
# Training
batch=64
subdivisions=16
width=416
height=416
channels=3
momentum=0.949
decay=0.0005
angle=0
saturation = 1.5
exposure = 1.5
hue=.1

learning_rate=0.001
burn_in=1000
max_batches = 500200
policy=steps
steps=400000,450000
scales=.1,.1
mosaic=1
frobnicate=2

[maxpool]
size=2
stride=2
"""


def darknet_rate(settings, it):
    """Darknet's get_current_rate (pjreddie), for the policies used below; its settings are
    C floats, and so is the base of the poly policy."""
    f = np.float32
    lr = float(f(settings["learning_rate"]))
    power = float(f(settings.get("power", 4.0)))
    if it < settings.get("burn_in", 0):
        return lr * float(f(it) / f(settings["burn_in"])) ** power
    policy = settings.get("policy", "constant")
    if policy == "constant":
        return lr
    if policy == "steps":
        rate = lr
        for step, scale in zip(settings["steps"], settings["scales"]):
            if step > it:
                return rate
            rate *= float(f(scale))
        return rate
    if policy == "step":
        return lr * float(f(settings["scale"])) ** (it // settings["step"])
    if policy == "exp":
        return lr * float(f(settings["gamma"])) ** it
    if policy == "poly":
        return lr * float(f(1) - f(it) / f(settings["max_batches"])) ** power
    if policy == "sigmoid":
        gamma = float(f(settings["gamma"]))
        return lr * (1.0 / (1.0 + math.exp(gamma * (it - settings["step"]))))
    raise ValueError(policy)


def test_yolo_training_settings():
    with pytest.warns(DarknetWarning, match=r"<string>:22: \[net\]: unknown key frobnicate=2"):
        sp, tp, comments = solver_from_cfg(parse_cfg(YOLO_NET))
    assert sp.iter_size == 16
    assert sp.base_lr == pytest.approx(0.001)
    assert sp.momentum == pytest.approx(0.949)
    assert sp.weight_decay == pytest.approx(0.0005)
    assert sp.max_iter == 500200
    assert sp.lr_policy == "steps"
    assert list(sp.steps) == [400000, 450000]
    np.testing.assert_allclose(sp.scales, [0.1, 0.1], rtol=1e-6)
    assert sp.burn_in == 1000 and sp.burn_in_power == 4
    assert (tp.hue, tp.saturation, tp.exposure) == pytest.approx((0.1, 1.5, 1.5))
    text = "\n".join(comments)
    assert "batch_size: 4 in the training data layer" in text
    assert "transform_param { hue: 0.1 saturation: 1.5 exposure: 1.5 }" in text
    unmapped = text[text.index("no equivalent"):]
    for line in ("<string>:10: angle=0", "<string>:21: mosaic=1", "<string>:22: frobnicate=2"):
        assert line in unmapped
    assert "width" not in unmapped and "learning_rate" not in unmapped


def test_solver_file_round_trip_and_schedule(tmp_path):
    cfg = tmp_path / "yolo.cfg"
    cfg.write_text(YOLO_NET)
    with pytest.warns(DarknetWarning):
        darknet2caffe(str(cfg), prototxt=str(tmp_path / "yolo.prototxt"),
                      solver=str(tmp_path / "yolo_solver.prototxt"))
    text = (tmp_path / "yolo_solver.prototxt").read_text()
    assert text.startswith("# Caffe solver converted from")
    assert "#   <string>" not in text and "yolo.cfg:21: mosaic=1" in text
    sp = protoio.read_solver_param(str(tmp_path / "yolo_solver.prototxt"))
    assert sp.net == "yolo.prototxt"
    settings = {"learning_rate": 0.001, "burn_in": 1000, "policy": "steps",
                "steps": [400000, 450000], "scales": [0.1, 0.1]}
    state = types.SimpleNamespace(current_step=0)
    for it in (0, 1, 10, 500, 999, 1000, 5000, 399999, 400000, 449999, 450000, 500000):
        assert learning_rate(sp, it, state) == pytest.approx(darknet_rate(settings, it),
                                                             rel=1e-5, abs=1e-12), it


@pytest.mark.parametrize("lines,settings,lr_policy", [
    ("policy=constant\nlearning_rate=0.01", {"learning_rate": 0.01}, "fixed"),
    ("learning_rate=0.01", {"learning_rate": 0.01}, "fixed"),
    ("policy=step\nstep=100\nscale=0.5\nlearning_rate=0.1",
     {"learning_rate": 0.1, "policy": "step", "step": 100, "scale": 0.5}, "step"),
    ("policy=exp\ngamma=0.999\nlearning_rate=0.1",
     {"learning_rate": 0.1, "policy": "exp", "gamma": 0.999}, "exp"),
    ("policy=poly\npower=2\nlearning_rate=0.1",
     {"learning_rate": 0.1, "policy": "poly", "power": 2, "max_batches": 1000}, "poly"),
    ("policy=sigmoid\ngamma=-0.01\nstep=500\nlearning_rate=0.1",
     {"learning_rate": 0.1, "policy": "sigmoid", "gamma": -0.01, "step": 500}, "sigmoid"),
])
def test_policies_follow_darknet(lines, settings, lr_policy):
    sp, _, _ = solver_from_cfg(parse_cfg("[net]\nmax_batches=1000\n" + lines + "\n"))
    assert sp.lr_policy == lr_policy
    state = types.SimpleNamespace(current_step=0)
    for it in (0, 1, 99, 100, 250, 500, 999):
        assert learning_rate(sp, it, state) == pytest.approx(darknet_rate(settings, it),
                                                             rel=1e-5), it


def test_policy_without_equivalent_is_listed():
    sp, _, comments = solver_from_cfg(parse_cfg("[net]\npolicy=random\n"))
    assert sp.lr_policy == "fixed"
    assert any("<string>:2: policy=random has no Caffe equivalent" in c for c in comments)
    sp, _, comments = solver_from_cfg(parse_cfg("[net]\npolicy=sigmoid\ngamma=0.1\nstep=9\n"))
    assert sp.lr_policy == "fixed"
    assert any("policy=sigmoid with gamma > 0" in c for c in comments)


def test_burn_in_with_poly():
    """Darknet's warm-up replaces the policy's rate until burn_in; power serves both."""
    sp, _, _ = solver_from_cfg(parse_cfg(
        "[net]\npolicy=poly\npower=3\nmax_batches=100\nburn_in=10\nlearning_rate=0.1\n"))
    assert sp.lr_policy == "poly" and sp.power == 3 and sp.burn_in_power == 3
    settings = {"learning_rate": 0.1, "policy": "poly", "power": 3, "max_batches": 100,
                "burn_in": 10}
    state = types.SimpleNamespace(current_step=0)
    for it in (0, 1, 5, 9, 10, 11, 50, 99):
        assert learning_rate(sp, it, state) == pytest.approx(darknet_rate(settings, it),
                                                             rel=1e-5), it


def test_adam():
    sp, _, _ = solver_from_cfg(parse_cfg("[net]\nadam=1\nB1=0.8\nB2=0.99\neps=1e-7\n"))
    assert sp.type == "Adam"
    assert (sp.momentum, sp.momentum2, sp.delta) == pytest.approx((0.8, 0.99, 1e-7))


@pytest.mark.parametrize("lines,pattern", [
    ("policy=steps\nsteps=100", r"<string>:2: \[net\]: policy=steps needs steps and scales"),
    ("policy=steps\nsteps=100,200\nscales=.1", r"<string>:4: \[net\]: policy=steps: 2 steps but "
                                               r"1 scales"),
    ("policy=steps\nsteps=200,100\nscales=.1,.1", r"<string>:3: \[net\]: policy=steps: steps "
                                                  r"\[200, 100\] must increase"),
    ("batch=0", r"<string>:1: \[net\]: batch and subdivisions must be positive"),
    ("max_batches=3000000000", r"<string>:2: \[net\]: max_batches=3000000000 is out of range: "
                               r"allowed -2147483648\.\.2147483647"),
    ("policy=steps\nsteps=100,2147483648\nscales=.1,.1",
     r"<string>:3: \[net\]: steps=100,2147483648: entry 2147483648 is out of range"),
])
def test_solver_errors(lines, pattern):
    with pytest.raises(DarknetError, match=pattern):
        solver_from_cfg(parse_cfg("[net]\n" + lines + "\n"))
