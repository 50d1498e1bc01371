"""PSROIPooling: R-FCN's position-sensitive region-of-interest pooling."""

import numpy as np

from ...backend import get_array_module, to_host
from ...layer import Layer
from ...registry import register_layer
from .roi_pooling_layer import c_round


@register_layer("PSROIPooling")
class PSROIPoolingLayer(Layer):
    """Average pooling of each region of interest to a ``group_size x group_size`` grid,
    bin ``(i, j)`` of output channel ``k`` read from input channel ``(k * group_size + i) *
    group_size + j``, as R-FCN (daijifeng001/caffe-rfcn) defines it.

    A region ``(b, x1, y1, x2, y2)`` in input pixels covers ``round(x1) * spatial_scale`` to
    ``(round(x2) + 1) * spatial_scale`` on the map (C's rounding; at least 0.1 wide), and
    likewise rows; bin ``i`` spans ``floor(i * size / g + start)`` to ``ceil((i + 1) * size /
    g + start)`` (end excluded), clipped to the map; its output is the mean there, or 0 for
    an empty bin.

    Backward: each output's gradient is spread evenly over its bin (summed where bins
    overlap); the regions get none.

    Bottoms: features ``(N, output_dim * group_size^2, H, W)``; regions ``(R, 5)`` (or
    ``(R, 5, 1, 1)``): batch index, x1, y1, x2, y2.
    Tops: ``(R, output_dim, group_size, group_size)``.
    Params: ``psroi_pooling_param { spatial_scale output_dim group_size }`` (all required;
    output_dim and group_size > 0).
    """

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.psroi_pooling_param
        missing = [f for f in ("spatial_scale", "output_dim", "group_size")
                   if not p.HasField(f)]
        if missing:
            raise self.error("psroi_pooling_param needs %s" % ", ".join(missing))
        self.spatial_scale = float(p.spatial_scale)
        self.output_dim, self.group = int(p.output_dim), int(p.group_size)
        if self.output_dim <= 0 or self.group <= 0:
            raise self.error("psroi_pooling_param output_dim and group_size must be > 0, got "
                             "%d and %d" % (self.output_dim, self.group))
        self.geometry = None

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    def reshape(self, bottom, top):
        x, rois = bottom
        g = self.group
        if x.num_axes != 4 or x.shape[1] != self.output_dim * g * g:
            raise self.error("the features (bottom 0) must be (N, %d, H, W) = output_dim %d x "
                             "group_size^2 %d channels, got %s"
                             % (self.output_dim * g * g, self.output_dim, g * g, x.shape))
        shape = rois.shape
        if len(shape) < 2 or shape[1] != 5 or any(d != 1 for d in shape[2:]):
            raise self.error("the regions (bottom 1) must be R x 5 (batch index, x1, y1, x2, "
                             "y2 per row), got shape %s" % (shape,))
        if top[0] is x or top[0] is rois:
            raise self.error("PSROIPooling cannot run in place (its top must be a new blob)")
        top[0].reshape(shape[0], self.output_dim, g, g)

    def _bins(self, bottom):
        """Batch index (R,), bin starts and ends along rows and columns (R, g) each."""
        n, _, height, width = bottom[0].shape
        rois = to_host(bottom[1].read_data()).reshape(-1, 5)
        dt = np.float32 if rois.dtype == np.float32 else np.float64
        rois = rois.astype(dt)
        batch = rois[:, 0].astype(np.int64)
        bad = (batch < 0) | (batch >= n)
        if bad.any():
            r = int(bad.argmax())
            raise self.error("region %d has batch index %r, outside the %d image(s) of bottom 0"
                             % (r, float(rois[r, 0]), n))
        scale = dt(self.spatial_scale)
        corners = c_round(rois[:, 1:], np)
        start = corners[:, :2] * scale
        end = (corners[:, 2:] + dt(1)) * scale
        size = np.maximum(end - start, dt(0.1))
        step = size / dt(self.group)
        k = np.arange(self.group, dtype=dt)
        lo = np.floor(k[None, None, :] * step[:, :, None] + start[:, :, None])
        hi = np.ceil((k[None, None, :] + 1) * step[:, :, None] + start[:, :, None])
        limits = np.array([width, height])[None, :, None]
        lo = np.clip(lo.astype(np.int64), 0, limits)
        hi = np.clip(hi.astype(np.int64), 0, limits)
        # axis 1: 0 = columns (x), 1 = rows (y)
        return batch, lo[:, 1], hi[:, 1], lo[:, 0], hi[:, 0]

    def _each_bin(self):
        """For each bin ``(i, j)``: its input channels ``(1, D)``, its rows ``r0, r1`` and
        columns ``c0, c1`` ``(R, 1)`` per region, and its area ``(R, 1)``."""
        _, hs, he, ws, we = self.geometry
        for i in range(self.group):
            for j in range(self.group):
                ch = ((np.arange(self.output_dim) * self.group + i) * self.group + j)[None, :]
                r0, r1 = hs[:, i, None], he[:, i, None]
                c0, c1 = ws[:, j, None], we[:, j, None]
                yield i, j, ch, r0, r1, c0, c1, (r1 - r0) * (c1 - c0)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        host = to_host(x).astype(np.float64)
        n, c, h, w = host.shape
        table = np.zeros((n, c, h + 1, w + 1))
        table[:, :, 1:, 1:] = host.cumsum(axis=2).cumsum(axis=3)
        self.geometry = self._bins(bottom)
        b = self.geometry[0][:, None]
        out = np.zeros((len(b), self.output_dim, self.group, self.group))
        for i, j, ch, r0, r1, c0, c1, area in self._each_bin():
            total = (table[b, ch, r1, c1] - table[b, ch, r0, c1]
                     - table[b, ch, r1, c0] + table[b, ch, r0, c0])
            out[:, :, i, j] = np.where(area > 0, total / np.maximum(area, 1), 0)
        top[0].write_data()[...] = xp.asarray(out.astype(x.dtype))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.geometry is None:
            raise self.error("backward needs a forward pass first")
        dy = to_host(top[0].read_diff()).astype(np.float64)
        n, c, h, w = bottom[0].shape
        corners = np.zeros((n, c, h + 1, w + 1))
        b = self.geometry[0][:, None]
        for i, j, ch, r0, r1, c0, c1, area in self._each_bin():
            v = np.where(area > 0, dy[:, :, i, j] / np.maximum(area, 1), 0)
            shape = v.shape
            for rr, cc, sign in ((r0, c0, 1), (r0, c1, -1), (r1, c0, -1), (r1, c1, 1)):
                np.add.at(corners, (np.broadcast_to(b, shape), np.broadcast_to(ch, shape),
                                    np.broadcast_to(rr, shape), np.broadcast_to(cc, shape)),
                          sign * v)
        dx = corners.cumsum(axis=2).cumsum(axis=3)[:, :, :h, :w]
        target = bottom[0].write_diff()
        target[...] = get_array_module(target).asarray(dx.astype(target.dtype))
