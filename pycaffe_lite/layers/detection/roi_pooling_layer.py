"""ROIPooling: max pooling of regions of interest to a fixed grid (Fast/Faster R-CNN fork)."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer

# Elements of the largest temporary of one chunk of regions (regions x channels x rows x bins).
_CHUNK_ELEMENTS = 1 << 22


def c_round(values, xp):
    """C's ``round``: halves go away from zero (NumPy's ``round`` sends them to even)."""
    return xp.sign(values) * xp.floor(xp.abs(values) + 0.5)


def _running_max(xp, lo, hi, size, gather):
    """Max and position of the max over the windows ``[lo, hi)`` of one axis.

    ``lo``, ``hi``: (R, bins) integer arrays clipped to ``[0, size]``; ``gather(index)`` gives
    the values at positions ``index`` (R, bins), with (R, bins) as its leading axes. Positions
    are visited in increasing order and a value wins only when strictly greater, so ties keep
    the first position, as Caffe's scan does; past a window's end its last element is read
    again, which never wins. Empty windows (``hi <= lo``) give meaningless values: the caller
    masks them. Returns ``(best, position)``, positions as int32.
    """
    span = max(1, int((hi - lo).max()) if lo.size else 1)
    last = xp.clip(hi - 1, 0, size - 1)
    best = position = None
    for k in range(span):
        index = xp.minimum(xp.clip(lo + k, 0, size - 1), last)
        values = gather(index)
        where = index.astype(xp.int32).reshape(index.shape + (1,) * (values.ndim - index.ndim))
        if best is None:
            best = xp.where(values == values, values, -xp.inf)  # a NaN never wins (Caffe)
            position = xp.broadcast_to(where, values.shape).copy()
            continue
        better = values > best
        best = xp.where(better, values, best)
        position = xp.where(better, where, position)
    return best, position


@register_layer("ROIPooling")
class ROIPoolingLayer(Layer):
    """Max pooling of each region of interest to a ``pooled_h x pooled_w`` grid, as the Fast
    R-CNN fork of Caffe (rbgirshick/caffe-fast-rcnn) defines it.

    A region ``(b, x1, y1, x2, y2)`` in input pixels maps onto the feature map as
    ``round(x1 * spatial_scale)`` .. ``round(x2 * spatial_scale)`` (C's rounding, halves away
    from zero; both ends included; a region narrower than one cell counts as one cell). With
    ``h`` its height in cells, bin ``(i, j)`` covers rows ``floor(i * h / pooled_h)`` to
    ``ceil((i + 1) * h / pooled_h)`` (end excluded) from the region's first row, and likewise
    columns, clipped to the map; its output is the maximum there (the first in row-major order
    on ties), or 0 for a bin wholly outside the map.

    Backward: each output's gradient goes to the input element it took (summed over the bins
    and regions that took it); empty bins send none; the regions get a zero gradient (the
    output does not change with them except at rounding steps). Where a region's corners are
    inverted after rounding (x2 < x1 or y2 < y1), the fork's kernels drop the gradient of its
    one-cell bins; here it reaches the element the forward read, the true gradient.

    Bottoms: features ``(N, C, H, W)``; regions ``(R, 5)`` (or ``(R, 5, 1, 1)``), each
    ``batch index, x1, y1, x2, y2``, the batch index truncated to an integer in ``[0, N)``.
    Tops: ``(R, C, pooled_h, pooled_w)``.
    Params: ``roi_pooling_param { pooled_h pooled_w (both required, > 0)
    spatial_scale (1) }``.
    """

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.roi_pooling_param
        self.pooled_h, self.pooled_w = int(p.pooled_h), int(p.pooled_w)
        if self.pooled_h <= 0 or self.pooled_w <= 0:
            raise self.error("roi_pooling_param pooled_h and pooled_w must be > 0, got "
                             "pooled_h %d, pooled_w %d" % (self.pooled_h, self.pooled_w))
        self.spatial_scale = float(p.spatial_scale)
        self.argmax = None

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    def reshape(self, bottom, top):
        x, rois = bottom
        if x.num_axes != 4:
            raise self.error("the features (bottom 0) must have 4 axes (num, channels, height, "
                             "width), got shape %s" % (x.shape,))
        shape = rois.shape
        if len(shape) < 2 or shape[1] != 5 or any(d != 1 for d in shape[2:]):
            raise self.error("the regions (bottom 1) must be R x 5 (batch index, x1, y1, x2, "
                             "y2 per row), got shape %s" % (shape,))
        if top[0] is x or top[0] is rois:
            raise self.error("ROIPooling cannot run in place (its top must be a new blob)")
        top[0].reshape(shape[0], x.shape[1], self.pooled_h, self.pooled_w)

    # ---- geometry ----------------------------------------------------------------------
    def _regions(self, bottom):
        """Per region: its batch index, and its bins' clipped [start, end) rows (R, PH) and
        columns (R, PW)."""
        x, rois_blob = bottom
        n, _, height, width = x.shape
        rois = rois_blob.read_data().reshape(-1, 5)
        xp = get_array_module(rois)
        batch = rois[:, 0].astype(xp.int64)  # C's conversion: truncation toward zero
        if rois.shape[0]:
            bad = (batch < 0) | (batch >= n)
            if bool(bad.any()):
                r = int(bad.argmax())
                raise self.error("region %d has batch index %r, outside the %d image(s) of "
                                 "bottom 0 (expected 0 <= index < %d)"
                                 % (r, float(rois[r, 0]), n, n))
        scale = rois.dtype.type(self.spatial_scale)
        corners = c_round(rois[:, 1:] * scale, xp).astype(xp.int64)
        start_w, start_h, end_w, end_h = (corners[:, i] for i in range(4))
        rows = self._bins(start_h, end_h, self.pooled_h, height, rois.dtype, xp)
        cols = self._bins(start_w, end_w, self.pooled_w, width, rois.dtype, xp)
        return batch, rows, cols

    @staticmethod
    def _bins(start, end, pooled, size, dtype, xp):
        # in the blob's precision, as the fork computes bin_size in Dtype
        extent = xp.maximum(end - start + 1, 1)
        bin_size = extent.astype(dtype) / dtype.type(pooled)
        steps = xp.arange(pooled, dtype=dtype)
        lo = xp.floor(steps[None, :] * bin_size[:, None]).astype(xp.int64)
        hi = xp.ceil((steps[None, :] + 1) * bin_size[:, None]).astype(xp.int64)
        return (xp.clip(lo + start[:, None], 0, size), xp.clip(hi + start[:, None], 0, size))

    # ---- forward / backward ------------------------------------------------------------
    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        _, channels, height, width = x.shape
        batch, (row_lo, row_hi), (col_lo, col_hi) = self._regions(bottom)
        y = top[0].write_data()
        self.argmax = xp.full(y.shape, -1, dtype=xp.int64)
        if y.size == 0 or x.size == 0:
            y[...] = 0
            return
        # (N, W, H, C): a gather at (image, column, row) copies a run of C values
        planes = xp.ascontiguousarray(x.transpose(0, 3, 2, 1))
        # regions in order of their height in rows, so that a chunk gathers few spare rows
        first = row_lo[:, 0]
        extent = xp.maximum(row_hi[:, -1] - first, 1)
        order = xp.argsort(extent, kind="stable")
        chunk = max(1, _CHUNK_ELEMENTS // (channels * int(extent.max()) * self.pooled_w))
        for r0 in range(0, batch.shape[0], chunk):
            take = order[r0:r0 + chunk]
            y[take], self.argmax[take] = self._pool(
                planes, batch[take], first[take], int(extent[take].max()), row_lo[take],
                row_hi[take], col_lo[take], col_hi[take])

    @staticmethod
    def _pool(planes, batch, first, span, row_lo, row_hi, col_lo, col_hi):
        """Max and flat argmax (row * W + column; -1 when the bin is empty) of the bins of
        some regions, (R, C, PH, PW): first over the column bins of the ``span`` rows from
        each region's ``first`` row, then over the row bins. ``planes``: the map as
        (N, W, H, C)."""
        xp = get_array_module(planes)
        width, height = planes.shape[1], planes.shape[2]
        rows = xp.clip(first[:, None] + xp.arange(span)[None, :], 0, height - 1)
        ar = xp.arange(batch.shape[0])[:, None]
        # (R, PW, span, C): per row, the max over each column bin
        by_row, col_at = _running_max(
            xp, col_lo, col_hi, width,
            lambda index: planes[batch[:, None, None], index[:, :, None], rows[:, None, :]])
        # (R, PH, PW, C): the max over the rows of each row bin (rows counted from first)
        best, row_at = _running_max(xp, row_lo - first[:, None], row_hi - first[:, None], span,
                                    lambda index: by_row[ar, :, index])
        col_at = col_at[ar[:, :, None, None], xp.arange(col_at.shape[1])[None, None, :, None],
                        row_at, xp.arange(col_at.shape[3])[None, None, None, :]]
        empty = ((row_hi <= row_lo)[:, :, None] | (col_hi <= col_lo)[:, None, :])[..., None]
        row_at = row_at.astype(xp.int64) + first[:, None, None, None]
        flat = xp.where(empty, -1, row_at * width + col_at)
        best = xp.where(empty, 0, best)
        return best.transpose(0, 3, 1, 2), flat.transpose(0, 3, 1, 2)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            bottom[1].write_diff()[...] = 0
        if not propagate_down[0]:
            return
        dx = bottom[0].write_diff()
        xp = get_array_module(dx)
        dx[...] = 0
        if self.argmax is None or not self.argmax.size or not dx.size:
            return
        batch = self._regions(bottom)[0]
        _, channels, height, width = dx.shape
        taken = self.argmax >= 0
        plane = (batch[:, None, None, None] * channels +
                 xp.arange(channels)[None, :, None, None]) * (height * width)
        xp.add.at(dx.reshape(-1), (plane + self.argmax)[taken], top[0].read_diff()[taken])
