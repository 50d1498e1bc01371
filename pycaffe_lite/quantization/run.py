"""The calibration run: statistics over the TEST batches of the net's own data layers, the
three files, and the accuracy each precision gives."""

import json
import logging
import os

import numpy as np

from ..errors import CaffeError
from .. import net_graph
from ..net import Net
from ..onnx import export
from ..onnx.export import DATA_TYPES
from ..onnx._lib import require_onnx
from ..proto import caffe_pb2, protoio
from . import calibrate, intel, qdq

log = logging.getLogger("pycaffe_lite")

# opset 17: what TensorRT 8.6+, OpenVINO and onnxruntime all read; onnxruntime 1.2x's
# int8-to-uint8 rewrite of QDQ graphs fails on opset 21's QuantizeLinear
DEFAULT_OPSET = 17
FLOAT_REASON = "ONNX %s: computed on the dequantized values (only Conv, Gemm, MatMul are int8)"


def _require_ort():
    try:
        import onnxruntime
    except ImportError:
        raise CaffeError("quantize needs onnxruntime to measure the int8 accuracy: "
                         "pip install onnxruntime") from None
    return onnxruntime


def _blob_values(net, report):
    """{(record index, top index): ONNX value} for every exported layer's tops."""
    by_layer = {}
    for layer, _blob, value in report["values"]:
        by_layer.setdefault(layer, []).append(value)
    out = {}
    for i, rec in enumerate(net.records):
        if rec.layer.type in DATA_TYPES:  # graph inputs, named after their blobs
            out.update(((i, j), net._blob_names[t]) for j, t in enumerate(rec.top_ids))
            continue
        vals = by_layer.get(rec.name)
        if vals and len(vals) == len(rec.tops):
            for j, v in enumerate(vals):
                out[(i, j)] = v
    return out


def _feeds(net, batches):
    """The calibration batches as feed dicts (None: one batch of the net's own data layers),
    checked: a count needs data layers that load batches; fed batches give every input."""
    if isinstance(batches, (int, np.integer)) and not isinstance(batches, bool):
        if net.inputs:
            raise CaffeError(
                "calibration runs %d batches of the net's own data layers, but its input%s %s "
                "come%s from an Input layer (or input: fields): give the train/test prototxt, "
                "whose TEST phase reads a dataset, or feed {input blob: array} batches"
                % (batches, "s" if len(net.inputs) > 1 else "",
                   ", ".join("'%s'" % n for n in net.inputs),
                   "" if len(net.inputs) > 1 else "s"))
        yield from (None for _ in range(batches))
        return
    for k, feed in enumerate(batches):
        if not isinstance(feed, dict):
            raise CaffeError("calibration batch %d is a %s, not a {input blob: array} dict "
                             "(the net's inputs: %s)" % (k, type(feed).__name__,
                                                         ", ".join(net.inputs) or "none"))
        missing = [n for n in net.inputs if n not in feed]
        if missing:
            raise CaffeError("calibration batch %d gives no values for the input%s %s"
                             % (k, "s" if len(missing) > 1 else "",
                                ", ".join("'%s'" % n for n in missing)))
        yield feed


def _before_bias(model, tops):
    """{ONNX value of a top: (the MatMul output its bias Add reads, the bias)} for the inner
    products exported as MatMul + Add (an axis other than 1): that MatMul output is no Caffe
    blob, and its statistics are those of the top less the bias, so that it gets its own
    QDQ pair and runs as an int8 MatMul."""
    onnx = require_onnx()
    inits = {t.name: t for t in model.graph.initializer}
    producers = {o: n for n in model.graph.node for o in n.output}
    reads = {}
    for node in model.graph.node:
        for name in node.input:
            reads[name] = reads.get(name, 0) + 1
    tracked = set(tops.values())
    out = {}
    for node in model.graph.node:
        if node.op_type != "Add" or node.output[0] not in tracked or node.input[1] not in inits:
            continue
        mm = producers.get(node.input[0])
        if mm is not None and mm.op_type == "MatMul" and reads[mm.output[0]] == 1:
            out[node.output[0]] = (mm.output[0],
                                   onnx.numpy_helper.to_array(inits[node.input[1]]))
    return out


def _collect(net, tops, batches, bins, before_bias=None):
    """Run the batches (a count of the data layers' batches, or feed dicts) and return
    {ONNX value: Histogram}; an activation that is not finite, or no batch, is an error.
    ``before_bias``: {top value: (value before its bias, bias)}, statistics of both."""
    before_bias = before_bias or {}
    stats = {v: calibrate.Histogram(bins) for v in tops.values()}
    stats.update((mv, calibrate.Histogram(bins)) for mv, _ in before_bias.values())
    done = [0]

    def record(i):
        rec = net.records[i]
        for j, blob in enumerate(rec.tops):
            v = tops.get((i, j))
            if v is None:
                continue
            values = blob.cpu_data()
            if not np.isfinite(values).all():
                clean = all(np.isfinite(b.cpu_data()).all() for b in rec.bottoms)
                raise CaffeError(
                    "calibration batch %d: top '%s' of layer '%s' holds NaN or infinite values"
                    "; %s" % (done[0], net._blob_names[rec.top_ids[j]], rec.name,
                              "its inputs are finite: check the layer's weights"
                              if clean and rec.bottoms else "calibrate with finite inputs"))
            stats[v].add(values)
            if v in before_bias:
                mv, bias = before_bias[v]
                stats[mv].add(values - bias)

    net.after_forward(record)
    try:
        for feed in _feeds(net, batches):
            net.forward(**feed) if feed is not None else net.forward()
            done[0] += 1
    finally:
        net._hooks["after_forward"].remove(record)
    if not done[0]:
        raise CaffeError("no calibration batch was given")
    return stats


def _plan(model, thresholds, layer_names, skip, per_channel, activation_type, names=None):
    """Quantize the graph of ``model`` in place; returns {layer: entry of the report}.
    ``names``: {ONNX value: how errors name it (its blob and layer)}."""
    names = names or {}

    def scale(value, lname):
        if thresholds[value] > 0:
            return thresholds[value] / 127.0
        raise calibrate.zero_range_error(names.get(value, "ONNX value '%s'" % value), lname)

    g = qdq.QDQGraph(model, activation_type)
    readers = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in model.graph.output}
    layers = {}
    for node in list(model.graph.node):
        lname = qdq.layer_of_node(node.name, layer_names)
        if lname is None:
            continue
        entry = layers.setdefault(lname, {"name": lname, "onnx": [], "precision": "float"})
        entry["onnx"].append(node.op_type)
        if node.op_type not in qdq.QUANTIZED_OPS:
            continue
        if lname in skip:
            entry["reason"] = "--skip: left in float as asked"
            continue
        if len(node.input) < 2 or node.input[1] not in g.inits:
            entry["reason"] = "ONNX %s: its weights are not constant" % node.op_type
            continue
        src = qdq.stats_source(node.input[0], g.producers, thresholds)
        if src is None:
            entry["reason"] = "no calibration statistics for its input '%s'" % node.input[0]
            continue
        x, y = node.input[0], node.output[0]
        g.quantize_activation(x, qdq.upstream_scale(x, g.producers, g.done)
                              or scale(src, lname))
        w_scales = g.quantize_node(node, g.done[x], per_channel)
        clamped = qdq.clamped_by(y, readers, outputs)
        if clamped in thresholds:  # a ReLU's range: its negative side needs no steps
            g.quantize_activation(y, scale(clamped, lname))
        elif y in thresholds:
            g.quantize_activation(y, scale(y, lname))
        entry.update(precision="int8", input=x, input_scale=g.done[x],
                     output_scale=g.done.get(y),
                     weight_scales=[float(s) for s in np.ravel(w_scales)])
    g.finish()
    for entry in layers.values():
        if entry["precision"] == "float" and "reason" not in entry:
            entry["reason"] = FLOAT_REASON % "/".join(sorted(set(entry["onnx"])))
    return layers


def _accuracy_layers(net):
    return [(i, rec) for i, rec in enumerate(net.records) if rec.layer.type == "Accuracy"]


def _score_values(net, tops, accuracy):
    """{accuracy record index: the ONNX value its first bottom holds}."""
    current, out = {}, {}
    for i, rec in enumerate(net.records):
        if any(i == a for a, _ in accuracy):
            out[i] = current.get(rec.bottom_ids[0])
        for j, tid in enumerate(rec.top_ids):
            if (i, j) in tops:
                current[tid] = tops[(i, j)]
    return out


def _evaluate(model_path, weights, int8_model, iterations):
    """Float (this engine) and int8 (onnxruntime) accuracy over the same ``iterations``
    TEST batches, per top of each Accuracy layer."""
    onnx = require_onnx()
    ort = _require_ort()
    net = Net(model_path, caffe_pb2.TEST, weights=weights, fold=False, int8=False)
    _, report = export(net, None, check=False)
    tops = _blob_values(net, report)
    accuracy = _accuracy_layers(net)
    if not accuracy:
        net.close()
        return {}
    scores = _score_values(net, tops, accuracy)
    for i, rec in accuracy:
        if scores[i] is None:
            net.close()
            raise CaffeError("Accuracy layer '%s' reads blob '%s', which no layer of the ONNX "
                             "graph computes: its int8 accuracy cannot be measured"
                             % (rec.name, net._blob_names[rec.bottom_ids[0]]))
    model = onnx.ModelProto()
    model.CopyFrom(int8_model)
    have = {o.name for o in model.graph.output}
    for v in set(scores.values()) - have - {None}:
        model.graph.output.append(onnx.helper.make_tensor_value_info(
            v, onnx.TensorProto.FLOAT, None))
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    feeds = [i.name for i in session.get_inputs()]
    names = [o.name for o in session.get_outputs()]
    sums = {}
    try:
        for _ in range(iterations):
            net.forward()
            fl = {i: float(np.ravel(rec.tops[0].cpu_data())[0]) for i, rec in accuracy}
            outs = dict(zip(names, session.run(None, {n: np.ascontiguousarray(
                net.blobs[n].cpu_data(), np.float32) for n in feeds})))
            for i, rec in accuracy:
                rec.bottoms[0].data[...] = outs[scores[i]].reshape(rec.bottoms[0].shape)
                rec.layer.Forward(rec.bottoms, rec.tops)
                s = sums.setdefault(net._blob_names[rec.top_ids[0]], [0.0, 0.0])
                s[0] += fl[i]
                s[1] += float(np.ravel(rec.tops[0].cpu_data())[0])
    finally:
        net.close()
    return {k: {"float": f / iterations, "int8": q / iterations,
                "change": (q - f) / iterations} for k, (f, q) in sums.items()}


def qdq_model(net, batches, method="entropy", per_channel=False, skip=(), percentile=99.99,
              opset=None, activation_type="int8", where=None):
    """Calibrate ``net`` (a TEST net with its weights, not folded) over ``batches`` (a count
    of its data layers' batches, or an iterable of ``{input blob: array}``), activations as
    ``activation_type`` (int8, zero point 0; or uint8, zero point 128), and return a dict:
    the QDQ ``model`` (checked), the ``layers`` of the report, the ``thresholds`` and ``stats``
    per ONNX value, and ``tops``: {(layer index, top index): ONNX value}."""
    onnx = require_onnx()
    if method not in calibrate.METHODS:
        raise CaffeError("unknown calibration method %r: choose %s"
                         % (method, ", ".join(calibrate.METHODS)))
    if activation_type not in qdq.ACTIVATION_TYPES:
        raise CaffeError("activation type must be int8 or uint8, got %r" % (activation_type,))
    unknown = [s for s in skip if s not in set(net.layer_names)]
    if unknown:
        raise CaffeError("--skip: no layer named %s in the TEST net%s (layers: %s)"
                         % (", ".join(map(repr, unknown)), " of %s" % where if where else "",
                            ", ".join(net.layer_names)))
    model, report = export(net, None, opset=DEFAULT_OPSET if opset is None else opset)
    tops = _blob_values(net, report)
    stats = _collect(net, tops, batches, 0 if method == "minmax" else calibrate.BINS,
                     _before_bias(model, tops))
    thresholds = {v: calibrate.threshold(h, method, percentile) for v, h in stats.items()
                  if h.count}
    names = {v: "blob '%s' (top of layer '%s')" % (net._blob_names[net.records[i].top_ids[j]],
                                                    net.records[i].name)
             for (i, j), v in tops.items()}
    layers = _plan(model, thresholds, net.layer_names, set(skip), per_channel,
                   activation_type, names)
    onnx.checker.check_model(model, full_check=True)
    return {"model": model, "layers": layers, "thresholds": thresholds, "stats": stats,
            "tops": tops}


def _test_net(model, weights):
    """The TEST net of ``model``, unfolded and in float; where it cannot be built because no
    layer of the TEST phase gives data, an error that says so (calibration runs TEST
    batches), naming the data layers that other phases include."""
    try:
        return Net(model, caffe_pb2.TEST, weights=weights, fold=False, int8=False)
    except CaffeError as exc:
        param = protoio.read_net_param(model)
        if param.input:
            raise
        param.state.phase = caffe_pb2.TEST
        if any(layer.type in DATA_TYPES for layer in net_graph.filter_net(param).layer):
            raise
        elsewhere = ["'%s' (%s) is included in %s only" % (
            layer.name, layer.type, " and ".join(sorted({caffe_pb2.Phase.Name(r.phase)
                                                        for r in layer.include})))
            for layer in param.layer if layer.type in DATA_TYPES and layer.include]
        raise CaffeError(
            "%s: the TEST phase has no data layer, and quantize calibrates on TEST batches%s: "
            "add a data layer for TEST (include { phase: TEST }) that reads calibration "
            "images (%s)" % (model, " (%s)" % "; ".join(elsewhere) if elsewhere else "",
                             exc)) from None


def quantize(model, weights, calibration_iterations, output_dir, method="entropy",
             per_channel=False, eval_iterations=50, skip=(), percentile=99.99, opset=None,
             activation_type="int8"):
    """Calibrate the TEST net of ``model`` (a train/test prototxt with its data layers) and
    ``weights`` over ``calibration_iterations`` batches and write ``model.int8.onnx``,
    ``quantized.prototxt`` and ``report.json`` into ``output_dir``; returns the report (a
    dict; see docs/int8.md). ``eval_iterations`` batches measure the float and int8 accuracy
    (0: none); ``activation_type="uint8"`` writes the activations as uint8 with zero point 128
    (the same grid), which onnxruntime runs faster on x86."""
    if calibration_iterations < 1:
        raise CaffeError("--calibration_iterations must be >= 1 (got %d)"
                         % calibration_iterations)
    if eval_iterations < 0:
        raise CaffeError("--eval_iterations must be >= 0 (got %d)" % eval_iterations)
    if os.path.exists(output_dir) and not os.path.isdir(output_dir):
        raise CaffeError("--output_dir %s is a file, not a folder: the three files of quantize "
                         "go into a folder" % os.fspath(output_dir))
    onnx = require_onnx()
    if eval_iterations:
        _require_ort()
    net = _test_net(model, weights)
    try:
        q = qdq_model(net, calibration_iterations, method, per_channel, skip, percentile,
                      opset, activation_type, where=model)
    finally:
        net.close()
    os.makedirs(output_dir, exist_ok=True)
    onnx_path = os.path.join(output_dir, "model.int8.onnx")
    onnx.save(q["model"], onnx_path)
    proto_path = os.path.join(output_dir, "quantized.prototxt")
    stats, thresholds, layers = q["stats"], q["thresholds"], q["layers"]
    intel_layers = intel.write_quantized_prototxt(model, net, q["tops"], stats, thresholds,
                                                  set(skip), per_channel, proto_path)
    accuracy = _evaluate(model, weights, q["model"], eval_iterations) if eval_iterations \
        else {}
    result = {
        "model": os.fspath(model), "weights": os.fspath(weights), "method": method,
        "percentile": percentile if method == "percentile" else None,
        "per_channel": bool(per_channel), "activation_type": activation_type,
        "calibration_iterations": calibration_iterations,
        "eval_iterations": eval_iterations, "accuracy": accuracy,
        "layers": [layers[n] for n in net.layer_names if n in layers],
        "intel_caffe": intel_layers,
        "activations": {v: {"threshold": thresholds[v], "scale": thresholds[v] / 127.0,
                            "max_abs": stats[v].amax, "min": stats[v].min}
                        for v in sorted(thresholds)},
        "files": {"onnx": onnx_path, "prototxt": proto_path,
                  "report": os.path.join(output_dir, "report.json")},
    }
    protoio.atomic_write(result["files"]["report"],
                         json.dumps(result, indent=1).encode("utf-8"), "the quantization report")
    return result


def format_report(report):
    """The printed table: accuracy per Accuracy top, then each layer's precision and scales."""
    lines = []
    acc = report["accuracy"]
    if not acc and report["eval_iterations"]:
        lines.append("accuracy not measured: the TEST net of %s has no Accuracy layer"
                     % report["model"])
    if acc:
        lines.append("accuracy over %d TEST batches   float     int8      change"
                     % report["eval_iterations"])
        for name, a in acc.items():
            lines.append("  %-28s %-9.4f %-9.4f %+.4f" % (name, a["float"], a["int8"],
                                                           a["change"]))
    lines.append("%-24s %-12s %-9s %-12s %-12s %-14s %s" % (
        "layer", "onnx", "precision", "input scale", "output scale", "weight scale",
        "why float"))
    for e in report["layers"]:
        if e["precision"] == "int8":
            ws = e["weight_scales"]
            w = "%.4g" % ws[0] if len(ws) == 1 else "%.3g..%.3g" % (min(ws), max(ws))
            out = "-" if e["output_scale"] is None else "%.5g" % e["output_scale"]
            lines.append("%-24s %-12s %-9s %-12.5g %-12s %-14s" % (
                e["name"], "/".join(e["onnx"]), "int8", e["input_scale"], out, w))
        else:
            lines.append("%-24s %-12s %-9s %-12s %-12s %-14s %s" % (
                e["name"], "/".join(e["onnx"]), "float", "-", "-", "-", e["reason"]))
    return "\n".join(lines)
