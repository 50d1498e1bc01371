"""EvalDetection (Intel Caffe) against a hand-made scene: decoded boxes, NMS, matching."""

import math

import numpy as np
import pytest

from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

BIASES = "biases: 1 biases: 1 biases: 2 biases: 2"


def logit(p):
    return math.log(p / (1 - p))


def head(side, classes, anchors, boxes):
    """Raw outputs with everything unlikely except ``boxes``: (row, col, anchor, tx, ty, w, h
    (in cells, anchor-relative exp), objectness, class)."""
    entries = classes + 5
    x = np.zeros((anchors * entries, side, side))
    for a in range(anchors):
        x[a * entries + 4] = logit(0.001)  # objectness
    for row, col, a, sx, sy, ew, eh, obj, cls in boxes:
        base = a * entries
        x[base + 0, row, col] = logit(sx)
        x[base + 1, row, col] = logit(sy)
        x[base + 2, row, col] = math.log(ew)
        x[base + 3, row, col] = math.log(eh)
        x[base + 4, row, col] = logit(obj)
        x[base + 5 + cls, row, col] = 5.0
    return x[None]


def run(text, x, gt):
    layer = make_layer(text, np.float64)
    bottom = random_blobs([x, gt], dtype=np.float64)
    top = empty_blobs(1, np.float64)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return top[0].data


def test_scores_and_matches_by_hand():
    side, classes = 4, 3
    # anchor 0 is 1 x 1 cells, anchor 1 is 2 x 2 cells
    x = head(side, classes, 2, [
        (1, 1, 0, 0.5, 0.5, 1.0, 1.0, 0.9, 2),   # centre (1.5, 1.5)/4, 1x1 cells: class 2
        (1, 1, 1, 0.5, 0.5, 0.5, 0.5, 0.8, 2),   # the same box through anchor 1: suppressed
        (3, 0, 0, 0.5, 0.5, 1.0, 1.0, 0.7, 0),   # class 0, no ground truth of class 0
    ])
    # ground truth (image 0): class 2 (label 3) exactly the first box, and a class 1 box
    gt = np.array([[0, 3, 0, 0.25, 0.25, 0.5, 0.5, 0],
                   [0, 2, 0, 0.0, 0.0, 0.1, 0.1, 0]], float).reshape(1, 1, 2, 8)
    out = run('type: "EvalDetection" eval_detection_param { side: 4 num_class: 3 '
              'num_object: 2 threshold: 0.5 nms: 0.45 %s }' % BIASES, x, gt)[0]
    assert out.shape == (3 + 4 * 4 * 2 * 4,)
    np.testing.assert_array_equal(out[:3], [0, 1, 1])  # ground truth per class
    p_cls = math.exp(5) / (math.exp(5) + 2)  # softmax of (5, 0, 0)
    rows = out[3:].reshape(-1, 4)
    # classes ascending: class 0 (a false positive), then class 2 (a true positive)
    np.testing.assert_allclose(rows[0], [0, 0.7 * p_cls, 0, 1], rtol=1e-9)
    np.testing.assert_allclose(rows[1], [2, 0.9 * p_cls, 1, 0], rtol=1e-9)
    assert not rows[2:].any()


def test_negative_nms_keeps_nothing_as_the_fork():
    x = head(2, 2, 2, [(0, 0, 0, 0.5, 0.5, 1.0, 1.0, 0.9, 1)])
    gt = np.array([[0, 2, 0, 0.0, 0.0, 0.5, 0.5, 0]], float).reshape(1, 1, 1, 8)
    out = run('type: "EvalDetection" eval_detection_param { side: 2 num_class: 2 '
              'num_object: 2 %s }' % BIASES, x, gt)
    np.testing.assert_array_equal(out[0, :2], [0, 1])
    assert not out[0, 2:].any()


def test_too_few_biases_is_an_error():
    layer = make_layer('name: "e" type: "EvalDetection" eval_detection_param { num_object: 2 '
                       'biases: 1 biases: 1 }')
    with pytest.raises(Exception, match="biases"):
        layer.SetUp(random_blobs([(1, 2 * 25, 7, 7), (1, 1, 1, 8)]), empty_blobs(1))
