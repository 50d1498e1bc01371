"""ONNX pooling that Caffe's 2-D Pooling does not take as it is -> Caffe layers: a 1-D
MaxPool / AveragePool (``N x C x L``) is the 2-D one of ``N x C x L x 1`` with a ``K x 1``
window (a Reshape before and after; :func:`.import_ops.pool` checks its windows, pads and
``ceil_mode`` and corrects its divisors), a pool whose begin and end pads differ (SAME_UPPER /
SAME_LOWER of an even kernel, a pad at one end) the pool of pads equal on both sides, its extra
windows sliced off (a MaxPool, an AveragePool that counts no padding), a GlobalMaxPool /
GlobalAveragePool of any rank the global pooling of ``N x C x (all spatial values) x 1``.
Registered in :data:`.import_ops.IMPORTERS` as the other importers."""

import numpy as np

from .import_layout import _crop
from .import_ops import IMPORTERS, _name, _onnx_pooled, _pads, _read, attrs, importer

_pool_2d = IMPORTERS["MaxPool"]
_global_pool_2d = IMPORTERS["GlobalMaxPool"]


def _reshape(ctx, name, x, top, shape):
    lp = ctx.layer("Reshape", name, [x], [top])
    lp.reshape_param.shape.dim.extend([int(d) for d in shape])
    return top


def _as_2d(ctx, node):
    """The 1-D pool's node as a 2-D one: its input the ``N x C x L x 1`` view, its output
    a blob of its own, every geometry attribute given a second axis of window 1, stride 1,
    no pads and no dilation."""
    helper = ctx.onnx.helper
    a = attrs(node)
    x, top = node.input[0], node.output[0]
    two = dict(a)
    two["kernel_shape"] = [int(a["kernel_shape"][0]), 1]
    for key in ("strides", "dilations"):
        if key in a:
            two[key] = [int(a[key][0]), 1]
    if "pads" in a:
        two["pads"] = [int(a["pads"][0]), 0, int(a["pads"][1]), 0]
    outputs = [top + "/pool2d"] + [n + "/pool2d" if n else n for n in node.output[1:]]
    return helper.make_node(node.op_type, [x + "/view2d"] + list(node.input[1:]), outputs,
                            name=_name(node), **two)


def _pool_uneven(ctx, node):
    """A 2-D pool whose begin and end pads differ, floor mode, as the pool of pads ``p`` on
    both sides, ``p`` the larger pad (the smaller where a window offset of it would not be a
    whole number of strides: then the begin pad plus the end's excess rounded up to
    strides), and its windows that ONNX's pads give sliced out: the same windows, whose
    maximum, or average of the values inside the input (``count_include_pad`` 0), is the
    same. Other pools: :func:`.import_ops.pool`."""
    a = attrs(node)
    shape = ctx.shape(node.input[0], node)
    if len(shape) != 4 or node.input[0] in ctx.padded or "kernel_shape" not in a or \
            _read(ctx, node, 1) or \
            int(a.get("ceil_mode", 0)) or any(int(d) != 1 for d in a.get("dilations", [])) or \
            node.op_type == "AveragePool" and int(a.get("count_include_pad", 0)):
        _pool_2d(ctx, node)
        return
    kernel = [int(k) for k in a["kernel_shape"]]
    strides = [int(q) for q in a.get("strides", [1, 1])]
    pads = _pads(ctx, node, a, kernel, strides, [1, 1])
    begin, end = pads[:2], pads[2:]
    even = [b if b >= e else b + -(-(e - b) // q) * q for b, e, q in zip(begin, end, strides)]
    if begin == end or any(p >= k for p, k in zip(even, kernel)):
        _pool_2d(ctx, node)
        return
    sizes = shape[2:]
    sym_out = [_onnx_pooled(n, k, q, p, p, 0) for n, k, q, p in zip(sizes, kernel, strides, even)]
    onnx_out = [_onnx_pooled(n, k, q, b, e, 0)
                for n, k, q, b, e in zip(sizes, kernel, strides, begin, end)]
    cuts = []
    for axis in range(2):
        start = (even[axis] - begin[axis]) // strides[axis]
        if (start, start + onnx_out[axis]) != (0, sym_out[axis]):
            cuts.append((axis + 2, (start, start + onnx_out[axis])))
    two = dict(a)
    two.pop("auto_pad", None)
    two["pads"] = even + even
    top = node.output[0]
    sym = ctx.onnx.helper.make_node(node.op_type, list(node.input),
                                    [top + "/even_pads" if cuts else top] +
                                    list(node.output[1:]), name=_name(node), **two)
    _pool_2d(ctx, sym)
    if cuts:
        _crop(ctx, node, sym.output[0], list(shape[:2]) + sym_out, cuts, top)


@importer("MaxPool", "AveragePool")
def pool(ctx, node):
    """1-D pooling as 2-D pooling of the input viewed as ``N x C x L x 1``, the output
    reshaped back; other ranks go to :func:`.import_ops.pool` (2-D; 3-D is refused there)."""
    shape = ctx.shape(node.input[0], node)
    if len(shape) != 3 or node.input[0] in ctx.padded or "kernel_shape" not in attrs(node):
        _pool_uneven(ctx, node)
        return
    x, top, name = node.input[0], node.output[0], _name(node)
    two = _as_2d(ctx, node)
    ctx.shapes[two.input[0]] = tuple(shape) + (1,)
    indices = _read(ctx, node, 1)
    if indices:  # the 2-D pool's Indices, read by the Reshape back to ONNX's
        ctx.consumers[two.output[1]] = 1
    _reshape(ctx, name + "/view2d", x, two.input[0], tuple(shape) + (1,))
    _pool_uneven(ctx, two)
    _reshape(ctx, name + "/view1d", two.output[0], top, ctx.shape(top, node))
    if indices:  # ((n C + c) L + l) 1 + 0: the 1-D index
        _reshape(ctx, name + "/indices1d", two.output[1], node.output[1],
                 ctx.shape(node.output[1], node))


@importer("GlobalMaxPool", "GlobalAveragePool")
def global_pool(ctx, node):
    """Over every spatial axis: for another input than ``N x C x H x W`` the global pooling
    of its view as ``N x C x (the spatial values) x 1``, reshaped to ``N x C x 1 ...``."""
    shape = ctx.shape(node.input[0], node)
    if len(shape) == 4:
        _global_pool_2d(ctx, node)
        return
    if len(shape) < 3:
        raise ctx.error(node, "a global pool needs an input of N x C and spatial axes, got "
                              "shape %s" % (tuple(shape),))
    x, top, name = node.input[0], node.output[0], _name(node)
    view = [shape[0], shape[1], int(np.prod(shape[2:])), 1]
    lp = ctx.layer("Pooling", name, [_reshape(ctx, name + "/view2d", x, top + "/view2d",
                                              view)], [top + "/pooled"])
    lp.pooling_param.pool = (lp.pooling_param.MAX if node.op_type == "GlobalMaxPool"
                             else lp.pooling_param.AVE)
    lp.pooling_param.global_pooling = True
    _reshape(ctx, name + "/shape", top + "/pooled", top, [shape[0], shape[1]] + [1] *
             (len(shape) - 2))
