"""ONNX's Pad -> Caffe layers: a zero pad of the spatial axes that an AveragePool alone reads
becomes that pool's ``pad``; any other Pad (constant of any value, edge, reflect, wrap; on any
axis; negative pads cropping) is built by :func:`.axis_pieces.pad`. Registered in
:data:`.import_ops.IMPORTERS` as the other importers."""

import math

import numpy as np

from .axis_pieces import Layers
from .axis_pieces import pad as pad_blob
from .import_layout import _text
from .import_ops import _name, _pads, attrs, importer


def _pad_sizes(ctx, node, rank):
    """(mode, the pads before and after each axis, the constant value) of a Pad of any
    opset: ``paddings`` (opset 1) or ``pads`` and ``value`` as attributes (2 to 10), then
    inputs, with the axes they name from opset 18."""
    a = attrs(node)
    mode = _text(a.get("mode", "constant"))
    if "pads" in a or "paddings" in a:
        pads = [int(p) for p in a.get("pads", a.get("paddings"))]
    else:
        pads = [int(p) for p in ctx.const(node.input[1], node, "pads").reshape(-1)]
    value = float(a.get("value", 0.0))
    if len(node.input) > 2 and node.input[2]:
        given = ctx.const(node.input[2], node, "constant_value").reshape(-1)
        value = float(given[0]) if given.size else 0.0
    axes = list(range(rank))
    if len(node.input) > 3 and node.input[3]:
        axes = [int(v) for v in ctx.const(node.input[3], node, "axes").reshape(-1)]
        if any(not -rank <= v < rank for v in axes) or \
                len({v % rank for v in axes}) != len(axes):
            raise ctx.error(node, "axes %s are not distinct axes of the input's %d"
                            % (axes, rank))
        axes = [v % rank for v in axes]
    if len(pads) != 2 * len(axes):
        raise ctx.error(node, "pads %s: ONNX gives two per padded axis (%d axes)"
                        % (pads, len(axes)))
    before, after = [0] * rank, [0] * rank
    for i, axis in enumerate(axes):
        before[axis], after[axis] = pads[i], pads[len(axes) + i]
    return mode, before, after, value


def _pool_pad(ctx, node, mode, before, after, value, rank):
    """Whether the Pad is a zero pad of the two spatial axes of a 4-D blob, the same on both
    sides, that one AveragePool without begin pads of its own alone reads: then it is that
    pool's pad."""
    if mode != "constant" or value != 0.0 or math.copysign(1.0, value) < 0 or rank != 4 or \
            any(before[:2] + after[:2]) or min(before + after) < 0 or before != after:
        return False
    readers = ctx.readers.get(node.output[0], [])
    if ctx.consumers.get(node.output[0], 0) != 1 or len(readers) != 1 or \
            readers[0].op_type != "AveragePool":
        return False
    a = attrs(readers[0])
    if len(a.get("kernel_shape", ())) != 2:
        return False
    kernel = [int(k) for k in a["kernel_shape"]]
    strides = [int(s) for s in a.get("strides", [1, 1])]
    return not any(_pads(ctx, readers[0], a, kernel, strides, [1, 1])[:2])


def node_layers(ctx, node):
    """The :class:`.axis_pieces.Layers` writing ``node``'s layers into ``ctx``: its errors name
    the node, and a constant it needs becomes one of the graph's constants under a name not yet
    taken (a Parameter layer when a layer reads it)."""
    def constant(dims, fill, name):
        base, i = name, 0
        while name in ctx.consts or name in ctx.values or name in ctx.written:
            i += 1
            name = "%s_%d" % (base, i)
        ctx.consts[name] = np.full(dims, fill, np.float32)
        return name
    return Layers(ctx.layer, lambda message: ctx.error(node, message), constant=constant)


@importer("Pad")
def pad(ctx, node):
    """A zero Pad that only an AveragePool reads: the pool takes it as Caffe's ``pad``
    (Caffe's AVE divisor counts that padding, as ONNX's average over the padded blob does).
    Any other: the input cropped by the negative pads first (as onnxruntime does), then padded
    one axis after another (a constant as a Parameter layer holding it, not learnt, which
    keeps the net at the converted batch size and which the exporters write back out; the
    edge slice tiled; single slices in reverse order for a reflection; the other end's slices
    for a wrap), joined by Concat."""
    x = node.input[0]
    shape = ctx.shape(x, node)
    mode, before, after, value = _pad_sizes(ctx, node, len(shape))
    if _pool_pad(ctx, node, mode, before, after, value, len(shape)):
        ctx.padded[node.output[0]] = (x, before[2:], after[2:], node)
        return

    em = node_layers(ctx, node)
    blob, _ = pad_blob(em, x, shape, before, after, mode, value, _name(node), node.output[0])
    if blob == x:  # no pads: the input itself
        ctx.alias[node.output[0]] = ctx.blob(x)
