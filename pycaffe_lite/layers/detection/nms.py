"""Greedy non-maximum suppression in memory linear in the boxes, for every detection layer.

The forks all suppress greedily: boxes are taken best first, a box is kept unless a box kept
before it overlaps it too much, and kept boxes are final. They differ in the overlap (SSD's
normalised Jaccard, Faster R-CNN's pixel areas counting both end pixels, Intel Caffe's
centre-size boxes), in the rule (dropped above the threshold, at or above it, or kept only
when every overlap is at most it, which also drops a NaN overlap), in SSD's adaptive
threshold (``eta``) and in stopping after a number of kept boxes. :func:`greedy` runs them
all the same way, without an ``N x N`` overlap matrix:

- each box carries the largest overlap it has with a kept box so far (one float per box);
  whether it is suppressed is decided from that value when its turn comes, so the adaptive
  threshold (which only falls) gives the fork's result;
- boxes go in blocks of :data:`BLOCK`: inside a block, the overlaps of its live boxes with
  each other (a ``BLOCK x BLOCK`` matrix) decide them one by one; then the block's kept
  boxes raise the values of the later live boxes, :data:`CHUNK` overlaps at a time, and
  the boxes already beyond the threshold are no longer looked at.

The overlap of two boxes is computed with the same operations in the same order as each
fork's own loop, so the kept boxes are the same, ties included.
"""

import numpy as np

# Boxes decided together from one small overlap matrix.
BLOCK = 256
# Overlaps computed at once when kept boxes raise the later ones (a few MB of temporaries).
CHUNK = 1 << 17

# Rules: when the largest overlap ``m`` with the kept boxes suppresses a box.
ABOVE = "above"          # m > threshold (SSD's ApplyNMS)
AT_LEAST = "at least"    # m >= threshold (the YOLO ports, Intel Caffe's EvalDetection)
AT_MOST = "at most"      # kept only when m <= threshold (ApplyNMSFast, py-faster-rcnn)


def jaccard(a, b):
    """SSD's JaccardOverlap of every box of ``a`` (``(M, 4)`` corners) with every box of
    ``b`` (``(N, 4)``): 0 unless the intersection has a positive width and height; an
    inverted box has area 0 (:func:`bbox_size`)."""
    a = a[:, None, :]
    b = b[None, :, :]
    iw = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0])
    ih = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1])
    inter = iw * ih
    union = bbox_size(a) + bbox_size(b) - inter
    ok = (iw > 0) & (ih > 0)
    out = np.zeros(inter.shape, dtype=np.result_type(a, b))
    np.divide(inter, union, out=out, where=ok)
    return out


def bbox_size(boxes):
    """SSD's BBoxSize of ``boxes`` (``(..., 4)``): 0 where xmax < xmin or ymax < ymin."""
    w = boxes[..., 2] - boxes[..., 0]
    h = boxes[..., 3] - boxes[..., 1]
    return np.where((w < 0) | (h < 0), 0, w * h).astype(boxes.dtype, copy=False)


def pixel_overlaps(a, b):
    """py-faster-rcnn's overlap of pixel boxes: widths and heights count both end pixels
    (``x2 - x1 + 1``), an empty intersection is 0."""
    a = a[:, None, :]
    b = b[None, :, :]
    area_a = (a[..., 2] - a[..., 0] + 1) * (a[..., 3] - a[..., 1] + 1)
    area_b = (b[..., 2] - b[..., 0] + 1) * (b[..., 3] - b[..., 1] + 1)
    iw = np.maximum(0.0, np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]) + 1)
    ih = np.maximum(0.0, np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]) + 1)
    inter = iw * ih
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (area_a + area_b - inter)


def center_overlaps(a, b):
    """Intel Caffe's overlap of ``(cx, cy, w, h)`` boxes: 0 when the boxes are apart (a
    negative extent of the intersection)."""
    a = a[:, None, :]
    b = b[None, :, :]
    ow = (np.minimum(a[..., 0] + a[..., 2] / 2, b[..., 0] + b[..., 2] / 2)
          - np.maximum(a[..., 0] - a[..., 2] / 2, b[..., 0] - b[..., 2] / 2))
    oh = (np.minimum(a[..., 1] + a[..., 3] / 2, b[..., 1] + b[..., 3] / 2)
          - np.maximum(a[..., 1] - a[..., 3] / 2, b[..., 1] - b[..., 3] / 2))
    inter = ow * oh
    with np.errstate(divide="ignore", invalid="ignore"):
        out = inter / (a[..., 2] * a[..., 3] + b[..., 2] * b[..., 3] - inter)
    return np.where((ow < 0) | (oh < 0), 0.0, out)


def _suppressed(rule, m, threshold):
    if rule == AT_MOST:
        return ~(m <= threshold)
    if rule == AT_LEAST:
        return m >= threshold
    return m > threshold


def greedy(boxes, threshold, overlaps=jaccard, rule=ABOVE, eta=1.0, limit=-1):
    """Positions of the kept boxes of ``boxes`` (``(N, 4)``, already best first), in order.

    A box is suppressed when its largest ``overlaps`` with the boxes kept before it meets
    ``rule`` at the threshold of its turn; with ``eta < 1`` the threshold is multiplied by
    ``eta`` (in single precision, as the fork's float) after each kept box while it is above
    0.5. Stops after ``limit`` kept boxes when ``limit > -1``. Memory: a few values per box
    and fixed-size temporaries; the overlaps are computed only between a kept box and the
    later boxes still live.
    """
    n = len(boxes)
    adaptive = eta < 1
    if adaptive:
        threshold, eta = np.float32(threshold), np.float32(eta)
    # AT_MOST drops a NaN overlap, so a NaN must survive the running maximum.
    combine = np.maximum if rule == AT_MOST else np.fmax
    best = None                   # allocated in the overlaps' type, compared as the fork's
    live = np.ones(n, dtype=bool)
    kept = []
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        idx = start + np.flatnonzero(live[start:stop])
        if idx.size == 0:
            continue
        local = overlaps(boxes[idx], boxes[idx])
        if best is None:
            best = np.full(n, -np.inf, dtype=local.dtype)
        block_best = best[idx]
        new = []
        for a in range(idx.size):
            if _suppressed(rule, block_best[a], threshold):
                continue
            new.append(idx[a])
            if -1 < limit <= len(kept) + len(new):
                return np.asarray(kept + new, dtype=np.int64)
            block_best[a + 1:] = combine(block_best[a + 1:], local[a, a + 1:])
            if adaptive and threshold > 0.5:
                threshold = np.float32(threshold * eta)
        kept.extend(new)
        live[idx] = False
        if not new:
            continue
        later = stop + np.flatnonzero(live[stop:])
        if later.size == 0:
            continue
        keepers = boxes[np.asarray(new)]
        step = max(1, CHUNK // len(new))
        for c in range(0, later.size, step):
            part = later[c:c + step]
            m = combine.reduce(overlaps(keepers, boxes[part]), axis=0)
            best[part] = combine(best[part], m)
            live[part] = ~_suppressed(rule, best[part], threshold)
    return np.asarray(kept, dtype=np.int64)
