"""The SSD box utilities and average precision against literal, box-by-box transcriptions
of the fork's loops and against hand computations."""

import numpy as np
import pytest

from pycaffe_lite.layers.detection import bbox_util as bu
from pycaffe_lite.layers.detection.average_precision import (DetectionAccumulator,
                                                             average_precision)


def iou(a, b):
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0
    size = lambda x: 0.0 if x[2] < x[0] or x[3] < x[1] else (x[2] - x[0]) * (x[3] - x[1])  # noqa
    return iw * ih / (size(a) + size(b) - iw * ih)


def random_boxes(n, seed):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 0.7, (n, 2))
    wh = rng.uniform(0.05, 0.4, (n, 2))
    return np.concatenate([xy, xy + wh], axis=1)


def test_jaccard_by_hand():
    a = np.array([[0.0, 0.0, 0.5, 0.5], [0.2, 0.2, 0.1, 0.9]])
    b = np.array([[0.25, 0.25, 0.75, 0.75], [0.5, 0.5, 1, 1]])
    got = bu.jaccard(a, b)
    np.testing.assert_allclose(got[0], [0.0625 / (0.25 + 0.25 - 0.0625), 0.0])  # touching
    np.testing.assert_array_equal(got[1], [0, 0])                # an inverted box
    boxes = random_boxes(12, 0)
    want = [[iou(p, q) for q in boxes] for p in boxes]
    np.testing.assert_allclose(bu.jaccard(boxes, boxes), want, rtol=1e-12)


PRIOR = np.array([[0.2, 0.3, 0.6, 0.5]])
VAR = np.array([[0.1, 0.1, 0.2, 0.2]])
BOX = np.array([[0.25, 0.2, 0.7, 0.6]])


@pytest.mark.parametrize("code,in_target,want", [
    (bu.CORNER, False, [0.5, -1.0, 0.5, 0.5]),
    (bu.CORNER, True, [0.05, -0.1, 0.1, 0.1]),
    (bu.CENTER_SIZE, False, [(0.475 - 0.4) / 0.4 / 0.1, (0.4 - 0.4) / 0.2 / 0.1,
                             np.log(0.45 / 0.4) / 0.2, np.log(0.4 / 0.2) / 0.2]),
    (bu.CENTER_SIZE, True, [(0.475 - 0.4) / 0.4, 0.0, np.log(0.45 / 0.4), np.log(2.0)]),
    (bu.CORNER_SIZE, False, [0.05 / 0.4 / 0.1, -0.1 / 0.2 / 0.1, 0.1 / 0.4 / 0.2,
                             0.1 / 0.2 / 0.2]),
])
def test_encode_by_hand_and_decode_inverts_it(code, in_target, want):
    enc = bu.encode(PRIOR, VAR, code, in_target, BOX)
    np.testing.assert_allclose(enc[0], want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(bu.decode(PRIOR, VAR, code, in_target, enc), BOX, rtol=1e-12)


def nms_fast_literal(boxes, scores, score_thr, nms_thr, eta, top_k):
    order = sorted([i for i in range(len(scores)) if scores[i] > score_thr],
                   key=lambda i: -scores[i])
    if top_k > -1:
        order = order[:top_k]
    kept, thr = [], nms_thr
    for i in order:
        if all(iou(boxes[i], boxes[k]) <= thr for k in kept):
            kept.append(i)
            if eta < 1 and thr > 0.5:
                thr *= eta
    return kept


@pytest.mark.parametrize("seed,eta,top_k,thr", [(0, 1.0, -1, 0.3), (1, 1.0, 15, 0.45),
                                                (2, 0.9, -1, 0.7), (3, 0.7, 30, 0.9)])
def test_nms_fast_equals_the_literal_loop(seed, eta, top_k, thr):
    boxes = random_boxes(60, seed)
    scores = np.random.default_rng(seed + 10).uniform(0, 1, 60)
    got = bu.nms_fast(boxes, scores, 0.2, thr, eta, top_k)
    assert list(got) == nms_fast_literal(boxes, scores, 0.2, thr, eta, top_k)
    assert 3 < len(got) < 50


def match_literal(gt, pred, match_type, thr):
    """MatchBBox transcribed loop by loop."""
    P, G = len(pred), len(gt)
    idx, ovs = [-1] * P, [0.0] * P
    overlaps = {}
    for i in range(P):
        for j in range(G):
            o = iou(pred[i], gt[j])
            if o > 1e-6:
                ovs[i] = max(ovs[i], o)
                overlaps.setdefault(i, {})[j] = o
    pool = list(range(G))
    while pool:
        best, bi, bj = -1, -1, -1
        for i in sorted(overlaps):
            if idx[i] != -1:
                continue
            for j in pool:
                if j in overlaps[i] and overlaps[i][j] > best:
                    best, bi, bj = overlaps[i][j], i, j
        if bi == -1:
            break
        idx[bi], ovs[bi] = bj, best
        pool.remove(bj)
    if match_type == bu.PER_PREDICTION:
        for i in sorted(overlaps):
            if idx[i] != -1:
                continue
            best, bj = -1, -1
            for j in range(G):
                o = overlaps[i].get(j)
                if o is not None and o >= thr and o > best:
                    best, bj = o, j
            if bj != -1:
                idx[i], ovs[i] = bj, best
    return idx, ovs


@pytest.mark.parametrize("match_type", [bu.BIPARTITE, bu.PER_PREDICTION])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_match_equals_the_literal_loops(match_type, seed):
    gt, pred = random_boxes(5, seed), random_boxes(40, seed + 100)
    idx, ovs = bu.match(gt, pred, match_type, 0.3)
    want_idx, want_ovs = match_literal(gt, pred, match_type, 0.3)
    assert list(idx) == want_idx
    np.testing.assert_allclose(ovs, want_ovs, rtol=1e-12)
    assert (idx > -1).sum() >= 5 if match_type == bu.PER_PREDICTION else (idx > -1).sum() <= 5


def test_match_ignores_cross_boundary_priors():
    gt = np.array([[0.1, 0.1, 0.5, 0.5]])
    pred = np.array([[-0.1, 0.1, 0.5, 0.5], [0.12, 0.1, 0.5, 0.5]])
    idx, _ = bu.match(gt, pred, bu.PER_PREDICTION, 0.5, ignore_cross_boundary=True)
    assert list(idx) == [-2, 0]


def ap_literal(scores, tp, num_pos, version):
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    ctp = np.cumsum([tp[i] for i in order])
    cfp = np.cumsum([1 - tp[i] for i in order])
    prec = (ctp / (ctp + cfp)).astype(np.float32)   # single precision, as the fork
    rec = (ctp / num_pos).astype(np.float32)
    if version == "11point":     # the usual VOC2007 definition, thresholds j / 10
        r = rec.astype(np.float64)   # C++ compares the float recall with a double threshold
        return np.mean([prec[r >= j / 10.0].max() if (r >= j / 10.0).any() else 0
                        for j in range(11)])
    if version == "Integral":
        return sum(p * (r - q) for p, r, q in zip(prec, rec, np.r_[0, rec[:-1]]))
    env = np.maximum.accumulate(prec[::-1])[::-1]
    return sum(e * (r - q) for e, r, q in zip(env, rec, np.r_[0, rec[:-1]]))


def test_average_precision_by_hand():
    # precision 0, 1/2, 2/3 at recall 0, 1/2, 1
    assert average_precision([0.9, 0.8, 0.7], [0, 1, 1], 2, "Integral") == \
        pytest.approx(0.5 * 0.5 + 0.5 * 2 / 3)
    assert average_precision([0.9, 0.8, 0.7], [0, 1, 1], 2, "MaxIntegral") == \
        pytest.approx(2 / 3)
    assert average_precision([0.9, 0.8, 0.7], [0, 1, 1], 2, "11point") == pytest.approx(2 / 3)
    assert average_precision([0.5, 0.9], [1, 1], 4, "11point") == pytest.approx(6 / 11)
    assert average_precision([], [], 3) == 0 and average_precision([0.3], [1], 0) == 0
    with pytest.raises(ValueError, match="unknown ap_version"):
        average_precision([0.3], [1], 1, "VOC")


@pytest.mark.parametrize("version", ["11point", "MaxIntegral", "Integral"])
def test_average_precision_against_the_definitions(version):
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = int(rng.integers(1, 40))
        scores = rng.uniform(0, 1, n)
        tp = (rng.uniform(0, 1, n) < 0.6).astype(int)
        num_pos = int(tp.sum() + rng.integers(0, 4)) or 1
        assert average_precision(scores, tp, num_pos, version) == \
            pytest.approx(ap_literal(scores, tp, num_pos, version), abs=2e-6)


def test_accumulator_mean_over_classes_and_batches():
    acc = DetectionAccumulator()
    acc.add([[-1, 1, 2, -1, -1], [-1, 2, 1, -1, -1], [0, 1, 0.9, 1, 0], [0, 1, 0.8, 0, 1],
             [0, 2, 0.3, 0, 0]])          # the last one matched a difficult box: ignored
    acc.add([[-1, 1, 0, -1, -1], [-1, 2, 0, -1, -1], [1, 1, 0.7, 1, 0]])
    aps = acc.average_precisions("Integral")
    assert aps == {1: pytest.approx(0.5 * 1 + 0.5 * 2 / 3), 2: 0.0}
    assert acc.mean_average_precision("Integral") == pytest.approx((0.5 + 1 / 3) / 2)
