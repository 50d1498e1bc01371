"""ONNX pooling of other ranks than 2-D -> Caffe's 2-D Pooling: a 1-D MaxPool / AveragePool
(``N x C x L``) is the 2-D one of ``N x C x L x 1`` with a ``K x 1`` window (a Reshape before
and after; :func:`.import_ops.pool` checks its windows, pads and ``ceil_mode`` and corrects
its divisors), a GlobalMaxPool / GlobalAveragePool of any rank the global pooling of
``N x C x (all spatial values) x 1``. Registered in :data:`.import_ops.IMPORTERS` as the
other importers; 2-D pooling stays with :func:`.import_ops.pool`."""

import numpy as np

from .import_ops import IMPORTERS, _name, attrs, importer

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
    outputs = [top + "/pool2d"] + list(node.output[1:])
    return helper.make_node(node.op_type, [x + "/view2d"] + list(node.input[1:]), outputs,
                            name=_name(node), **two)


@importer("MaxPool", "AveragePool")
def pool(ctx, node):
    """1-D pooling as 2-D pooling of the input viewed as ``N x C x L x 1``, the output
    reshaped back; other ranks go to :func:`.import_ops.pool` (2-D; 3-D is refused there)."""
    shape = ctx.shape(node.input[0], node)
    if len(shape) != 3 or node.input[0] in ctx.padded or "kernel_shape" not in attrs(node):
        _pool_2d(ctx, node)
        return
    x, top, name = node.input[0], node.output[0], _name(node)
    two = _as_2d(ctx, node)
    ctx.shapes[two.input[0]] = tuple(shape) + (1,)
    _reshape(ctx, name + "/view2d", x, two.input[0], tuple(shape) + (1,))
    _pool_2d(ctx, two)
    _reshape(ctx, name + "/view1d", two.output[0], top, ctx.shape(top, node))


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
