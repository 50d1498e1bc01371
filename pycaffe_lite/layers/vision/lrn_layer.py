"""LRN: local response normalisation (Caffe's LRNLayer)."""

import numpy as np

from ...backend import get_array_module
from ...layer import Layer
from ...ops import cpu as _cpu
from ...ops.gpu import lrn as _gpu
from ...proto import caffe_pb2
from ...registry import register_layer

LRN = caffe_pb2.LRNParameter


def _window_sum(a, size, axis):
    """Sum of ``a`` over a centred window of ``size`` (odd) along ``axis``, zero-padded."""
    xp = get_array_module(a)
    pre = (size - 1) // 2
    n = a.shape[axis]
    padded_shape = list(a.shape)
    padded_shape[axis] = n + size - 1
    padded = xp.zeros(padded_shape, dtype=a.dtype)
    index = [slice(None)] * a.ndim
    index[axis] = slice(pre, pre + n)
    padded[tuple(index)] = a
    index[axis] = slice(0, n)
    out = padded[tuple(index)].copy()
    for i in range(1, size):
        index[axis] = slice(i, i + n)
        out += padded[tuple(index)]
    return out


@register_layer("LRN")
class LRNLayer(Layer):
    """Local response normalisation, ``y = x * scale^-beta``.

    - ACROSS_CHANNELS: ``scale = k + alpha / size * sum(x^2)`` over ``size`` neighbouring
      channels centred on the channel (zero beyond the first and last channel);
    - WITHIN_CHANNEL: ``scale = 1 + alpha * mean(x^2)`` over a ``size x size`` spatial window
      centred on the position, the mean dividing by ``size^2`` everywhere (zero padding), as
      Caffe's split/square/AVE-pool/power/product composition computes it (``k`` unused).

    Bottoms: x ``(N, C, H, W)`` (exactly 4 axes).
    Tops: y, same shape.
    Params: ``lrn_param { local_size (5, odd) alpha (1) beta (0.75)
    norm_region (ACROSS_CHANNELS) k (1) }``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.lrn_param
        self.size = int(p.local_size)
        if self.size % 2 != 1:
            raise self.error("LRN only supports odd values for local_size, got %d" % self.size)
        self.alpha, self.beta, self.k = p.alpha, p.beta, p.k
        self.region = p.norm_region
        if self.region not in (LRN.ACROSS_CHANNELS, LRN.WITHIN_CHANNEL):
            raise self.error("unknown norm_region %d; expected ACROSS_CHANNELS or "
                             "WITHIN_CHANNEL" % self.region)
        self.scale = None

    def reshape(self, bottom, top):
        if bottom[0].num_axes != 4:
            raise self.error("input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got shape %s" % (bottom[0].shape,))
        top[0].reshape(bottom[0].shape)

    def _window(self, a):
        if self.region == LRN.ACROSS_CHANNELS:
            return _window_sum(a, self.size, 1)
        return _window_sum(_window_sum(a, self.size, 2), self.size, 3)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        if _gpu.supported(x):  # CuPy arrays: the CUDA kernels of ops/gpu/lrn.py
            self.scale = _gpu.lrn_forward(x, top[0].write_data(), self.size, self.alpha,
                                          self.beta, self.k, self.region == LRN.ACROSS_CHANNELS)
            return
        dt = x.dtype.type
        across = self.region == LRN.ACROSS_CHANNELS
        if across and _cpu.supported(x):  # the compiled channel sums (ops/cpu)
            summed = np.empty_like(x)
            _cpu.lrn_scale(x, summed, self.size, dt(self.alpha / self.size), dt(self.k))
        elif across:
            summed = self._window(x * x)
            summed *= dt(self.alpha / self.size)
            summed += dt(self.k)
        else:
            summed = self._window(x * x)
            summed /= dt(self.size * self.size)
            summed *= dt(self.alpha)
            summed += dt(1)
        self.scale = summed
        y = top[0].write_data()
        y[...] = x * summed ** dt(-self.beta)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].read_data()
        y = top[0].read_data()
        dy = top[0].read_diff()
        if _gpu.supported(x, y, dy, self.scale):  # CuPy arrays: the CUDA kernels
            _gpu.lrn_backward(x, y, dy, self.scale, bottom[0].write_diff(), self.size,
                              self.alpha, self.beta, self.region == LRN.ACROSS_CHANNELS)
            return
        dt = x.dtype.type
        n = self.size if self.region == LRN.ACROSS_CHANNELS else self.size * self.size
        if self.region == LRN.ACROSS_CHANNELS and _cpu.supported(x, y, dy, self.scale):
            accum = np.empty_like(x)
            _cpu.lrn_accum(dy, y, self.scale, np.empty_like(x), accum, self.size)
        else:
            accum = self._window(dy * y / self.scale)
        dx = bottom[0].write_diff()
        dx[...] = dy * self.scale ** dt(-self.beta) - \
            dt(2.0 * self.alpha * self.beta / n) * x * accum
