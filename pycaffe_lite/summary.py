"""A model's size and cost, layer by layer, at the prototxt's own input shape.

:func:`summarize` builds the net (so every shape is the one the layers compute) and reports per
layer its type, top shapes, parameter count, multiply-accumulates and activation memory:

- ``params``: the elements of the layer's parameter blobs (weights, biases, BatchNorm's
  statistics); a blob shared by name (``param { name }``) counts once, at its owner.
- ``macs``: multiply-accumulates of Convolution and the forks' depthwise convolutions
  (ConvolutionDepthwise, DepthwiseConvolution: one input channel per output) (top elements x
  input channels per group x kernel volume), Deconvolution (bottom elements x output channels
  per group x kernel volume) and InnerProduct (rows x weight elements), for the whole batch.
- ``element_ops``: the other layers' element operations, a separate and rougher figure: the
  elements they write (times the window size for Pooling); data layers count none.
- ``activation_bytes``: the memory of the layer's new top blobs (a top computed in place adds
  nothing). The Split layers the net inserts share their bottom's memory and are not listed.
"""

import numpy as np

from .net import Net
from .proto import caffe_pb2

#: the convolutions: a weight blob of (outputs, input channels per group, kernel...)
CONVOLUTION_TYPES = ("Convolution", "ConvolutionDepthwise", "DepthwiseConvolution")
MAC_TYPES = CONVOLUTION_TYPES + ("Deconvolution", "InnerProduct")


def _pooling_window(layer, bottom):
    p = layer.layer_param.pooling_param
    if p.global_pooling:
        return int(np.prod(bottom.shape[2:]))
    if p.HasField("kernel_h"):
        return int(p.kernel_h) * int(p.kernel_w)
    return int(p.kernel_size) ** 2


def layer_macs(layer, bottoms, tops):
    """Multiply-accumulates of one convolution (the depthwise fork types included),
    Deconvolution or InnerProduct layer (0 for the other types)."""
    kind = layer.type
    if kind not in MAC_TYPES or not layer.blobs:
        return 0
    weight = layer.blobs[0]
    per_output = int(np.prod(weight.shape[1:]))
    if kind in CONVOLUTION_TYPES:
        return sum(t.count for t in tops) * per_output
    if kind == "Deconvolution":
        return sum(b.count for b in bottoms) * per_output
    num_output = layer.layer_param.inner_product_param.num_output
    return sum(t.count // num_output for t in tops) * weight.count


def layer_element_ops(layer, bottoms, tops):
    """The element operations of a layer that is not a MAC layer (see the module's notes)."""
    if layer.type in MAC_TYPES or layer.type == "Split" or not bottoms:
        return 0  # data layers read, they do not compute
    written = sum(t.count for t in tops)
    if layer.type == "Pooling" and bottoms:
        written *= _pooling_window(layer, bottoms[0])
    return written


def summarize(model, phase=None, level=0, stages=(), allow_python_layers=None):
    """The summary of a net (a prototxt path or text, or a built :class:`Net`) as a dict:
    ``params``, ``macs``, ``element_ops``, ``activation_bytes`` (totals) and ``layers`` (one
    dict per layer with ``name``, ``type``, ``top_shapes`` and the same four figures).
    ``phase`` defaults to TEST (the net as deployed), as on the command line."""
    if isinstance(model, Net):
        net = model
    else:
        net = Net(model, caffe_pb2.TEST if phase is None else phase, level=level, stages=stages,
                  allow_python_layers=allow_python_layers)
    owned = {layer_id: [] for layer_id in range(len(net.records))}
    for net_pid, (layer_id, pid) in enumerate(net.param_layer_indices):
        if net.param_owners[net_pid] == -1:
            owned[layer_id].append(pid)
    layers = []
    for layer_id, rec in enumerate(net.records):
        name, layer, bottoms, tops = rec.name, rec.layer, rec.bottoms, rec.tops
        if layer.type == "Split":
            continue
        new_tops = [t for t in tops if not any(t is b for b in bottoms)]
        layers.append({
            "name": name,
            "type": layer.type,
            "top_shapes": [list(t.shape) for t in tops],
            "params": int(sum(layer.blobs[pid].count for pid in owned[layer_id])),
            "macs": int(layer_macs(layer, bottoms, tops)),
            "element_ops": int(layer_element_ops(layer, bottoms, tops)),
            "activation_bytes": int(sum(t.count * t.dtype.itemsize for t in new_tops)),
        })
    totals = {key: sum(entry[key] for entry in layers)
              for key in ("params", "macs", "element_ops", "activation_bytes")}
    return dict(net=net.name, phase="TRAIN" if net.phase == 0 else "TEST", **totals,
                layers=layers)


def _human(n, unit=""):
    for suffix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return "%.2f %s%s" % (n / scale, suffix, unit)
    return "%d %s" % (n, unit) if unit else "%d" % n


def format_table(summary):
    """The summary as a text table with a totals line."""
    rows = [("layer", "type", "top shapes", "params", "MACs", "element ops", "activations")]
    for e in summary["layers"]:
        shapes = " ".join("x".join(str(d) for d in s) for s in e["top_shapes"])
        rows.append((e["name"], e["type"], shapes, "{:,}".format(e["params"]),
                     "{:,}".format(e["macs"]), "{:,}".format(e["element_ops"]),
                     _human(e["activation_bytes"], "B")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        left = ["%-*s" % (w, c) for w, c in zip(widths[:3], r[:3])]
        right = ["%*s" % (w, c) for w, c in zip(widths[3:], r[3:])]
        lines.append("  ".join(left + right).rstrip())
    lines.append("")
    lines.append("net %s (%s): %s params, %s MACs (%s), %s element ops, %s activations"
                 % (summary["net"], summary["phase"], "{:,}".format(summary["params"]),
                    "{:,}".format(summary["macs"]), _human(summary["macs"]),
                    "{:,}".format(summary["element_ops"]),
                    _human(summary["activation_bytes"], "B")))
    return "\n".join(lines)
