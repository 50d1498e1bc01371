"""The net with Intel Caffe's ``quantization_param`` filled in, as its calibrator
(``scripts/calibrator.py``) writes it: every Convolution gets ``bw_layer_in``,
``bw_layer_out`` and ``bw_params`` 8 and

- ``scale_in = 255 / t_in`` for a non-negative input (u8), ``127 / t_in`` with
  ``is_negative_input: true`` for an input with negative values (s8);
- ``scale_out = 255 / t_out`` when the int8 engine fuses the ReLU after it and its negative
  slope is 0 (u8; see :func:`pycaffe_lite.net_int8.fused_relu`), ``127 / t_out`` otherwise
  (s8: a leaky ReLU's output has negative values); a convolution whose
  top goes to a layer outside Intel Caffe's int8 set (Convolution, ReLU, Split, Concat,
  Pooling, Eltwise) writes float: ``bw_layer_out: 32``, ``scale_out: 1``, as the
  calibrator's last step (``force_fp32_opt``) decides it: float when no layer reading the top
  is in that set, or one computing in place on it is not, and always for the net's last
  Convolution (a Split this engine inserts counts as the layers it feeds);
- ``scale_params = 127 / max |w|``, one value, or one per output channel with
  ``per_channel`` (0 where the weights are all zero),

with ``t`` the calibrated threshold of the value (the ReLU's output for a fused ReLU). As
the calibrator samples the net Intel Caffe's compiler folded (:mod:`pycaffe_lite.net_int8_bn`),
a convolution with BatchNorm (and Scale) folded in gets the scales of its folded weights and
of the Scale's output (or the ReLU's after it). A
convolution with an Eltwise sum fused into it (:mod:`pycaffe_lite.net_int8_sum`) outputs the
sum, or the ReLU after it: its ``scale_out`` is that value's (``255 / t`` with the ReLU),
as the calibrator samples the compiled net's fused convolution.
Unlike the calibrator's default, the first convolution is quantized too (``--skip`` it to
keep it in float).
"""

import numpy as np

from ..net_graph import split_layer_name
from ..net_int8 import fused_relu
from ..net_int8_bn import folds as bn_folds
from ..net_int8_sum import fusions
from ..proto import protoio
from ..proto import caffe_pb2
from . import calibrate

INT8_LAYERS = ("Convolution", "ReLU", "Split", "Concat", "Pooling", "Eltwise")


def _current_values(net, tops):
    """For each record index, {blob id: the ONNX value it holds before that layer runs}."""
    current, before = {}, []
    for i, rec in enumerate(net.records):
        before.append(dict(current))
        for j, tid in enumerate(rec.top_ids):
            if (i, j) in tops:
                current[tid] = tops[(i, j)]
    return before


def _readers(net, producer, tid):
    """The records after record ``producer`` that read blob ``tid``, as the prototxt has
    them: a Split this engine inserted (Caffe's InsertSplits) stands for the layers it
    feeds."""
    blob = net._blob_names[tid]
    auto = split_layer_name(net.records[producer].name, blob, 0)
    out = []
    for k in range(producer + 1, len(net.records)):
        rec = net.records[k]
        if tid not in rec.bottom_ids:
            continue
        if rec.layer.type == "Split" and rec.name == auto:
            for t in rec.top_ids:
                out.extend(_readers(net, k, t))
        else:
            out.append(rec)
    return out


def _output_int8(net, producer, tid):
    """The calibrator's ``force_fp32_opt`` for a convolution whose (fused) output is blob
    ``tid`` of record ``producer``: int8 when a reader is in Intel Caffe's int8 set and no
    reader that computes in place on it is outside it."""
    eight = False
    for rec in _readers(net, producer, tid):
        if rec.layer.type not in INT8_LAYERS:
            if tid in rec.top_ids:  # in place: the value itself turns float
                return False
            continue
        eight = True
    return eight


def conv_params(net, tops, stats, thresholds, skip, per_channel):
    """{layer name: the quantization_param fields} for the TEST net's convolutions."""
    before = _current_values(net, tops)
    convs = [i for i, rec in enumerate(net.records) if rec.layer.type == "Convolution"]
    folded = bn_folds(net)  # Intel Caffe samples the net its compiler folded
    relu_of = {i: j for i in convs for j in [fused_relu(net, i, folded)] if j is not None}
    sums = {f.conv: f for f in fusions(net, relu_of, folded)[0]}
    out = {}
    for i, rec in enumerate(net.records):
        if rec.layer.type != "Convolution" or rec.name in skip:
            continue
        src = before[i].get(rec.bottom_ids[0])
        relu = relu_of.get(i)  # the ReLU the int8 engine fuses (net_int8's rule)
        fused = relu is not None
        fold = folded.get(i)  # BatchNorm (and Scale) folded in: the convolution writes theirs
        last = relu if fused else (fold.last if fold is not None else i)
        # u8 after a fused ReLU of slope 0 (the calibrator's analyze_conv_output_with_relu)
        unsigned = fused and net.records[relu].layer.layer_param.relu_param.negative_slope == 0
        f = sums.get(i)
        if f is not None:  # an Eltwise sum fused in: its output is the sum's (or its ReLU's)
            last = f.relu if f.relu is not None else f.eltwise
            fused, unsigned = f.relu_after, f.relu_after and f.slope == 0
        dst = tops.get((last, 0))
        if src not in thresholds or dst not in thresholds:
            continue
        signed = stats[src].min < 0
        t_in, t_out = thresholds[src], thresholds[dst]
        if t_in <= 0:
            raise calibrate.zero_range_error("blob '%s' (the input of layer '%s')" % (
                net._blob_names[rec.bottom_ids[0]], rec.name), rec.name)
        w = np.abs(np.asarray(fold.weights(net)[0] if fold is not None
                              else rec.layer.blobs[0].data, np.float64))
        wmax = w.reshape(w.shape[0], -1).max(axis=1) if per_channel else np.array([w.max()])
        out_rec = net.records[last]
        eight = i != convs[-1] and _output_int8(net, last, out_rec.top_ids[0])
        if eight and t_out <= 0:
            raise calibrate.zero_range_error("blob '%s' (top of layer '%s')" % (
                net._blob_names[out_rec.top_ids[0]], out_rec.name), rec.name)
        out[rec.name] = {
            "name": rec.name, "is_negative_input": bool(signed),
            "scale_in": (127.0 if signed else 255.0) / t_in,
            "bw_layer_out": 8 if eight else 32, "fused_relu": bool(fused),
            "scale_out": (255.0 if unsigned else 127.0) / t_out if eight else 1.0,
            "scale_params": [127.0 / m if m > 0 else 0.0 for m in wmax]}
    return out


def write_quantized_prototxt(model, net, tops, stats, thresholds, skip, per_channel, path):
    """Write ``model`` (every phase kept) with the convolutions' ``quantization_param`` to
    ``path``; returns the fields written, one dict per layer."""
    params = conv_params(net, tops, stats, thresholds, skip, per_channel)
    param = protoio.read_net_param(model)
    for lp in param.layer:
        p = params.get(lp.name)
        if p is None or lp.type != "Convolution":
            continue
        q = lp.quantization_param
        q.Clear()
        q.precision = caffe_pb2.QuantizationParameter.DYNAMIC_FIXED_POINT
        q.bw_layer_in, q.bw_layer_out, q.bw_params = 8, p["bw_layer_out"], 8
        q.scale_in.append(p["scale_in"])
        q.scale_out.append(p["scale_out"])
        q.scale_params.extend(p["scale_params"])
        if p["is_negative_input"]:
            q.is_negative_input = True
    protoio.write_text(param, path)
    return list(params.values())
