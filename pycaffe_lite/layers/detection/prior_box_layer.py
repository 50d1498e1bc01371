"""PriorBox: the SSD fork's default boxes for one feature map (weiliu89/caffe)."""

import numpy as np

from ... import backend
from ...layer import Layer
from ...registry import register_layer


@register_layer("PriorBox")
class PriorBoxLayer(Layer):
    """The prior (default) boxes at every cell of a feature map, and their variances.

    At cell ``(h, w)`` the centre is ``((w + offset) * step_w, (h + offset) * step_h)`` in
    image pixels. For each ``min_size`` ``s`` (in order) the cell gets: a square of side
    ``s``; with a ``max_size`` ``m``, a square of side ``sqrt(s * m)``; then a box of width
    ``s * sqrt(r)`` and height ``s / sqrt(r)`` for each aspect ratio ``r`` other than 1 (each
    given ratio, and ``1 / r`` right after it with ``flip``; repeats are dropped). As in the
    fork, sizes are truncated to integers before use. Coordinates are divided by the image
    width and height (and clipped to [0, 1] with ``clip``).

    Bottoms: the feature map ``(N, C, H, W)`` and the image (``(N, C, img_h, img_w)``, used
    for its size unless ``img_size`` or ``img_h``/``img_w`` is given). The step defaults to
    image size / feature size.
    Tops: ``(1, 2, H * W * num_priors * 4)``: channel 0 the boxes (xmin, ymin, xmax, ymax per
    prior, cell by cell), channel 1 their variances (one value for all, or four).
    Params: ``prior_box_param`` (the SSD fork's PriorBoxParameter).

    The boxes depend only on the shapes and the params: they are computed on the host at
    reshape when a shape changes and kept in the current mode's array (on the GPU a device
    copy), so that a forward is one device-to-device copy (a CUDA graph can hold it).
    """

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.prior_box_param
        if not p.min_size:
            raise self.error("prior_box_param needs at least one min_size")
        self.min_sizes = [float(s) for s in p.min_size]
        for s in self.min_sizes:
            if not s > 0:
                raise self.error("prior_box_param min_size %g must be positive" % s)
        self.max_sizes = [float(s) for s in p.max_size]
        if self.max_sizes and len(self.max_sizes) != len(self.min_sizes):
            raise self.error("prior_box_param has %d max_size values for %d min_size values; "
                             "give one per min_size (or none)"
                             % (len(self.max_sizes), len(self.min_sizes)))
        for lo, hi in zip(self.min_sizes, self.max_sizes):
            if not hi > lo:
                raise self.error("prior_box_param max_size %g must be greater than its "
                                 "min_size %g" % (hi, lo))
        ratios = [1.0]
        for r in p.aspect_ratio:
            r = float(r)
            if not r > 0:
                raise self.error("prior_box_param aspect_ratio %g must be positive" % r)
            if any(abs(r - q) < 1e-6 for q in ratios):
                continue
            ratios.append(r)
            if p.flip:
                ratios.append(float(np.float32(1.0 / r)))
        self.aspect_ratios = ratios
        self.num_priors = len(ratios) * len(self.min_sizes) + len(self.max_sizes)
        self.clip = bool(p.clip)
        variance = [float(v) for v in p.variance]
        if len(variance) not in (0, 1, 4):
            raise self.error("prior_box_param needs 1 or 4 variance values, got %d"
                             % len(variance))
        if any(not v > 0 for v in variance):
            raise self.error("prior_box_param variance values must be positive, got %s"
                             % (variance,))
        self.variance = variance or [0.1]
        has_hw = p.HasField("img_h") or p.HasField("img_w")
        if has_hw and p.HasField("img_size"):
            raise self.error("prior_box_param: give img_size or img_h/img_w, not both")
        if has_hw:
            self.img_h, self.img_w = int(p.img_h), int(p.img_w)
            if self.img_h <= 0 or self.img_w <= 0:
                raise self.error("prior_box_param img_h and img_w must be positive, got %d "
                                 "and %d" % (self.img_h, self.img_w))
        elif p.HasField("img_size"):
            self.img_h = self.img_w = int(p.img_size)
            if self.img_h <= 0:
                raise self.error("prior_box_param img_size must be positive")
        else:
            self.img_h = self.img_w = 0
        has_step_hw = p.HasField("step_h") or p.HasField("step_w")
        if has_step_hw and p.HasField("step"):
            raise self.error("prior_box_param: give step or step_h/step_w, not both")
        if has_step_hw:
            self.step_h, self.step_w = float(p.step_h), float(p.step_w)
            if not (self.step_h > 0 and self.step_w > 0):
                raise self.error("prior_box_param step_h and step_w must be positive, got "
                                 "%g and %g" % (self.step_h, self.step_w))
        elif p.HasField("step"):
            self.step_h = self.step_w = float(p.step)
            if not self.step_h > 0:
                raise self.error("prior_box_param step must be positive, got %g"
                                 % self.step_h)
        else:
            self.step_h = self.step_w = 0.0
        self.offset = float(p.offset)
        self._cache_key = None

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error("the feature map must have 4 axes; got shape %s"
                             % (bottom[0].shape,))
        h, w = bottom[0].shape[2], bottom[0].shape[3]
        top[0].reshape(1, 2, h * w * self.num_priors * 4)
        if self.img_h and self.img_w:
            img_h, img_w = self.img_h, self.img_w
        else:
            if bottom[1].num_axes != 4:
                raise self.error("the image bottom must have 4 axes; got shape %s"
                                 % (bottom[1].shape,))
            img_h, img_w = bottom[1].shape[2], bottom[1].shape[3]
        xp = backend.xp()
        key = (h, w, img_h, img_w, xp)
        if key != self._cache_key:
            self._priors = xp.asarray(self._compute(h, w, img_h, img_w))
            self._cache_key = key

    def _cell_boxes(self):
        """Half widths and half heights of the priors of one cell, in pixels."""
        sizes = []
        f32 = np.float32
        for k, s in enumerate(self.min_sizes):
            s = int(s)
            sizes.append((f32(s), f32(s)))
            if self.max_sizes:
                side = f32(np.sqrt(float(s * int(self.max_sizes[k]))))
                sizes.append((side, side))
            for r in self.aspect_ratios:
                if abs(r - 1.0) < 1e-6:
                    continue
                root = np.sqrt(f32(r))
                sizes.append((f32(s * root), f32(s / root)))
        return np.asarray(sizes, dtype=np.float64) / 2.0

    def forward(self, bottom, top):
        top[0].write_data()[...] = self._priors

    def _compute(self, h, w, img_h, img_w):
        f32 = np.float32
        if self.step_h and self.step_w:
            step_h, step_w = f32(self.step_h), f32(self.step_w)
        else:
            step_h, step_w = f32(img_h) / f32(h), f32(img_w) / f32(w)
        offset = f32(self.offset)
        cx = ((np.arange(w, dtype=f32) + offset) * step_w).astype(np.float64)
        cy = ((np.arange(h, dtype=f32) + offset) * step_h).astype(np.float64)
        half = self._cell_boxes()                                   # (K, 2)
        cxg = np.broadcast_to(cx[None, :, None], (h, w, len(half)))
        cyg = np.broadcast_to(cy[:, None, None], (h, w, len(half)))
        boxes = np.stack([(cxg - half[:, 0]) / img_w, (cyg - half[:, 1]) / img_h,
                          (cxg + half[:, 0]) / img_w, (cyg + half[:, 1]) / img_h], axis=-1)
        boxes = boxes.astype(np.float32).reshape(-1)
        if self.clip:
            boxes = np.clip(boxes, 0, 1)
        var = np.empty_like(boxes).reshape(-1, 4)
        var[...] = np.asarray(self.variance if len(self.variance) == 4
                              else self.variance * 4, dtype=np.float32)
        return np.stack([boxes, var.reshape(-1)])[None]
