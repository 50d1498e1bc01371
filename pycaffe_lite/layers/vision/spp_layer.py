"""SPP: spatial pyramid pooling to a fixed-length vector (Caffe's SPPLayer)."""

import math

import numpy as np

from ... import backend
from ...backend import get_array_module
from ...layer import Layer
from ...ops import pooling as ops
from ...proto import caffe_pb2
from ...registry import register_layer

SP = caffe_pb2.SPPParameter


def level_geometry(level, size):
    """Caffe's pooling window for pyramid level ``level`` along an axis of ``size``:
    ``(kernel, pad)`` with ``bins = 2^level``, ``kernel = ceil(size / bins)`` (also the
    stride) and ``pad = (kernel * bins - size + 1) // 2``."""
    bins = 2 ** level
    kernel = int(math.ceil(size / float(bins)))
    return kernel, (kernel * bins - size + 1) // 2


@register_layer("SPP")
class SPPLayer(Layer):
    """Pools each channel over a pyramid of grids, so that inputs of any height and width give
    an output of one length.

    Level ``l`` (``0 <= l < pyramid_height``) is a Pooling with kernel ``ceil(H / 2^l)`` by
    ``ceil(W / 2^l)``, stride equal to the kernel and pad ``(kernel * 2^l - size + 1) // 2``
    per axis, giving (for every valid input) a ``2^l x 2^l`` grid per channel; pooling
    follows Pooling's rules exactly (MAX: first maximum in row-major order, padding never
    wins; AVE: divided by the window clipped to the padded input; STOCHASTIC: as Pooling,
    TRAIN or TEST phase, drawing on the host or the device as Pooling does, only where no
    level needs padding). Each level is flattened per image as ``(C, 2^l, 2^l)`` and the
    levels are concatenated in order. As in Caffe, every level's pad must be smaller than its
    kernel, which needs ``H, W`` large enough for the finest level.

    Bottoms: x ``(N, C, H, W)`` (exactly 4 axes, ``H, W > 0``).
    Tops: y ``(N, C * sum_l 4^l)``; with ``pyramid_height: 1`` Caffe's single global pooling,
    ``(N, C, 1, 1)``.
    Params: ``spp_param { pyramid_height (required, >= 1)  pool (MAX) | AVE | STOCHASTIC }``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.spp_param
        self.pyramid_height = int(p.pyramid_height)
        if self.pyramid_height < 1:
            raise self.error("pyramid_height must be at least 1, got %d" % self.pyramid_height)
        self.pool = p.pool
        if self.pool not in (SP.MAX, SP.AVE, SP.STOCHASTIC):
            raise self.error("unknown pooling method %d; expected MAX, AVE or STOCHASTIC"
                             % self.pool)
        self._shape_key = None
        self._choices = []

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes != 4:
            raise self.error("input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got shape %s" % (x.shape,))
        n, c, h, w = x.shape
        if h <= 0 or w <= 0:
            raise self.error("input dimensions cannot be zero, got height %d and width %d"
                             % (h, w))
        if self._shape_key != (h, w):
            self._levels = [self._level(level, h, w) for level in range(self.pyramid_height)]
            self._shape_key = (h, w)
            self._choices = [None] * self.pyramid_height
        if self.pyramid_height == 1:
            top[0].reshape(n, c, *self._levels[0]["pooled"])
        else:
            top[0].reshape(n, c * sum(lv["pooled"][0] * lv["pooled"][1]
                                      for lv in self._levels))

    def _level(self, level, h, w):
        (kh, pad_h), (kw, pad_w) = level_geometry(level, h), level_geometry(level, w)
        kernel, pad = (kh, kw), (pad_h, pad_w)
        if pad_h >= kh or pad_w >= kw:
            raise self.error("pyramid level %d of a %dx%d input needs kernel %s and pad %s, "
                             "but the pad must be smaller than the kernel: the input is too "
                             "small for pyramid_height %d" % (level, h, w, kernel, pad,
                                                              self.pyramid_height))
        if self.pool == SP.STOCHASTIC and pad != (0, 0):
            raise self.error("pyramid level %d of a %dx%d input needs pad %s, and padding is "
                             "implemented only for AVE and MAX pooling (STOCHASTIC needs "
                             "height and width divisible by %d)"
                             % (level, h, w, pad, 2 ** (self.pyramid_height - 1)))
        pooled = (ops.pooled_size(h, kh, pad_h, kh), ops.pooled_size(w, kw, pad_w, kw))
        info = {"kernel": kernel, "pad": pad, "pooled": pooled, "divisors": None}
        if self.pool == SP.AVE:
            info["divisors"] = ops.pool_divisors(h, w, kernel, pad, kernel, pooled,
                                                 dtype=self.dtype)
        return info

    # ---- blocks: stride == kernel, so the windows tile a padded copy of the input ---------
    @staticmethod
    def _blocks(x, info, fill):
        """``x`` placed at offset ``pad`` in an array of ``pooled * kernel`` per axis (``fill``
        elsewhere), as ``(N, C, PH, kh, PW, kw)``: window ``(i, j)`` is ``[:, :, i, :, j]``."""
        xp = get_array_module(x)
        n, c, h, w = x.shape
        (kh, kw), (ph, pw), (mh, mw) = info["kernel"], info["pad"], info["pooled"]
        eh, ew = mh * kh, mw * kw
        if (ph, pw) == (0, 0) and (eh, ew) == (h, w):
            src = x
        else:
            src = xp.full((n, c, eh, ew), fill, dtype=x.dtype)
            hh, ww = min(h, eh - ph), min(w, ew - pw)
            src[:, :, ph:ph + hh, pw:pw + ww] = x[:, :, :hh, :ww]
        return src.reshape(n, c, mh, kh, mw, kw)

    @staticmethod
    def _add_unblocked(grad_blocks, info, dx):
        """``dx += `` the ``(N, C, PH, kh, PW, kw)`` window gradients inside the image."""
        n, c, h, w = dx.shape
        (kh, kw), (ph, pw), (mh, mw) = info["kernel"], info["pad"], info["pooled"]
        full = grad_blocks.reshape(n, c, mh * kh, mw * kw)
        hh, ww = min(h, mh * kh - ph), min(w, mw * kw - pw)
        dx[:, :, :hh, :ww] += full[:, :, ph:ph + hh, pw:pw + ww]

    def _divisors(self, info, xp):
        if get_array_module(info["divisors"]) is not xp:
            info["divisors"] = xp.asarray(info["divisors"])
        return info["divisors"]

    # ---- forward -------------------------------------------------------------------------
    def _max_level(self, x, info, i):
        xp = get_array_module(x)
        blocks = self._blocks(x, info, -np.inf)
        n, c, mh, kh, mw, kw = blocks.shape
        windows = blocks.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, mh, mw, kh * kw)
        # Caffe's strict ">" scan from -FLT_MAX skips NaN and keeps the first maximum
        windows = xp.where(xp.isnan(windows), -np.inf, windows)
        choice = xp.argmax(windows, axis=-1).astype(np.int32)
        best = xp.take_along_axis(windows, choice[..., None].astype(np.intp), axis=-1)[..., 0]
        valid = best > -ops.FLT_MAX
        self._choices[i] = xp.where(valid, choice, np.int32(-1))
        return xp.where(valid, best, x.dtype.type(-ops.FLT_MAX))

    def _ave_level(self, x, info):
        xp = get_array_module(x)
        sums = self._blocks(x, info, 0).sum(axis=(3, 5))
        return sums / self._divisors(info, xp)

    def _stochastic_level(self, x, info, i):
        xp = get_array_module(x)
        kernel, pooled = info["kernel"], info["pooled"]
        out = xp.empty(x.shape[:2] + pooled, dtype=x.dtype)
        if self.phase == caffe_pb2.TRAIN:
            draw = np.float32 if x.dtype == np.float32 else np.float64
            uniform = backend.random_uniform(out.shape, draw, xp).astype(x.dtype, copy=False)
            choice = xp.empty(out.shape, dtype=np.int32)
            ops.stochastic_pool_forward_train(x, kernel, kernel, pooled, uniform, out, choice)
            self._choices[i] = choice
        else:
            ops.stochastic_pool_forward_test(x, kernel, kernel, pooled, out)
        return out

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        y = top[0].write_data()
        n = x.shape[0]
        flat = y.reshape(n, -1)
        start = 0
        for i, info in enumerate(self._levels):
            if self.pool == SP.MAX:
                out = self._max_level(x, info, i)
            elif self.pool == SP.AVE:
                out = self._ave_level(x, info)
            else:
                out = self._stochastic_level(x, info, i)
            size = out[0].size
            flat[:, start:start + size] = out.reshape(n, size)
            start += size

    # ---- backward ------------------------------------------------------------------------
    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy_all = top[0].read_diff()
        dx = bottom[0].write_diff()
        xp = get_array_module(dy_all)
        n, c = dx.shape[:2]
        flat = dy_all.reshape(n, -1)
        dx[...] = 0
        start = 0
        for i, info in enumerate(self._levels):
            (kh, kw), (mh, mw) = info["kernel"], info["pooled"]
            size = c * mh * mw
            dy = flat[:, start:start + size].reshape(n, c, mh, mw)
            start += size
            if self.pool == SP.AVE:
                share = dy / self._divisors(info, xp)
                grad = xp.broadcast_to(share[:, :, :, None, :, None], (n, c, mh, kh, mw, kw))
                self._add_unblocked(grad, info, dx)
            elif self.pool == SP.MAX:
                choice = self._choice(i, dy.shape)
                hit = xp.arange(kh * kw, dtype=np.int32) == choice[..., None]
                grad = (hit * dy[..., None]).reshape(n, c, mh, mw, kh, kw)
                self._add_unblocked(grad.transpose(0, 1, 2, 4, 3, 5), info, dx)
            else:
                part = xp.empty(dx.shape, dtype=dx.dtype)
                if self.phase == caffe_pb2.TRAIN:
                    ops.stochastic_pool_backward(dy, self._choice(i, dy.shape), info["kernel"],
                                                 info["kernel"], info["pooled"], part)
                else:
                    # the exact gradient of sum(v^2) / sum(v), as Pooling's TEST phase
                    x = bottom[0].read_data()
                    y = self._stochastic_level(x, info, i)
                    ops.stochastic_pool_test_backward(x, y, dy, info["kernel"], info["kernel"],
                                                      info["pooled"], part)
                dx += part

    def _choice(self, i, shape):
        choice = self._choices[i] if i < len(self._choices) else None
        if choice is None or choice.shape != shape:
            raise self.error("backward needs a forward pass first (no recorded window choices "
                             "for pyramid level %d)" % i)
        return choice
