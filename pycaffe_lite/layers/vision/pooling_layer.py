"""Pooling: MAX, AVE or STOCHASTIC over 2-D windows (Caffe's PoolingLayer)."""

import numpy as np

from ... import backend
from ...backend import get_array_module
from ...layer import Layer
from ...ops import pooling as ops
from ...ops.gpu import cudnn
from ...proto import caffe_pb2
from ...registry import register_layer
from ..neuron.inplace_utils import InPlaceInputs

PP = caffe_pb2.PoolingParameter


@register_layer("Pooling")
class PoolingLayer(InPlaceInputs, Layer):
    """Pools each channel of a 4-D blob over (possibly padded, overlapping) windows.

    Window ``(ph, pw)`` covers rows ``ph*stride_h - pad_h`` to ``+ kernel_h`` (and likewise
    for columns), clipped to the input. The pooled size is ``ceil`` (``round_mode: CEIL``,
    the default) or ``floor`` of ``(H + 2*pad - kernel) / stride``, plus one, minus one more if
    padding would make the last window start in the padding.

    - MAX: the window's maximum (first in row-major order on ties);
    - AVE: the sum of the in-image values divided by the window size clipped to the *padded*
      input (so border windows that hang into the padding count the padding);
    - STOCHASTIC (no padding; for non-negative inputs): in TRAIN a value sampled with
      probability proportional to the values (``backend.random_uniform``: the host generator
      ``backend.rng()`` on the CPU, the device's on the GPU), gradient routed to it; in TEST
      ``sum(v^2) / sum(v)``.

    Bottoms: x ``(N, C, H, W)`` (exactly 4 axes).
    Tops: y ``(N, C, PH, PW)`` (in place when that is x's shape); for MAX an optional second
    top, the mask: the index
    ``h * W + w`` of each maximum within its input plane (as floats, -1 where none).
    Params: ``pooling_param { pool (MAX) kernel_size | kernel_h, kernel_w  stride (1) |
    stride_h, stride_w  pad (0) | pad_h, pad_w  global_pooling (false)  round_mode (CEIL) }``
    (or ``ceil_mode``, which wins when set: ``false`` is ``round_mode: FLOOR``);
    ``global_pooling`` takes the whole plane as the kernel (no kernel, pad 0, stride 1).
    """

    exact_num_bottom_blobs = 1
    min_num_top_blobs = 1
    max_num_top_blobs = 2  # 2 for MAX only, checked in setup

    def setup(self, bottom, top):
        p = self.layer_param.pooling_param
        self.pool = p.pool
        if self.pool not in (PP.MAX, PP.AVE, PP.STOCHASTIC):
            raise self.error("unknown pooling method %d; expected MAX, AVE or STOCHASTIC"
                             % self.pool)
        if len(top) > 1 and self.pool != PP.MAX:
            raise self.error("only MAX pooling can output a mask (second top); %s pooling "
                             "takes exactly 1 top, got %d"
                             % (PP.PoolMethod.Name(self.pool), len(top)))
        has_kernel_size = p.HasField("kernel_size")
        has_kernel_hw = p.HasField("kernel_h") or p.HasField("kernel_w")
        self.global_pooling = p.global_pooling
        if self.global_pooling:
            if has_kernel_size or has_kernel_hw:
                raise self.error("with global_pooling: true the filter size cannot be "
                                 "specified (got kernel_size/kernel_h/kernel_w)")
        else:
            if has_kernel_size and has_kernel_hw:
                raise self.error("filter size is kernel_size OR kernel_h and kernel_w; not "
                                 "both (got kernel_size: %d and kernel_h/kernel_w)"
                                 % p.kernel_size)
            if not has_kernel_size and not (p.HasField("kernel_h") and p.HasField("kernel_w")):
                raise self.error("a kernel size is required: give kernel_size, or both "
                                 "kernel_h and kernel_w for non-square filters")
        if p.HasField("pad") and (p.HasField("pad_h") or p.HasField("pad_w")) or \
                p.HasField("pad_h") != p.HasField("pad_w"):
            raise self.error("pad is pad OR pad_h and pad_w (both of them), not a mix "
                             "(got pad: %d, pad_h: %d, pad_w: %d)" % (p.pad, p.pad_h, p.pad_w))
        if p.HasField("stride") and (p.HasField("stride_h") or p.HasField("stride_w")) or \
                p.HasField("stride_h") != p.HasField("stride_w"):
            raise self.error("stride is stride OR stride_h and stride_w (both of them), not a "
                             "mix (got stride: %d, stride_h: %d, stride_w: %d)"
                             % (p.stride, p.stride_h, p.stride_w))
        if self.global_pooling:
            self.kernel = None
        elif has_kernel_size:
            self.kernel = (p.kernel_size, p.kernel_size)
        else:
            self.kernel = (p.kernel_h, p.kernel_w)
        if self.kernel is not None and min(self.kernel) <= 0:
            raise self.error("filter dimensions cannot be zero, got kernel %s" % (self.kernel,))
        self.pad = (p.pad_h, p.pad_w) if p.HasField("pad_h") else (p.pad, p.pad)
        self.stride = (p.stride_h, p.stride_w) if p.HasField("stride_h") else \
            (p.stride, p.stride)
        if min(self.stride) <= 0:
            raise self.error("stride must be positive, got %s" % (self.stride,))
        if self.global_pooling and (self.pad != (0, 0) or self.stride != (1, 1)):
            raise self.error("with global_pooling: true only pad = 0 and stride = 1 are "
                             "allowed, got pad %s and stride %s" % (self.pad, self.stride))
        if self.pad != (0, 0):
            if self.pool not in (PP.MAX, PP.AVE):
                raise self.error("padding is implemented only for AVE and MAX pooling, got "
                                 "pad %s with %s" % (self.pad, PP.PoolMethod.Name(self.pool)))
            if self.kernel is not None and (self.pad[0] >= self.kernel[0] or
                                            self.pad[1] >= self.kernel[1]):
                raise self.error("pad must be smaller than the kernel, got pad %s and kernel "
                                 "%s" % (self.pad, self.kernel))
        self.ceil_mode = p.round_mode == PP.CEIL
        if p.round_mode not in (PP.CEIL, PP.FLOOR):
            raise self.error("unknown round_mode %d; expected CEIL or FLOOR" % p.round_mode)
        if p.HasField("ceil_mode"):  # BVLC pull request 3057's spelling (DenseNet's files)
            self.ceil_mode = p.ceil_mode
        self.memo = ops.PoolMemo()  # what the forward leaves for the backward
        self.engine = cudnn.choose_engine(
            p.engine, cudnn.pool_why_not(self.pool, len(top), self.pad), self.name)
        self.divisors = None  # AVE divisors per output position
        self._divisor_key = None

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes != 4:
            raise self.error("input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got shape %s" % (x.shape,))
        n, c, h, w = x.shape
        if self.global_pooling:
            self.kernel = (h, w)
        kh, kw = self.kernel
        ph = ops.pooled_size(h, kh, self.pad[0], self.stride[0], self.ceil_mode)
        pw = ops.pooled_size(w, kw, self.pad[1], self.stride[1], self.ceil_mode)
        if ph <= 0 or pw <= 0:
            raise self.error("kernel %s is larger than the padded input %s (input %s, pad %s):"
                             " the pooled output would be %dx%d"
                             % (self.kernel, (h + 2 * self.pad[0], w + 2 * self.pad[1]),
                                (h, w), self.pad, ph, pw))
        self.pooled = (ph, pw)
        for t in top:
            t.reshape(n, c, ph, pw)
        if self.pool == PP.AVE:
            key = (h, w, self.kernel, self.pooled)
            if self._divisor_key != key:
                self._divisor_key = key
                self.divisors = ops.pool_divisors(h, w, self.kernel, self.pad, self.stride,
                                                  self.pooled, dtype=self.dtype)

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        y = top[0].write_data()
        xp = get_array_module(x)
        if self.pool == PP.MAX:
            ops.max_pool(x, self.kernel, self.pad, self.stride, self.pooled, y, self.memo,
                         self.engine, mask=top[1].write_data() if len(top) > 1 else None)
        elif self.pool == PP.AVE:
            ops.ave_pool(x, self.kernel, self.pad, self.stride, self.pooled, y,
                         self._divisors(xp), self.engine)
        elif self.phase == caffe_pb2.TRAIN:
            draw = np.float32 if x.dtype == np.float32 else np.float64
            uniform = backend.random_uniform(y.shape, draw, xp).astype(x.dtype, copy=False)
            ops.stochastic_pool_forward_train(x, self.kernel, self.stride, self.pooled,
                                              uniform, y, self.memo.choice_buffer(xp, y.shape))
        else:
            ops.stochastic_pool_forward_test(x, self.kernel, self.stride, self.pooled, y)

    def inference_forward(self, bottom, top):
        """Forward for a net that never runs this layer's backward (a folded TEST net, see
        :mod:`pycaffe_lite.net_fold`): MAX pooling with one top records no window choices
        (about 30% faster); other pooling runs :meth:`Forward`."""
        if self.pool != PP.MAX or len(top) > 1:
            return self.Forward(bottom, top)
        self.reshape(bottom, top)
        ops.max_pool_values(self.forward_input(bottom, top), self.kernel, self.pad, self.stride,
                            self.pooled, top[0].write_data(), self.memo, self.engine)
        return 0.0

    def _divisors(self, xp):
        if get_array_module(self.divisors) is not xp:
            self.divisors = xp.asarray(self.divisors)
        return self.divisors

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = self.backward_top_diff(top, bottom)
        x = self.backward_input(bottom, top)
        dx = bottom[0].write_diff()
        xp = get_array_module(dy)
        if self.pool == PP.AVE:
            ops.ave_pool_grad(x, top[0].read_data(), dy, self.kernel,
                              self.pad, self.stride, self.pooled, self._divisors(xp), dx,
                              self.engine)
            return
        if self.pool == PP.STOCHASTIC and self.phase != caffe_pb2.TRAIN:
            # TEST phase: the exact gradient of sum(v^2) / sum(v) (Caffe has no defined one).
            ops.stochastic_pool_test_backward(x, top[0].read_data(), dy,
                                              self.kernel, self.stride, self.pooled, dx)
            return
        if not self.memo.ready(dy.shape):
            raise self.error("backward needs a forward pass first (no recorded window "
                             "choices for top shape %s)" % (dy.shape,))
        if self.pool == PP.MAX:
            ops.max_pool_grad(x, top[0].read_data(), dy, self.kernel,
                              self.pad, self.stride, self.pooled, self.memo, dx, self.engine)
        else:
            ops.stochastic_pool_backward(dy, self.memo.choice, self.kernel, self.stride,
                                         self.pooled, dx)
