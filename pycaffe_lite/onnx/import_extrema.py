"""ONNX ops that pick extremes and signs -> Caffe layers: ReduceMax / ReduceMin over any axes
(the axes moved to the end by a Permute, the input viewed as ``(outer, K)``, Caffe's ArgMax
with ``out_max_val`` along the second axis; Min by negation), ArgMax / ArgMin (Caffe's ArgMax
along the axis; ONNX's first index of equal values by the reversed axis, since Caffe's ranks
the higher index first), Hardmax (that first index, one-hot by an Embed of fixed identity
weights) and Sign (Threshold layers: ``[x > 0] - [-x > 0]``). Registered in
:data:`.import_ops.IMPORTERS` as the other importers."""

import numpy as np

from .import_gates import _reduced_axes
from .import_math import _power
from .import_ops import IMPORTERS, _name, attrs, importer

_reduce_max_pooled = IMPORTERS["ReduceMax"]


def _argmax(ctx, name, x, top, axis, values=False):
    lp = ctx.layer("ArgMax", name, [x], [top])
    lp.argmax_param.axis = axis
    if values:
        lp.argmax_param.out_max_val = True
    return top


def _reshape(ctx, name, x, top, shape):
    lp = ctx.layer("Reshape", name, [x], [top])
    lp.reshape_param.shape.dim.extend([int(d) for d in shape])
    return top


def _permute(ctx, name, x, top, order):
    lp = ctx.layer("Permute", name, [x], [top])
    lp.permute_param.order.extend(order)
    return top


@importer("ReduceMax", "ReduceMin")
def reduce_extreme(ctx, node):
    """The reduced axes moved to the end (a Permute, where they are not there), the input
    viewed as ``(outer, K)``, Caffe's ArgMax with ``out_max_val`` along axis 1 (the maximum
    itself, -inf included), a Reshape to ONNX's output shape; ReduceMin as ``-max(-x)``
    (Power by -1 before and after). A ReduceMax over the spatial axes of a 4-D input stays
    global pooling (:func:`.import_gates.reduce_`); no axes with ``noop_with_empty_axes``:
    the input."""
    shape = ctx.shape(node.input[0], node)
    rank = len(shape)
    axes = _reduced_axes(ctx, node, rank)
    x, top, name = node.input[0], node.output[0], _name(node)
    is_min = node.op_type == "ReduceMin"
    if not axes:
        ctx.alias[top] = ctx.blob(x)
        return
    if not is_min and rank == 4 and axes == [2, 3]:
        _reduce_max_pooled(ctx, node)
        return
    kept = [i for i in range(rank) if i not in axes]
    blob = x
    if is_min:
        blob = _power(ctx, name + "/neg", blob, top + "/neg", scale=-1.0)
    if kept + axes != list(range(rank)):
        blob = _permute(ctx, name + "/permute", blob, top + "/permute", kept + axes)
    outer = int(np.prod([shape[i] for i in kept]))
    k = int(np.prod([shape[i] for i in axes]))
    blob = _reshape(ctx, name + "/view", blob, top + "/view", [outer, k])
    blob = _argmax(ctx, name + ("/max" if is_min else ""), blob, top + "/max", 1, True)
    if is_min:
        blob = _power(ctx, name, blob, top + "/min", scale=-1.0)
    _reshape(ctx, name + "/shape", blob, top, ctx.shape(top, node))

def _first_index(ctx, node, x, shape, axis, top):
    """The index along ``axis`` of the first maximum of ``x`` (ONNX's rule for equal values):
    Caffe's ArgMax ranks the higher index first, so it runs on the axis reversed, and
    ``n - 1 - i`` turns its index back (a Power)."""
    name, n = _name(node), shape[axis]
    lp = ctx.layer("Reverse", name + "/reverse", [x], [top + "/reverse"])
    lp.reverse_param.axis = axis
    _argmax(ctx, name + "/argmax", top + "/reverse", top + "/reversed_index", axis)
    return _power(ctx, name + "/index", top + "/reversed_index", top, scale=-1.0,
                  shift=float(n - 1))


@importer("ArgMax", "ArgMin")
def arg_extreme(ctx, node):
    """Caffe's ArgMax along ``axis`` (ArgMin: of ``-x``, a Power by -1). Equal values: ONNX
    takes the first index, or the last with ``select_last_index``; Caffe's ArgMax ranks the
    higher index first, so the first is found on the reversed axis. ``keepdims`` 0: a
    Reshape dropping the axis. The indices are floats in the Caffe blob."""
    shape = ctx.shape(node.input[0], node)
    rank = len(shape)
    a = attrs(node)
    axis = int(a.get("axis", 0))
    axis = axis + rank if axis < 0 else axis
    keep = int(a.get("keepdims", 1))
    last = int(a.get("select_last_index", 0))
    x, top, name = node.input[0], node.output[0], _name(node)
    if node.op_type == "ArgMin":
        x = _power(ctx, name + "/neg", x, top + "/neg", scale=-1.0)
    out = top if keep else top + "/kept"
    if last:
        _argmax(ctx, name, x, out, axis)
    else:
        _first_index(ctx, node, x, shape, axis, out)
    if not keep:
        _reshape(ctx, name + "/squeeze", out, top, ctx.shape(top, node))

@importer("Hardmax")
def hardmax(ctx, node):
    """1 at the first maximum along ``axis`` (from opset 13; before it, of the input
    flattened to 2-D at ``axis``), 0 elsewhere: the axis moved to the end (Permute), the
    first index of its maximum (:func:`_first_index`), one-hot by an Embed of the fixed
    identity matrix (not learnt), the axis moved back."""
    shape = ctx.shape(node.input[0], node)
    rank = len(shape)
    axis = int(attrs(node).get("axis", 1 if ctx.opset < 13 else -1))
    axis = axis + rank if axis < 0 else axis
    x, top, name = node.input[0], node.output[0], _name(node)
    if ctx.opset < 13:  # the trailing axes from ``axis`` on are one
        order = list(range(rank))
        view = list(shape[:axis]) + [int(np.prod(shape[axis:]))]
    else:
        order = [i for i in range(rank) if i != axis] + [axis]
        view = [shape[i] for i in order]
    blob = x
    if order != list(range(rank)):
        blob = _permute(ctx, name + "/permute", blob, top + "/permute", order)
    if len(view) != rank:
        blob = _reshape(ctx, name + "/view", blob, top + "/view", view)
    n = view[-1]
    index = _first_index(ctx, node, blob, view, len(view) - 1, top + "/index")
    lp = ctx.layer("Embed", name + "/one_hot", [index], [top + "/one_hot"],
                   [np.eye(n, dtype=np.float32)])
    lp.embed_param.num_output, lp.embed_param.input_dim = n, n
    lp.embed_param.bias_term = False
    lp.param.add(lr_mult=0, decay_mult=0)
    # the Embed's top is the index's shape (the axis of size 1) and the one-hot axis
    if order == list(range(rank)):
        _reshape(ctx, name, top + "/one_hot", top, shape)
        return
    _reshape(ctx, name + "/drop", top + "/one_hot", top + "/hot", view)
    _permute(ctx, name, top + "/hot", top, [order.index(i) for i in range(rank)])


@importer("Sign")
def sign(ctx, node):
    """``[x > 0] - [-x > 0]``: a Threshold of ``x`` and one of ``-x`` (a Power by -1), both
    at 0, and an Eltwise SUM with coefficients 1 and -1 (0 at 0)."""
    x, top, name = node.input[0], node.output[0], _name(node)
    ctx.layer("Threshold", name + "/positive", [x], [top + "/positive"])
    _power(ctx, name + "/neg", x, top + "/neg", scale=-1.0)
    ctx.layer("Threshold", name + "/negative", [top + "/neg"], [top + "/negative"])
    lp = ctx.layer("Eltwise", name, [top + "/positive", top + "/negative"], [top])
    lp.eltwise_param.operation = lp.eltwise_param.SUM
    lp.eltwise_param.coeff.extend([1.0, -1.0])


@importer("ThresholdedRelu")
def thresholded_relu(ctx, node):
    """``x`` where ``x > alpha``, else 0, for ``alpha >= 0``: ``relu(x) * [x > alpha]`` (ReLU,
    a Threshold at alpha, an Eltwise PROD), exact, infinities included (``relu`` makes -inf
    0 before the product); a NaN stays NaN where ONNX's comparison gives 0. A negative alpha,
    which lets negative values through, is an error naming the node."""
    alpha = float(np.float32(attrs(node).get("alpha", 1.0)))
    if alpha < 0:
        raise ctx.error(node, "alpha %g < 0: the values in (alpha, 0] pass, which ReLU times a "
                              "Threshold does not give" % alpha)
    x, top, name = node.input[0], node.output[0], _name(node)
    ctx.layer("ReLU", name + "/relu", [x], [top + "/relu"])
    lp = ctx.layer("Threshold", name + "/above", [x], [top + "/above"])
    lp.threshold_param.threshold = alpha
    lp = ctx.layer("Eltwise", name, [top + "/relu", top + "/above"], [top])
    lp.eltwise_param.operation = lp.eltwise_param.PROD
