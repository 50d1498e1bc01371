"""Box arithmetic of the SSD fork of Caffe (weiliu89/caffe, ``src/caffe/util/bbox_util.cpp``).

Boxes are arrays of shape ``(..., 4)`` holding ``xmin, ymin, xmax, ymax`` in coordinates
normalised by the image size. Everything here works on whole arrays of boxes (NumPy on the
host; the SSD layers bring their blobs to the host, as the fork does):

- ``encode`` / ``decode``: offsets of boxes relative to prior (default) boxes for the three
  code types CORNER, CENTER_SIZE and CORNER_SIZE, with the variance in the target or in the
  offsets;
- ``bbox_size``, ``jaccard`` (defined in :mod:`.nms`): the fork's area (0 for an inverted
  box) and overlap (0 unless the intersection has a positive width and height);
- ``nms_fast`` (DetectionOutput's suppression with the adaptive ``eta``) and ``nms`` (the
  variant hard-example mining uses: tiny boxes dropped, stop after ``top_k`` kept), both
  run by :func:`.nms.greedy` in memory linear in the boxes;
- ``match`` (bipartite then per-prediction matching of priors to ground truth).
"""

import numpy as np

from ...proto import caffe_pb2
from .nms import ABOVE, AT_MOST, bbox_size, greedy, jaccard

CodeType = caffe_pb2.PriorBoxParameter
CORNER = CodeType.CORNER
CENTER_SIZE = CodeType.CENTER_SIZE
CORNER_SIZE = CodeType.CORNER_SIZE
CODE_NAMES = {CORNER: "CORNER", CENTER_SIZE: "CENTER_SIZE", CORNER_SIZE: "CORNER_SIZE"}

MatchType = caffe_pb2.MultiBoxLossParameter
BIPARTITE = MatchType.BIPARTITE
PER_PREDICTION = MatchType.PER_PREDICTION


def _variance(variances, boxes, in_target):
    if in_target:
        return np.ones((1, 4), dtype=boxes.dtype)
    return variances


def decode(priors, variances, code_type, variance_encoded_in_target, offsets):
    """Boxes from predicted ``offsets`` (``(..., P, 4)``) against ``priors`` (``(P, 4)``) with
    their ``variances`` (``(P, 4)``), as the fork's DecodeBBox (no clipping)."""
    v = _variance(variances, offsets, variance_encoded_in_target)
    if code_type == CORNER:
        return priors + v * offsets
    pw = priors[:, 2] - priors[:, 0]
    ph = priors[:, 3] - priors[:, 1]
    if code_type == CENTER_SIZE:
        pcx = (priors[:, 0] + priors[:, 2]) / 2
        pcy = (priors[:, 1] + priors[:, 3]) / 2
        cx = v[:, 0] * offsets[..., 0] * pw + pcx
        cy = v[:, 1] * offsets[..., 1] * ph + pcy
        w = np.exp(v[:, 2] * offsets[..., 2]) * pw
        h = np.exp(v[:, 3] * offsets[..., 3]) * ph
        return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)
    if code_type == CORNER_SIZE:
        scale = np.stack([pw, ph, pw, ph], axis=-1)
        return priors + v * offsets * scale
    raise ValueError("unknown code_type %r" % (code_type,))


def encode(priors, variances, code_type, encode_variance_in_target, boxes):
    """Offsets of ``boxes`` (``(P, 4)``, one per prior) against ``priors``, as the fork's
    EncodeBBox: the inverse of :func:`decode`."""
    v = _variance(variances, boxes, encode_variance_in_target)
    if code_type == CORNER:
        return (boxes - priors) / v
    pw = priors[:, 2] - priors[:, 0]
    ph = priors[:, 3] - priors[:, 1]
    if code_type == CENTER_SIZE:
        pcx = (priors[:, 0] + priors[:, 2]) / 2
        pcy = (priors[:, 1] + priors[:, 3]) / 2
        bw = boxes[:, 2] - boxes[:, 0]
        bh = boxes[:, 3] - boxes[:, 1]
        bcx = (boxes[:, 0] + boxes[:, 2]) / 2
        bcy = (boxes[:, 1] + boxes[:, 3]) / 2
        return np.stack([(bcx - pcx) / pw / v[:, 0], (bcy - pcy) / ph / v[:, 1],
                         np.log(bw / pw) / v[:, 2], np.log(bh / ph) / v[:, 3]], axis=-1)
    if code_type == CORNER_SIZE:
        scale = np.stack([pw, ph, pw, ph], axis=-1)
        return (boxes - priors) / scale / v
    raise ValueError("unknown code_type %r" % (code_type,))


def sort_descending(scores):
    """Indices ordering ``scores`` from high to low, ties in index order (a stable sort)."""
    return np.argsort(-np.asarray(scores), kind="stable")


def nms_fast(boxes, scores, score_threshold, nms_threshold, eta=1.0, top_k=-1):
    """The fork's ApplyNMSFast: indices of the kept boxes, best first.

    Candidates are the boxes scoring above ``score_threshold``, best first (ties in index
    order), at most ``top_k`` of them (-1: all). A candidate is kept when its overlap with
    every box kept so far is at most the current threshold; after each kept box, with
    ``eta < 1`` and the threshold above 0.5, the threshold is multiplied by ``eta``.
    """
    candidates = np.flatnonzero(scores > score_threshold)
    order = candidates[sort_descending(scores[candidates])]
    if top_k > -1:
        order = order[:top_k]
    return order[greedy(boxes[order], nms_threshold, jaccard, AT_MOST, eta)]


def nms(boxes, scores, nms_threshold, top_k=-1):
    """The fork's ApplyNMS (used by hard-example mining): boxes best first (ties in index
    order, at most ``top_k`` candidates when ``top_k > -1``); boxes of area below 1e-5 are
    dropped; a kept box removes the later ones overlapping it by more than the threshold;
    stops once ``top_k`` boxes are kept."""
    order = sort_descending(scores)
    if top_k > -1:
        order = order[:top_k]
    order = order[bbox_size(boxes[order]) >= 1e-5]
    return order[greedy(boxes[order], nms_threshold, jaccard, ABOVE, limit=top_k)]


def cross_boundary(boxes):
    """True for boxes reaching outside [0, 1] on any coordinate."""
    return ((boxes < 0) | (boxes > 1)).any(axis=-1)


def match(gt_boxes, pred_boxes, match_type, overlap_threshold,
          ignore_cross_boundary=False):
    """The fork's MatchBBox against all of ``gt_boxes`` (``(G, 4)``).

    Returns ``(indices, overlaps)`` for the ``P`` predictions (or priors): ``indices[i]`` is
    the matched ground-truth box, -1 when none, -2 for a cross-boundary prediction that is
    ignored; ``overlaps[i]`` is the best overlap of prediction ``i`` with any ground truth
    (then the overlap of its match). First every ground truth takes, greedily by overlap,
    its best free prediction (bipartite); with PER_PREDICTION each remaining prediction then
    takes its best ground truth if the overlap is at least ``overlap_threshold``. Overlaps
    of 1e-6 or less count as none.
    """
    num_pred = pred_boxes.shape[0]
    indices = np.full(num_pred, -1, dtype=np.int64)
    overlaps = np.zeros(num_pred, dtype=np.float64)
    if gt_boxes.shape[0] == 0 or num_pred == 0:
        return indices, overlaps
    ious = jaccard(pred_boxes, gt_boxes).astype(np.float64)
    if ignore_cross_boundary:
        ignored = cross_boundary(pred_boxes)
        indices[ignored] = -2
        ious[ignored] = 0
    ious[ious <= 1e-6] = -1.0
    overlaps[:] = np.maximum(ious.max(axis=1), 0)
    work = ious.copy()
    work[indices == -2] = -1.0
    for _ in range(gt_boxes.shape[0]):
        flat = int(np.argmax(work))
        i, j = divmod(flat, work.shape[1])
        if work[i, j] < 0:
            break
        indices[i] = j
        overlaps[i] = work[i, j]
        work[i, :] = -1.0
        work[:, j] = -1.0
    if match_type == PER_PREDICTION:
        free = indices == -1
        cand = np.where(ious >= overlap_threshold, ious, -1.0)
        best = np.argmax(cand, axis=1)
        best_iou = cand[np.arange(num_pred), best]
        take = free & (best_iou >= 0) & (best_iou >= overlap_threshold)
        indices[take] = best[take]
        overlaps[take] = best_iou[take]
    return indices, overlaps
