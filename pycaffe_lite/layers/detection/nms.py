"""Greedy non-maximum suppression in memory linear in the boxes, for every detection layer.

The forks all suppress greedily: boxes are taken best first, a box is kept unless a box kept
before it overlaps it too much, and kept boxes are final. They differ in the overlap (SSD's
normalised Jaccard, Faster R-CNN's pixel areas counting both end pixels, Intel Caffe's
centre-size boxes), in the rule (dropped above the threshold, at or above it, or kept only
when every overlap is at most it, which also drops a NaN overlap), in SSD's adaptive
threshold (``eta``) and in stopping after a number of kept boxes. :func:`greedy` runs them
all the same way, without an ``N x N`` overlap matrix:

- each box carries the largest overlap it has with a kept box so far (one value per box);
  whether it is suppressed is decided from that value when its turn comes, so the adaptive
  threshold (which only falls) gives the fork's result;
- boxes go in blocks of :data:`BLOCK`: inside a block, the overlaps of its live boxes with
  each other (a ``BLOCK x BLOCK`` matrix) decide them one by one; then the block's kept
  boxes raise the values of the later live boxes, at most :data:`CHUNK` overlaps at a time,
  and the boxes already beyond the threshold are no longer looked at;
- when an overlap of 0 cannot suppress (a threshold of at least 0, above 0 for the "at
  least" rule), only boxes that can intersect are paired: a grid of cells about the size of
  a typical box lists the boxes each cell touches, and a kept box meets the live boxes of its
  cells (boxes spanning many cells meet every box). Pairs left out intersect in nothing and
  have overlap 0, so the result is the same.

The overlap of two boxes is computed with the same operations in the same order as each
fork's own loop, so the kept boxes are the same, ties included.
"""

import numpy as np

# Boxes decided together from one small overlap matrix.
BLOCK = 256
# Overlaps computed at once when kept boxes raise the later ones (a few MB of temporaries).
CHUNK = 1 << 17
# A box touching more grid cells than this meets every box instead of being listed.
MAX_CELLS = 16
# Grid cells are this many times the median box's width and height.
CELL = 1.0

# Rules: when the largest overlap ``m`` with the kept boxes suppresses a box.
ABOVE = "above"          # m > threshold (SSD's ApplyNMS)
AT_LEAST = "at least"    # m >= threshold (the YOLO ports, Intel Caffe's EvalDetection)
AT_MOST = "at most"      # kept only when m <= threshold (ApplyNMSFast, py-faster-rcnn)


def bbox_size(boxes):
    """SSD's BBoxSize of ``boxes`` (``(..., 4)``): 0 where xmax < xmin or ymax < ymin."""
    w = boxes[..., 2] - boxes[..., 0]
    h = boxes[..., 3] - boxes[..., 1]
    return np.where((w < 0) | (h < 0), 0, w * h).astype(boxes.dtype, copy=False)


def _corner_columns(boxes):
    return boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3], bbox_size(boxes)


def _jaccard(a, b):
    iw = np.minimum(a[2], b[2]) - np.maximum(a[0], b[0])
    ih = np.minimum(a[3], b[3]) - np.maximum(a[1], b[1])
    inter = iw * ih
    union = a[4] + b[4] - inter
    ok = (iw > 0) & (ih > 0)
    out = np.zeros(inter.shape, dtype=np.result_type(a[0], b[0]))
    np.divide(inter, union, out=out, where=ok)
    return out


def _pixel_columns(boxes):
    x1, y1, x2, y2 = (boxes[:, i] for i in range(4))
    return x1, y1, x2, y2, (x2 - x1 + 1) * (y2 - y1 + 1)


def _pixel(a, b):
    iw = np.maximum(0.0, np.minimum(a[2], b[2]) - np.maximum(a[0], b[0]) + 1)
    ih = np.maximum(0.0, np.minimum(a[3], b[3]) - np.maximum(a[1], b[1]) + 1)
    inter = iw * ih
    with np.errstate(divide="ignore", invalid="ignore"):
        return inter / (a[4] + b[4] - inter)


def _pixel_extents(columns):
    # an overlap 0 / 0 (two boxes of no pixel area) would be NaN: no pruning then
    if not (columns[4] > 0).all():
        return None
    return columns[0], columns[1], columns[2] + 1, columns[3] + 1


def _center_columns(boxes):
    cx, cy, w, h = (boxes[:, i] for i in range(4))
    return cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2, w * h


def _center(a, b):
    ow = np.minimum(a[2], b[2]) - np.maximum(a[0], b[0])
    oh = np.minimum(a[3], b[3]) - np.maximum(a[1], b[1])
    inter = ow * oh
    with np.errstate(divide="ignore", invalid="ignore"):
        out = inter / (a[4] + b[4] - inter)
    return np.where((ow < 0) | (oh < 0), 0.0, out)


def _first_four(columns):
    return columns[:4]


class Overlap:
    """One fork's overlap of two boxes. ``columns(boxes)``: per-box values computed once (the
    box's sides as the overlap uses them and its area); ``pairs(a, b)``: the overlaps element
    by element from broadcast columns; ``extents(columns)``: the x and y ranges (low x, low y,
    high x, high y) outside which a box overlaps nothing (a nonzero overlap needs the ranges
    of both boxes to meet), or None where that cannot be said."""

    def __init__(self, columns, pairs, extents):
        self.columns = columns
        self.pairs = pairs
        self.extents = extents

    def __call__(self, a, b):
        """The ``(M, N)`` overlaps of every box of ``a`` (``(M, 4)``) with every box of
        ``b`` (``(N, 4)``)."""
        return self.pairs([c[:, None] for c in self.columns(a)],
                          [c[None, :] for c in self.columns(b)])


# SSD's JaccardOverlap of corner boxes (normalised): 0 unless the intersection has a positive
# width and height; an inverted box has area 0 (bbox_size).
jaccard = Overlap(_corner_columns, _jaccard, _first_four)
# py-faster-rcnn's overlap of pixel boxes: widths and heights count both end pixels
# (x2 - x1 + 1); an empty intersection is 0.
pixel_overlaps = Overlap(_pixel_columns, _pixel, _pixel_extents)
# Intel Caffe's overlap of (cx, cy, w, h) boxes: 0 when an extent of the intersection is
# negative.
center_overlaps = Overlap(_center_columns, _center, _first_four)


def _suppressed(rule, m, threshold):
    if rule == AT_MOST:
        return ~(m <= threshold)
    if rule == AT_LEAST:
        return m >= threshold
    return m > threshold


def _expand(counts):
    """For runs of ``counts``: the run of every element and its place in its run."""
    runs = np.repeat(np.arange(counts.size), counts)
    starts = np.cumsum(counts) - counts
    return runs, np.arange(runs.size) - starts[runs]


class _Grid:
    """The live boxes each cell of a uniform grid touches (cells about the median box size,
    at most about 4 per box); a box touching more than :data:`MAX_CELLS` cells is kept apart
    as large, to meet every box."""

    def __init__(self, extents, live):
        self.extents = [np.asarray(e, dtype=np.float64) for e in extents]
        lo_x, lo_y, hi_x, hi_y = self.extents
        ids = np.flatnonzero(live)
        self.listed_live = ids.size
        cells = max(4 * ids.size, 1024)
        self.origin, size, spans = [], [], []
        for lo, hi in ((lo_x[ids], hi_x[ids]), (lo_y[ids], hi_y[ids])):
            width = hi - lo
            typical = float(np.median(width[width > 0])) if (width > 0).any() else 1.0
            self.origin.append(lo.min())
            spans.append(max(hi.max() - lo.min(), typical))
            size.append(typical * CELL)
        scale = max(1.0, np.sqrt(spans[0] / size[0] * spans[1] / size[1] / cells))
        self.size = [v * scale for v in size]
        self.dims = [int(min(spans[i] / self.size[i], cells)) + 1 for i in (0, 1)]
        gx0, wide, gy0, high = self.range(ids)
        large = wide * high > MAX_CELLS
        self.large = ids[large]
        listed = np.flatnonzero(~large & (wide * high > 0))
        tags, cell = self._cells(gx0[listed], wide[listed], gy0[listed], high[listed],
                                 ids[listed])
        order = np.lexsort((tags, cell))
        self.members = tags[order]
        self.starts = np.searchsorted(cell[order], np.arange(self.dims[0] * self.dims[1] + 1))

    def range(self, boxes):
        """First column, columns, first row, rows of the cells each box touches (clipped to
        the grid, which keeps every cell a box of the grid shares with another)."""
        out = []
        for axis in (0, 1):
            last = self.dims[axis] - 1
            lo = (self.extents[axis][boxes] - self.origin[axis]) / self.size[axis]
            hi = (self.extents[axis + 2][boxes] - self.origin[axis]) / self.size[axis]
            a = np.clip(np.floor(lo), 0, last).astype(np.int64)
            b = np.clip(np.floor(hi), -1, last).astype(np.int64)
            out += [a, np.maximum(b - a + 1, 0)]
        return out

    def _cells(self, gx0, wide, gy0, high, tags):
        """(tag, cell) for every cell of the given ranges."""
        runs, place = _expand(wide * high)
        step = np.maximum(wide[runs], 1)
        return tags[runs], (gy0[runs] + place // step) * self.dims[0] + gx0[runs] + place % step

    def candidates(self, keepers):
        """(keeper position, box) pairs, the boxes listed in the cells of the keepers that
        are not large, in pieces of about :data:`CHUNK` pairs; and the large keepers."""
        gx0, wide, gy0, high = self.range(keepers)
        large = wide * high > MAX_CELLS
        few = np.flatnonzero(~large)
        k, cell = self._cells(gx0[few], wide[few], gy0[few], high[few], few)
        counts = self.starts[cell + 1] - self.starts[cell]
        total = np.cumsum(counts)
        first = 0
        while first < k.size:
            base = total[first] - counts[first]
            last = max(first + 1, int(np.searchsorted(total, base + CHUNK, side="right")))
            runs, place = _expand(counts[first:last])
            yield k[first:last][runs], self.members[self.starts[cell[first:last]][runs] + place]
            first = last
        return np.flatnonzero(large)


class _State:
    """The running maximum overlap of every box with the kept ones, and which boxes are
    still live (not yet decided nor beyond the threshold)."""

    def __init__(self, boxes, overlap, rule, prune):
        self.overlap, self.rule = overlap, rule
        self.columns = overlap.columns(boxes)
        self.combine = np.maximum if rule == AT_MOST else np.fmax
        dtype = overlap.pairs(self.columns, self.columns).dtype
        self.best = np.full(len(boxes), -np.inf, dtype=dtype)
        self.live = np.ones(len(boxes), dtype=bool)
        self.extents = overlap.extents(self.columns) if prune else None
        if self.extents is not None and not all(np.isfinite(e).all() for e in self.extents):
            self.extents = None
        self.grid = None

    def matrix(self, rows, cols):
        return self.overlap.pairs([c[rows][:, None] for c in self.columns],
                                  [c[cols][None, :] for c in self.columns])

    def raise_dense(self, keepers, later, threshold):
        """Every pair of ``keepers`` and boxes ``later``."""
        if later.size == 0 or keepers.size == 0:
            return
        step = max(1, CHUNK // keepers.size)
        for c in range(0, later.size, step):
            part = later[c:c + step]
            self._update(part, self.combine.reduce(self.matrix(keepers, part), axis=0),
                         threshold)

    def _update(self, part, m, threshold):
        self.best[part] = self.combine(self.best[part], m)
        self.live[part] = ~_suppressed(self.rule, self.best[part], threshold)

    def raise_from(self, keepers, stop, threshold):
        """Raise the live boxes after position ``stop`` by their overlaps with ``keepers``."""
        if self.extents is None:
            self.raise_dense(keepers, stop + np.flatnonzero(self.live[stop:]), threshold)
            return
        live_now = int(np.count_nonzero(self.live[stop:]))
        if live_now == 0:
            return
        if self.grid is None or live_now < self.grid.listed_live // 2:
            live = self.live.copy()
            live[:stop] = False
            self.grid = _Grid(self.extents, live)
        grid = self.grid
        large = grid.large[grid.large >= stop]
        self.raise_dense(keepers, large[self.live[large]], threshold)
        pieces = grid.candidates(keepers)
        while True:
            try:
                k, cand = next(pieces)
            except StopIteration as done:
                big = keepers[done.value]
                break
            keep = (cand >= stop) & self.live[cand]
            k, cand = keepers[k[keep]], cand[keep]
            if cand.size == 0:
                continue
            m = self.overlap.pairs([c[k] for c in self.columns], [c[cand] for c in self.columns])
            # a box may come in several pairs: the ufunc's ``at`` keeps the largest
            self.combine.at(self.best, cand, m)
            self.live[cand] = ~_suppressed(self.rule, self.best[cand], threshold)
        self.raise_dense(big, stop + np.flatnonzero(self.live[stop:]), threshold)


def greedy(boxes, threshold, overlap=jaccard, rule=ABOVE, eta=1.0, limit=-1):
    """Positions of the kept boxes of ``boxes`` (``(N, 4)``, already best first), in order.

    A box is suppressed when its largest ``overlap`` (an :class:`Overlap`) with the boxes
    kept before it meets ``rule`` at the threshold of its turn; with ``eta < 1`` the
    threshold is multiplied by ``eta`` (in single precision, as the fork's float) after each
    kept box while it is above 0.5. Stops after ``limit`` kept boxes when ``limit > -1``.
    Memory: a few values per box and bounded temporaries.
    """
    n = len(boxes)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    adaptive = eta < 1
    if adaptive:
        threshold, eta = np.float32(threshold), np.float32(eta)
    # an overlap of 0 (boxes apart) never suppresses at these thresholds; the adaptive one
    # only falls while above 0.5
    prune = threshold > 0 if rule == AT_LEAST else threshold >= 0
    state = _State(boxes, overlap, rule, bool(prune))
    kept = []
    for start in range(0, n, BLOCK):
        stop = min(n, start + BLOCK)
        idx = start + np.flatnonzero(state.live[start:stop])
        if idx.size == 0:
            continue
        local = state.matrix(idx, idx)
        block_best = state.best[idx]
        new = []
        for a in range(idx.size):
            if _suppressed(rule, block_best[a], threshold):
                continue
            new.append(idx[a])
            if -1 < limit <= len(kept) + len(new):
                return np.asarray(kept + new, dtype=np.int64)
            block_best[a + 1:] = state.combine(block_best[a + 1:], local[a, a + 1:])
            if adaptive and threshold > 0.5:
                threshold = np.float32(threshold * eta)
        kept.extend(new)
        state.live[idx] = False
        if new and stop < n:
            state.raise_from(np.asarray(new, dtype=np.int64), stop, threshold)
    return np.asarray(kept, dtype=np.int64)
