"""ONNX ops of the mobile and squeeze-excitation nets (MobileNetV3, EfficientNet, MnasNet,
ShuffleNetV2, RegNetY as torchvision writes them) -> Caffe layers: HardSigmoid and HardSwish
(Power, ReLU6, Power; an Eltwise PROD by the input), a Mul of a per-channel gate by a feature
map (Scale with two bottoms, the gate flattened first), ReduceMean / ReduceMax over the
spatial axes (global pooling) or over the trailing axes (Reduction), and Gather of constant
indices (Slice, Concat, Reshape) or of computed indices into a constant table (Embed).
Registered in :data:`.import_ops.IMPORTERS` as the other
importers; the Mul here handles a Mul of two tensors of different shapes and leaves every
other Mul to :func:`.import_ops.arithmetic`."""

import numpy as np

from ..proto import caffe_pb2
from .import_ops import IMPORTERS, _name, attrs, importer

_plain_mul = IMPORTERS["Mul"]


def _hard_sigmoid(ctx, node, x, top, alpha, beta):
    """``max(0, min(1, alpha * x + beta))`` as ``ReLU6(6 alpha x + 6 beta) / 6``: a Power, a
    ReLU6 and a Power (Caffe's Clip is not in OpenCV's Caffe importer; ReLU6 is). For
    PyTorch's alpha 1/6 and beta 1/2 this is ``relu6(x + 3) / 6``, PyTorch's own formula."""
    name = _name(node)
    lp = ctx.layer("Power", name + "/affine", [x], [top + "/affine"])
    scale, shift = float(np.float32(6 * alpha)), float(np.float32(6 * beta))
    if scale != 1.0:
        lp.power_param.scale = scale
    if shift != 0.0:
        lp.power_param.shift = shift
    ctx.layer("ReLU6", name + "/relu6", [top + "/affine"], [top + "/relu6"])
    lp = ctx.layer("Power", name, [top + "/relu6"], [top])
    lp.power_param.scale = 1.0 / 6.0


@importer("HardSigmoid")
def hard_sigmoid(ctx, node):
    a = attrs(node)
    _hard_sigmoid(ctx, node, node.input[0], node.output[0], float(a.get("alpha", 0.2)),
                  float(a.get("beta", 0.5)))


@importer("HardSwish")
def hard_swish(ctx, node):
    """``x * HardSigmoid(x)`` with alpha 1/6 and beta 1/2 (opset 14's op): the gate as
    above, then an Eltwise PROD with the input."""
    x, top = node.input[0], node.output[0]
    gate = top + "/gate"
    _hard_sigmoid(ctx, node, x, gate, 1.0 / 6.0, 0.5)
    lp = ctx.layer("Eltwise", _name(node) + "/mul", [x, gate], [top])
    lp.eltwise_param.operation = caffe_pb2.EltwiseParameter.PROD


@importer("Mul")
def mul(ctx, node):
    """A Mul of two tensors whose shapes differ, one broadcast onto the other along a
    contiguous run of its axes (the squeeze-excitation gate ``x * s`` with ``s`` of shape
    ``(N, C, 1, 1)``): the gate reshaped to those axes, then Caffe's Scale with two bottoms
    (as OpenCV's Caffe importer runs it). Any other Mul: :func:`.import_ops.arithmetic`."""
    a, b = node.input[0], node.input[1]
    if a in ctx.consts or b in ctx.consts or ctx.shape(a, node) == ctx.shape(b, node):
        _plain_mul(ctx, node)
        return
    out = ctx.shape(node.output[0], node)
    if ctx.shape(b, node) == out:
        a, b = b, a
    x_shape, g_shape = ctx.shape(a, node), ctx.shape(b, node)
    if x_shape != out or len(g_shape) > len(x_shape):
        raise ctx.error(node, "a Mul of tensors of shapes %s and %s converts only when one "
                              "has the output's shape (Caffe's Scale broadcasts one way)"
                        % (ctx.shape(node.input[0], node), ctx.shape(node.input[1], node)))
    full = (1,) * (len(x_shape) - len(g_shape)) + tuple(g_shape)
    big = [i for i, d in enumerate(full) if d != 1] or [0]
    start, end = big[0], big[-1] + 1
    while start > 0 and full[start - 1] == x_shape[start - 1]:
        start -= 1  # a batch axis of 1 on both goes with the gate (the Scale is per sample)
    if any(full[i] != x_shape[i] for i in range(start, end)):
        raise ctx.error(node, "a Mul of tensors of shapes %s and %s converts only when the "
                              "smaller one matches the other on a run of axes and is 1 on "
                              "the rest (Caffe's Scale with two bottoms)"
                        % (ctx.shape(node.input[0], node), ctx.shape(node.input[1], node)))
    gate = node.output[0] + "/gate"
    lp = ctx.layer("Reshape", _name(node) + "/gate", [b], [gate])
    dims = list(full[start:end])
    if start == 0 and len(full) == len(g_shape):
        dims[0] = 0  # the batch axis, copied
    lp.reshape_param.shape.dim.extend(dims)
    lp = ctx.layer("Scale", _name(node), [a, gate], [node.output[0]])
    lp.scale_param.axis = start


def _reduced_axes(ctx, node, rank):
    a = attrs(node)
    if "axes" in a:
        axes = list(a["axes"])
    elif len(node.input) > 1 and node.input[1]:  # an input from opset 18 (ReduceSum: 13)
        axes = ctx.const(node.input[1], node, "axes").reshape(-1).tolist()
    else:
        axes = []
    if not axes:
        if int(a.get("noop_with_empty_axes", 0)):
            return []
        axes = list(range(rank))
    return sorted({int(q) + rank if int(q) < 0 else int(q) for q in axes})


@importer("ReduceMean", "ReduceMax")
def reduce_(ctx, node):
    """Over the two spatial axes of a 4-D input (``x.mean([2, 3])``): global AVE (or MAX)
    pooling, then a Reshape to ``(N, C)`` when ``keepdims`` is 0. A mean over the trailing
    axes of another input: Caffe's Reduction (MEAN), then a Reshape when ``keepdims`` is 1.
    Other axes are errors naming the node."""
    shape = ctx.shape(node.input[0], node)
    rank = len(shape)
    axes = _reduced_axes(ctx, node, rank)
    keep = int(attrs(node).get("keepdims", 1))
    x, top, name = node.input[0], node.output[0], _name(node)
    if not axes:
        ctx.alias[top] = ctx.blob(x)
        return
    if rank == 4 and axes == [2, 3]:
        mid = top if keep else top + "/pooled"
        lp = ctx.layer("Pooling", name, [x], [mid])
        lp.pooling_param.pool = (caffe_pb2.PoolingParameter.MAX if node.op_type == "ReduceMax"
                                 else caffe_pb2.PoolingParameter.AVE)
        lp.pooling_param.global_pooling = True
        if not keep:
            lp = ctx.layer("Reshape", name + "/squeeze", [mid], [top])
            lp.reshape_param.shape.dim.extend([0, shape[1]])
        return
    if node.op_type == "ReduceMean" and axes == list(range(axes[0], rank)):
        mid = top + "/reduced" if keep else top
        lp = ctx.layer("Reduction", name, [x], [mid])
        lp.reduction_param.operation = caffe_pb2.ReductionParameter.MEAN
        lp.reduction_param.axis = axes[0]
        if keep:
            lp = ctx.layer("Reshape", name + "/keepdims", [mid], [top])
            lp.reshape_param.shape.dim.extend(list(shape[:axes[0]]) + [1] * (rank - axes[0]))
        return
    raise ctx.error(node, "a %s over axes %s of a %d-D input has no Caffe equivalent (the "
                          "spatial axes of a 4-D input convert as global pooling%s)"
                    % (node.op_type, axes, rank,
                       ", the trailing axes as Reduction" if node.op_type == "ReduceMean"
                       else ""))


@importer("Gather")
def gather(ctx, node):
    """Constant indices into a tensor (``x[:, 2]``, ``x[:, [0, 2]]``): a Slice of the axis
    into its single entries, the ones indexed concatenated in the indices' order, then a
    Reshape to the output's shape (a scalar index drops the axis)."""
    shape = ctx.shape(node.input[0], node)
    rank = len(shape)
    axis = int(attrs(node).get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    index = ctx.const(node.input[1], node, "indices").astype(np.int64)
    size = shape[axis]
    flat = [int(i) + size if int(i) < 0 else int(i) for i in index.reshape(-1)]
    if not flat or any(i < 0 or i >= size for i in flat):
        raise ctx.error(node, "indices %s out of range for axis %d of size %d"
                        % (index.reshape(-1).tolist(), axis, size))
    name, top = _name(node), node.output[0]
    out = ctx.shape(top, node)
    if size == 1:
        pieces = [node.input[0]]
    else:
        pieces = ["%s/%d" % (top, i) for i in range(size)]
        lp = ctx.layer("Slice", name + "/slice", [node.input[0]], pieces)
        lp.slice_param.axis = axis
        lp.slice_param.slice_point.extend(range(1, size))
    used = [pieces[i] for i in flat]
    unused = [p for p in pieces if p not in used]
    if unused and size > 1:
        ctx.layer("Silence", name + "/spare", unused, [])
    mid = used[0]
    if len(used) > 1:
        mid = top + "/gathered"
        lp = ctx.layer("Concat", name + "/concat", used, [mid])
        lp.concat_param.axis = axis
    if mid == node.input[0] and tuple(out) == tuple(shape):
        ctx.alias[top] = ctx.blob(mid)
        return
    lp = ctx.layer("Reshape", name, [mid], [top])
    dims = list(out)
    if axis > 0 and dims and dims[0] == shape[0]:
        dims[0] = 0  # the batch axis, copied
    lp.reshape_param.shape.dim.extend(dims)


@importer("Gather")
def gather_rows(ctx, node):
    """Rows of a constant table picked by computed indices (``nn.Embedding``: the table
    ``V x D`` along axis 0): Caffe's Embed, the table its weights, with no bias (a 1-D table:
    an Embed of one column, then a Reshape dropping it). The indices are floats, exact as
    integers; Embed stops the net naming an index out of ``[0, V)``, where ONNX would count
    a negative one from the end. Constant indices: :func:`gather`."""
    data, index = node.input[0], node.input[1]
    if index in ctx.consts or data not in ctx.consts:
        gather(ctx, node)
        return
    table = ctx.const(data, node).astype(np.float32)
    axis = int(attrs(node).get("axis", 0))
    if table.ndim not in (1, 2) or axis not in (0, -table.ndim):
        raise ctx.error(node, "computed indices into a constant of shape %s along axis %d "
                              "convert only as the rows of a 1-D or 2-D table (axis 0: "
                              "Caffe's Embed)" % (table.shape, axis))
    name, top = _name(node), node.output[0]
    rows = top if table.ndim == 2 else top + "/rows"
    weights = table if table.ndim == 2 else table.reshape(-1, 1)
    lp = ctx.layer("Embed", name if table.ndim == 2 else name + "/rows", [index], [rows],
                   [weights])
    p = lp.embed_param
    p.input_dim, p.num_output, p.bias_term = weights.shape[0], weights.shape[1], False
    if table.ndim == 1:
        lp = ctx.layer("Reshape", name, [rows], [top])
        lp.reshape_param.shape.dim.extend(ctx.shape(top, node))
