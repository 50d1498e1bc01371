"""Intel Caffe's convolution + Eltwise sum (+ ReLU) fusion in its int8 nets (ResNet's
shortcuts), found as its net compiler finds it and computed as its MKL-DNN int8 convolution
computes it (docs/int8.md).

Its compiler (``CompilationRuleConvSumFusion``, TEST nets of the MKL-DNN engine) walks the
layers after Caffe's split insertion and after the convolution + ReLU fusion (those ReLUs are
gone): a convolution (no engine named, or ``MKLDNN``) whose first reader is an Eltwise that
is the very next layer takes the Eltwise's other bottom as a second input and writes the
Eltwise's top, or the top of the ReLU that first reads the Eltwise's top (that ReLU is then
dropped and the convolution applies a ReLU of slope 0). A convolution whose first reader is
an Eltwise further on (a shortcut computed before the other branch) stays as it is and
becomes the sum input of the next fusion. An Eltwise that reads a top (not the last) of a
Split with more than two tops is not fused. The compiler's ReLU flag, once cleared by an
Eltwise that no ReLU reads, stays cleared for the rest of the net.

The fused int8 convolution then computes, in float32, ``y = acc * s_out / (s_in * s_w) * c1
+ (s_out / s_b * c0) * b_q`` (``b_q`` the other branch's integers at their scale ``s_b``;
``c0``, ``c1`` the Eltwise's two coeffs, in that order whichever bottom the convolution is;
an add where the factor is 1, else one multiply-add), then the ReLU, then one rounding to
the other branch's type (u8 or s8: it writes into that branch's buffer). Where the other
branch holds float values, the engine runs the fused convolution in float.
"""

import logging

import numpy as np

from . import net_int8_bn, net_int8_engine
from .proto import caffe_pb2

log = logging.getLogger("pycaffe_lite")

SUM = caffe_pb2.EltwiseParameter.SUM
MKLDNN = ("", "MKLDNN")
# layers that pass an int8 blob on with its type and scale (MKL-DNN's Split, ReLU, Pooling)
PASS_ON = ("Split", "ReLU", "Pooling")


class Fusion:
    """One convolution + Eltwise (+ ReLU) the compiler fuses: record indices ``conv``,
    ``eltwise`` and ``relu`` (the ReLU it drops, or None), the blob ids ``conv_out`` (what
    the Eltwise reads from the convolution) and ``other`` (its other bottom), the ReLU the
    convolution applies after the sum (``relu_after``, its ``slope``) and the coeffs."""

    def __init__(self, net, conv, eltwise, relu, conv_out, other, own_relu):
        self.conv, self.eltwise, self.relu = conv, eltwise, relu
        self.conv_out, self.other = conv_out, other
        self.relu_after = relu is not None or own_relu is not None
        # the compiler sets relu on the convolution, not the ReLU's slope: a ReLU fused into
        # the convolution before keeps its slope, one after the Eltwise becomes slope 0
        self.slope = float(net.records[own_relu].layer.layer_param.relu_param.negative_slope) \
            if own_relu is not None else 0.0
        coeff = net.records[eltwise].layer.layer_param.eltwise_param.coeff
        self.c0, self.c1 = (float(coeff[0]), float(coeff[1])) if len(coeff) == 2 else (1.0, 1.0)
        self.other_type = None  # ("u8" | "s8", scale), or None: float


def fusions(net, relu_of, bn_folds=None):
    """The fusions Intel Caffe's compiler makes in ``net`` (``relu_of``: {convolution record
    index: the ReLU fused into it}; ``bn_folds``: the BatchNorm folds before,
    :func:`net_int8_bn.folds`), and a list of (layer name, reason) for those it makes
    that this engine leaves unfused (what the engine would then compute is not the net's
    function)."""
    if net.phase != caffe_pb2.TEST or net.param.engine not in MKLDNN:
        return [], []
    recs, bn_folds = net.records, bn_folds or {}
    gone = set(relu_of.values()) | net_int8_bn.dropped(bn_folds)
    order = [k for k in range(len(recs)) if k not in gone]

    def out_blob(k):
        return recs[relu_of[k]].top_ids[0] if k in relu_of else \
            net_int8_bn.out_blob(net, bn_folds, k)

    def first(blob, start, attr):
        for q in range(start, len(order)):
            if blob in getattr(recs[order[q]], attr):
                return q
        return None

    invalid, has_relu, pending, found, left = set(), True, None, [], []
    pos = 0
    while pos < len(order):
        k, step = order[pos], 1
        rec = recs[k]
        lp = rec.layer.layer_param
        if lp.type == "Split" and len(rec.top_ids) > 2:
            invalid.update(rec.top_ids[:-1])
        if lp.type == "Convolution" and lp.engine in MKLDNN and rec.top_ids:
            t = out_blob(k)
            q = first(t, pos + 1, "bottom_ids")
            elt = recs[order[q]] if q is not None else None
            if elt is not None and elt.layer.layer_param.type == "Eltwise" \
                    and not invalid.intersection(elt.bottom_ids):
                g = first(elt.top_ids[0], pos + 1, "bottom_ids")
                if g is None or recs[order[g]].layer.layer_param.type != "ReLU":
                    has_relu = False
                bottoms = list(elt.bottom_ids)
                other = bottoms[0] if len(bottoms) > 1 and bottoms[1] == t else \
                    (bottoms[1] if len(bottoms) > 1 else None)
                if q != pos + 1:
                    p = first(other, pos + 1, "top_ids") if other is not None else None
                    if p is None or recs[order[p]].layer.layer_param.type == "Convolution":
                        pending = k
                else:
                    sum_in = out_blob(pending) if pending is not None else other
                    pending = None
                    relu = order[pos + 2] if has_relu and pos + 2 < len(order) else None
                    step = 3 if has_relu else 2
                    why = _unreproduced(net, elt, other, sum_in, relu, g, q)
                    if why:
                        left.append((lp.name, why))
                    else:
                        found.append(Fusion(net, k, order[q], relu, t, other,
                                            relu_of.get(k)))
        pos += step
    return found, left


def _unreproduced(net, elt, other, sum_in, relu, g, q):
    """Why a fusion the compiler makes is not the net's function, or None."""
    ep = elt.layer.layer_param.eltwise_param
    if ep.operation != SUM or len(elt.bottom_ids) != 2:
        return "its Eltwise '%s' is no sum of two bottoms, which the engine would compute " \
               "as one" % elt.name
    if sum_in != other:
        return "the engine would add blob '%s' instead of the Eltwise's '%s'" % (
            net._blob_names[sum_in], net._blob_names[other])
    if relu is not None and g != q + 1:
        return "the engine would drop layer '%s' for the ReLU that reads '%s'" % (
            net.records[relu].name, net._blob_names[elt.top_ids[0]])
    return None


def _writer(net, blob, before):
    for k in range(before - 1, -1, -1):
        if blob in net.records[k].top_ids:
            return k
    return None


def other_type(net, blob, before, convs, fused):
    """The type and scale of blob ``blob`` as Intel Caffe's int8 engine holds it before
    record ``before``: ("u8" | "s8", scale), None for float, or "unknown" (a layer whose
    int8 output this engine does not follow). ``convs``: {record index: its int8 layer};
    ``fused``: {record index of a fused Eltwise: its Fusion}. A Concat is int8 where its
    inputs are (:func:`concat_type`). Split, ReLU, Pooling and Concat pass int8 values on as
    MKL-DNN layers only; under another engine their output is float."""
    k = _writer(net, blob, before)
    folded = getattr(net, "int8_folded", ())
    while k is not None:
        rec = net.records[k]
        if k in folded:  # a BatchNorm or Scale folded into the convolution that wrote it
            k = _writer(net, rec.bottom_ids[0], k)
            continue
        if k in fused:
            return fused[k].out_type
        if k in convs:
            c = convs[k]
            if c.sum is not None:
                return c.sum.out_type
            if c.out_bits != 8:
                return None
            return ("u8" if c.unsigned_out else "s8", c.scale_out)
        kind = rec.layer.layer_param.type
        if kind in PASS_ON + ("Concat",) and \
                not net_int8_engine.is_mkldnn(net, rec.layer.layer_param):
            return None  # a float layer: MKL-DNN's reorder hands it float values
        if kind in PASS_ON:
            src = rec.bottom_ids[0]
            k = _writer(net, src, k)
            continue
        if kind == "Concat":
            return concat_type([other_type(net, b, k, convs, fused) for b in rec.bottom_ids])
        if kind == "Eltwise":
            return "unknown"
        return None
    return None


def concat_scale(scales):
    """The scale of Intel Caffe's int8 Concat (``MKLDNNConcatLayer``): the least of its
    inputs' scales, those of 1 aside (its first one stands in until another is less)."""
    least = 1.0
    for s in scales:
        if least == 1.0:
            least = s
        if s != 1.0 and s < least:
            least = s
    return least


def concat_type(types):
    """The type and scale of a Concat's output from its inputs' (each as
    :func:`other_type` gives it): int8 when every input is int8 of one type (u8 or s8), at
    :func:`concat_scale`; float when they differ (the engine then concatenates in float)."""
    if "unknown" in types:
        return "unknown"
    if any(t is None for t in types) or len({t[0] for t in types}) != 1:
        return None
    if any(t[1] == 1.0 for t in types):  # an int8 input at scale 1 keeps it: not followed
        return "unknown"
    return (types[0][0], concat_scale([t[1] for t in types]))


class SumInt8:
    """The sum part of a fused int8 convolution: reads the other branch's blob and adds it
    as the engine does, then its ReLU and rounding."""

    def __init__(self, fusion, other_blob, other, scale_out):
        self.fusion, self.blob = fusion, other_blob
        self.kind, self.scale = other
        # the fused convolution writes the other branch's type, at its own scale_out
        self.out_type = (self.kind, scale_out)

    def finish(self, y, s_out):
        """``y`` the convolution's rescaled sums (float32, before the coeff ``c1``); returns
        the rounded integers the engine writes."""
        f32 = np.float32
        f = self.fusion
        if f.c1 != 1.0:
            y = y * f32(f.c1)
        b_q = np.rint(np.asarray(self.blob.cpu_data(), f32) * f32(self.scale)).reshape(y.shape)
        factor = f32(f32(s_out / f32(self.scale)) * f32(f.c0))
        if factor == 1:
            y = y + b_q.astype(f32)
        else:  # one multiply-add: the exact product, one rounding to float32
            y = (y.astype(np.float64) + b_q * np.float64(factor)).astype(f32)
        if f.relu_after:
            y = np.where(y > 0, y, y * f32(f.slope)) if f.slope else np.maximum(y, f32(0))
        lo, hi = (0, 255) if self.kind == "u8" else (-128, 127)
        return np.clip(np.rint(y), lo, hi)


def _copy_from(index):
    def forward(bottom, top):
        if top[0] is not bottom[index]:
            top[0].reshape_like(bottom[index])
            top[0].data[...] = bottom[index].cpu_data()
        return 0.0
    return forward


def attach(net, relu_of, convs, pass_on, float_forward, bn_folds=None):
    """Fuse the int8 convolutions ``convs`` ({record index: Int8Conv}) of ``net`` with the
    Eltwise sums Intel Caffe's compiler fuses into them. A fused one whose other branch is
    float computes in float (``float_forward(k)`` restores its float layer, and it leaves
    ``convs``); returns the names of those and {record index of a fused Eltwise: its
    Fusion}."""
    found, left = fusions(net, relu_of, bn_folds)
    for name, why in left:
        log.warning("Net %s: Intel Caffe fuses the Eltwise after convolution '%s' into it, "
                    "but %s; computed unfused here", net.name or "(unnamed)", name, why)
    fused, to_float = {}, []
    for f in found:
        conv = convs.get(f.conv)
        if conv is None:  # a float convolution: the float layers compute the same sum
            continue
        kind = other_type(net, f.other, f.conv, convs, fused)
        cname = net.records[f.conv].name
        if kind == "unknown":
            log.warning("Net %s: Intel Caffe fuses Eltwise '%s' into int8 convolution '%s'; "
                        "its other input comes from a Concat or Eltwise, whose int8 type "
                        "is not followed here: computed unfused", net.name or "(unnamed)",
                        net.records[f.eltwise].name, cname)
            continue
        if kind is None:  # the engine drops the quantization: a float convolution
            float_forward(f.conv)
            del convs[f.conv]
            to_float.append(cname)
            f.out_type = None
            fused[f.eltwise] = f
            continue
        conv.sum = SumInt8(f, net._blobs[f.other], kind, conv.scale_out)
        f.out_type = conv.sum.out_type
        fused[f.eltwise] = f
        elt = net.records[f.eltwise]
        elt.layer.Forward = _copy_from(list(elt.bottom_ids).index(f.conv_out))
        if f.relu is not None:
            net.records[f.relu].layer.Forward = pass_on
        log.info("Net %s: Eltwise '%s'%s fused into int8 convolution '%s' (the other "
                 "branch %s at scale %g)", net.name or "(unnamed)", elt.name,
                 " and ReLU '%s'" % net.records[f.relu].name if f.relu is not None else "",
                 cname, kind[0], kind[1])
    return to_float, fused
