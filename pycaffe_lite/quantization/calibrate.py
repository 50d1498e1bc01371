"""Activation statistics and the int8 thresholds chosen from them.

Every method gives a threshold ``t`` on ``|x|``; the symmetric int8 scale is ``t / 127``
(``x ~ 127 * q / t`` with ``q`` in [-127, 127]).

- ``minmax``: ``t = max |x|`` over every calibration batch.
- ``percentile``: the upper edge of the first histogram bin at which the share of ``|x|``
  at or below it reaches ``percentile`` % (99.99 by default).
- ``entropy``: TensorRT's entropy calibration. A histogram of ``|x|`` in 2048 bins over
  ``[0, max |x|]``; for every ``i`` in 128..2048 the reference ``P`` is the first ``i`` bins
  with the count of every later bin added to bin ``i - 1``; the candidate ``Q`` merges the
  first ``i`` bins into 128 levels (``i // 128`` bins a level, the last level also takes the
  remainder) and spreads each level's count evenly over that level's bins where ``P`` is not
  empty (the last one too when only the outliers fill it: Intel Caffe's and onnxruntime's
  calibrators, which follow the same TensorRT talk, expand by ``P``'s non-empty bins). Both
  are normalised and smoothed (every empty bin gets ``eps = 1e-4``, taken evenly from the
  non-empty ones) and ``KL(P || Q) = sum P log(P / Q)`` is computed; the ``i`` of the least
  divergence gives ``t = (i + 0.5) * bin width`` (at most ``max |x|``).

The histogram's range grows with the data: a batch beyond it widens the range to the new
maximum and moves the counts so far into the new bins (each old bin's count goes to the new
bin that holds the old bin's centre).
"""

import numpy as np

from ..errors import CaffeError

BINS = 2048
LEVELS = 128
EPS = 1e-4
METHODS = ("entropy", "percentile", "minmax")


class Histogram:
    """Running statistics of one activation: its minimum, ``max |x|`` and (when ``bins``)
    a histogram of ``|x|`` over ``[0, range]``."""

    def __init__(self, bins=BINS):
        self.bins = bins
        self.counts = np.zeros(bins, np.float64) if bins else None
        self.range = 0.0
        self.amax = 0.0
        self.min = np.inf
        self.count = 0

    def add(self, x):
        a = np.abs(np.asarray(x, np.float64).ravel())
        if not a.size:
            return
        self.count += a.size
        self.min = min(self.min, float(np.min(x)))
        top = float(a.max())
        self.amax = max(self.amax, top)
        if self.counts is None:
            return
        if top > self.range:
            self._widen(top)
        if self.range == 0.0:
            self.counts[0] += a.size
            return
        self.counts += np.histogram(a, self.bins, (0.0, self.range))[0]

    def _widen(self, new_range):
        if self.range > 0 and self.counts.any():
            width = self.range / self.bins
            centres = (np.arange(self.bins) + 0.5) * width
            self.counts = np.histogram(centres, self.bins, (0.0, new_range),
                                       weights=self.counts)[0]
        self.range = new_range

    @property
    def width(self):
        return self.range / self.bins


def minmax_threshold(hist):
    return hist.amax


def percentile_threshold(hist, percentile=99.99):
    """The upper edge of the first bin where the cumulative share of ``|x|`` reaches
    ``percentile`` %."""
    if not 0 < percentile <= 100:
        raise CaffeError("percentile must be in (0, 100], got %r" % (percentile,))
    total = hist.counts.sum()
    if total == 0 or hist.range == 0:
        return hist.amax
    cumulative = np.cumsum(hist.counts)
    # the small slack keeps a share that is exactly the percentile from rounding below it
    k = int(np.searchsorted(cumulative, total * percentile / 100.0 * (1 - 1e-12)))
    return min(k + 1, hist.bins) * hist.width


def _smooth(p, eps=EPS):
    """Give every zero entry ``eps``, taken evenly from the non-zero ones."""
    zero = p == 0
    nz = int((~zero).sum())
    if nz == 0:
        return None
    out = p.astype(np.float64).copy()
    out[zero] = eps
    out[~zero] -= eps * zero.sum() / nz
    if (out[~zero] <= 0).any():
        return None
    return out


def _spread(groups, used):
    """Each row's sum spread evenly over its entries where ``used``."""
    n = used.sum(axis=1, keepdims=True)
    return np.where(used, groups.sum(axis=1, keepdims=True) / np.maximum(n, 1), 0.0)


def kl_divergence(counts, i, levels=LEVELS):
    """KL(P || Q) of TensorRT's entropy calibration for a threshold after ``i`` bins of the
    histogram ``counts`` merged into ``levels`` levels (module notes); ``inf`` when either
    distribution is empty."""
    counts = np.asarray(counts, np.float64)
    if not levels <= i <= len(counts):
        raise CaffeError("the threshold bin %d must lie in %d..%d" % (i, levels, len(counts)))
    p = counts[:i].copy()
    p[i - 1] += counts[i:].sum()
    per = i // levels
    split = (levels - 1) * per
    used = p != 0  # the reference's non-empty bins, its last one holding the outliers
    head = counts[:split].reshape(levels - 1, per)
    q = np.concatenate([_spread(head, used[:split].reshape(levels - 1, per)).ravel(),
                        _spread(counts[split:i][None], used[split:][None])[0]])
    if p.sum() == 0 or q.sum() == 0:
        return np.inf
    p, q = _smooth(p / p.sum()), _smooth(q / q.sum())
    if p is None or q is None:
        return np.inf
    return float(np.sum(p * np.log(p / q)))


def entropy_threshold(hist, levels=LEVELS):
    """The threshold of least KL divergence over the bins ``levels``..``len(bins)``."""
    if hist.range == 0 or hist.counts.sum() == 0:
        return hist.amax
    counts = hist.counts
    best, best_i = np.inf, len(counts)
    for i in range(levels, len(counts) + 1):
        d = kl_divergence(counts, i, levels)
        if d < best:
            best, best_i = d, i
    return min((best_i + 0.5) * hist.width, hist.amax)


def zero_range_error(what, layer):
    """The error for an activation that calibration saw only as 0: its int8 scale would be 0
    (``what`` names the blob)."""
    return CaffeError("calibration: %s is 0 in every calibration batch, so its int8 scale "
                      "would be 0 and int8 layer '%s' could not represent any other value; "
                      "calibrate on batches that reach it, or --skip %s"
                      % (what, layer, layer))


def threshold(hist, method, percentile=99.99):
    """The threshold of ``method`` (``entropy``, ``percentile`` or ``minmax``)."""
    if method == "minmax":
        return minmax_threshold(hist)
    if method == "percentile":
        return percentile_threshold(hist, percentile)
    if method == "entropy":
        return entropy_threshold(hist)
    raise CaffeError("unknown calibration method %r: choose %s" % (method, ", ".join(METHODS)))
