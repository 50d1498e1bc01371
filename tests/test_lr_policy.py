"""Learning-rate policies: Caffe's formulas, the multistep counter, Darknet's steps and burn_in."""

import math
import types

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import LR_POLICIES
from pycaffe_lite.solvers import SGDSolver
from pycaffe_lite.solvers.lr_policy import get_policy, learning_rate
from helpers.solver import solver_param


def param(text):
    p = caffe_pb2.SolverParameter()
    text_format.Merge(text, p)
    return p


def rates(text, iters):
    p = param(text)
    policy = get_policy(p, "test")
    state = types.SimpleNamespace(current_step=0)
    return [learning_rate(p, it, state, policy) for it in iters], state


ITERS = [0, 1, 7, 99, 100, 101, 250, 999]


def f32(v):
    """A solver field's value: prototxt floats are float32."""
    return float(np.float32(v))


@pytest.mark.parametrize("text,formula", [
    ('lr_policy: "fixed" base_lr: 0.01', lambda it: 0.01),
    ('lr_policy: "step" base_lr: 0.01 gamma: 0.1 stepsize: 100',
     lambda it: 0.01 * 0.1 ** (it // 100)),
    ('lr_policy: "exp" base_lr: 0.01 gamma: 0.99', lambda it: 0.01 * f32(0.99) ** it),
    ('lr_policy: "inv" base_lr: 0.01 gamma: 0.0001 power: 0.75',
     lambda it: 0.01 * (1 + 0.0001 * it) ** -0.75),
    ('lr_policy: "poly" base_lr: 0.01 power: 2 max_iter: 1000',
     lambda it: 0.01 * (1 - f32(it / 1000)) ** 2),  # float32 as Caffe
    ('lr_policy: "sigmoid" base_lr: 0.01 gamma: 0.05 stepsize: 200',
     lambda it: 0.01 / (1 + math.exp(-0.05 * (it - 200)))),
])
def test_caffe_policies(text, formula):
    got, _ = rates(text, ITERS)
    want = [formula(it) for it in ITERS]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    # rates are float32 values, as Caffe's Dtype rates
    assert all(float(np.float32(r)) == r for r in got)


def test_lenet_inv_schedule_values():
    """The values Caffe logs for the LeNet solver ('Iteration 100, lr = 0.00992565')."""
    got, _ = rates('lr_policy: "inv" base_lr: 0.01 gamma: 0.0001 power: 0.75', [100, 1000])
    assert ["%g" % r for r in got] == ["0.00992565", "0.00931012"]


def test_multistep_counts_stepvalues_reached():
    text = 'lr_policy: "multistep" base_lr: 1 gamma: 0.5 stepvalue: 3 stepvalue: 5'
    got, state = rates(text, range(8))
    assert got == [1, 1, 1, 0.5, 0.5, 0.25, 0.25, 0.25]
    assert state.current_step == 2


def test_multistep_moves_one_step_per_iteration_like_caffe():
    """Caffe advances the multistep counter at most once per call: a jump (e.g. after a restore
    without current_step) catches up one step per iteration."""
    p = param('lr_policy: "multistep" base_lr: 1 gamma: 0.1 stepvalue: 1 stepvalue: 2')
    state = types.SimpleNamespace(current_step=0)
    assert learning_rate(p, 10, state) == pytest.approx(0.1)
    assert learning_rate(p, 11, state) == pytest.approx(0.01)


def test_steps_policy_multiplies_scales():
    text = ('lr_policy: "steps" base_lr: 0.1 steps: 10 steps: 20 steps: 30 '
            'scales: 0.5 scales: 0.1 scales: 2')
    got, state = rates(text, [0, 9, 10, 19, 20, 30, 1000])
    np.testing.assert_allclose(got, [0.1, 0.1, 0.05, 0.05, 0.005, 0.01, 0.01], rtol=1e-6)
    assert state.current_step == 3


def test_burn_in_warms_up_every_policy():
    text = ('lr_policy: "step" base_lr: 0.1 gamma: 0.5 stepsize: 3 burn_in: 4 '
            'burn_in_power: 2')
    got, _ = rates(text, range(7))
    # Darknet: base_lr * (it / burn_in) ^ power during the warm-up, then the policy's rate
    want = [0.1 * (it / 4) ** 2 if it < 4 else 0.1 * 0.5 ** (it // 3) for it in range(7)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert got[0] == 0.0


def test_burn_in_default_power_is_darknets_4():
    p = param('lr_policy: "fixed" base_lr: 1 burn_in: 10')
    assert p.burn_in_power == 4
    got, _ = rates('lr_policy: "fixed" base_lr: 1 burn_in: 10', [5, 10])
    np.testing.assert_allclose(got, [0.5 ** 4, 1.0], rtol=1e-6)


def test_all_policies_registered():
    assert {"fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid",
            "steps"} <= set(LR_POLICIES.names())


@pytest.mark.parametrize("text,message", [
    ('base_lr: 0.1', "lr_policy is not set"),
    ('lr_policy: "stpe" base_lr: 0.1', "did you mean 'step'"),
    ('lr_policy: "step" base_lr: 0.1 gamma: 0.1', "needs stepsize > 0"),
    ('lr_policy: "sigmoid" base_lr: 0.1 gamma: 0.1', "needs stepsize > 0"),
    ('lr_policy: "exp" base_lr: 0.1 gamma: -1', "needs gamma >= 0"),
    ('lr_policy: "poly" base_lr: 0.1 power: 1', "needs max_iter > 0"),
    ('lr_policy: "multistep" base_lr: 0.1 stepvalue: 5 stepvalue: 2', "increasing"),
    ('lr_policy: "steps" base_lr: 0.1 steps: 5 scales: 0.1 scales: 0.2',
     "as many scales as steps"),
    ('lr_policy: "fixed" base_lr: 0.1 burn_in: -1', "burn_in must be >= 0"),
])
def test_bad_settings_are_reported_at_construction(text, message):
    with pytest.raises(CaffeError, match=message):
        SGDSolver(solver_param(text))


def test_solver_logs_lr_and_uses_it(caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    solver = SGDSolver(solver_param('lr_policy: "step" base_lr: 0.1 gamma: 0.1 stepsize: 2 '
                                    'display: 1'))
    solver.step(3)
    assert "Iteration 0, lr = 0.1" in caplog.text
    assert "Iteration 2, lr = 0.01" in caplog.text
    assert solver.lr == pytest.approx(0.01)
    assert solver.current_step == 1


def test_burn_in_keeps_the_multistep_counter_current():
    text = ('lr_policy: "multistep" base_lr: 1 gamma: 0.1 stepvalue: 2 burn_in: 5 '
            'burn_in_power: 1')
    got, state = rates(text, range(7))
    np.testing.assert_allclose(got, [0, 0.2, 0.4, 0.6, 0.8, 0.1, 0.1], rtol=1e-6)
    assert state.current_step == 1


def test_lr_is_the_rate_of_the_current_iteration_as_pycaffe():
    """pycaffe's SGDSolver.lr is GetLearningRate() at solver.iter: base_lr before any step,
    and after n steps the rate the next update will use."""
    solver = SGDSolver(solver_param('lr_policy: "step" base_lr: 0.1 gamma: 0.5 stepsize: 2'))
    assert solver.lr == f32(0.1)
    solver.step(1)
    assert solver.lr == f32(0.1)  # iteration 1: 0.1 * 0.5 ^ (1 // 2)
    solver.step(1)
    assert solver.lr == f32(f32(0.1) * 0.5)  # iteration 2: 0.1 * 0.5 ^ (2 // 2)
    multi = SGDSolver(solver_param('lr_policy: "multistep" base_lr: 1 gamma: 0.1 '
                                   'stepvalue: 1 stepvalue: 3'))
    multi.step(1)
    assert multi.lr == f32(0.1) and multi.lr == f32(0.1)  # iteration 1 reached stepvalue 1
    assert multi.current_step == 0  # reading the rate moved no counter
    multi.step(2)
    assert multi.lr == f32(f32(0.1) ** 2) and multi.current_step == 1  # Caffe: pow(0.1f, 2)
