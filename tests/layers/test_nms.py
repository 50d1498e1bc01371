"""Every detection layer's non-maximum suppression against the plain greedy loop of its fork,
written out here box by box: random boxes, many ties (equal scores, equal boxes, overlaps
exactly at the threshold), the blocks and the grid of the bounded-memory version made small
so that a few hundred boxes go through all their paths."""

import numpy as np
import pytest

from pycaffe_lite.layers.detection import bbox_util, nms
from pycaffe_lite.layers.detection.eval_detection_layer import center_iou
from pycaffe_lite.layers.detection.proposal_layer import nms_pixels
from pycaffe_lite.layers.detection.yolo_detection_output_layer import suppress


FULL_SIZE = {"test_memory_stays_linear_in_the_boxes"}


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch, request):
    """Blocks of 16 boxes, 97 overlaps at a time, boxes of more than 4 cells kept apart."""
    if request.node.name in FULL_SIZE:
        return
    monkeypatch.setattr(nms, "BLOCK", 16)
    monkeypatch.setattr(nms, "CHUNK", 97)
    monkeypatch.setattr(nms, "MAX_CELLS", 4)


def ssd_iou(a, b):
    """The SSD fork's JaccardOverlap (normalized): 0 unless the boxes truly intersect."""
    if b[0] > a[2] or b[2] < a[0] or b[1] > a[3] or b[3] < a[1]:
        return 0.0
    iw = min(a[2], b[2]) - max(a[0], b[0])
    ih = min(a[3], b[3]) - max(a[1], b[1])
    if iw <= 0 or ih <= 0:
        return 0.0

    def size(x):
        return 0.0 if x[2] < x[0] or x[3] < x[1] else (x[2] - x[0]) * (x[3] - x[1])
    return iw * ih / (size(a) + size(b) - iw * ih)


def pixel_iou(a, b):
    """py-faster-rcnn's nms.py overlap: areas and intersection count both end pixels."""
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]) + 1)
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]) + 1)
    inter = iw * ih
    area = lambda x: (x[2] - x[0] + 1) * (x[3] - x[1] + 1)  # noqa: E731
    return inter / (area(a) + area(b) - inter)


def grid_boxes(n, seed, side=24, most=10):
    """Corner boxes on an integer grid (exact areas: many overlaps exactly 1/2, 1/3, 1/4,
    and repeated boxes)."""
    rng = np.random.default_rng(seed)
    xy = rng.integers(0, side, (n, 2))
    wh = rng.integers(1, most, (n, 2))
    boxes = np.concatenate([xy, xy + wh], axis=1).astype(np.float64)
    boxes[rng.integers(0, n, n // 10)] = boxes[rng.integers(0, n, n // 10)]  # duplicates
    return boxes


def tied_scores(n, seed):
    """Scores with many exact ties (a few distinct values)."""
    return np.random.default_rng(seed + 100).integers(0, 12, n) / 12.0


def sorted_stable(scores):
    return sorted(range(len(scores)), key=lambda i: -scores[i])  # Python's sort is stable


def greedy_literal(order, boxes, overlap, suppresses, thr, eta=1.0, limit=-1):
    """Box by box: a box is kept unless some kept box suppresses it; the fork's adaptive
    threshold (a float) after each kept box."""
    kept = []
    for i in order:
        if any(suppresses(overlap(boxes[k], boxes[i]), thr) for k in kept):
            continue
        kept.append(i)
        if -1 < limit <= len(kept):
            break
        if eta < 1 and thr > 0.5:
            thr = np.float32(np.float32(thr) * np.float32(eta))
    return kept


def at_most(o, t):   # ApplyNMSFast and py-faster-rcnn: kept only while overlap <= threshold
    return not o <= t


def above(o, t):
    return o > t


def at_least(o, t):
    return o >= t


@pytest.mark.parametrize("seed,thr,eta,top_k", [(0, 0.5, 1.0, -1), (1, 1 / 3, 1.0, 50),
                                                (2, 0.0, 1.0, -1), (3, 0.7, 0.9, -1),
                                                (4, 0.9, 0.5, 200), (5, 0.25, 1.0, -1)])
def test_ssd_apply_nms_fast(seed, thr, eta, top_k):
    boxes, scores = grid_boxes(400, seed), tied_scores(400, seed)
    order = [i for i in sorted_stable(scores) if scores[i] > 0.1]
    if top_k > -1:
        order = order[:top_k]
    want = greedy_literal(order, boxes, ssd_iou, at_most,
                          np.float32(thr) if eta < 1 else thr, eta)
    got = bbox_util.nms_fast(boxes, scores, 0.1, thr, eta, top_k)
    assert list(got) == want
    assert 5 < len(want) < len(order)


def test_ssd_apply_nms_fast_in_single_precision():
    """Float boxes (DetectionOutput's decoded boxes): overlaps and threshold compared in
    float, as the fork."""
    boxes = (grid_boxes(300, 7) / 32).astype(np.float32)
    scores = tied_scores(300, 7).astype(np.float32)
    order = [i for i in sorted_stable(scores) if scores[i] > 0.0]

    def float_iou(a, b):
        return np.float32(ssd_iou(a.astype(np.float32), b.astype(np.float32)))
    for thr in (0.45, 0.5):
        want = greedy_literal(order, boxes, lambda a, b: float(float_iou(a, b)), at_most,
                              float(np.float32(thr)))
        assert list(bbox_util.nms_fast(boxes, scores, 0.0, thr)) == want


@pytest.mark.parametrize("seed,thr,top_k", [(0, 0.5, -1), (1, 0.3, 40), (2, 1 / 3, 400)])
def test_ssd_apply_nms_for_mining(seed, thr, top_k):
    boxes, scores = grid_boxes(500, seed) / 24, tied_scores(500, seed)
    boxes[::37, 2] = boxes[::37, 0]                      # zero-width boxes: dropped
    order = sorted_stable(scores)
    if top_k > -1:
        order = order[:top_k]
    order = [i for i in order if (boxes[i, 2] - boxes[i, 0]) * (boxes[i, 3] - boxes[i, 1])
             >= 1e-5]
    want = greedy_literal(order, boxes, ssd_iou, above, thr, limit=top_k)
    assert list(bbox_util.nms(boxes, scores, thr, top_k)) == want


@pytest.mark.parametrize("seed,thr", [(0, 0.45), (1, 0.5), (2, 0.25), (3, 0.0)])
def test_yolo_ports_suppression(seed, thr):
    """MobileNet-YOLO: best first across classes, dropped at an overlap of thr or more."""
    boxes, scores = grid_boxes(450, seed) / 24, tied_scores(450, seed)
    want = greedy_literal(sorted_stable(scores), boxes, ssd_iou, at_least, thr)
    assert list(suppress(boxes, scores, thr)) == want


@pytest.mark.parametrize("seed,thr,limit", [(0, 0.7, -1), (1, 0.5, 30), (2, 0.3, -1)])
def test_faster_rcnn_pixel_nms(seed, thr, limit):
    boxes = grid_boxes(500, seed, side=60, most=25)
    scores = tied_scores(500, seed)
    want = greedy_literal(sorted_stable(scores), boxes, pixel_iou, at_most, thr, limit=limit)
    assert list(nms_pixels(boxes, scores, thr, limit)) == want


@pytest.mark.parametrize("seed,thr", [(0, 0.4), (1, 0.5)])
def test_intel_eval_detection_centre_boxes(seed, thr):
    corners = grid_boxes(400, seed) / 24
    centre = np.stack([(corners[:, 0] + corners[:, 2]) / 2, (corners[:, 1] + corners[:, 3]) / 2,
                       corners[:, 2] - corners[:, 0], corners[:, 3] - corners[:, 1]], axis=1)
    scores = tied_scores(400, seed)
    order = sorted_stable(scores)
    want = greedy_literal(order, centre, center_iou, at_least, thr)
    got = np.asarray(order)[nms.greedy(centre[order], thr, nms.center_overlaps, nms.AT_LEAST)]
    assert list(got) == want


def test_large_and_small_boxes_together():
    """Boxes spanning much of the image (met by every box) among small ones."""
    rng = np.random.default_rng(9)
    small = grid_boxes(300, 9, side=200, most=12)
    xy = rng.integers(0, 50, (60, 2))
    large = np.concatenate([xy, xy + rng.integers(80, 150, (60, 2))], axis=1).astype(float)
    boxes = np.concatenate([small, large])[rng.permutation(360)] / 200
    scores = tied_scores(360, 9)
    for thr in (0.05, 0.3):
        want = greedy_literal(sorted_stable(scores), boxes, ssd_iou, at_least, thr)
        assert list(suppress(boxes, scores, thr)) == want


def test_boxes_that_cannot_be_placed_on_a_grid():
    """Infinite or NaN coordinates, inverted boxes, a negative threshold: the same result as
    the loop (the pairing by place is left out where it could not be exact)."""
    boxes = grid_boxes(120, 3) / 24
    boxes[5] = [0, 0, np.inf, np.inf]
    boxes[9, 0] = np.nan
    boxes[11] = boxes[11, [2, 3, 0, 1]]
    scores = tied_scores(120, 3)
    order = sorted_stable(scores)
    with np.errstate(invalid="ignore"):
        for rule, lit, thr in ((nms.AT_LEAST, at_least, 0.4), (nms.AT_MOST, at_most, 0.4),
                               (nms.ABOVE, above, -0.5), (nms.AT_LEAST, at_least, 0.0)):
            want = greedy_literal(order, boxes, lambda a, b: float(nms.jaccard(
                a[None], b[None])[0, 0]), lit, thr)
            got = np.asarray(order)[nms.greedy(boxes[order], thr, nms.jaccard, rule)]
            assert list(got) == want, rule


def test_memory_stays_linear_in_the_boxes():
    """20,000 boxes: the peak of NumPy's allocations is a small multiple of the boxes' own
    size, far from the 20,000 x 20,000 overlaps (3.2 GB in float64) of a matrix."""
    import tracemalloc

    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 1, (20000, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(0.01, 0.05, (20000, 2))], axis=1)
    scores = rng.uniform(0, 1, 20000)
    tracemalloc.start()
    kept = suppress(boxes, scores, 0.45)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert 1000 < len(kept) < 20000
    assert peak < 60 * 2 ** 20
