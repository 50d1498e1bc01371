"""ONNX comparisons, logical ops, Where, IsNaN and IsInf -> Caffe layers. A boolean is carried
as 0 or 1 in a float blob. Each operand is first broadcast to the output's shape (Reshape and
Tile: copies; a constant as a Parameter layer of that shape, not learnt). Every conversion is
exact for every finite and infinite value, NaN included, unless said otherwise:

- ``a > b`` is ``[a - b > 0]`` (Eltwise SUM with coefficients 1 and -1, Threshold at 0): with
  subnormals, ``a - b`` is 0 only where ``a == b``, keeps its sign where it overflows, and
  is NaN (so 0) where either is NaN or both are the same infinity; ``a < b`` is ``b > a``.
- ``a >= b`` is ``(1 - [b > a]) n(a) n(b)``, ``n(x) = max([x > -inf], [-x > -inf])`` being 1
  but for NaN; ``a <= b`` is ``b >= a``; ``a == b`` is ``(a >= b)(b >= a)``.
- Not is ``1 - x`` (Power), And the product (Eltwise PROD), Or the maximum (Eltwise MAX), Xor
  ``|a - b|`` (Eltwise SUM, AbsVal): exact on 0 and 1.
- ``Where(c, x, y)`` is ``s(x, L) + s(y, M) + N`` with ``s(v, L) = -max(-max(v, L), L)``:
  ``v`` where ``L = -inf``, a zero where ``L = 0`` (a NaN gives ``L``: Eltwise MAX keeps its
  second bottom when the first is not larger); ``L = 1 - (1 - c)^-1`` and ``M = 1 - c^-1``
  (Powers); ``N = log(1 - m) - log(1 - m)`` is NaN where the chosen value ``m`` is NaN
  (``m = max(c [x is NaN], (1 - c) [y is NaN])``), else 0.
- IsNaN is ``1 - n(x)``; IsInf ``[x > FLT_MAX]`` and / or ``[-x > FLT_MAX]`` (Threshold).

Sum, Max, Min and Mean of inputs of different shapes: each broadcast so first, then the
importers of equal shapes. Registered in :data:`.import_ops.IMPORTERS` as the other
importers."""

import numpy as np

from ..proto import caffe_pb2
from .import_math import _broadcast
from .import_ops import IMPORTERS, _name, attrs, importer

E = caffe_pb2.EltwiseParameter
FLT_MAX = float(np.finfo(np.float32).max)


class _Builder:
    """Layers of one node's conversion, their tops named ``<output>/<tag>``."""

    def __init__(self, ctx, node):
        self.ctx, self.node = ctx, node
        self.top, self.name = node.output[0], _name(node)
        self.out = tuple(ctx.shape(node.output[0], node))

    def operand(self, x, tag):
        """``x`` broadcast to the output's shape."""
        ctx = self.ctx
        if x in ctx.consts:
            label, k = "%s/%s" % (self.top, tag), 0
            while label in ctx.consts or label in ctx.values or label in ctx.written:
                k += 1
                label = "%s/%s_%d" % (self.top, tag, k)
            value = np.asarray(ctx.consts[x], dtype=np.float32)
            ctx.consts[label] = np.ascontiguousarray(np.broadcast_to(value, self.out))
            return label
        shape = tuple(ctx.shape(x, self.node))
        if shape == self.out:
            return x
        return _broadcast(ctx, self.node, x, shape, self.out, "%s/%s" % (self.top, tag))

    def layer(self, type_, bottoms, tag, final=False):
        top = self.top if final else "%s/%s" % (self.top, tag)
        name = self.name if final else "%s/%s" % (self.name, tag)
        return self.ctx.layer(type_, name, bottoms, [top]), top

    def power(self, x, tag, power=1.0, scale=1.0, shift=0.0, final=False):
        lp, top = self.layer("Power", [x], tag, final)
        lp.power_param.power, lp.power_param.scale, lp.power_param.shift = power, scale, shift
        return top

    def eltwise(self, op, bottoms, tag, coeff=(), final=False):
        lp, top = self.layer("Eltwise", list(bottoms), tag, final)
        lp.eltwise_param.operation = op
        lp.eltwise_param.coeff.extend(coeff)
        return top

    def threshold(self, x, value, tag, final=False):
        lp, top = self.layer("Threshold", [x], tag, final)
        lp.threshold_param.threshold = value
        return top

    def greater(self, a, b, tag, final=False):
        """``[a > b]``."""
        diff = self.eltwise(E.SUM, [a, b], tag + "_diff", (1.0, -1.0))
        return self.threshold(diff, 0.0, tag, final)

    def not_nan(self, x, tag):
        """1 where ``x`` is not NaN, else 0."""
        up = self.threshold(x, -np.inf, tag + "_up")
        down = self.threshold(self.power(x, tag + "_neg", scale=-1.0), -np.inf, tag + "_down")
        return self.eltwise(E.MAX, [up, down], tag)

    def greater_equal(self, a, b, tag, final=False):
        """``[a >= b]``."""
        below = self.greater(b, a, tag + "_below")
        not_below = self.power(below, tag + "_not_below", scale=-1.0, shift=1.0)
        return self.eltwise(E.PROD, [not_below, self.not_nan(a, tag + "_a"),
                                     self.not_nan(b, tag + "_b")], tag, final=final)

    def select(self, v, bound, tag):
        """``v`` where ``bound`` is -inf, a zero where it is 0; a NaN gives the bound (-inf
        where kept: :meth:`nan_where` puts it back)."""
        low = self.eltwise(E.MAX, [v, bound], tag + "_low")
        neg = self.power(low, tag + "_neg", scale=-1.0)
        return self.power(self.eltwise(E.MAX, [neg, bound], tag + "_high"), tag,
                          scale=-1.0)

    def is_nan(self, x, tag):
        return self.power(self.not_nan(x, tag + "_not"), tag, scale=-1.0, shift=1.0)

    def nan_where(self, mask, tag):
        """NaN where ``mask`` is 1, 0 where it is 0: ``log(1 - m) - log(1 - m)``."""
        lp, log = self.layer("Log", [mask], tag + "_log")
        lp.log_param.scale, lp.log_param.shift = -1.0, 1.0
        return self.eltwise(E.SUM, [log, log], tag, (1.0, -1.0))


@importer("Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal")
def compare(ctx, node):
    b = _Builder(ctx, node)
    x, y = b.operand(node.input[0], "a"), b.operand(node.input[1], "b")
    op = node.op_type
    if op in ("Less", "LessOrEqual"):
        x, y = y, x
    if op in ("Greater", "Less"):
        b.greater(x, y, "greater", final=True)
    elif op == "Equal":
        b.eltwise(E.PROD, [b.greater_equal(x, y, "ge"), b.greater_equal(y, x, "le")], "eq",
                  final=True)
    else:
        b.greater_equal(x, y, "ge", final=True)


@importer("Not")
def not_(ctx, node):
    _Builder(ctx, node).power(node.input[0], "not", scale=-1.0, shift=1.0, final=True)


@importer("And", "Or", "Xor")
def logical(ctx, node):
    b = _Builder(ctx, node)
    x, y = b.operand(node.input[0], "a"), b.operand(node.input[1], "b")
    if node.op_type == "Xor":
        lp, _ = b.layer("AbsVal", [b.eltwise(E.SUM, [x, y], "diff", (1.0, -1.0))], "xor",
                        final=True)
        return
    b.eltwise(E.PROD if node.op_type == "And" else E.MAX, [x, y], "op", final=True)


@importer("Where")
def where(ctx, node):
    b = _Builder(ctx, node)
    c, x, y = (b.operand(n, t) for n, t in zip(node.input, ("cond", "x", "y")))
    if c in ctx.consts:  # the bounds themselves are constants
        mask = ctx.consts[c] != 0
        lx = _const(ctx, b, np.where(mask, -np.inf, 0.0), "bound_x")
        ly = _const(ctx, b, np.where(mask, 0.0, -np.inf), "bound_y")
    else:
        lx = b.power(b.power(c, "inv_not", power=-1.0, scale=-1.0, shift=1.0), "bound_x",
                     scale=-1.0, shift=1.0)
        ly = b.power(b.power(c, "inv", power=-1.0), "bound_y", scale=-1.0, shift=1.0)
    not_c = b.power(c, "not_cond", scale=-1.0, shift=1.0)
    chosen_nan = b.eltwise(E.MAX, [b.eltwise(E.PROD, [c, b.is_nan(x, "x_nan")], "x_chosen_nan"),
                                   b.eltwise(E.PROD, [not_c, b.is_nan(y, "y_nan")],
                                             "y_chosen_nan")], "chosen_nan")
    b.eltwise(E.SUM, [b.select(x, lx, "x"), b.select(y, ly, "y"),
                      b.nan_where(chosen_nan, "nan")], "sum", final=True)


def _const(ctx, b, value, tag):
    label, k = "%s/%s" % (b.top, tag), 0
    while label in ctx.consts or label in ctx.values or label in ctx.written:
        k += 1
        label = "%s/%s_%d" % (b.top, tag, k)
    ctx.consts[label] = value.astype(np.float32)
    return label


@importer("IsNaN")
def is_nan(ctx, node):
    b = _Builder(ctx, node)
    b.power(b.not_nan(node.input[0], "not_nan"), "isnan", scale=-1.0, shift=1.0, final=True)


@importer("IsInf")
def is_inf(ctx, node):
    b = _Builder(ctx, node)
    a = attrs(node)
    x = node.input[0]
    sides = []
    if int(a.get("detect_positive", 1)):
        sides.append(b.threshold(x, FLT_MAX, "positive",
                                 final=not int(a.get("detect_negative", 1))))
    if int(a.get("detect_negative", 1)):
        neg = b.power(x, "neg", scale=-1.0)
        sides.append(b.threshold(neg, FLT_MAX, "negative", final=not sides))
    if len(sides) == 2:
        b.eltwise(E.MAX, sides, "isinf", final=True)
    elif not sides:
        b.power(x, "none", scale=0.0, final=True)  # Caffe's Power of scale 0: constant 0


_VARIADIC = {op: IMPORTERS[op] for op in ("Sum", "Max", "Min", "Mean")}


@importer(*_VARIADIC)
def variadic(ctx, node):
    """Inputs of different shapes broadcast to the output's (copies), then the Eltwise of
    equal shapes (:func:`.import_ops.variadic`, :func:`.import_math.min_mean`)."""
    inputs = [n for n in node.input if n]
    shapes = {tuple(ctx.shape(n, node)) for n in inputs}
    if len(shapes) > 1:
        b = _Builder(ctx, node)
        inputs = [b.operand(n, "in%d" % i) for i, n in enumerate(inputs)]
        for n in inputs:
            ctx.shapes[n] = b.out
        node = ctx.onnx.helper.make_node(node.op_type, inputs, list(node.output),
                                         name=_name(node))
    _VARIADIC[node.op_type](ctx, node)
