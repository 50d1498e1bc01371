"""A float ONNX graph (the exporter's) -> the same graph with QuantizeLinear/DequantizeLinear
(QDQ) pairs, the form onnxruntime, TensorRT and OpenVINO read as int8.

Conv, Gemm and MatMul nodes with constant weights become int8: their weights are stored as
int8 (symmetric, zero point 0; one scale for the tensor, or one per output channel with
``per_channel``: axis 0 of a Conv's or a ``transB`` Gemm's weights, the last axis of a
MatMul's), their bias as int32 at ``input scale * weight scale`` (as an int8 convolution
adds it), and their activation input and output pass through a QuantizeLinear/DequantizeLinear
pair at the calibrated scale (``threshold / 127``, zero point 0; or as uint8 with zero point
128, the same grid, which onnxruntime's x86 kernels take without conversion; module
``ACTIVATION_TYPES``). Every other node keeps its
float computation on the dequantized values; shape-only nodes (Flatten, Reshape, ...) take
the statistics of the value they reshape. An input that is a quantized output passed through
shape-only nodes, MaxPool or Relu (which keep its values on its int8 grid) is quantized at
that output's scale: exactly, and so that a runtime can run those nodes in int8. An output
whose only reader is a Relu or Clip is quantized at the scale of that node's output (as
onnxruntime's quantizer ranges it): the values the clamp removes need no steps of the grid.
"""

import numpy as np

from ..onnx._lib import require_onnx

QUANTIZED_OPS = ("Conv", "Gemm", "MatMul")
ACTIVATION_TYPES = ("int8", "uint8")
SHAPE_OPS = ("Flatten", "Reshape", "Identity", "Squeeze", "Unsqueeze", "Transpose")
GRID_OPS = SHAPE_OPS + ("MaxPool", "Relu")
CLAMP_OPS = ("Relu", "Clip")


def layer_of_node(node_name, layer_names):
    """The Caffe layer a node of the exported graph belongs to: its name, or the longest layer
    name that is a ``/``-prefix of it."""
    best = None
    for name in layer_names:
        if node_name == name or node_name.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best


def stats_source(value, producers, has_stats):
    """The value whose statistics ``value`` has: itself, or what a chain of shape-only
    nodes reshapes into it; None when there is none."""
    while value not in has_stats:
        node = producers.get(value)
        if node is None or node.op_type not in SHAPE_OPS:
            return None
        value = node.input[0]
    return value


def upstream_scale(value, producers, done):
    """The scale of the quantized value that ``value`` is, through a chain of nodes that
    keep a value's grid (shape-only nodes, MaxPool, Relu), or None: re-quantizing at that scale
    is exact, and lets a runtime run those nodes on the int8 values."""
    while value not in done:
        node = producers.get(value)
        if node is None or node.op_type not in GRID_OPS:
            return None
        value = node.input[0]
    return done[value]


def clamped_by(value, readers, graph_outputs):
    """The output of the Relu or Clip node that is the only reader of ``value`` (and
    ``value`` no graph output), or None. Its range is the one ``value`` needs: what the clamp
    cuts off saturates in int8 to the same result, so ``value`` takes that output's scale,
    as onnxruntime's quantizer sets it (``adjust_tensor_ranges``)."""
    nodes = readers.get(value, ())
    if len(nodes) != 1 or value in graph_outputs or nodes[0].op_type not in CLAMP_OPS:
        return None
    return nodes[0].output[0]


def weight_axis(node, weight):
    """The output-channel axis of a quantized node's weights."""
    if node.op_type == "Conv":
        return 0
    if node.op_type == "Gemm":
        trans = [a.i for a in node.attribute if a.name == "transB"]
        return 0 if trans and trans[0] else 1
    return weight.ndim - 1


def weight_scales(w, axis, per_channel):
    """Symmetric int8 scales of ``w``: ``max |w| / 127`` of the tensor or of each slice along
    ``axis`` (1 where a slice is all zero)."""
    a = np.abs(np.asarray(w, np.float64))
    if per_channel:
        a = np.moveaxis(a, axis, 0).reshape(a.shape[axis], -1).max(axis=1)
    else:
        a = np.array(a.max() if a.size else 0.0)
    return np.where(a > 0, a / 127.0, 1.0).astype(np.float32)


def quantize_weights(w, scales, axis):
    shape = [1] * w.ndim
    if scales.ndim:
        shape[axis] = -1
    return np.clip(np.rint(w / scales.reshape(shape)), -127, 127).astype(np.int8)


class QDQGraph:
    """Rewrites one exported model in place (see the module notes)."""

    def __init__(self, model, activation_type="int8"):
        self.onnx = require_onnx()
        # int8 with zero point 0, or uint8 with zero point 128: the same grid of 256 steps
        self.zero_point = np.int8(0) if activation_type == "int8" else np.uint8(128)
        self.model = model
        graph = model.graph
        self.inits = {t.name: t for t in graph.initializer}
        self.producers = {o: n for n in graph.node for o in n.output}
        self.inputs = {i.name for i in graph.input}
        self.before = {}   # node name -> nodes to insert before it
        self.after = {}    # node name -> nodes to insert after it
        self.done = {}     # activation value -> its quantization scale
        self.renames = {}  # graph input -> its dequantized value

    def array(self, name):
        return self.onnx.numpy_helper.to_array(self.inits[name])

    def _const(self, name, array):
        t = self.onnx.numpy_helper.from_array(np.asarray(array), name)
        self.model.graph.initializer.append(t)
        self.inits[name] = t
        return name

    def _node(self, anchor, op, inputs, outputs, name, **attrs):
        made = self.onnx.helper.make_node(op, inputs, outputs, name=name, **attrs)
        self.before.setdefault(anchor.name, []).append(made)

    def quantize_activation(self, value, scale):
        """A QuantizeLinear/DequantizeLinear pair on ``value`` (once), at ``scale``."""
        if value in self.done:
            return
        self.done[value] = float(scale)
        s = self._const(value + "/scale", np.float32(scale))
        z = self._const(value + "/zero_point", self.zero_point)
        if value in self.inputs:
            anchor = self.model.graph.node[0]
            deq = value + "/dequantized"
            self.renames[value] = deq
            self._node(anchor, "QuantizeLinear", [value, s, z], [value + "/q"],
                       value + "/quantize")
            self._node(anchor, "DequantizeLinear", [value + "/q", s, z], [deq],
                       value + "/dequantize")
            return
        producer = self.producers[value]
        raw = value + "/float"
        for k, out in enumerate(producer.output):
            if out == value:
                producer.output[k] = raw
        self.after.setdefault(producer.name, []).extend([
            self.onnx.helper.make_node("QuantizeLinear", [raw, s, z], [value + "/q"],
                                       name=value + "/quantize"),
            self.onnx.helper.make_node("DequantizeLinear", [value + "/q", s, z], [value],
                                       name=value + "/dequantize")])

    def quantize_node(self, node, in_scale, per_channel):
        """int8 weights (and an int32 bias) for ``node``; returns its weight scales."""
        wname = node.input[1]
        w = self.array(wname)
        axis = weight_axis(node, w)
        scales = weight_scales(w, axis, per_channel)
        q = self._const(wname + "/int8", quantize_weights(w, scales, axis))
        s = self._const(wname + "/scale", scales)
        z = self._const(wname + "/zero_point", np.zeros(scales.shape, np.int8))
        extra = {"axis": axis} if scales.ndim else {}
        deq_w = wname + "/dequantized"
        self._node(node, "DequantizeLinear", [q, s, z], [deq_w], wname + "/dequantize", **extra)
        node.input[1] = deq_w
        if len(node.input) > 2 and node.input[2] in self.inits:
            bname = node.input[2]
            b = self.array(bname).astype(np.float64)
            bscale = (np.float32(in_scale) * scales).astype(np.float32)
            bq = np.clip(np.rint(b / bscale), -2**31, 2**31 - 1).astype(np.int32)
            qb = self._const(bname + "/int32", bq)
            sb = self._const(bname + "/scale", bscale)
            zb = self._const(bname + "/zero_point", np.zeros(bscale.shape, np.int32))
            extra = {"axis": 0} if bscale.ndim else {}
            self._node(node, "DequantizeLinear", [qb, sb, zb], [bname + "/dequantized"],
                       bname + "/dequantize", **extra)
            node.input[2] = bname + "/dequantized"
        return scales

    def finish(self):
        """Put the new nodes in place (before their consumer, after their producer), point
        the readers of a quantized graph input at its dequantized value and drop the float
        weights nothing reads any more."""
        graph = self.model.graph
        nodes = []
        for node in graph.node:
            nodes.extend(self.before.get(node.name, []))
            nodes.append(node)
            nodes.extend(self.after.get(node.name, []))
        for node in nodes:
            if node.op_type == "QuantizeLinear" and node.input[0] in self.renames:
                continue
            for k, name in enumerate(node.input):
                if name in self.renames:
                    node.input[k] = self.renames[name]
        del graph.node[:]
        graph.node.extend(nodes)
        used = {name for node in graph.node for name in node.input}
        keep = [t for t in graph.initializer if t.name in used]
        del graph.initializer[:]
        graph.initializer.extend(keep)
