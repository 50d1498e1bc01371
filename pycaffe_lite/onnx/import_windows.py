"""ONNX pooling that Caffe's Pooling layer cannot hold -> Caffe layers: a MaxPool or
AveragePool with ``dilations``, of any rank, a 3-D (or higher) pool, and LpPool (the windows'
sum of ``|x|^p``, then a Power ``1/p``). Caffe's Pooling
is 2-D and has no dilation, so such a pool is built from its windows' offsets: the input
padded (``-inf`` for a maximum, 0 for an average: a Parameter layer holding the pad, not
learnt, joined by Concat), then along each spatial axis in turn the ``k`` strided selections
``x[a d :: s]`` of the window's offsets ``a`` (:func:`.axis_pieces.strided`: values copied,
never computed) reduced by one Eltwise MAX or SUM. A window's maximum or sum over a box is
the maximum or sum over one axis after another, so this is ONNX's pool; an average is the
sum then a fixed Scale (not learnt) by one over the number of the window's positions that
ONNX counts (inside the input, or inside its padding with ``count_include_pad``). Registered
in :data:`.import_ops.IMPORTERS` as the other importers; other pools go on to
:func:`.import_pools.pool`."""

import numpy as np

from ..proto import caffe_pb2
from .axis_pieces import pad as pad_blob
from .axis_pieces import strided
from .import_pad import node_layers
from .import_ops import IMPORTERS, _name, _pads, _read, attrs, importer

_pool_caffe = IMPORTERS["MaxPool"]
E = caffe_pb2.EltwiseParameter


def _positions(count, kernel, stride, dilation, begin, lo, hi):
    """Along one axis, how many of each window's ``kernel`` positions (window ``o`` starts at
    ``o * stride - begin``, its positions ``dilation`` apart) lie in ``[lo, hi)``."""
    starts = np.arange(count)[:, None] * stride - begin
    at = starts + np.arange(kernel)[None, :] * dilation
    return ((at >= lo) & (at < hi)).sum(axis=1)


@importer("MaxPool", "AveragePool")
def pool(ctx, node):
    """Dilated pooling and pooling of more than two spatial axes by the windows' offsets
    (see the module); any other pool: :func:`.import_pools.pool`."""
    a = attrs(node)
    x = node.input[0]
    shape = ctx.shape(x, node)
    spatial = len(shape) - 2
    dilations = [int(d) for d in a.get("dilations", [1] * spatial)]
    if x in ctx.padded or "kernel_shape" not in a or \
            (spatial <= 2 and all(d == 1 for d in dilations)):
        _pool_caffe(ctx, node)
        return
    if _read(ctx, node, 1):
        raise ctx.error(node, "its Indices output '%s' is read, and has no Caffe equivalent"
                        % node.output[1])
    _windows(ctx, node, x, "max" if node.op_type == "MaxPool" else "average", node.output[0])


@importer("LpPool")
def lp_pool(ctx, node):
    """``(sum |x|^p)^(1/p)`` over each window: AbsVal and Power ``p`` (for an even ``p`` the
    Power alone), the windows' sum (:func:`_windows`: zero pads add nothing, as ONNX's), a
    Power ``1/p``."""
    p = int(attrs(node).get("p", 2))
    if p < 1:
        raise ctx.error(node, "p %d: a norm needs p of 1 or more" % p)
    x, top, name = node.input[0], node.output[0], _name(node)
    if p % 2:
        ctx.layer("AbsVal", name + "/abs", [x], [top + "/abs"])
        x = top + "/abs"
    if p != 1:
        lp = ctx.layer("Power", name + "/pow", [x], [top + "/pow"])
        lp.power_param.power = float(p)
        x = top + "/pow"
    if p == 1:
        _windows(ctx, node, x, "sum", top)
        return
    _windows(ctx, node, x, "sum", top + "/sum")
    lp = ctx.layer("Power", name, [top + "/sum"], [top])
    lp.power_param.power = 1.0 / p


def _windows(ctx, node, x, kind, top):
    """The pool of ``node``'s geometry over the blob ``x`` (of the node's input's shape) by
    the windows' offsets into ``top``: their maximum, sum or average (see the module)."""
    a = attrs(node)
    shape = ctx.shape(node.input[0], node)
    spatial = len(shape) - 2
    dilations = [int(d) for d in a.get("dilations", [1] * spatial)]
    kernel = [int(k) for k in a["kernel_shape"]]
    strides = [int(s) for s in a.get("strides", [1] * spatial)]
    if len(kernel) != spatial or len(strides) != spatial or len(dilations) != spatial or \
            min(kernel + strides + dilations) < 1:
        raise ctx.error(node, "kernel_shape %s, strides %s, dilations %s do not fit its %d "
                              "spatial axes" % (kernel, strides, dilations, spatial))
    pads = _pads(ctx, node, a, kernel, strides, dilations)
    begin, end = pads[:spatial], pads[spatial:]
    out = list(ctx.shape(node.output[0], node))
    is_max = kind == "max"
    name = _name(node)
    sizes = list(shape[2:])
    # the input padded so that every window's positions lie inside it: ONNX's begin pads,
    # and at the end whatever the last window reaches (ceil_mode's may pass ONNX's pads)
    after = [max(0, (o - 1) * s + (k - 1) * d + 1 - b - n)
             for o, s, k, d, b, n in zip(out[2:], strides, kernel, dilations, begin, sizes)]
    fill = -np.inf if is_max else 0.0

    em = node_layers(ctx, node)
    padded = top + "/padded"
    blob, cur = pad_blob(em, x, shape, [0, 0] + begin, [0, 0] + after, "constant", fill,
                         name + "/pad", padded)
    cur = list(cur)
    last_axis = spatial - 1
    for i in range(spatial):
        axis = i + 2
        done = i == last_axis and kind != "average"
        reduced = top if done else "%s/axis%d" % (top, axis)
        if kernel[i] == 1:
            blob = strided(em, blob, cur, axis, 0, strides[i], out[axis],
                           "%s/axis%d" % (name, axis), reduced)
            if blob != reduced and done:
                ctx.alias[top] = ctx.blob(blob)
        else:
            pieces = [strided(em, blob, cur, axis, k * dilations[i], strides[i], out[axis],
                              "%s/axis%d_%d" % (name, axis, k), "%s/axis%d_%d" % (top, axis, k))
                      for k in range(kernel[i])]
            lp = ctx.layer("Eltwise", "%s/axis%d" % (name, axis), pieces, [reduced])
            lp.eltwise_param.operation = E.MAX if is_max else E.SUM
            blob = reduced
        cur[axis] = out[axis]
    if kind != "average":
        return
    include = bool(int(a.get("count_include_pad", 0)))
    counts = [_positions(o, k, s, d, b, -b if include else 0, n + e if include else n)
              for o, k, s, d, b, e, n in zip(out[2:], kernel, strides, dilations, begin, end,
                                            sizes)]
    if min(int(c.min()) for c in counts) <= 0:
        raise ctx.error(node, "a window of its average lies wholly in the padding (ONNX "
                              "divides by 0 there)")
    divisor = counts[0].astype(np.float64)
    for c in counts[1:]:
        divisor = np.multiply.outer(divisor, c)
    lp = ctx.layer("Scale", name, [blob], [top], [(1.0 / divisor).astype(np.float32)])
    lp.scale_param.axis, lp.scale_param.num_axes = 2, spatial
    lp.param.add(lr_mult=0, decay_mult=0)
