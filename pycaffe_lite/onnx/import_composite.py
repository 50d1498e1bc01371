"""ONNX ops that are a few of the other importers' ops in a row -> Caffe layers, each built
by handing those ops, as nodes of their own, to the importers that convert them: Celu
(``alpha ELU(x / alpha)``: Power, ELU, Power), LpNormalization (``x * (sum |x|^p)^(-1/p)``
over the axis: ReduceL1 or ReduceSumSquare, a Power, and the broadcast Mul), ReduceLogSumExp
(shifted by the maximum, as runtimes compute it: ReduceMax, Clip to the finite range, Sub,
Exp, ReduceSum, Log, Add), RMSNormalization (``x (mean(x^2) + epsilon)^-0.5 * scale`` over
the axes from ``axis`` on: Power, Reduction MEAN, Power, Scale, Scale), GroupNormalization
(Reshape, InstanceNormalization, Reshape, Mul, Add), Swish, Shrink (comparisons and Wheres),
Trilu (the select of :mod:`.import_logic` by fixed bounds: exact for every value, NaN
included) and Cast / CastLike to a type whose values the float blob already holds (an
identity; a Cast that rounds, truncates or wraps is an error naming the node). Registered in
:data:`.import_ops.IMPORTERS` as the other importers."""

import numpy as np

from ..proto import caffe_pb2
from .import_gates import _reduced_axes
from .import_logic import _Builder
from .import_ops import IMPORTERS, _name, attrs, importer

E = caffe_pb2.EltwiseParameter


def _sub(ctx, outer, op, inputs, output, shape, **attributes):
    """Converts ``op`` of ``inputs`` (ONNX value names, or arrays: constants) into the value
    ``output`` of static ``shape`` through its importer, as part of the node ``outer``."""
    from onnx import helper
    names = []
    for i, x in enumerate(inputs):
        if isinstance(x, np.ndarray):
            label, k = "%s/%s_c%d" % (output, op.lower(), i), 0
            while label in ctx.consts or label in ctx.values or label in ctx.written:
                k += 1
                label = "%s/%s_c%d_%d" % (output, op.lower(), i, k)
            ctx.consts[label] = x
            x = label
        names.append(x)
    tag = output[len(outer.output[0]):] if output.startswith(outer.output[0] + "/") else ""
    node = helper.make_node(op, names, [output], name=_name(outer) + tag, **attributes)
    ctx.shapes[output] = tuple(int(d) for d in shape)
    IMPORTERS[op](ctx, node)
    return output


def _kept_shape(shape, axes):
    return tuple(1 if i in axes else d for i, d in enumerate(shape))


# -- Celu --------------------------------------------------------------------------------------
@importer("Celu")
def celu(ctx, node):
    """``max(0, x) + min(0, alpha (exp(x / alpha) - 1))`` = ``alpha ELU(x / alpha)`` (ELU
    of alpha 1): Power by ``1 / alpha``, ELU, Power by ``alpha`` (alpha 1: ELU alone)."""
    alpha = float(np.float32(attrs(node).get("alpha", 1.0)))
    if not alpha > 0:
        raise ctx.error(node, "alpha %s: Celu's alpha must be positive" % alpha)
    x, top, name = node.input[0], node.output[0], _name(node)
    if alpha == 1.0:
        ctx.layer("ELU", name, [x], [top])
        return
    lp = ctx.layer("Power", name + "/in", [x], [top + "/in"])
    lp.power_param.scale = 1.0 / alpha
    ctx.layer("ELU", name + "/elu", [top + "/in"], [top + "/elu"])
    lp = ctx.layer("Power", name, [top + "/elu"], [top])
    lp.power_param.scale = alpha


# -- LpNormalization -------------------------------------------------------------------------
@importer("LpNormalization")
def lp_normalization(ctx, node):
    """``x / ||x||_p`` along ``axis`` (p 1 or 2): the norm's inverse, ``sum(|x|)^-1`` or
    ``sum(x^2)^-0.5`` (Reduction ASUM or SUMSQ kept as an axis of 1, a Power), times ``x``
    broadcast along the axis; where the norm is 0 the output is ``x`` itself, 0 as
    onnxruntime gives (for p 2, values whose squares all underflow, below about 1e-19 in
    magnitude, stay as they are where onnxruntime gives 0)."""
    a = attrs(node)
    p = int(a.get("p", 2))
    x, top = node.input[0], node.output[0]
    shape = ctx.shape(x, node)
    rank = len(shape)
    axis = int(a.get("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.error(node, "axis %d is not an axis of the input's %d" % (axis, rank))
    axis %= rank
    if p not in (1, 2):
        raise ctx.error(node, "p %d: ONNX defines LpNormalization for p 1 and 2 only" % p)
    kept = _kept_shape(shape, [axis])
    norm = _sub(ctx, node, "ReduceL1" if p == 1 else "ReduceSumSquare", [x], top + "/norm",
                kept, axes=[axis], keepdims=1)
    b = _Builder(ctx, node)
    # a zero norm made 1 (onnxruntime gives 0 there, not x / 0: x itself is then 0): the
    # norm plus [norm <= 0], which is 0 elsewhere, so the sum is the norm itself (NaN too)
    zero = b.power(b.threshold(norm, 0.0, "positive"), "zero", scale=-1.0, shift=1.0)
    safe = b.eltwise(E.SUM, [norm, zero], "safe_norm")
    inverse = b.power(safe, "inverse", power=-1.0 if p == 1 else -0.5)
    ctx.shapes[inverse] = kept
    _sub(ctx, node, "Mul", [x, inverse], top, shape)


# -- ReduceLogSumExp -------------------------------------------------------------------------
@importer("ReduceLogSumExp")
def reduce_log_sum_exp(ctx, node):
    """``m + log(sum(exp(x - m)))``, ``m`` the maximum over the axes clipped to the finite
    range (so that a row of ``-inf`` gives ``-inf`` and one holding ``+inf`` gives ``+inf``,
    not NaN): ReduceMax kept as axes of 1, Clip, Sub broadcast, Exp, ReduceSum, Log, then the
    Add of ``m`` (viewed as the output). No axes with ``noop_with_empty_axes``: the input."""
    x, top = node.input[0], node.output[0]
    shape = ctx.shape(x, node)
    axes = _reduced_axes(ctx, node, len(shape))
    if not axes:
        ctx.alias[top] = ctx.blob(x)
        return
    out = ctx.shape(top, node)
    keep = int(attrs(node).get("keepdims", 1))
    kept = _kept_shape(shape, axes)
    peak = _sub(ctx, node, "ReduceMax", [x], top + "/max", kept, axes=axes, keepdims=1)
    big = float(np.finfo(np.float32).max)
    lp = ctx.layer("Clip", _name(node) + "/finite", [peak], [top + "/finite"])
    lp.clip_param.min, lp.clip_param.max = -big, big
    ctx.shapes[top + "/finite"] = kept
    shifted = _sub(ctx, node, "Sub", [x, top + "/finite"], top + "/shifted", shape)
    exp = _sub(ctx, node, "Exp", [shifted], top + "/exp", shape)
    total = _sub(ctx, node, "ReduceSum", [exp, np.array(axes, np.int64)], top + "/sum", out,
                 keepdims=keep)
    log = _sub(ctx, node, "Log", [total], top + "/log", out)
    offset = top + "/finite"
    if not keep:
        offset = _sub(ctx, node, "Reshape", [offset, np.array(out, np.int64)], top + "/offset",
                      out)
    _sub(ctx, node, "Add", [log, offset], top, out)


# -- RMSNormalization ------------------------------------------------------------------------
@importer("RMSNormalization")
def rms_normalization(ctx, node):
    """Opset 23's ``x / sqrt(mean(x^2) + epsilon) * scale``, the mean over the axes from
    ``axis`` on: Power 2, Reduction MEAN, Power ``(ms + epsilon)^-0.5``, Scale with two
    bottoms, then a Scale by the weights broadcast over those axes."""
    x, top, name = node.input[0], node.output[0], _name(node)
    shape = tuple(ctx.shape(x, node))
    rank = len(shape)
    a = attrs(node)
    axis = int(a.get("axis", -1))
    if not -rank <= axis < rank:
        raise ctx.error(node, "axis %d is not an axis of the input's %d" % (axis, rank))
    axis %= rank
    eps = float(np.float32(a.get("epsilon", 1e-5)))
    w = ctx.const(node.input[1], node, "scale").astype(np.float32)
    try:
        w = np.ascontiguousarray(np.broadcast_to(w, shape[axis:]))
    except ValueError:
        raise ctx.error(node, "its scale of shape %s does not broadcast onto the normalized "
                              "axes %s" % (w.shape, shape[axis:])) from None
    lp = ctx.layer("Power", name + "/square", [x], [top + "/square"])
    lp.power_param.power = 2.0
    lp = ctx.layer("Reduction", name + "/mean", [top + "/square"], [top + "/mean"])
    lp.reduction_param.operation = caffe_pb2.ReductionParameter.MEAN
    lp.reduction_param.axis = axis
    lp = ctx.layer("Power", name + "/inv_rms", [top + "/mean"], [top + "/inv_rms"])
    lp.power_param.power, lp.power_param.shift = -0.5, eps
    lp = ctx.layer("Scale", name + "/normalized", [x, top + "/inv_rms"],
                   [top + "/normalized"])
    lp.scale_param.axis = 0
    lp = ctx.layer("Scale", name, [top + "/normalized"], [top], [w])
    lp.scale_param.axis, lp.scale_param.num_axes = axis, rank - axis


def _bound(ctx, node, value, shape, top):
    """The constant ``value`` broadcast to ``shape``: a Parameter layer holding it, tiled
    (the net keeps the converted input's shape, which the import fixes already)."""
    value = value.astype(np.float32)
    if value.shape == tuple(shape):
        label, k = top, 0
        while label in ctx.consts or label in ctx.values or label in ctx.written:
            k += 1
            label = "%s_%d" % (top, k)
        ctx.consts[label] = value
        return label
    return _sub(ctx, node, "Expand", [value, np.array(shape, np.int64)], top, shape)


# -- Trilu -----------------------------------------------------------------------------------
@importer("Trilu")
def trilu(ctx, node):
    """The upper (``upper`` 1) or lower triangle of the last two axes, from diagonal ``k``
    on, the rest 0: :meth:`.import_logic._Builder.select` of ``x`` by a fixed bound (a
    Parameter layer, not learnt, tiled to the input): -inf where the triangle is kept (``x``
    as it is), 0 where it is zeroed (0 for any ``x``, infinities and NaN included), and NaN
    put back where a kept value is NaN."""
    x, top = node.input[0], node.output[0]
    shape = tuple(ctx.shape(x, node))
    if len(shape) < 2:
        raise ctx.error(node, "its input of shape %s has fewer than 2 axes" % (shape,))
    k = 0
    if len(node.input) > 1 and node.input[1]:
        k = int(ctx.const(node.input[1], node, "k").reshape(-1)[0])
    rows, cols = shape[-2:]
    i, j = np.arange(rows)[:, None], np.arange(cols)[None, :]
    keep = (j - i >= k) if int(attrs(node).get("upper", 1)) else (j - i <= k)
    view = (1,) * (len(shape) - 2) + (rows, cols)
    low = _bound(ctx, node, np.where(keep, -np.inf, 0.0).reshape(view), shape, top + "/low")
    b = _Builder(ctx, node)
    kept = b.select(x, low, "kept")
    nan_kept = b.eltwise(E.PROD, [b.is_nan(x, "nan"), _bound(ctx, node, keep.reshape(view),
                                                            shape, top + "/keep")], "nan_kept")
    b.eltwise(E.SUM, [kept, b.nan_where(nan_kept, "nan_back")], "sum", final=True)


# -- Cast, CastLike ----------------------------------------------------------------------------
_FLOATS = {1: "float", 11: "double"}
_HALVES = {10: "float16", 16: "bfloat16"}
# the integer types' ranges, as (low, high); BOOL as 0..1
_RANGES = {2: (0, 2 ** 8 - 1), 3: (-2 ** 7, 2 ** 7 - 1), 4: (0, 2 ** 16 - 1),
           5: (-2 ** 15, 2 ** 15 - 1), 6: (-2 ** 31, 2 ** 31 - 1), 7: (-2 ** 63, 2 ** 63 - 1),
           12: (0, 2 ** 32 - 1), 13: (0, 2 ** 64 - 1), 9: (0, 1)}


def _type_name(elem):
    from onnx import helper
    return "bool" if elem == 9 else helper.tensor_dtype_to_np_dtype(elem).name


@importer("Cast", "CastLike")
def cast(ctx, node):
    """A Cast (or CastLike) whose every input value the target type holds as it is: to float
    or double from any type the blobs carry (a float blob is float32 already; integers and
    booleans are carried as their values), to an integer type (or bool) from one whose range
    it holds. Then it is the identity. A Cast to float16 or bfloat16 rounds, one from a float
    to an integer truncates, one to a narrower integer wraps: errors naming the node."""
    x, top = node.input[0], node.output[0]
    if node.op_type == "Cast":
        target = int(attrs(node)["to"])
    else:
        target = ctx.types.get(node.input[1])
        if target is None and node.input[1] in ctx.consts:
            from onnx import helper
            target = helper.np_dtype_to_tensor_dtype(ctx.consts[node.input[1]].dtype)
    if x in ctx.consts:  # a constant cast to a computed value's type: a constant still
        from onnx import helper
        ctx.consts[top] = np.asarray(ctx.consts[x]).astype(helper.tensor_dtype_to_np_dtype(
            target) if target is not None else ctx.consts[x].dtype)
        return
    source = ctx.types.get(x)
    if target in _FLOATS:  # every value a float blob holds, float32 holds: the identity
        ctx.alias[top] = ctx.blob(x)
        ctx.types[top] = target
        return
    if target is None or source is None:
        raise ctx.error(node, "the type of '%s' is not known (shape inference gave none), so "
                              "whether the cast keeps every value cannot be told"
                        % (x if source is None else node.input[1]))
    same = source == target or target in _FLOATS or \
        target in _HALVES and (source in _HALVES and source == target or
                               source in _RANGES and _RANGES[source][1] - _RANGES[source][0]
                               <= 2 ** 11) or \
        target in _RANGES and source in _RANGES and \
        _RANGES[target][0] <= _RANGES[source][0] and _RANGES[source][1] <= _RANGES[target][1]
    if not same:
        integer = target not in _HALVES and (
            target in _RANGES or _type_name(target).lstrip("u").startswith("int"))
        what = ("rounds the values, which Caffe's float32 blobs do not"
                if not integer else
                "makes booleans of the values, which no Caffe layer does exactly"
                if target == 9 else
                "wraps the values outside %s's range" % _type_name(target)
                if source in _RANGES else
                "truncates towards zero, which no Caffe layer does")
        raise ctx.error(node, "a cast from %s to %s %s" % (_type_name(source),
                                                          _type_name(target), what))
    ctx.alias[top] = ctx.blob(x)
    ctx.types[top] = target


# -- Swish, Shrink, GroupNormalization -------------------------------------------------------
@importer("Swish")
def swish(ctx, node):
    """Opset 24's ``x sigmoid(alpha x)``: Caffe's Swish of ``beta`` alpha."""
    lp = ctx.layer("Swish", _name(node), [node.input[0]], [node.output[0]])
    alpha = float(np.float32(attrs(node).get("alpha", 1.0)))
    if alpha != 1.0:
        lp.swish_param.beta = alpha


@importer("Shrink")
def shrink(ctx, node):
    """``x - bias`` where ``x > lambd``, ``x + bias`` where ``x < -lambd``, else 0: the
    comparisons and two Wheres of :mod:`.import_logic` (exact; NaN gives 0, as ONNX)."""
    a = attrs(node)
    lambd = np.float32(a.get("lambd", 0.5))
    bias = np.float32(a.get("bias", 0.0))
    x, top = node.input[0], node.output[0]
    shape = ctx.shape(x, node)
    above = _sub(ctx, node, "Greater", [x, np.array(lambd)], top + "/above", shape)
    below = _sub(ctx, node, "Less", [x, np.array(-lambd)], top + "/below", shape)
    down = _sub(ctx, node, "Sub", [x, np.array(bias)], top + "/down", shape)
    up = _sub(ctx, node, "Add", [x, np.array(bias)], top + "/up", shape)
    low = _sub(ctx, node, "Where", [below, up, np.zeros((), np.float32)], top + "/low",
               shape)
    _sub(ctx, node, "Where", [above, down, low], top, shape)


@importer("GroupNormalization")
def group_norm(ctx, node):
    """The input viewed as ``N x G x (the rest)``, its InstanceNormalization (weights 1, bias
    0: the statistics per sample and group, epsilon added to the variance), viewed back, then
    the Mul and Add of the per-channel scale and bias (opset 18's per-group ones repeated
    over the group's channels)."""
    a = attrs(node)
    x, top = node.input[0], node.output[0]
    shape = tuple(ctx.shape(x, node))
    groups = int(a["num_groups"])
    if len(shape) < 3 or groups < 1 or shape[1] % groups:
        raise ctx.error(node, "num_groups %d does not divide the %s channels of shape %s"
                        % (groups, shape[1] if len(shape) > 1 else "missing", shape))
    channels = shape[1]
    weights = []
    for slot, what in ((1, "scale"), (2, "bias")):
        w = ctx.const(node.input[slot], node, what).astype(np.float32).reshape(-1)
        if w.size == groups and groups != channels:
            w = np.repeat(w, channels // groups)
        if w.size != channels:
            raise ctx.error(node, "its %s has %d values for %d channels" % (what, w.size,
                                                                          channels))
        weights.append(w.reshape((channels,) + (1,) * (len(shape) - 2)))
    view = (shape[0], groups, int(np.prod(shape[1:])) // groups)
    grouped = _sub(ctx, node, "Reshape", [x, np.array(view, np.int64)], top + "/grouped", view)
    normed = _sub(ctx, node, "InstanceNormalization",
                  [grouped, np.ones(groups, np.float32), np.zeros(groups, np.float32)],
                  top + "/normalized", view, epsilon=float(a.get("epsilon", 1e-5)))
    back = _sub(ctx, node, "Reshape", [normed, np.array(shape, np.int64)], top + "/back",
                shape)
    scaled = _sub(ctx, node, "Mul", [back, weights[0]], top + "/scaled", shape)
    _sub(ctx, node, "Add", [scaled, weights[1]], top, shape)


# -- Erf ---------------------------------------------------------------------------------------
@importer("Erf")
def erf(ctx, node):
    """An Erf outside the exact GELU subgraph (which :mod:`.import_fuse` makes one Gelu):
    Caffe has no erf, and no layer computes it exactly enough on its own."""
    raise ctx.error(node, "Caffe has no erf layer: Erf converts only inside the exact GELU "
                          "0.5 x (1 + erf(x / sqrt(2))), as pycaffe-lite's GELU layer, its "
                          "values read by that subgraph alone")
