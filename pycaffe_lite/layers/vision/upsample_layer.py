"""Upsample: nearest-neighbour upsampling (YOLO ports) or max-unpooling (SegNet, ENet)."""

import numpy as np

from ... import backend
from ...backend import get_array_module
from ...layer import Layer, defer_check
from ...registry import register_layer


@register_layer("Upsample")
class UpsampleLayer(Layer):
    """Two forks' layers under one type name, told apart by the number of bottoms.

    **One bottom** (darknet2caffe, MobileNet-YOLO, Darknet's ``[upsample]``): repeat every
    pixel ``scale`` times along height and width, ``y[n, c, i, j] = x[n, c, i // s, j // s]``.
    Backward: each input pixel's gradient is the sum of its ``s x s`` block of the top
    gradient. Reads ``scale`` only (>= 1; 1 copies the input).

    **Two bottoms** (SegNet, ENet): max-unpooling. Bottom 1 is the mask that a MAX Pooling
    layer writes to its second top (the index ``h * W + w`` of each maximum in its input
    plane); each value of bottom 0 goes to that index of its plane in the top, every other
    top element is 0 (where two values name one index, the later in row-major order stays).
    The top is ``upsample_h x upsample_w`` when both are given, else ``H * scale_h - pad_out_h``
    by ``W * scale_w - pad_out_w`` (``scale_h``/``scale_w`` given together, else ``scale`` for
    both; each factor > 1; ``pad_out_*`` only with a factor of 2). Backward: each value's
    gradient is the top gradient at its index; the mask gets none.

    Bottoms: x ``(N, C, H, W)``; with max-unpooling, the mask of x's shape.
    Tops: y ``(N, C, H', W')``.
    Params: ``upsample_param { scale (2) scale_h scale_w pad_out_h (false) pad_out_w (false)
    upsample_h upsample_w }``.
    """

    min_num_bottom_blobs = 1
    max_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.upsample_param
        self.unpool = len(bottom) == 2
        if not self.unpool:
            self.scale = int(p.scale)
            if self.scale < 1:
                raise self.error("upsample_param scale must be a positive integer, got %d"
                                 % self.scale)
            return
        self.size = None
        if p.HasField("upsample_h") or p.HasField("upsample_w"):
            if not (p.HasField("upsample_h") and p.HasField("upsample_w")):
                raise self.error("upsample_param needs upsample_h and upsample_w together")
            self.size = (int(p.upsample_h), int(p.upsample_w))
            if min(self.size) <= 1:
                raise self.error("upsample_param upsample_h and upsample_w must be > 1, got "
                                 "%d x %d" % self.size)
            return
        if p.HasField("scale_h") != p.HasField("scale_w") or (
                p.HasField("scale_h") and p.HasField("scale")):
            raise self.error("upsample_param needs upsample_h and upsample_w, or scale_h and "
                             "scale_w together (without scale), or scale")
        self.factors = ((int(p.scale_h), int(p.scale_w)) if p.HasField("scale_h")
                        else (int(p.scale), int(p.scale)))
        if min(self.factors) <= 1:
            raise self.error("upsample_param scale factors must be > 1 for max-unpooling, got "
                             "%d x %d" % self.factors)
        self.pad_out = (int(p.pad_out_h), int(p.pad_out_w))
        for axis, (pad, factor) in enumerate(zip(self.pad_out, self.factors)):
            if pad and factor != 2:
                raise self.error("upsample_param pad_out_%s needs a factor of 2 along that axis "
                                 "(got %d)" % ("hw"[axis], factor))

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes != 4:
            raise self.error("input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got shape %s" % (x.shape,))
        if any(top[0] is b for b in bottom):
            raise self.error("Upsample cannot run in place (its top must be a new blob)")
        n, c, h, w = x.shape
        if not self.unpool:
            top[0].reshape(n, c, h * self.scale, w * self.scale)
            return
        if bottom[1].shape != x.shape:
            raise self.error("the mask (bottom 1) must have the shape of bottom 0 %s, got %s "
                             "(it is the second top of the MAX Pooling that made bottom 0)"
                             % (x.shape, bottom[1].shape))
        if self.size is not None:
            out_h, out_w = self.size
        else:
            out_h = h * self.factors[0] - self.pad_out[0]
            out_w = w * self.factors[1] - self.pad_out[1]
        top[0].reshape(n, c, out_h, out_w)

    def _indices(self, bottom, top, check=True):
        """The mask as integer indices into each flattened top plane, checked (``check``;
        inside a captured forward the check is deferred, :func:`defer_check`, and an index
        out of range is clipped into the plane until it is read) or clipped (the backward:
        its forward checked the same mask)."""
        mask = bottom[1].read_data()
        xp = get_array_module(mask)
        n, c, h, w = bottom[0].shape
        plane = top[0].shape[2] * top[0].shape[3]
        idx = mask.reshape(n * c, h * w).astype(xp.int64)
        if not idx.size:
            return idx, plane
        if check:
            failed = (idx.max() >= plane) | (idx.min() < 0)
            if xp is not np and defer_check(
                    failed, lambda: self._check_range(backend.to_host(idx), top)):
                check = False
            elif bool(failed):
                self._check_range(backend.to_host(idx), top)
        return (idx if check else xp.clip(idx, 0, plane - 1)), plane

    def _check_range(self, idx, top):
        """Raise the error for a mask index (host ``idx``) outside the top plane."""
        plane = top[0].shape[2] * top[0].shape[3]
        low, high = int(idx.min()), int(idx.max())
        if high >= plane or low < 0:
            raise self.error("mask index %d is outside the %d x %d top plane: the scale or "
                             "upsample_h/upsample_w do not match the Pooling that made the "
                             "mask" % (high if high >= plane else low, top[0].shape[2],
                                       top[0].shape[3]))

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        if not self.unpool:
            n, c, h, w = x.shape
            s = self.scale
            y = top[0].write_data().reshape(n, c, h, s, w, s)
            y[...] = xp.broadcast_to(x[:, :, :, None, :, None], y.shape)
            return
        idx, plane = self._indices(bottom, top)
        rows = xp.arange(idx.shape[0])[:, None]
        y = top[0].write_data().reshape(-1, plane)
        y[...] = 0
        # With repeated indices (overlapping pooling windows) NumPy keeps the last value,
        # as the fork's loop does; on CuPy which one stays is unspecified.
        y[rows, idx] = x.reshape(idx.shape)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].write_diff()
        if not self.unpool:
            n, c, h, w = dx.shape
            s = self.scale
            dy = top[0].read_diff().reshape(n, c, h, s, w, s)
            dy.sum(axis=(3, 5), out=dx)
            return
        idx, plane = self._indices(bottom, top, check=False)
        xp = get_array_module(dx)
        dy = top[0].read_diff().reshape(-1, plane)
        dx[...] = xp.take_along_axis(dy, idx, axis=1).reshape(dx.shape)
