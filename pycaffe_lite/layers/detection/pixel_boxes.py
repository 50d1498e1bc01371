"""OpenCV's DetectionOutput on pixel boxes (``normalized_bbox: false``), the post-processing
of OpenCV's Faster R-CNN nets (``modules/dnn/src/layers/detection_output_layer.cpp``).

Where it differs from the SSD fork's normalised form:

- decoding (CENTER_SIZE): a prior's width and height count both end pixels
  (``xmax - xmin + 1``), its centre is ``xmin + width / 2``, and the decoded box is the
  centre plus and minus half the decoded size; CORNER adds the offsets as the fork does;
- clipping (``clip``) is to ``[0, W - 1] x [0, H - 1]`` of a fourth bottom's ``H x W``;
- a box's area is ``(w + 1) * (h + 1)`` (0 when inverted) and two boxes overlap only when
  their intersection has a non-negative width and height;
- every score must be above ``confidence_threshold`` (0 unless set), ``nms_param.top_k``
  applies when positive, and ``eta`` is not applied;
- the top is ``1 x 1 x (keep_top_k * N) x 7``: each image's detections (at most
  ``keep_top_k``) one after the other, sorted by score across classes, then rows of zeros.
"""

import numpy as np

from .nms import AT_MOST, Overlap, greedy


def _columns(boxes):
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    w = x2 - x1
    h = y2 - y1
    return x1, y1, x2, y2, np.where((w < 0) | (h < 0), 0, (w + 1) * (h + 1)).astype(
        boxes.dtype, copy=False)


def _pairs(a, b):
    iw = np.minimum(a[2], b[2]) - np.maximum(a[0], b[0])
    ih = np.minimum(a[3], b[3]) - np.maximum(a[1], b[1])
    inter = (iw + 1) * (ih + 1)
    ok = (iw >= 0) & (ih >= 0)
    out = np.zeros(inter.shape, dtype=np.result_type(a[0], b[0]))
    np.divide(inter, a[4] + b[4] - inter, out=out, where=ok)
    return out


def _extents(columns):
    # boxes touching along an edge (intersection width 0) still overlap
    return columns[0], columns[1], columns[2] + 1, columns[3] + 1


# OpenCV's JaccardOverlap<false> of pixel boxes.
overlaps = Overlap(_columns, _pairs, _extents)


def decode(priors, variances, center_size, offsets):
    """Boxes ``(..., P, 4)`` from ``offsets`` against pixel ``priors`` ``(P, 4)``, in the
    priors' float type; ``variances`` ``(P, 4)`` scale the offsets unless None."""
    dtype = priors.dtype
    offsets = offsets.astype(dtype, copy=False)
    if variances is not None:
        offsets = offsets * variances
    if not center_size:
        return priors + offsets
    one, half = dtype.type(1), dtype.type(0.5)
    pw = priors[:, 2] - priors[:, 0] + one
    ph = priors[:, 3] - priors[:, 1] + one
    cx = offsets[..., 0] * pw + (priors[:, 0] + pw * half)
    cy = offsets[..., 1] * ph + (priors[:, 1] + ph * half)
    w = np.exp(offsets[..., 2]) * pw
    h = np.exp(offsets[..., 3]) * ph
    return np.stack([cx - w * half, cy - h * half, cx + w * half, cy + h * half], axis=-1)


def image_rows(boxes, scores, classes, threshold, nms_threshold, top_k, keep_top_k):
    """One image's detections ``(K, 6)``: label, score, xmin, ymin, xmax, ymax, best first.

    ``boxes`` ``(L, P, 4)`` (``L`` = 1: shared by every class), ``scores`` ``(P, C)``,
    ``classes`` the labels searched (all but the background)."""
    labels, picks = [], []
    for c in classes:
        cls_boxes = boxes[0 if boxes.shape[0] == 1 else c]
        s = scores[:, c]
        candidates = np.flatnonzero(s > threshold)
        order = candidates[np.argsort(-s[candidates], kind="stable")]
        if top_k > 0:
            order = order[:top_k]
        kept = order[greedy(cls_boxes[order], nms_threshold, overlaps, AT_MOST)]
        labels.append(np.full(kept.size, c))
        picks.append(kept)
    label = np.concatenate(labels) if labels else np.zeros(0, np.int64)
    index = np.concatenate(picks) if picks else np.zeros(0, np.int64)
    score = scores[index, label]
    best = np.argsort(-score, kind="stable")[:keep_top_k]
    label, index = label[best], index[best]
    rows = np.empty((best.size, 6), dtype=np.float64)
    rows[:, 0] = label
    rows[:, 1] = score[best]
    for i, c in enumerate(label):
        rows[i, 2:] = boxes[0 if boxes.shape[0] == 1 else c, index[i]]
    return rows
