"""ONNX element-wise and reduction ops that Caffe's layers compute exactly -> Caffe layers: Neg,
Reciprocal, Sqrt and Pow by a constant exponent (Power), Selu (ELU, Power), Softsign (AbsVal,
Power, Eltwise PROD), Min and Mean of equal shapes (Eltwise), LogSoftmax (shifted by the
maximum as ONNX computes it: Pooling MAX and AVE, Tile, Eltwise, Exp, Log), ReduceSum /
ReduceSumSquare / ReduceL1 / ReduceL2 / ReduceMean over any axes (Reduction, after a Permute
where the axes are not the trailing ones), Tile (Caffe's Tile per axis), Expand (a Reshape and
Tiles), Add / Sub / Mul of two tensors that broadcast (each expanded so, then Eltwise SUM or
PROD), Div by a tensor (its reciprocal, a Power of -1, then that product), PRelu of
slopes that are not per channel (ReLU, Scale, Eltwise) and InstanceNormalization (Reduction,
Bias and Scale by the per-sample statistics, Scale by the per-channel weights). Registered in
:data:`.import_ops.IMPORTERS` as the other importers."""

import numpy as np

from ..proto import caffe_pb2
from .import_gates import _reduced_axes
from .import_ops import (IMPORTERS, _broadcast_param, _name, attrs, importer, softmax_axis,
                         zero_scale)

E = caffe_pb2.EltwiseParameter


def _power(ctx, name, x, top, power=1.0, scale=1.0, shift=0.0):
    lp = ctx.layer("Power", name, [x], [top])
    p = lp.power_param
    if power != 1.0:
        p.power = power
    if scale != 1.0:
        p.scale = scale
    if shift != 0.0:
        p.shift = shift
    return top


# -- element-wise --------------------------------------------------------------------------
@importer("Neg", "Reciprocal", "Sqrt")
def neg_reciprocal_sqrt(ctx, node):
    kw = {"Neg": dict(scale=-1.0), "Reciprocal": dict(power=-1.0),
          "Sqrt": dict(power=0.5)}[node.op_type]
    _power(ctx, _name(node), node.input[0], node.output[0], **kw)


#: the most pieces of equal exponent a Pow's input is cut into (one Power layer each)
MAX_POW_PIECES = 512


@importer("Pow")
def pow_(ctx, node):
    """``x ** y`` for a constant ``y``: of one value, Caffe's Power. Of several values (a
    constant that broadcasts onto ``x``): ``x`` flattened by a Reshape, cut by a Slice into
    the runs of equal exponent (in ``x``'s order), a Power of each run's exponent, a Concat
    and a Reshape back: each value raised to its own exponent by the same Power arithmetic,
    at most :data:`MAX_POW_PIECES` runs. A tensor exponent has no Caffe layer."""
    y = ctx.const(node.input[1], node, "exponent").astype(np.float64)
    x_shape = tuple(ctx.shape(node.input[0], node))
    if len(ctx.shape(node.input[1], node)) > len(x_shape):
        raise ctx.error(node, "the exponent gives the output more axes than the input's %s"
                        % (x_shape,))
    flat = y.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        _power(ctx, _name(node), node.input[0], node.output[0],
               power=float(np.float32(flat[0])))
        return
    try:
        full = np.broadcast_to(y, x_shape).reshape(-1).astype(np.float32)
    except ValueError:
        raise ctx.error(node, "an exponent of shape %s gives the output another shape than "
                              "the input's %s" % (y.shape, x_shape)) from None
    starts = [0] + [i for i in range(1, full.size) if full[i] != full[i - 1]]
    if len(starts) > MAX_POW_PIECES:
        raise ctx.error(node, "an exponent of %d runs of equal values along the flattened "
                              "input converts as one Power layer per run, at most %d"
                        % (len(starts), MAX_POW_PIECES))
    x, top, name = node.input[0], node.output[0], _name(node)
    lp = ctx.layer("Reshape", name + "/flat", [x], [top + "/flat"])
    lp.reshape_param.shape.dim.extend([1, full.size])
    pieces = ["%s/piece%d" % (top, i) for i in range(len(starts))]
    lp = ctx.layer("Slice", name + "/pieces", [top + "/flat"], pieces)
    lp.slice_param.axis = 1
    lp.slice_param.slice_point.extend(starts[1:])
    powered = [_power(ctx, "%s/power%d" % (name, i), piece, "%s/power%d" % (top, i),
                      power=float(full[start]))
               for i, (piece, start) in enumerate(zip(pieces, starts))]
    lp = ctx.layer("Concat", name + "/joined", powered, [top + "/joined"])
    lp.concat_param.axis = 1
    lp = ctx.layer("Reshape", name, [top + "/joined"], [top])
    lp.reshape_param.shape.dim.extend(x_shape)


@importer("Selu")
def selu(ctx, node):
    a = attrs(node)
    alpha = float(a.get("alpha", 1.67326319217681884765625))
    gamma = float(a.get("gamma", 1.05070102214813232421875))
    lp = ctx.layer("ELU", _name(node) + "/elu", [node.input[0]], [node.output[0] + "/elu"])
    lp.elu_param.alpha = alpha
    _power(ctx, _name(node), node.output[0] + "/elu", node.output[0], scale=gamma)


@importer("Softsign")
def softsign(ctx, node):
    """``x / (1 + |x|)``: AbsVal, Power (``(1 + |x|) ^ -1``), Eltwise PROD by ``x``."""
    x, top, name = node.input[0], node.output[0], _name(node)
    ctx.layer("AbsVal", name + "/abs", [x], [top + "/abs"])
    _power(ctx, name + "/reciprocal", top + "/abs", top + "/reciprocal", power=-1.0,
           shift=1.0)
    lp = ctx.layer("Eltwise", name, [x, top + "/reciprocal"], [top])
    lp.eltwise_param.operation = E.PROD


def _same_shapes(ctx, node):
    shapes = {ctx.shape(n, node) for n in node.input}
    if len(shapes) != 1:
        raise ctx.error(node, "inputs of different shapes %s do not convert (Caffe's Eltwise "
                              "does not broadcast)" % sorted(shapes))


@importer("Min", "Mean")
def min_mean(ctx, node):
    """Mean: Eltwise SUM with coefficients ``1 / n``; Min: ``-max(-a, -b, ...)`` (Power by
    -1 each side of an Eltwise MAX)."""
    if len(node.input) == 1:
        ctx.alias[node.output[0]] = ctx.blob(node.input[0])
        return
    _same_shapes(ctx, node)
    name, top = _name(node), node.output[0]
    if node.op_type == "Mean":
        lp = ctx.layer("Eltwise", name, list(node.input), [top])
        lp.eltwise_param.operation = E.SUM
        lp.eltwise_param.coeff.extend([1.0 / len(node.input)] * len(node.input))
        return
    negated = [_power(ctx, "%s/neg%d" % (name, i), x, "%s/neg%d" % (top, i), scale=-1.0)
               for i, x in enumerate(node.input)]
    lp = ctx.layer("Eltwise", name + "/max", negated, [top + "/max"])
    lp.eltwise_param.operation = E.MAX
    _power(ctx, name, top + "/max", top, scale=-1.0)


# -- LogSoftmax ----------------------------------------------------------------------------
def _tile(ctx, name, x, top, axis, tiles):
    lp = ctx.layer("Tile", name, [x], [top])
    lp.tile_param.axis, lp.tile_param.tiles = axis, int(tiles)
    return top


@importer("LogSoftmax")
def log_softmax(ctx, node):
    """``x - max - log(sum(exp(x - max)))`` along the axis, as ONNX computes it (a Softmax
    then Log would give -inf where a probability underflows): the input viewed as
    ``(outer, 1, C, inner)``, the maximum and the mean of the exponentials by pooling over a
    ``C x 1`` window, tiled back over the axis."""
    shape = ctx.shape(node.input[0], node)
    axis = softmax_axis(ctx, node, shape)
    c = shape[axis]
    outer, inner = int(np.prod(shape[:axis])), int(np.prod(shape[axis + 1:]))
    x, top, name = node.input[0], node.output[0], _name(node)
    lp = ctx.layer("Reshape", name + "/view", [x], [top + "/view"])
    lp.reshape_param.shape.dim.extend([outer, 1, c, inner])
    P = caffe_pb2.PoolingParameter

    def pool(kind, bottom, suffix):
        lp = ctx.layer("Pooling", name + suffix, [bottom], [top + suffix])
        lp.pooling_param.pool = kind
        lp.pooling_param.kernel_h, lp.pooling_param.kernel_w = c, 1
        return _tile(ctx, name + suffix + "/tile", top + suffix, top + suffix + "/tile", 2, c)

    def minus(a, b, suffix, out):
        lp = ctx.layer("Eltwise", name + suffix, [a, b], [out])
        lp.eltwise_param.operation = E.SUM
        lp.eltwise_param.coeff.extend([1.0, -1.0])
        return out

    shifted = minus(top + "/view", pool(P.MAX, top + "/view", "/max"), "/shifted",
                    top + "/shifted")
    ctx.layer("Exp", name + "/exp", [shifted], [top + "/exp"])
    lp = ctx.layer("Pooling", name + "/mean", [top + "/exp"], [top + "/mean"])
    lp.pooling_param.pool = P.AVE
    lp.pooling_param.kernel_h, lp.pooling_param.kernel_w = c, 1
    lp = ctx.layer("Log", name + "/log", [top + "/mean"], [top + "/log"])
    if c != 1:
        lp.log_param.scale = float(c)  # log(c * mean): log of the sum
    log_sum = _tile(ctx, name + "/log/tile", top + "/log", top + "/log/tile", 2, c)
    minus(shifted, log_sum, "/out", top + "/out")
    lp = ctx.layer("Reshape", name, [top + "/out"], [top])
    lp.reshape_param.shape.dim.extend(shape)


# -- reductions ----------------------------------------------------------------------------
_REDUCTIONS = {"ReduceSum": "SUM", "ReduceSumSquare": "SUMSQ", "ReduceL1": "ASUM",
               "ReduceL2": "SUMSQ", "ReduceMean": "MEAN"}
_reduce_mean_pooled = IMPORTERS["ReduceMean"]


@importer(*_REDUCTIONS)
def reduce_(ctx, node):
    """Caffe's Reduction (SUM, SUMSQ, ASUM, MEAN; L2 the square root of SUMSQ by a Power)
    over the trailing axes, the reduced axes moved there first by a Permute (the others keep
    their order) where they are not, then a Reshape to ONNX's output shape (``keepdims``).
    No axes with ``noop_with_empty_axes``: the input (ReduceSumSquare: its square, ReduceL1
    and ReduceL2: ``|x|``, as ONNX gives them then). A ReduceMean over the spatial axes of
    a 4-D input is global pooling (:func:`.import_gates.reduce_`)."""
    shape = ctx.shape(node.input[0], node)
    rank = len(shape)
    axes = _reduced_axes(ctx, node, rank)
    x, top, name = node.input[0], node.output[0], _name(node)
    op = node.op_type
    if op == "ReduceMean" and (not axes or rank == 4 and axes == [2, 3]):
        _reduce_mean_pooled(ctx, node)
        return
    if not axes:
        if op == "ReduceSum":
            ctx.alias[top] = ctx.blob(x)
        elif op == "ReduceSumSquare":
            _power(ctx, name, x, top, power=2.0)
        else:
            ctx.layer("AbsVal", name, [x], [top])
        return
    out_shape = ctx.shape(top, node)
    kept = [i for i in range(rank) if i not in axes]
    steps = (["permute"] if kept + axes != list(range(rank)) else []) + ["reduce"] + \
        (["sqrt"] if op == "ReduceL2" else []) + \
        (["reshape"] if tuple(out_shape) != tuple(shape[i] for i in kept) else [])
    blob = x
    for i, step in enumerate(steps):
        out = top if i == len(steps) - 1 else "%s/%s" % (top, step)
        layer = name if out == top else "%s/%s" % (name, step)
        if step == "permute":
            lp = ctx.layer("Permute", layer, [blob], [out])
            lp.permute_param.order.extend(kept + axes)
        elif step == "reduce":
            lp = ctx.layer("Reduction", layer, [blob], [out])
            lp.reduction_param.operation = getattr(caffe_pb2.ReductionParameter,
                                                   _REDUCTIONS[op])
            lp.reduction_param.axis = len(kept)
        elif step == "sqrt":
            _power(ctx, layer, blob, out, power=0.5)
        else:
            lp = ctx.layer("Reshape", layer, [blob], [out])
            lp.reshape_param.shape.dim.extend(out_shape)
        blob = out


# -- Tile, Expand --------------------------------------------------------------------------
def _tiles(ctx, node, x, repeats, top):
    """``x`` repeated ``repeats[i]`` times along each axis ``i``: one Tile layer per axis."""
    todo = [(i, r) for i, r in enumerate(repeats) if r != 1]
    if not todo:
        ctx.alias[top] = ctx.blob(x)
        return
    for k, (axis, r) in enumerate(todo):
        out = top if k == len(todo) - 1 else "%s/tile%d" % (top, axis)
        _tile(ctx, _name(node) if len(todo) == 1 else "%s/tile%d" % (_name(node), axis),
              x, out, axis, r)
        x = out


@importer("Tile")
def tile(ctx, node):
    repeats = [int(r) for r in ctx.const(node.input[1], node, "repeats").reshape(-1)]
    if min(repeats, default=1) < 1:
        raise ctx.error(node, "repeats %s: a Caffe blob cannot be empty" % repeats)
    _tiles(ctx, node, node.input[0], repeats, node.output[0])


@importer("Expand")
def expand(ctx, node):
    """A broadcast of ``x`` to the static output shape: a Reshape to the output's rank (1s
    in front) where it has fewer axes, then a Tile of each axis of size 1 that grows."""
    shape = ctx.shape(node.input[0], node)
    out = ctx.shape(node.output[0], node)
    full = (1,) * (len(out) - len(shape)) + tuple(shape)
    x = node.input[0]
    if len(full) != len(shape):
        x = node.output[0] + "/view"
        lp = ctx.layer("Reshape", _name(node) + "/view", [node.input[0]], [x])
        lp.reshape_param.shape.dim.extend(full)
    _tiles(ctx, node, x, [o // f for o, f in zip(out, full)], node.output[0])



_plain_arithmetic = IMPORTERS["Add"]


def _broadcast(ctx, node, x, shape, out, top):
    """``x`` of ``shape`` broadcast to ``out`` as ONNX does: a Reshape to the output's rank
    (1s in front) where it has fewer axes, then a Tile of each axis of size 1 that grows."""
    full = (1,) * (len(out) - len(shape)) + tuple(shape)
    if len(full) != len(shape):
        lp = ctx.layer("Reshape", _name(node) + "/view", [x], [top + "/view"])
        lp.reshape_param.shape.dim.extend(full)
        x = top + "/view"
    _tiles(ctx, node, x, [o // f for o, f in zip(out, full)], top)
    return top


@importer("Add", "Sub")
def add_sub(ctx, node):
    """Of two tensors of different shapes: each input that has not the output's shape
    broadcast to it (:func:`_broadcast`: copies, no arithmetic), then an Eltwise SUM (Sub:
    with coefficients 1 and -1). Anything else: :func:`.import_ops.arithmetic`."""
    a, b = node.input[0], node.input[1]
    if node.op_type == "Sub" and a in ctx.consts and b not in ctx.consts and \
            ctx.consts[a].size == 1 and ctx.consts[a].ndim <= len(ctx.shape(b, node)):
        # a constant minus a tensor: one rounding, as ONNX's
        _power(ctx, _name(node), b, node.output[0], scale=-1.0,
               shift=float(np.float32(ctx.consts[a].reshape(-1)[0])))
        return
    if a in ctx.consts or b in ctx.consts or ctx.shape(a, node) == ctx.shape(b, node):
        _plain_arithmetic(ctx, node)
        return
    out = tuple(ctx.shape(node.output[0], node))
    top = node.output[0]
    bottoms = []
    for i, x in enumerate((a, b)):
        shape = tuple(ctx.shape(x, node))
        bottoms.append(x if shape == out else
                       _broadcast(ctx, node, x, shape, out, "%s/broadcast%d" % (top, i)))
    lp = ctx.layer("Eltwise", _name(node), bottoms, [top])
    lp.eltwise_param.operation = E.SUM
    if node.op_type == "Sub":
        lp.eltwise_param.coeff.extend([1.0, -1.0])


_channel_prelu = IMPORTERS["PRelu"]


@importer("PRelu")
def prelu(ctx, node):
    """Constant slopes that broadcast onto the input (ONNX aligns them with its last axes)
    but are not one per channel: ``relu(x) + (-slope) relu(-x)`` (Power by -1, ReLU, a Scale
    by the fixed negated slopes, not learnt, an Eltwise SUM; one of the two terms is 0, so
    the sum is exact). Shared or per-channel slopes: Caffe's PReLU
    (:func:`.import_ops.prelu`), as is a slope of C values before opset 7 (broadcast
    came with opset 7; before it the slopes were per channel)."""
    slope = ctx.const(node.input[1], node, "slope")
    shape = tuple(ctx.shape(node.input[0], node))
    full = (1,) * (len(shape) - slope.ndim) + tuple(slope.shape)
    if ctx.opset < 7 and len(shape) >= 2 and slope.size == shape[1] != 1:
        # before opset 7 a slope of C values is one per channel, whatever its shape
        ctx.layer("PReLU", _name(node), [node.input[0]], [node.output[0]],
                  [slope.reshape(-1)])
        return
    channel = slope.size == 1 or len(shape) >= 2 and full[1] == shape[1] and \
        slope.size == shape[1]
    if channel or slope.ndim > len(shape) or \
            any(f not in (1, d) for f, d in zip(full, shape)):
        _channel_prelu(ctx, node)
        return
    x, top, name = node.input[0], node.output[0], _name(node)
    ctx.layer("ReLU", name + "/positive", [x], [top + "/positive"])
    _power(ctx, name + "/neg", x, top + "/neg", scale=-1.0)
    ctx.layer("ReLU", name + "/negative", [top + "/neg"], [top + "/negative"])
    axis, param = _broadcast_param(ctx, node, shape, -slope.astype(np.float32))
    lp = ctx.layer("Scale", name + "/slope", [top + "/negative"], [top + "/sloped"], [param])
    lp.scale_param.axis, lp.scale_param.num_axes = axis, param.ndim
    lp.param.add(lr_mult=0, decay_mult=0)
    lp = ctx.layer("Eltwise", name, [top + "/positive", top + "/sloped"], [top])
    lp.eltwise_param.operation = E.SUM

# -- InstanceNormalization -----------------------------------------------------------------
@importer("InstanceNormalization")
def instance_norm(ctx, node):
    """``scale (x - mean) / sqrt(var + epsilon) + B`` per sample and channel, the statistics
    over the spatial axes as ONNX computes them (Caffe's MVN adds epsilon to the standard
    deviation instead): Reduction MEAN, Bias by minus it, Power 2, Reduction MEAN,
    Power ``(var + epsilon) ^ -0.5``, Scale by it, then Scale with bias by the weights."""
    shape = ctx.shape(node.input[0], node)
    if len(shape) < 3:
        raise ctx.error(node, "an input of shape %s has no spatial axes" % (shape,))
    gamma = ctx.const(node.input[1], node, "scale").astype(np.float32).reshape(-1)
    beta = ctx.const(node.input[2], node, "B").astype(np.float32).reshape(-1)
    eps = float(attrs(node).get("epsilon", 1e-5))
    x, top, name = node.input[0], node.output[0], _name(node)
    R = caffe_pb2.ReductionParameter

    def mean(bottom, suffix):
        lp = ctx.layer("Reduction", name + suffix, [bottom], [top + suffix])
        lp.reduction_param.operation = R.MEAN
        lp.reduction_param.axis = 2
        return top + suffix

    neg_mean = _power(ctx, name + "/neg_mean", mean(x, "/mean"), top + "/neg_mean", scale=-1.0)
    lp = ctx.layer("Bias", name + "/centred", [x, neg_mean], [top + "/centred"])
    lp.bias_param.axis = 0
    square = _power(ctx, name + "/square", top + "/centred", top + "/square", power=2.0)
    inv_std = _power(ctx, name + "/inv_std", mean(square, "/var"), top + "/inv_std",
                     power=-0.5, shift=float(np.float32(eps)))
    lp = ctx.layer("Scale", name + "/normalized", [top + "/centred", inv_std],
                   [top + "/normalized"])
    lp.scale_param.axis = 0
    lp = ctx.layer("Scale", name, [top + "/normalized"], [top], [gamma, beta])
    lp.scale_param.axis, lp.scale_param.bias_term = 1, True


# -- Mul and Div of tensors that broadcast ---------------------------------------------------
_gate_mul = IMPORTERS["Mul"]
_plain_div = IMPORTERS["Div"]


def _is_gate(x_shape, g_shape, out):
    """Whether ``g`` multiplies ``x`` as Caffe's Scale with two bottoms does: ``x`` has the
    output's shape and ``g`` matches it on a run of axes and is 1 elsewhere."""
    if tuple(x_shape) != tuple(out) or len(g_shape) > len(x_shape):
        return False
    full = (1,) * (len(x_shape) - len(g_shape)) + tuple(g_shape)
    big = [i for i, d in enumerate(full) if d != 1] or [0]
    return all(full[i] == x_shape[i] for i in range(big[0], big[-1] + 1))


def _product(ctx, node, a, a_shape, b, b_shape, top):
    """``a * b`` broadcast as ONNX does: each operand that has not the output's shape
    broadcast to it (:func:`_broadcast`: copies), then an Eltwise PROD."""
    out = tuple(ctx.shape(node.output[0], node))
    bottoms = [x if tuple(shape) == out else
               _broadcast(ctx, node, x, tuple(shape), out, "%s/broadcast%d" % (top, i))
               for i, (x, shape) in enumerate(((a, a_shape), (b, b_shape)))]
    lp = ctx.layer("Eltwise", _name(node), bottoms, [top])
    lp.eltwise_param.operation = E.PROD


@importer("Mul")
def mul(ctx, node):
    """Of two tensors of different shapes: the gate ``x * s`` (:func:`.import_gates.mul`,
    Caffe's Scale with two bottoms) where ``s`` matches ``x`` on a run of axes, any other
    broadcast by :func:`_product`. Anything else: :func:`.import_gates.mul`."""
    a, b = node.input[0], node.input[1]
    if a in ctx.consts or b in ctx.consts or ctx.shape(a, node) == ctx.shape(b, node):
        _gate_mul(ctx, node)
        return
    shapes = ctx.shape(a, node), ctx.shape(b, node)
    out = ctx.shape(node.output[0], node)
    if _is_gate(shapes[0], shapes[1], out) or _is_gate(shapes[1], shapes[0], out):
        _gate_mul(ctx, node)
        return
    _product(ctx, node, a, shapes[0], b, shapes[1], node.output[0])


@importer("Div")
def div(ctx, node):
    """``a / b`` with ``b`` a tensor: Caffe has no division, so ``b``'s reciprocal (Power of
    -1, correctly rounded as ``1 / b``), then the product (:func:`_product`; a constant
    ``a`` of one value: a Power scaling the reciprocal). The product of the rounded
    reciprocal differs from the rounded quotient by at most about 1.5 units in the last
    place; ``1 / 0`` is ``inf``, so ``a / 0`` is ``±inf`` and ``0 / 0`` NaN as ONNX gives
    them; a ``b`` beyond 2^126 in magnitude has a subnormal reciprocal (fewer digits) and
    one below 2^-128 an infinite one. A constant ``b``: :func:`.import_ops.arithmetic`."""
    a, b = node.input[0], node.input[1]
    if b in ctx.consts:
        _plain_div(ctx, node)
        return
    top, name = node.output[0], _name(node)
    b_shape = ctx.shape(b, node)
    if a in ctx.consts and ctx.consts[a].size == 1 and \
            len(ctx.consts[a].shape) <= len(b_shape):
        c = float(np.float32(ctx.consts[a].reshape(-1)[0]))
        if c == 1.0:
            _power(ctx, name, b, top, power=-1.0)
            return
        recip = _power(ctx, name + "/reciprocal", b, top + "/reciprocal", power=-1.0)
        if c == 0.0:  # 0 / x: NaN for x = 0, signed zeros (a Power of scale 0 is constant)
            zero_scale(ctx, node, recip, b_shape, top, c)
            return
        _power(ctx, name, recip, top, scale=c)
        return
    recip = _power(ctx, name + "/reciprocal", b, top + "/reciprocal", power=-1.0)
    _product(ctx, node, a, ctx.shape(a, node), recip, b_shape, top)


# -- MatMul of two computed tensors ----------------------------------------------------------
_constant_matmul = IMPORTERS["MatMul"]


@importer("MatMul")
def matmul(ctx, node):
    """``A @ B`` with ``B`` computed (Caffe's InnerProduct needs constant weights): the
    products of every row of ``A`` with every column of ``B`` laid out as ``(..., M, N, K)``
    (``A`` viewed as ``(..., M, 1, K)``, ``B`` transposed by a Permute and viewed as
    ``(..., 1, N, K)``, both broadcast by Tiles, an Eltwise PROD), summed over ``K`` by a
    Reduction SUM, then viewed as ONNX's output (a 1-D operand's axis dropped). The sums run
    in order along ``K``, where a runtime's matrix product may add in another order: the
    results agree to float rounding. The layout holds ``M * N * K`` values per batch entry.
    ``B`` a constant matrix: :func:`.import_ops.matmul` (InnerProduct)."""
    a, b = node.input[0], node.input[1]
    if b in ctx.consts and ctx.consts[b].ndim == 2:
        _constant_matmul(ctx, node)
        return
    a_shape, b_shape = tuple(ctx.shape(a, node)), tuple(ctx.shape(b, node))
    out = tuple(ctx.shape(node.output[0], node))
    a2 = a_shape if len(a_shape) >= 2 else (1,) + a_shape
    b2 = b_shape if len(b_shape) >= 2 else b_shape + (1,)
    if a2[-1] != b2[-2]:
        raise ctx.error(node, "shapes %s and %s do not multiply" % (a_shape, b_shape))
    m, k, n = a2[-2], a2[-1], b2[-1]
    rank = max(len(a2), len(b2))
    batch_a = (1,) * (rank - len(a2)) + a2[:-2]
    batch_b = (1,) * (rank - len(b2)) + b2[:-2]
    batch = tuple(max(x, y) for x, y in zip(batch_a, batch_b))
    if any(x not in (1, d) or y not in (1, d) for x, y, d in zip(batch_a, batch_b, batch)):
        raise ctx.error(node, "batch axes %s and %s do not broadcast" % (a_shape, b_shape))
    full = batch + (m, n, k)
    top, name = node.output[0], _name(node)
    lp = ctx.layer("Reshape", name + "/rows", [a], [top + "/rows"])
    lp.reshape_param.shape.dim.extend(batch_a + (m, 1, k))
    rows = _broadcast(ctx, node, top + "/rows", batch_a + (m, 1, k), full, top + "/rows_tiled")
    if len(b_shape) >= 2:
        lp = ctx.layer("Permute", name + "/columns_t", [b], [top + "/columns_t"])
        lp.permute_param.order.extend(list(range(len(b2) - 2)) + [len(b2) - 1, len(b2) - 2])
        b = top + "/columns_t"
    lp = ctx.layer("Reshape", name + "/columns", [b], [top + "/columns"])
    lp.reshape_param.shape.dim.extend(batch_b + (1, n, k))
    cols = _broadcast(ctx, node, top + "/columns", batch_b + (1, n, k), full,
                      top + "/columns_tiled")
    lp = ctx.layer("Eltwise", name + "/products", [rows, cols], [top + "/products"])
    lp.eltwise_param.operation = E.PROD
    summed = top if out == batch + (m, n) else top + "/sums"
    lp = ctx.layer("Reduction", name if summed == top else name + "/sums",
                   [top + "/products"], [summed])
    lp.reduction_param.operation = caffe_pb2.ReductionParameter.SUM
    lp.reduction_param.axis = len(full) - 1
    if summed != top:
        lp = ctx.layer("Reshape", name, [summed], [top])
        lp.reshape_param.shape.dim.extend(out)


# -- LayerNormalization -----------------------------------------------------------------------
@importer("LayerNormalization")
def layer_norm(ctx, node):
    """``(x - mean) / sqrt(var + epsilon) * Scale + B``, the statistics over the axes from
    ``axis`` on, as ONNX computes them: Reduction MEAN, Bias by minus it, Power 2,
    Reduction MEAN, Power ``(var + epsilon) ^ -0.5``, Scale by it, then a Scale (with a bias
    where B is given) by the weights broadcast over those axes; the Mean and InvStdDev
    outputs, where the node names them, are the statistics viewed with ONNX's 1s."""
    x, top, name = node.input[0], node.output[0], _name(node)
    shape = tuple(ctx.shape(x, node))
    rank = len(shape)
    a = attrs(node)
    axis = int(a.get("axis", -1))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise ctx.error(node, "axis %s is not an axis of the input's %d" % (a.get("axis"), rank))
    eps = float(np.float32(a.get("epsilon", 1e-5)))
    tail = shape[axis:]

    def weights(slot, what):
        w = ctx.const(node.input[slot], node, what).astype(np.float32)
        try:
            return np.ascontiguousarray(np.broadcast_to(w, tail))
        except ValueError:
            raise ctx.error(node, "its %s of shape %s does not broadcast onto the normalized "
                                  "axes %s" % (what, w.shape, tail)) from None
    gamma = weights(1, "Scale")
    beta = weights(2, "B") if len(node.input) > 2 and node.input[2] else None
    R = caffe_pb2.ReductionParameter

    def mean(bottom, suffix):
        lp = ctx.layer("Reduction", name + suffix, [bottom], [top + suffix])
        lp.reduction_param.operation = R.MEAN
        lp.reduction_param.axis = axis
        return top + suffix

    stats = mean(x, "/mean")
    neg_mean = _power(ctx, name + "/neg_mean", stats, top + "/neg_mean", scale=-1.0)
    lp = ctx.layer("Bias", name + "/centred", [x, neg_mean], [top + "/centred"])
    lp.bias_param.axis = 0
    square = _power(ctx, name + "/square", top + "/centred", top + "/square", power=2.0)
    inv_std = _power(ctx, name + "/inv_std", mean(square, "/var"), top + "/inv_std",
                     power=-0.5, shift=eps)
    lp = ctx.layer("Scale", name + "/normalized", [top + "/centred", inv_std],
                   [top + "/normalized"])
    lp.scale_param.axis = 0
    blobs = [gamma] if beta is None else [gamma, beta]
    lp = ctx.layer("Scale", name, [top + "/normalized"], [top], blobs)
    lp.scale_param.axis, lp.scale_param.num_axes = axis, rank - axis
    lp.scale_param.bias_term = beta is not None
    kept = shape[:axis] + (1,) * (rank - axis)
    for slot, blob in ((1, stats), (2, inv_std)):
        if len(node.output) > slot and node.output[slot]:
            lp = ctx.layer("Reshape", "%s/output%d" % (name, slot), [blob],
                           [node.output[slot]])
            lp.reshape_param.shape.dim.extend(kept)


@importer("ReduceLogSum")
def reduce_log_sum(ctx, node):
    """``log(sum(x))`` over the axes: the ReduceSum of :func:`reduce_`, then Caffe's Log."""
    inner = ctx.onnx.NodeProto()
    inner.CopyFrom(node)
    inner.op_type = "ReduceSum"
    inner.output[0] = node.output[0] + "/sum"
    ctx.shapes[inner.output[0]] = ctx.shape(node.output[0], node)
    reduce_(ctx, inner)
    ctx.layer("Log", _name(node), [inner.output[0]], [node.output[0]])
