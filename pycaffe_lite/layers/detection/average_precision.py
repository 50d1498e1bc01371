"""Average precision as the SSD fork computes it (``ComputeAP`` in bbox_util.cpp) and the
mean over classes of DetectionEvaluate's output rows (the fork's ``Solver::TestDetection``).

DetectionEvaluate writes, per test batch, one row ``[-1, label, num_positives, -1, -1]``
per class and one row ``[image, label, score, tp, fp]`` per detection. A
:class:`DetectionAccumulator` gathers those rows over the test iterations and gives the mean
average precision over the classes.
"""

import numpy as np

AP_VERSIONS = ("11point", "MaxIntegral", "Integral")


def average_precision(scores, tp, num_pos, ap_version="Integral"):
    """Average precision of one class.

    ``scores`` and ``tp`` (1 for a true, 0 for a false positive) list the detections in the
    order they were found (a stable sort by descending score follows, as the fork's);
    ``num_pos`` counts the ground-truth boxes. 0 when there is no detection or no positive.
    ``ap_version``: "11point" (PASCAL VOC2007, the fork's loop over recall thresholds
    0.0..1.0), "MaxIntegral" (VOC2012/ILSVRC: area under the monotone precision envelope),
    "Integral" (area under the raw precision/recall curve).
    """
    if ap_version not in AP_VERSIONS:
        raise ValueError("unknown ap_version %r (expected one of %s)"
                         % (ap_version, ", ".join(AP_VERSIONS)))
    scores = np.asarray(scores, dtype=np.float32)
    tp = np.asarray(tp, dtype=np.int64)
    if scores.size == 0 or num_pos == 0:
        return 0.0
    order = np.argsort(-scores, kind="stable")
    tp_sum = np.cumsum(tp[order])
    fp_sum = np.cumsum(1 - tp[order])
    prec = (tp_sum.astype(np.float32) / (tp_sum + fp_sum).astype(np.float32))
    rec = tp_sum.astype(np.float32) / np.float32(num_pos)
    eps = 1e-6
    if ap_version == "11point":
        return _eleven_point(prec, rec)
    if ap_version == "MaxIntegral":
        # The fork walks back from the last detection: the recall step from detection i to
        # i + 1 counts with the best precision from i on (skipped when at most eps), and
        # the first recall rec[0] with the best precision overall.
        envelope = np.maximum.accumulate(prec[::-1])[::-1]
        steps = np.abs(np.diff(rec))
        keep = steps > eps
        area = np.sum(envelope[:-1][keep] * steps[keep], dtype=np.float32)
        return float(np.float32(area + rec[0] * envelope[0]))
    steps = np.diff(np.concatenate([[np.float32(0)], rec]))
    keep = np.abs(steps) > eps
    return float(np.sum(prec[keep] * np.abs(steps[keep]), dtype=np.float32))


def _eleven_point(prec, rec):
    """The fork's 11-point loop: for j = 10..0 it scans back from where the previous
    threshold stopped, taking the best precision at recall >= j / 10, and hands that best
    down to the next threshold only when it found a recall below j / 10."""
    max_precs = np.zeros(11, dtype=np.float32)
    start = rec.size - 1
    rec64 = rec.astype(np.float64)
    for j in range(10, -1, -1):
        below = np.flatnonzero(rec64[:start + 1] < j / 10.0)
        stop = below[-1] if below.size else -1
        if stop < start:
            max_precs[j] = max(max_precs[j], prec[stop + 1:start + 1].max())
        if below.size:
            start = stop
            if j > 0:
                max_precs[j - 1] = max_precs[j]
    return float(np.sum(max_precs[::-1] / np.float32(11), dtype=np.float32))


class DetectionAccumulator:
    """Collects DetectionEvaluate rows (``(K, 5)`` arrays) over test batches."""

    def __init__(self):
        self.num_pos = {}
        self.scores = {}
        self.tp = {}

    def add(self, rows):
        rows = np.asarray(rows, dtype=np.float64).reshape(-1, 5)
        if rows.size and not np.array_equal(rows.shape[1:], (5,)):
            raise ValueError("DetectionEvaluate rows have 5 columns")
        head = rows[:, 0].astype(np.int64) == -1
        for label, n in zip(rows[head, 1].astype(np.int64), rows[head, 2].astype(np.int64)):
            self.num_pos[int(label)] = self.num_pos.get(int(label), 0) + int(n)
        det = rows[~head]
        tp = det[:, 3].astype(np.int64)
        fp = det[:, 4].astype(np.int64)
        det = det[(tp != 0) | (fp != 0)]      # matched a difficult box: not counted
        for label in np.unique(det[:, 1].astype(np.int64)):
            sel = det[:, 1].astype(np.int64) == label
            self.scores.setdefault(int(label), []).append(det[sel, 2].astype(np.float32))
            self.tp.setdefault(int(label), []).append(det[sel, 3].astype(np.int64))

    def average_precisions(self, ap_version="Integral"):
        """``{label: AP}`` for every class with a positives row."""
        out = {}
        for label in sorted(self.num_pos):
            if label not in self.scores:
                out[label] = 0.0
                continue
            out[label] = average_precision(np.concatenate(self.scores[label]),
                                           np.concatenate(self.tp[label]),
                                           self.num_pos[label], ap_version)
        return out

    def mean_average_precision(self, ap_version="Integral"):
        aps = self.average_precisions(ap_version)
        return float(np.float32(sum(aps.values(), np.float32(0)) / len(aps))) if aps else 0.0
