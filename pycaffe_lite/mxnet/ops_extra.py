"""Converters of MXNet ops without a Caffe layer of their own (Embedding, InstanceNorm, Pad),
each built from BVLC Caffe's layers that compute the same values."""

from ..proto import caffe_pb2
from .context import converter
from .ops_nn import neuron

R = caffe_pb2.ReductionParameter


@converter("Embedding")
def embedding(c, node):
    """Caffe's Embed without a bias: the same table, (input_dim, output_dim). MXNet clips an
    index outside [0, input_dim) to the table and truncates a fraction; Caffe's Embed refuses
    such an index when the net runs, naming it."""
    a = c.attrs()
    x = c.bottom(0)
    weight = c.param(1)
    input_dim, output_dim = a.int("input_dim"), a.int("output_dim")
    if input_dim is None or output_dim is None:
        raise c.error("it needs input_dim and output_dim")
    if weight.shape != (input_dim, output_dim):
        raise c.error("its weight has shape %s; input_dim=%d, output_dim=%d make (%d, %d)"
                      % (weight.shape, input_dim, output_dim, input_dim, output_dim))
    lp = c.layer("Embed", node.name, [x], [c.out()], [weight])
    lp.embed_param.input_dim = input_dim
    lp.embed_param.num_output = output_dim
    lp.embed_param.bias_term = False
    c.configure(lp)
    c.produce(c.out())


@converter("InstanceNorm")
def instance_norm(c, node):
    """``gamma * (x - mean) / sqrt(var + eps) + beta`` per item and channel over the other
    axes, as MXNet computes it (eps under the root; Caffe's MVN adds it to the standard
    deviation instead): Reduction means, a negated mean as a Bias, the variance's
    (var + eps)^-0.5 by Power as a Scale, then gamma and beta."""
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    if len(shape) < 3:
        raise c.error("it normalises over the axes after the channels; the input of shape %s "
                      "has none" % (shape,))
    gamma, beta = c.param(1), c.param(2)
    eps = a.float("eps", 1e-3)
    name, top = node.name, c.out()

    def blob(what):
        return c.blob_name("%s/%s" % (top, what))

    def mean(src, what):
        lp = c.layer("Reduction", "%s/%s" % (name, what), [src], [blob(what)])
        lp.reduction_param.operation = R.MEAN
        lp.reduction_param.axis = 2
        return c.configure(lp).top[0]

    neg = neuron(c, "Power", mean(x, "mean"), blob("neg_mean"), name + "/neg_mean",
                 power_param__scale=-1.0).top[0]
    lp = c.layer("Bias", name + "/centre", [x, neg], [blob("centred")])
    lp.bias_param.axis = 0
    centred = c.configure(lp).top[0]
    sq = neuron(c, "Power", centred, blob("square"), name + "/square",
                power_param__power=2.0).top[0]
    inv = neuron(c, "Power", mean(sq, "var"), blob("inv_std"), name + "/inv_std",
                 power_param__shift=eps, power_param__power=-0.5).top[0]
    lp = c.layer("Scale", name + "/normalise", [centred, inv], [blob("normalised")])
    lp.scale_param.axis = 0
    normalised = c.configure(lp).top[0]
    lp = c.layer("Scale", name, [normalised], [top], [gamma, beta])
    lp.scale_param.axis = 1
    lp.scale_param.bias_term = True
    c.configure(lp)
    c.produce(top)


def _pad_axis(c, x, axis, before, after, mode, value, name, out):
    """``x`` padded along ``axis`` into the blob ``out``: the pieces concatenated in
    order."""
    shape = list(c.shape(x))
    n = shape[axis]
    tag = "%s/axis%d" % (name, axis)
    pieces = []
    for side, count in (("before", before), ("after", after)):
        if not count:
            pieces.append(None)
            continue
        top = c.blob_name("%s/%s" % (tag, side))
        if mode == "constant":
            lp = c.layer("DummyData", "%s_%s" % (tag, side), [], [top])
            dp = lp.dummy_data_param
            dp.shape.add().dim.extend(shape[:axis] + [count] + shape[axis + 1:])
            dp.data_filler.add(type="constant", value=value)
            c.configure(lp)
        elif mode == "edge":  # the first / last slice, repeated
            edge = c.take(x, axis, 0, 1, "%s_%s" % (tag, side)) if side == "before" else \
                c.take(x, axis, n - 1, n, "%s_%s" % (tag, side))
            if count == 1:
                top = edge
            else:
                neuron(c, "Tile", edge, top, "%s_%s_tile" % (tag, side),
                       tile_param__axis=axis, tile_param__tiles=count)
        else:  # reflect: the slices next to the edge (the edge itself not repeated), mirrored
            lo, hi = (1, count + 1) if side == "before" else (n - 1 - count, n - 1)
            top = _rows(c, x, axis, lo, hi, "%s_%s" % (tag, side))[::-1]
        pieces.append(top)
    blobs = []
    for piece in (pieces[0], x, pieces[1]):
        if piece is not None:
            blobs.extend(piece if isinstance(piece, list) else [piece])
    lp = c.layer("Concat", tag, blobs, [out])
    lp.concat_param.axis = axis
    return c.configure(lp).top[0]


def _rows(c, x, axis, lo, hi, name):
    """The slices ``lo`` .. ``hi - 1`` of ``x`` along ``axis``, one blob each, by one Slice
    (the rest to a Silence)."""
    n = c.shape(x)[axis]
    points = [p for p in range(lo, hi + 1) if 0 < p < n]
    tops = [c.blob_name("%s/%d" % (name, k)) for k in range(len(points) + 1)]
    lp = c.layer("Slice", name, [x], tops)
    lp.slice_param.axis = axis
    lp.slice_param.slice_point.extend(points)
    c.configure(lp)
    first = 1 if lo > 0 else 0
    kept = tops[first:first + hi - lo]
    spare = [t for t in tops if t not in kept]
    if spare:
        c.add("Silence", name + "/spare", spare, [])
    return kept


@converter("Pad", "pad")
def pad(c, node):
    """Each padded spatial axis in turn (as MXNet's Pad fills corners: per coordinate):
    constant values from DummyData, the edge by Slice and Tile, its mirror as single slices
    (Slice) in reverse order, joined by Concat."""
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    mode = a.str("mode", "constant")
    if mode not in ("constant", "edge", "reflect"):
        raise c.error("mode %s does not convert (constant, edge and reflect do)" % mode)
    width = list(a.tuple("pad_width", ()))
    if len(shape) not in (4, 5) or len(width) != 2 * len(shape):
        raise c.error("pad_width %s does not fit the input of shape %s (MXNet pads 4-D and "
                      "5-D blobs, two numbers per axis)" % (tuple(width), shape))
    if any(v is None or v < 0 for v in width):
        raise c.error("pad_width %s: the pads must be numbers >= 0" % (tuple(width),))
    if any(width[:4]):
        raise c.error("pad_width %s pads the batch or channel axis; MXNet pads the spatial "
                      "axes only" % (tuple(width),))
    value = a.float("constant_value", 0.0)
    padded = [axis for axis in range(2, len(shape)) if width[2 * axis] or width[2 * axis + 1]]
    blob = x
    for axis in padded:
        before, after = width[2 * axis], width[2 * axis + 1]
        if mode == "reflect" and max(before, after) >= shape[axis]:
            raise c.error("reflect pads %d, %d of axis %d (of size %d): a reflection needs "
                          "pads smaller than the axis" % (before, after, axis, shape[axis]))
        out = c.out() if axis == padded[-1] else c.blob_name("%s/axis%d" % (c.out(), axis))
        blob = _pad_axis(c, blob, axis, before, after, mode, value, node.name, out)
    if blob == x:  # (no pads: the input itself)
        c.alias(x)
        return
    c.produce(blob)
