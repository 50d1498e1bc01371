"""Numeric health of training: the first NaN/Inf is named (iteration, layer, blob) by a cheap
default check or by debug_info, the 87.3365 loss is explained, bad labels are errors."""

import logging

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import cli, health
from pycaffe_lite.errors import LayerError, NumericError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import SGDSolver

# NumPy's own warnings about the NaN and Inf these tests produce on purpose
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

FIXED = 'lr_policy: "fixed" random_seed: 1 snapshot_after_train: false '

# x -> ip -> sqrt (Power 0.5) -> Euclidean loss against y
SQRT_NET = """
layer { name: "input" type: "Input" top: "x" top: "y"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "constant" value: %s } } }
layer { name: "sqrt" type: "Power" bottom: "z" top: "r" power_param { power: 0.5 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "r" bottom: "y" top: "loss" }
"""

CLASSIFIER = """
layer { name: "input" type: "Input" top: "x" top: "label"
        input_param { shape { dim: 16 dim: 8 } shape { dim: 16 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "score"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "score" bottom: "label" top: "loss" }
"""


def make_solver(net, text="base_lr: 0.01 display: 1"):
    param = caffe_pb2.SolverParameter()
    text_format.Merge(FIXED + text, param)
    text_format.Merge(net, param.net_param)
    return SGDSolver(param)


def feed(solver, batches):
    """Load batch i (cycling) into the inputs before every forward pass."""
    count = {"i": 0}

    def hook(layer_index):
        if layer_index == 0:
            batch = batches[count["i"] % len(batches)]
            for name, value in batch.items():
                solver.net.blobs[name].data[...] = value
            count["i"] += 1

    solver.net.before_forward(hook)


def xy(x, y=1.0):
    return {"x": np.full((4, 3), x, np.float32), "y": np.full((4, 2), y, np.float32)}


def test_nan_in_the_input_data_names_the_data_layer_and_iteration(caplog):
    solver = make_solver(SQRT_NET % 0.1, "base_lr: 0.01 display: 0")
    bad = xy(1.0)
    bad["x"][2, 1] = np.nan
    feed(solver, [xy(1.0), xy(2.0), xy(1.5), bad])
    with pytest.raises(NumericError) as info:
        solver.step(10)
    err = info.value
    assert err.iteration == 3 and solver.iter == 3  # stopped before the update
    assert err.culprit.layer == "input" and err.culprit.blob == "x"
    msg = str(err)
    assert msg.startswith("Iteration 3: the loss is NaN; the first non-finite value: layer "
                          "'input' (type Input) produced NaN in top blob 'x'")
    assert "the input data holds NaN or Inf" in msg and "lower base_lr" in msg


def test_a_layer_that_turns_finite_inputs_into_nan_is_named():
    solver = make_solver(SQRT_NET % -0.1, "base_lr: 0.01 display: 0")
    feed(solver, [xy(1.0)])
    with pytest.raises(NumericError) as info:
        solver.step(1)
    msg = str(info.value)
    assert "Iteration 0: the loss is NaN" in msg
    assert "layer 'sqrt' (type Power) produced NaN in top blob 'r' from finite bottoms ('z')" \
        in msg


def test_a_nan_gradient_with_a_finite_loss_is_found_in_backward():
    """sqrt at 0: forward is finite (0), backward is 0.5 / sqrt(0) = Inf. The loss stays
    finite; the gradient check of the display iteration catches it."""
    solver = make_solver(SQRT_NET % 0.0, "base_lr: 0.01 display: 1")
    feed(solver, [xy(0.0)])
    with pytest.raises(NumericError) as info:
        solver.step(1)
    msg = str(info.value)
    assert "Iteration 0: the parameter gradients hold NaN or Inf (the loss is 1)" in msg
    assert "the backward pass of layer 'sqrt' (type Power) produced Inf in the diff of bottom " \
           "blob 'z'" in msg
    assert info.value.culprit.kind == "bottom diff"


def test_divergence_from_a_learning_rate_too_high():
    solver = make_solver(SQRT_NET.replace('type: "Power"', 'type: "ReLU"').replace(
        "power_param { power: 0.5 }", "") % 0.5, "base_lr: 1e12 display: 0")
    feed(solver, [xy(3.0, -1.0), xy(-2.0, 4.0)])
    with pytest.raises(NumericError) as info:
        solver.step(50)
    err = info.value
    assert 0 < err.iteration < 50
    assert err.culprit.layer in ("ip", "loss")
    assert "layer '%s'" % err.culprit.layer in str(err)
    assert "a learning rate too high (lower base_lr" in str(err)


def test_debug_info_names_the_culprit_without_running_again(monkeypatch, caplog):
    caplog.set_level(logging.INFO, "pycaffe_lite")
    solver = make_solver(SQRT_NET % -0.1, "base_lr: 0.01 display: 1 debug_info: true")
    feed(solver, [xy(1.0)])

    def not_needed(net):
        raise AssertionError("debug_info already found the culprit")

    monkeypatch.setattr(health, "locate", not_needed)
    with pytest.raises(NumericError, match="layer 'sqrt' .* top blob 'r'"):
        solver.step(1)
    assert "[Forward] Iteration 0, first non-finite value: layer 'sqrt' (type Power) produced " \
           "NaN in top blob 'r'" in caplog.text


def test_the_default_check_is_cheap(monkeypatch):
    """Healthy training never runs the net again, and reads the gradients only at display
    iterations (the loss check is a float comparison)."""
    calls = []
    real = health.gradients_finite
    monkeypatch.setattr(health, "gradients_finite", lambda net: calls.append(1) or real(net))
    monkeypatch.setattr(health, "locate", lambda net: pytest.fail("locate on healthy training"))
    solver = make_solver(SQRT_NET % 0.1, "base_lr: 0.01 display: 5")
    feed(solver, [xy(1.0), xy(2.0)])
    solver.step(20)
    assert len(calls) == 4


def test_without_stop_on_nonfinite_the_error_is_logged_once(caplog):
    solver = make_solver(SQRT_NET % -0.1, "base_lr: 0.01 display: 1")
    solver.stop_on_nonfinite = False
    feed(solver, [xy(1.0)])
    solver.step(3)
    assert solver.iter == 3
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "layer 'sqrt'" in errors[0].getMessage()


def test_the_cli_stops_with_one_line_naming_the_layer(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.prototxt").write_text("""
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                           data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "constant" value: -1 } } }
layer { name: "log" type: "Log" bottom: "z" top: "l" }
layer { name: "loss" type: "EuclideanLoss" bottom: "l" bottom: "y" top: "loss" }
""")
    (tmp_path / "solver.prototxt").write_text('net: "net.prototxt" base_lr: 0.1 lr_policy: '
                                              '"fixed" max_iter: 5 display: 1')
    assert cli.main(["train", "--solver", "solver.prototxt"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    line = [x for x in err.splitlines() if x.startswith("pycaffe-lite train: error:")]
    assert len(line) == 1
    assert "Iteration 0: the loss is NaN; the first non-finite value: layer 'log' (type Log) " \
           "produced NaN in top blob 'l'" in line[0]


# ---- 87.3365 ---------------------------------------------------------------------------------
def test_clipped_probability_gives_87_3365_and_a_diagnosis():
    net = caffe.Net("""
layer { name: "input" type: "Input" top: "s" top: "label"
        input_param { shape { dim: 2 dim: 2 } shape { dim: 2 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "label" top: "loss" }
""", caffe.TRAIN)
    out = net.forward(s=np.array([[1000, -1000], [1000, -1000]]), label=np.array([1, 1]))
    assert out["loss"] == pytest.approx(87.3365, abs=1e-4)
    (name, message), = health.diagnose(net)
    assert name == "loss"
    assert message.startswith("2 of 2 predictions gave their true class a probability below "
                              "FLT_MIN") and "87.3365" in message
    net.forward(s=np.array([[1000, -1000], [-1000, 1000]]), label=np.array([0, 1]))
    assert health.diagnose(net) == []


def test_the_solver_explains_a_diverging_softmax_loss_once(caplog):
    solver = make_solver(CLASSIFIER, "base_lr: 1000 momentum: 0.9 display: 1")
    rng = np.random.default_rng(0)
    feed(solver, [{"x": rng.normal(size=(16, 8)), "label": rng.integers(0, 5, 16)}])
    solver.step(10)
    warnings = [r.getMessage() for r in caplog.records if "FLT_MIN" in r.getMessage()]
    assert len(warnings) == 1
    assert warnings[0].startswith("Iteration 1, layer 'loss': ")
    for cause in ("87.3365", "learning rate too high", "labels out of range", "not scaled"):
        assert cause in warnings[0]


def test_healthy_training_gives_no_diagnosis(caplog):
    solver = make_solver(CLASSIFIER, "base_lr: 0.01 momentum: 0.9 display: 1")
    rng = np.random.default_rng(0)
    feed(solver, [{"x": rng.normal(size=(16, 8)), "label": rng.integers(0, 5, 16)}])
    solver.step(10)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ---- labels ----------------------------------------------------------------------------------
@pytest.mark.parametrize("label, what", [(5, "label value 5 is out of range"),
                                         (-1, "label value -1 is out of range"),
                                         (2.5, "label value 2.5 is not an integer")])
def test_bad_labels_stop_training_naming_the_label_and_range(label, what):
    solver = make_solver(CLASSIFIER, "base_lr: 0.01 display: 1")
    labels = np.zeros(16)
    labels[7] = label
    feed(solver, [{"x": np.ones((16, 8)), "label": np.zeros(16)},
                  {"x": np.ones((16, 8)), "label": labels}])
    with pytest.raises(LayerError) as info:
        solver.step(5)
    assert solver.iter == 1
    msg = str(info.value)
    assert msg.startswith("layer 'loss' (type SoftmaxWithLoss): " + what)
    assert "labels must be integers in [0, 5)" in msg


def test_copying_weights_that_hold_nan_warns(tmp_path, caplog):
    net = caffe.Net(CLASSIFIER, caffe.TEST)
    net.params["ip"][0].data[1, 2] = np.nan
    net.save(str(tmp_path / "nan.caffemodel"))
    caffe.Net(CLASSIFIER, caffe.TEST).copy_from(str(tmp_path / "nan.caffemodel"))
    assert "param 0 of layer 'ip' holds 1 NaN or infinite values out of 40" in caplog.text


CONSTANT = """
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "c" type: "Parameter" top: "c" param { lr_mult: %s }
        parameter_param { shape { dim: 2 dim: 3 } } }
layer { name: "m" type: "Eltwise" bottom: "x" bottom: "c" top: "m"
        eltwise_param { operation: MAX } }
"""


@pytest.mark.parametrize("lr_mult, value, warned", [("0", -np.inf, False),
                                                    ("0", np.nan, True),
                                                    ("1", -np.inf, True)])
def test_a_constants_infinities_are_not_a_divergence(tmp_path, caplog, lr_mult, value, warned):
    """A Parameter layer that is never learnt (lr_mult 0) holds what the net was built with
    (an imported graph's -inf padding): its infinities are not warned about, NaN still is, and
    a learnt blob's infinity still is."""
    path = tmp_path / "c.prototxt"
    path.write_text(CONSTANT % lr_mult)
    net = caffe.Net(str(path), caffe.TEST)
    net.params["c"][0].data[...] = 0.5
    net.params["c"][0].data[0, 1] = value
    net.save(str(tmp_path / "c.caffemodel"))
    with caplog.at_level(logging.WARNING):
        loaded = caffe.Net(str(path), str(tmp_path / "c.caffemodel"), caffe.TEST)
    assert ("param 0 of layer 'c' holds 1 NaN or infinite values out of 6"
            in caplog.text) == warned
    x = np.zeros((2, 3), np.float32)
    out = loaded.forward(x=x)["m"]
    np.testing.assert_array_equal(np.isnan(out), np.isnan(net.params["c"][0].data))
