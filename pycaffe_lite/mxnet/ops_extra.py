"""Converters of MXNet ops without a Caffe layer of their own (Embedding, InstanceNorm, Pad),
each built from BVLC Caffe's layers that compute the same values."""

from ..onnx.axis_pieces import Layers
from ..onnx.axis_pieces import pad as pad_blob
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


@converter("Pad", "pad")
def pad(c, node):
    """Each padded spatial axis in turn (as MXNet's Pad fills corners: per coordinate), by
    :func:`..onnx.axis_pieces.pad`: constant values from DummyData, the edge by Slice and
    Tile, its mirror as single slices (Slice) in reverse order, joined by Concat."""
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
    em = Layers(c.layer, c.error, c.configure, c.blob_name)
    blob, _ = pad_blob(em, x, shape, width[0::2], width[1::2], mode, value, node.name, c.out())
    if blob == x:  # (no pads: the input itself)
        c.alias(x)
        return
    c.produce(blob)
