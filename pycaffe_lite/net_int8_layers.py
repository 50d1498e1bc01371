"""Intel Caffe's int8 average pooling and Concat: layers whose input its MKL-DNN engine holds
as u8 or s8 (the output of an int8 convolution, passed on through Split, ReLU, Pooling or
Concat) and that then round (docs/int8.md).

Its Concat of inputs of one int8 type (all u8, or all s8) writes that type at the least of
the inputs' scales (``MKLDNNConcatLayer``): each input at another scale is reordered to it,
``round(q * (s_min / s))`` in float32, ties to even, saturated. Inputs of different types
are concatenated in float.

Its ``jit_uni_i8i8_pooling`` (MKL-DNN 0.18) sums the window's integers in int32, multiplies
the sum (as a float32) by the float32 ``1.0f / n`` and rounds to the nearest, ties to even,
saturated to the input's type, at the input's scale. Without padding (and a kernel over 1,
the case Intel Caffe's ``MKLDNNPoolingLayer`` forces to exclude padding) ``n`` is the count
of the window's positions inside the input. A padded one divides by the kernel's area or the
count inside, as ``avg_include_pad`` says, a field this schema does not read: those compute
in float here, as does a ``round_mode: FLOOR`` one (Intel Caffe's engine pools with ``ceil``).
"""

import logging

import numpy as np

from . import net_int8_engine, net_int8_sum
from .proto import caffe_pb2

log = logging.getLogger("pycaffe_lite")
AVE = caffe_pb2.PoolingParameter.AVE


def _forward(layer, kind, scale):
    f32 = np.float32
    lo, hi = (0, 255) if kind == "u8" else (-128, 127)

    def forward(bottom, top):
        layer.reshape(bottom, top)
        q = np.rint(np.asarray(bottom[0].cpu_data(), f32) * f32(scale)).astype(np.float64)
        _, _, h, w = q.shape
        (kh, kw), (sh, sw), (ph, pw) = layer.kernel, layer.stride, layer.pooled
        sums = np.empty(q.shape[:2] + (ph, pw), np.float64)
        count = np.empty((ph, pw), np.float64)
        for i in range(ph):
            h0, h1 = i * sh, min(i * sh + kh, h)
            for j in range(pw):
                w0, w1 = j * sw, min(j * sw + kw, w)
                sums[:, :, i, j] = q[:, :, h0:h1, w0:w1].sum(axis=(2, 3))
                count[i, j] = (h1 - h0) * (w1 - w0)
        y = sums.astype(f32) * (f32(1) / count.astype(f32))
        top[0].data[...] = np.clip(np.rint(y), lo, hi) / f32(scale)
        return 0.0
    return forward


def _concat_forward(layer, types, scale):
    f32 = np.float32

    def forward(bottom, top):
        layer.reshape(bottom, top)
        parts = []
        for blob, (kind, s) in zip(bottom, types):
            lo, hi = (0, 255) if kind == "u8" else (-128, 127)
            q = np.rint(np.asarray(blob.cpu_data(), f32) * f32(s))
            if s != scale:  # the reorder to the Concat's scale: one float32 product, rounded
                q = np.clip(np.rint(q.astype(f32) * (f32(scale) / f32(s))), lo, hi)
            parts.append(q)
        top[0].data[...] = np.concatenate(parts, axis=layer.axis) / f32(scale)
        return 0.0
    return forward


def attach(net, convs, fused):
    """Run the average poolings and Concats of ``net`` (MKLDNN layers) that read int8 values
    as Intel Caffe's int8 engine does; returns their names."""
    out = []
    for k, rec in enumerate(net.records):
        layer = rec.layer
        if layer.layer_param.type in ("Concat", "Pooling") and \
                not net_int8_engine.is_mkldnn(net, layer.layer_param):
            continue  # Intel's int8 Concat and pooling are its MKLDNN layers
        if layer.layer_param.type == "Concat":
            types = [net_int8_sum.other_type(net, b, k, convs, fused) for b in rec.bottom_ids]
            kind = net_int8_sum.concat_type(types)
            if isinstance(kind, tuple) and len({t[1] for t in types}) > 1:
                layer.Forward = _concat_forward(layer, types, kind[1])
                out.append(rec.name)
            continue
        if layer.layer_param.type != "Pooling" or layer.layer_param.pooling_param.pool != AVE:
            continue
        kind = net_int8_sum.other_type(net, rec.bottom_ids[0], k, convs, fused)
        if not isinstance(kind, tuple):
            continue
        if layer.pad != (0, 0) or not layer.ceil_mode:
            log.info("Net %s: average pooling '%s' reads int8 values but computes in float "
                     "(%s)", net.name or "(unnamed)", rec.name,
                     "padded: avg_include_pad is not read" if layer.pad != (0, 0)
                     else "round_mode FLOOR")
            continue
        layer.Forward = _forward(layer, kind[0], kind[1])
        out.append(rec.name)
    if out:
        log.info("Net %s: average pooling and Concat in int8 as Intel Caffe's engine rounds "
                 "them (%s)",
                 net.name or "(unnamed)", ", ".join(out))
    return out
