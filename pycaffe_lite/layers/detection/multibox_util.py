"""Matching, mining and the per-prior losses behind MultiBoxLoss (the SSD fork's
``FindMatches``, ``MineHardExamples``, ``ComputeConfLoss`` and ``ComputeLocLoss``).

Matches are kept per image as ``{loc_label: indices}``: ``indices`` has one entry per prior,
the matched ground-truth row of that image (-1 none, -2 ignored cross-boundary prior).
``loc_label`` is -1 with shared locations, else the class whose location slot is trained.
"""

import numpy as np

from ...proto import caffe_pb2
from .bbox_util import decode, encode, match, nms

MBL = caffe_pb2.MultiBoxLossParameter
FLT_MIN = float(np.finfo(np.float32).tiny)


class GroundTruth:
    """One image's ground truth: boxes ``(G, 4)``, labels ``(G,)``, difficult flags."""

    def __init__(self, boxes, labels, difficult):
        self.boxes, self.labels, self.difficult = boxes, labels, difficult


def read_ground_truth(layer, gt, num_classes, background_label_id, use_difficult_gt):
    """``{image: GroundTruth}`` from the label rows ``[image, label, instance, xmin, ymin,
    xmax, ymax, difficult]`` (rows with image -1 are padding), as the fork's GetGroundTruth."""
    rows = np.asarray(gt, dtype=np.float64).reshape(-1, 8)
    rows = rows[rows[:, 0].astype(np.int64) != -1]
    labels = rows[:, 1].astype(np.int64)
    bad = (labels < 0) | (labels >= num_classes) | (labels == background_label_id)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise layer.error(
            "ground truth row %d (image %d) has label %d; labels must be in [0, %d) and not "
            "the background label %d" % (k, int(rows[k, 0]), int(labels[k]), num_classes,
                                         background_label_id))
    difficult = rows[:, 7] != 0
    if not use_difficult_gt:
        rows, labels, difficult = rows[~difficult], labels[~difficult], difficult[~difficult]
    images = rows[:, 0].astype(np.int64)
    out = {}
    for i in np.unique(images):
        sel = images == i
        out[int(i)] = GroundTruth(rows[sel, 3:7], labels[sel], difficult[sel])
    return out


def gathered(gts, images, rows, field):
    """``gts[images[k]].<field>[rows[k]]`` for every k, without a loop over the matches."""
    keys = sorted(gts)
    start = np.zeros(max(keys) + 2 if keys else 1, dtype=np.int64)
    for k in keys:
        start[k + 1] = len(gts[k].labels)
    offsets = np.cumsum(start)
    # images without ground truth never appear among the matches
    flat = np.concatenate([getattr(gts[k], field) for k in range(len(start) - 1)
                           if k in gts]) if keys else np.zeros((0,))
    return flat[offsets[images] + rows]


def find_matches(p, loc, priors, variances, gts, num_classes):
    """Per image ``({label: indices}, {label: overlaps})`` (FindMatches). ``loc`` is
    ``(N, P, L, 4)``; ``gts`` from :func:`read_ground_truth`."""
    share = p.share_location
    bg = p.background_label_id
    all_indices, all_overlaps = [], []
    for i in range(loc.shape[0]):
        indices, overlaps = {}, {}
        gt = gts.get(i)
        if gt is None:
            all_indices.append(indices)
            all_overlaps.append(overlaps)
            continue
        if not p.use_prior_for_matching:
            for c in range(1 if share else num_classes):
                label = -1 if share else c
                if not share and label == bg:
                    continue
                boxes = decode(priors, variances, p.code_type, p.encode_variance_in_target,
                               loc[i, :, c])
                sel = np.arange(len(gt.labels)) if label == -1 else \
                    np.flatnonzero(gt.labels == label)
                idx, ov = match(gt.boxes[sel], boxes, p.match_type, p.overlap_threshold,
                                p.ignore_cross_boundary_bbox)
                idx = np.where(idx >= 0, sel[np.maximum(idx, 0)] if sel.size else idx, idx)
                indices[label], overlaps[label] = idx, ov
        else:
            idx, ov = match(gt.boxes, priors, p.match_type, p.overlap_threshold,
                            p.ignore_cross_boundary_bbox)
            if share:
                indices[-1], overlaps[-1] = idx, ov
            else:
                for c in range(num_classes):
                    if c == bg:
                        continue
                    own = np.full_like(idx, -1)
                    hit = idx > -1
                    own[hit] = np.where(gt.labels[idx[hit]] == c, idx[hit], -1)
                    indices[c], overlaps[c] = own, ov
        all_indices.append(indices)
        all_overlaps.append(overlaps)
    return all_indices, all_overlaps


def conf_loss_per_prior(conf, target, conf_loss_type):
    """The confidence loss of each prior ``(..., C)`` for integer targets ``(...)``, in the
    input's precision (SOFTMAX: ``-log(max(p, FLT_MIN))``; LOGISTIC: the summed
    cross-entropy against the one-hot target)."""
    if conf_loss_type == MBL.SOFTMAX:
        z = conf - conf.max(axis=-1, keepdims=True)
        e = np.exp(z)
        prob = np.take_along_axis(e, target[..., None], axis=-1)[..., 0] / e.sum(axis=-1)
        return -np.log(np.maximum(prob, FLT_MIN))
    onehot = np.zeros_like(conf)
    np.put_along_axis(onehot, target[..., None], 1, axis=-1)
    pos = conf >= 0
    return -(conf * (onehot - pos) - np.log1p(np.exp(conf - 2 * conf * pos))).sum(axis=-1)


def loc_loss_values(diff, loc_loss_type):
    """Elementwise localisation loss of ``pred - target``: smooth L1 or ``0.5 d^2``."""
    if loc_loss_type == MBL.SMOOTH_L1:
        a = np.abs(diff)
        return np.where(a < 1, 0.5 * diff * diff, a - 0.5)
    return 0.5 * diff * diff


def loc_loss_grad(diff, loc_loss_type):
    if loc_loss_type == MBL.SMOOTH_L1:
        return np.where(np.abs(diff) < 1, diff, np.sign(diff))
    return diff


def positives(all_indices):
    """``(image, label, prior, gt)`` arrays of every match, in the fork's order (images,
    then location labels ascending, then priors)."""
    parts = []
    for i, indices in enumerate(all_indices):
        for label in sorted(indices):
            idx = indices[label]
            j = np.flatnonzero(idx > -1)
            parts.append(np.stack([np.full(j.size, i), np.full(j.size, label), j, idx[j]], 1))
    if not parts:
        return np.zeros((0, 4), dtype=np.int64)
    return np.concatenate(parts).astype(np.int64)


def encode_locations(p, loc, priors, variances, gts, pos):
    """Predictions and encoded targets ``(M, 4)`` of the matched priors
    (EncodeLocPrediction), and ``scale`` ``(M, 4)``: d(prediction)/d(loc input)."""
    m = pos.shape[0]
    if m == 0:
        empty = np.zeros((0, 4), dtype=loc.dtype)
        return empty, empty, empty
    img, label, j, g = pos.T
    slot = np.where(label < 0, 0, label)
    gt_boxes = gathered(gts, img, g, "boxes")
    target = encode(priors[j], variances[j], p.code_type, p.encode_variance_in_target,
                    gt_boxes.astype(loc.dtype))
    pred = loc[img, j, slot].copy()
    scale = np.ones_like(pred)
    if p.bp_inside:
        box = priors[j]
        if not p.use_prior_for_matching:
            box = decode(priors[j], variances[j], p.code_type, p.encode_variance_in_target,
                         pred)
        outside = (box < 0) | (box > 1)
        pred = np.where(outside, target, pred)
        scale = np.where(outside, 0, scale)
    if p.encode_variance_in_target:
        pred = pred / variances[j]
        target = target / variances[j]
        scale = scale / variances[j]
    return pred, target, scale


def mine(p, conf, loc, priors, variances, gts, all_indices, all_overlaps, num_classes):
    """Hard negative (or hard example) mining (MineHardExamples): updates ``all_indices``
    in place (HARD_EXAMPLE drops unselected matches) and returns the negatives' prior
    indices per image."""
    num = conf.shape[0]
    mining = p.mining_type
    negs = [np.zeros(0, dtype=np.int64) for _ in range(num)]
    if mining == MBL.NONE:
        return negs
    bg = p.background_label_id
    # Confidence loss of each prior against its matched label (background when unmatched).
    target = np.full(conf.shape[:2], bg, dtype=np.int64)
    for i, indices in enumerate(all_indices):
        for label in sorted(indices, reverse=True):  # the first matching label wins
            idx = indices[label]
            hit = idx > -1
            target[i, hit] = gts[i].labels[idx[hit]]
    loss = conf_loss_per_prior(conf, target, p.conf_loss_type).astype(np.float32)
    if mining == MBL.HARD_EXAMPLE:
        pos = positives(all_indices)
        pred, tgt, _ = encode_locations(p, loc, priors, variances, gts, pos)
        loc_loss = loc_loss_values(pred - tgt, p.loc_loss_type).sum(axis=1)
        extra = np.zeros(conf.shape[:2], dtype=np.float32)
        extra[pos[:, 0], pos[:, 2]] = loc_loss
        loss = (loss + extra).astype(np.float32)
    has_nms = p.HasField("nms_param")
    nms_threshold = float(p.nms_param.nms_threshold) if has_nms else 0.0
    top_k = int(p.nms_param.top_k) if has_nms else -1
    for i in range(num):
        selected = []
        for label in sorted(all_indices[i]):
            idx = all_indices[i][label]
            if mining == MBL.MAX_NEGATIVE:
                eligible = np.flatnonzero((idx == -1) &
                                          (all_overlaps[i][label] < p.neg_overlap))
                num_pos = int(np.count_nonzero(idx > -1))
                num_sel = min(int(np.float32(num_pos) * np.float32(p.neg_pos_ratio)),
                              eligible.size)
            else:
                eligible = np.arange(idx.size)
                num_sel = min(int(p.sample_size), eligible.size)
            if has_nms and nms_threshold > 0:
                if p.use_prior_for_nms:
                    boxes = priors[eligible]
                else:
                    slot = 0 if label < 0 else label
                    boxes = decode(priors, variances, p.code_type,
                                   p.encode_variance_in_target, loc[i, :, slot])[eligible]
                kept = nms(boxes, loss[i, eligible], nms_threshold, top_k)
                sel = eligible[kept[:num_sel]]
            else:
                order = np.argsort(-loss[i, eligible], kind="stable")
                sel = eligible[order[:num_sel]]
            chosen = np.zeros(idx.size, dtype=bool)
            chosen[sel] = True
            if mining == MBL.HARD_EXAMPLE:
                idx[(idx > -1) & ~chosen] = -1
            selected.append(np.flatnonzero((idx == -1) & chosen))
        if selected:
            negs[i] = np.concatenate(selected)
    return negs

