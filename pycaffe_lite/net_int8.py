"""Intel Caffe's int8 calibration honoured at run time: the ``quantization_param`` of a
Convolution or InnerProduct layer in a TEST net.

Intel Caffe's int8 convolution (its MKL-DNN engine, TEST phase only) computes, with
``s_in = scale_in[0]``, ``s_out = scale_out[0]`` and ``s_w[c] = scale_params[c]`` (one value
for every output channel, or one per channel)::

    x_q = saturate(round(x * s_in))            u8 [0, 255], or s8 [-128, 127] when
                                               is_negative_input; round(x) with
                                               force_u8_input (scale_in is in the data)
    w_q = saturate_s8(round(w[c] * s_w[c]))
    b_q = round(b[c] * s_in * s_w[c])          int32
    acc = conv(x_q, w_q) + b_q                 exact integer sums
    y   = acc * s_out / (s_in * s_w[c])        (s_out alone where s_w[c] is 0)
    y   = y > 0 ? y : slope * y                a ReLU fused into the convolution (its
                                               negative_slope; 0: max(y, 0))
    y_q = saturate(round(y))                   bw_layer_out 8: u8 after a fused ReLU of
                                               slope 0, else s8

and the layers after it read ``y_q / s_out`` (``y / s_out`` when ``bw_layer_out`` is not 8, a
float output, where the calibrator writes ``scale_out: 1``). Every product of a value and a
scale, and the scales ``s_in * s_w[c]`` and ``s_out / (s_in * s_w[c])`` themselves, are
computed in float32 as the engine computes them (a float64 product rounds the other way
where the float32 one lands on a tie: ``0.1 * 25``). As in Intel Caffe, a
``quantization_param`` on a convolution is all it takes (its input and weight widths are not
read). Rounding is to the nearest, ties to even. A ReLU that is the first layer to
read the convolution's top (in place or not; a Split comes first where several layers read
it) counts as fused, as Intel Caffe's net compiler fuses it (whatever its negative slope: a
leaky one becomes the engine's ReLU post-op with that slope, applied before the rounding),
except after a convolution with a dilation over 1, which its engine leaves unfused; the
fused ReLU layer then passes the values on unchanged.

An InnerProduct with a ``quantization_param`` (Intel Caffe's calibrator writes them with
``--fc_int8``) computes the same way (``MKLDNNInnerProductLayer``), the sums a matrix
product, with two differences of its engine: it reads ``bw_layer_in`` (8 is what it
quantizes; another width is refused here) and its 8-bit output is u8 after any fused ReLU,
leaky or not (a leaky ReLU's negative values then saturate to 0).

This module runs that computation, in exact integer arithmetic, instead of the float layer;
every other layer computes in float (Intel Caffe's max pooling, ReLU and Split on int8 data
give the same values; its int8 average pooling rounds the mean and its Concat rounds onto one
scale, as :mod:`pycaffe_lite.net_int8_layers` does). An Eltwise sum (and ReLU) that Intel
Caffe's net compiler fuses into a convolution (``CompilationRuleConvSumFusion``, ResNet's
shortcuts) is computed as its engine does, one rounding onto the other branch's type:
:mod:`pycaffe_lite.net_int8_sum`. Before both, the compiler folds a BatchNorm (and the Scale
after it) into the convolution they follow, which then quantizes the folded weights:
:mod:`pycaffe_lite.net_int8_bn`.

``Net(..., int8=False)``, ``--int8 off`` on the commands that run nets, or the environment
variable ``PYCAFFE_LITE_INT8=0`` turn it off: the layers then compute in float.
"""

import logging

import numpy as np

from . import net_int8_bn, net_int8_engine, net_int8_layers, net_int8_sum
from .errors import NetError
from .ops.im2col import im2col
from .proto import caffe_pb2
from .switches import switch

log = logging.getLogger("pycaffe_lite")

ENV_VAR = "PYCAFFE_LITE_INT8"
QUANTIZED_TYPES = ("Convolution", "InnerProduct")


def enabled_by_default():
    """False when ``PYCAFFE_LITE_INT8`` is 0/false/no/off."""
    return switch(ENV_VAR)


class Int8Conv:
    """The scales of one quantized convolution or inner product, read from its
    ``quantization_param``."""

    def __init__(self, lp, fused_relu, slope=0.0):
        q = lp.quantization_param
        where = "layer '%s' (type %s): quantization_param" % (lp.name, lp.type)
        if not q.scale_in or not q.scale_out or not q.scale_params:
            raise NetError("%s needs scale_in, scale_out and scale_params (Intel Caffe's "
                           "calibrator writes all three)" % where)
        self.scale_in = float(q.scale_in[0])
        self.scale_out = float(q.scale_out[0])
        self.scale_params = np.asarray(q.scale_params, np.float64)
        if not (0 < self.scale_in < np.inf and 0 < self.scale_out < np.inf) \
                or not (np.isfinite(self.scale_params) & (self.scale_params >= 0)).all():
            raise NetError("%s: scales must be positive and finite (scale_in %g, scale_out %g, "
                           "scale_params from %g to %g)"
                           % (where, self.scale_in, self.scale_out, self.scale_params.min(),
                              self.scale_params.max()))
        inner = lp.type == "InnerProduct"
        num_output = (lp.inner_product_param if inner else lp.convolution_param).num_output
        if len(self.scale_params) not in (1, num_output):
            raise NetError("%s: %d scale_params for %d output channels (give one, or one per "
                           "channel)" % (where, len(self.scale_params), num_output))
        if inner and (q.bw_layer_in != 8 or lp.inner_product_param.transpose):
            raise NetError("%s: Intel Caffe's int8 inner product reads its input as 8 bits "
                           "(bw_layer_in: 8, got %d) and weights of num_output rows (no "
                           "transpose)" % (where, q.bw_layer_in))
        self.signed_in = q.is_negative_input
        # first_conv_force_u8.py's input: scale_in folded into the data layer's scale, the
        # engine quantizes the values at scale 1 (scale_in stays in the bias and output scales)
        self.force_u8 = not inner and q.force_u8_input
        self.out_bits = q.bw_layer_out
        self.fused_relu = fused_relu
        self.slope = float(slope)
        # u8 output after a fused ReLU: for a convolution only when its slope is 0; the
        # inner product takes u8 after any fused ReLU (MKLDNNInnerProductLayer)
        self.unsigned_out = fused_relu and (inner or self.slope == 0)
        self.sum = None  # an Eltwise sum fused in (net_int8_sum.SumInt8)
        self.folded = None  # the BatchNorm (+ Scale) fold: () -> (weights, bias), float32

    def _sums(self, layer, xq, wq):
        """The integer sums, (batch, output channel, positions)."""
        if layer.layer_param.type == "InnerProduct":
            return np.matmul(xq.reshape(layer.M, layer.K), wq.reshape(wq.shape[0], -1).T)[
                :, :, None]
        if len(layer.kernel_shape) != 2:
            raise layer.error("int8 (quantization_param) runs 2-D convolutions only")
        cols = im2col(xq, layer.kernel_shape, layer.pad, layer.stride, layer.dilation)
        g, nout = layer.group, wq.shape[0]
        cols = cols.reshape(g, cols.shape[0] // g, cols.shape[1])
        acc = np.matmul(wq.reshape(g, nout // g, -1), cols).reshape(nout, xq.shape[0], -1)
        return acc.transpose(1, 0, 2)

    def forward(self, layer, bottom, top):
        layer.reshape(bottom, top)
        f32 = np.float32
        s_in, s_out = f32(self.scale_in), f32(self.scale_out)
        x = np.asarray(bottom[0].cpu_data(), f32)
        lo, hi = (-128, 127) if self.signed_in else (0, 255)
        xq = np.clip(np.rint(x * (f32(1) if self.force_u8 else s_in)), lo, hi).astype(np.float64)
        if self.folded is not None:  # BatchNorm and Scale folded in (net_int8_bn)
            w, b = self.folded()
        else:
            w = np.asarray(layer.blobs[0].cpu_data(), f32)
            b = np.asarray(layer.blobs[1].cpu_data(), f32).reshape(-1) if layer.bias_term \
                else None
        sw = np.broadcast_to(self.scale_params.astype(f32), (w.shape[0],))
        wq = np.clip(np.rint(w * sw.reshape((-1,) + (1,) * (w.ndim - 1))), -128, 127)
        acc = self._sums(layer, xq, wq.astype(np.float64))
        in_and_params = s_in * sw  # float32 products, as the engine's scales are floats
        if b is not None:
            acc = acc + np.rint(b * np.where(sw == 0, f32(1), in_and_params))[:, None]
        safe = np.where(sw == 0, f32(1), in_and_params)
        mult = np.where(sw == 0, s_out, s_out / safe)
        y = acc.astype(f32) * mult.astype(f32)[:, None]
        if self.sum is not None:  # the sum, ReLU and rounding onto the other branch's type
            y = self.sum.finish(y.reshape(top[0].shape), s_out)
        else:
            if self.fused_relu:  # the engine's ReLU post-op: slope * y below 0, in float32
                y = np.where(y > 0, y, y * f32(self.slope)) if self.slope else \
                    np.maximum(y, f32(0))
            if self.out_bits == 8:
                lo, hi = (0, 255) if self.unsigned_out else (-128, 127)
                y = np.clip(np.rint(y), lo, hi)
        top[0].data[...] = (y / s_out).reshape(top[0].shape)
        return 0.0


def fused_relu(net, i, bn_folds=None):
    """The index of the ReLU that Intel Caffe's net compiler fuses into convolution or inner
    product ``i`` of ``net`` (a record index), or None: the first layer reading its top (a
    Split where several read it) is a ReLU (any negative_slope), in place or not, both are
    MKL-DNN layers to the compiler's rule (:func:`net_int8_engine.fusion_mkldnn`), and a
    convolution has no dilation over 1 (its engine fuses none then). ``bn_folds``
    (:func:`net_int8_bn.folds`): a convolution with BatchNorm (and Scale) folded in writes the
    last folded layer's top, and those layers are gone."""
    rec = net.records[i]
    lp = rec.layer.layer_param
    if lp.type not in QUANTIZED_TYPES or not rec.top_ids or \
            any(d > 1 for d in lp.convolution_param.dilation) or \
            not net_int8_engine.fusion_mkldnn(net, lp):
        return None
    bn_folds = bn_folds or {}
    top, gone = net_int8_bn.out_blob(net, bn_folds, i), net_int8_bn.dropped(bn_folds)
    for j in range(net_int8_bn.reader_start(bn_folds, i), len(net.records)):
        reader = net.records[j]
        if j not in gone and top in reader.bottom_ids:
            rlp = reader.layer.layer_param
            return j if rlp.type == "ReLU" and net_int8_engine.fusion_mkldnn(net, rlp) \
                else None
    return None


def _pass_on(bottom, top):
    if top[0] is not bottom[0]:
        top[0].reshape_like(bottom[0])
        top[0].data[...] = bottom[0].cpu_data()
    return 0.0


def attach(net, enabled=None):
    """Run the quantized convolutions and inner products of ``net`` (a TEST net) in int8.
    Returns the names of
    the layers that now do; ``enabled`` False (or None with ``PYCAFFE_LITE_INT8=0``) leaves
    them in float."""
    marked = [rec for rec in net.records if rec.layer.layer_param.HasField("quantization_param")]
    net.int8_layers = []
    if not marked:
        return []
    enabled = enabled_by_default() if enabled is None else bool(enabled)
    name = net.name or "(unnamed)"
    if not enabled or net.phase != caffe_pb2.TEST:
        log.info("Net %s: Intel Caffe's int8 calibration (quantization_param, %d layers) is "
                 "kept; the layers compute in float (%s)", name, len(marked),
                 "int8 turned off" if not enabled else "int8 runs in the TEST phase only")
        return []
    bn_folds = net_int8_bn.folds(net)
    net.int8_folded = net_int8_bn.dropped(bn_folds)
    if bn_folds:
        log.info("Net %s: BatchNorm (and Scale) folded into the convolution before them, as "
                 "Intel Caffe's net compiler folds them: %s", name, ", ".join(
                     "+".join(net.records[k].name for k in (i,) + f.dropped)
                     for i, f in sorted(bn_folds.items())))
    fused = {net.records[i].name: j for i in range(len(net.records))
             for j in [fused_relu(net, i, bn_folds)] if j is not None}
    convs = {}
    for rec in marked:
        lp = rec.layer.layer_param
        if lp.type not in QUANTIZED_TYPES:
            log.info("Net %s: layer '%s' (type %s) keeps its quantization_param and computes "
                     "in float (Intel Caffe's int8 engine quantizes convolutions and inner "
                     "products)", name,
                     lp.name, lp.type)
            continue
        if not net_int8_engine.is_mkldnn(net, lp):
            log.info("Net %s: layer '%s' (type %s, engine %s) keeps its quantization_param "
                     "and computes in float from its float weights (Intel Caffe computes in "
                     "int8 in its MKLDNN layers only)", name, lp.name, lp.type,
                     net_int8_engine.layer_engine(net, lp))
            continue
        relu = fused.get(lp.name)
        slope = net.records[relu].layer.layer_param.relu_param.negative_slope \
            if relu is not None else 0.0
        conv = Int8Conv(lp, relu is not None, slope)
        fold = bn_folds.get(net.records.index(rec))
        if fold is not None:  # the convolution writes what the Scale wrote; they pass it on
            conv.folded = (lambda f: lambda: f.weights(net))(fold)
            for k in fold.dropped:
                net.records[k].layer.Forward = _pass_on
        rec.layer.Forward = (lambda c, lay: lambda b, t: c.forward(lay, b, t))(conv, rec.layer)
        if slope:  # the convolution applied it: the ReLU layer passes its values on
            net.records[relu].layer.Forward = _pass_on
        net.int8_layers.append(lp.name)
        convs[net.records.index(rec)] = conv
    relu_of = {i: j for i, rec in enumerate(net.records)
               if rec.layer.layer_param.type == "Convolution"
               for j in [fused.get(rec.name)] if j is not None}

    def float_forward(k):  # the engine runs this one in float: the layers' own Forward
        rec = net.records[k]
        fold = bn_folds.get(k)
        for layer in (rec.layer, net.records[relu_of[k]].layer if k in relu_of else None) + \
                tuple(net.records[d].layer for d in (fold.dropped if fold else ())):
            if layer is not None and "Forward" in vars(layer):
                del layer.Forward
        net.int8_layers.remove(rec.name)

    to_float, fused_sums = net_int8_sum.attach(net, relu_of, convs, _pass_on, float_forward,
                                               bn_folds)
    for conv_name in to_float:
        log.info("Net %s: int8 convolution '%s' computes in float: the Eltwise sum fused "
                 "into it adds a float branch, and Intel Caffe's engine then leaves the "
                 "convolution in float", name, conv_name)
    net_int8_layers.attach(net, convs, fused_sums)
    if net.int8_layers:
        log.info("Net %s: Intel Caffe's int8 calibration (quantization_param): %d "
                 "of its layers compute in int8 (%s)", name, len(net.int8_layers),
                 ", ".join(net.int8_layers))
    return net.int8_layers
