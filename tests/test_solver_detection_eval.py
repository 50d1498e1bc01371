"""The solver's detection test phase (the SSD fork's eval_type: "detection"): DetectionEvaluate
rows gathered over the test batches become a mean average precision per output."""

import logging

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite.errors import CaffeError
from pycaffe_lite.solvers import get_solver

from helpers.solver import solver_param

TEST_NET = """
name: "eval"
layer { name: "input" type: "Input" top: "det" top: "gt"
        input_param { shape { dim: 1 dim: 1 dim: 3 dim: 7 }
                      shape { dim: 1 dim: 1 dim: 2 dim: 8 } } }
layer { name: "detection_eval" type: "DetectionEvaluate" bottom: "det" bottom: "gt"
        top: "detection_eval" detection_evaluate_param { num_classes: 3 } }
"""

A, B, FAR = [0.1, 0.1, 0.4, 0.4], [0.5, 0.5, 0.9, 0.9], [0.6, 0.0, 0.9, 0.2]
BATCHES = [
    (np.array([[0, 1, 0.9] + A, [0, 1, 0.6] + FAR, [0, 2, 0.3] + B]),
     np.array([[0, 1, 0] + A + [0], [0, 2, 1] + B + [0]])),
    (np.array([[0, 1, 0.8] + FAR, [0, 1, 0.7] + A, [0, -1, -1, -1, -1, -1, -1]]),
     np.array([[0, 1, 0] + A + [0], [-1] * 8])),
]
# class 1: 2 boxes; by score tp, fp, tp, fp: precision 1, 1/2, 2/3, 1/2 at recall 1/2, 1/2,
# 1, 1. Class 2: one box, one true positive: AP 1.
EXPECTED = {"Integral": (0.5 + 0.5 * 2 / 3 + 1) / 2,
            "MaxIntegral": (0.5 + 0.5 * 2 / 3 + 1) / 2,
            "11point": ((6 + 5 * 2 / 3) / 11 + 1) / 2}


def make_solver(extra):
    param = solver_param('base_lr: 0.01 lr_policy: "fixed" max_iter: 1 test_iter: 2 '
                         'test_interval: 1 '
                         'solver_mode: CPU ' + extra)
    text_format.Merge(TEST_NET, param.test_net_param.add())
    solver = get_solver(param)
    net = solver.test_nets[0]
    state = {"i": 0}

    def feed(layer_index):
        if layer_index == 0:
            det, gt = BATCHES[state["i"] % 2]
            net.blobs["det"].data[...] = det.reshape(1, 1, 3, 7)
            net.blobs["gt"].data[...] = gt.reshape(1, 1, 2, 8)
            state["i"] += 1

    net.before_forward(feed)
    return solver


@pytest.mark.parametrize("version", sorted(EXPECTED))
def test_detection_test_phase_reports_map(version, caplog):
    solver = make_solver('eval_type: "detection" ap_version: "%s" show_per_class_result: '
                         'true' % version)
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        results = solver.test(0)
    assert results == [("detection_eval", pytest.approx(EXPECTED[version], abs=1e-6))]
    assert solver.test_scores[0] == results
    text = caplog.text
    assert "class2: 1\n" in text
    assert "Test net output #0: detection_eval = %.6g\n" % results[0][1] in text


def test_detection_test_runs_inside_training():
    solver = make_solver('eval_type: "detection" ap_version: "Integral" '
                         'test_initialization: true')
    solver.step(1)
    assert solver.test_scores[0][0][1] == pytest.approx(EXPECTED["Integral"], abs=1e-6)


def test_unknown_eval_type_or_ap_version():
    with pytest.raises(CaffeError, match=r"ap_version 'VOC' is unknown"):
        make_solver('eval_type: "detection" ap_version: "VOC"').test(0)
    with pytest.raises(CaffeError, match=r"eval_type 'segmentation' is unknown"):
        make_solver('eval_type: "segmentation"').test(0)
