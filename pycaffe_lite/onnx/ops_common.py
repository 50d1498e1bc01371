"""Converters of Caffe's common layers: InnerProduct, BatchNorm, Scale, Bias, Softmax,
Concat, Slice, Split, Flatten, Reshape, Eltwise, ArgMax, Reduction, Tile, MVN, Embed, Parameter."""

import numpy as np

from ..proto import caffe_pb2
from .builder import keep_batch, register_converter


def _axis(axis, rank):
    return axis + rank if axis < 0 else axis


@register_converter("InnerProduct")
def inner_product(call):
    p = call.param.inner_product_param
    rank = len(call.in_shapes[0])
    axis = _axis(p.axis, rank)
    blobs = call.blobs
    w = blobs[0].reshape(blobs[0].shape[-2:]) if blobs[0].ndim > 2 else blobs[0]
    x = call.inputs[0]
    if axis == 1:
        if rank > 2:
            x = call.node("Flatten", [x], suffix="flatten", axis=1)
        inputs = [x, call.const("weight", w)]
        if p.bias_term:
            inputs.append(call.const("bias", blobs[1].reshape(-1)))
        call.node("Gemm", inputs, call.outputs, transB=0 if p.transpose else 1)
        return
    x = call.reshape(x, [0] * axis + [-1])
    wt = w if p.transpose else w.T
    if not p.bias_term:
        call.node("MatMul", [x, call.const("weight", wt)], call.outputs)
        return
    y = call.node("MatMul", [x, call.const("weight", wt)], suffix="matmul")
    call.node("Add", [y, call.const("bias", blobs[1].reshape(-1))], call.outputs)


@register_converter("BatchNorm")
def batch_norm(call):
    eps = float(call.layer.eps)
    x = call.inputs[0]
    channels = call.in_shapes[0][1] if len(call.in_shapes[0]) > 1 else 1
    affine = call.layer.affine_blobs  # NVCaffe's or Intel Caffe's scale (and bias) blobs
    sub_batches = call.layer.layer_param.batch_norm_param.stats_batch_size  # Intel Caffe's
    if (affine or call.layer.relu or sub_batches) and not call.layer.use_global_stats:
        raise call.error("a BatchNorm with scale and bias blobs, a ReLU or stats_batch_size "
                         "does not convert with batch statistics")
    if call.layer.use_global_stats:
        blobs = call.blobs
        s = float(blobs[2].reshape(-1)[0])
        factor = 0.0 if s == 0 else 1.0 / s  # the moving averages' scale-factor blob
        mean = (blobs[0].reshape(-1) * np.float32(factor)).astype(np.float32)
        var = (blobs[1].reshape(-1) * np.float32(factor)).astype(np.float32)
        gamma = blobs[3].reshape(-1) if affine else np.ones(channels)
        beta = blobs[4].reshape(-1) if affine > 1 else np.zeros(channels)
        relu = call.layer.relu  # Intel Caffe's relu option
        y = call.node("BatchNormalization",
                      [x, call.const("gamma", gamma), call.const("beta", beta),
                       call.const("mean", mean), call.const("var", var)],
                      None if relu else call.outputs, suffix="bn" if relu else None,
                      epsilon=eps)
        if relu:
            call.node("Relu", [y], call.outputs)
        return
    # the batch's own statistics (use_global_stats false): biased variance, as Caffe
    rank = len(call.in_shapes[0])
    axes = [0] + list(range(2, rank))
    mean = call.g.reduce("ReduceMean", x, axes, True, name=call.name + "/mean")
    d = call.node("Sub", [x, mean], suffix="centre")
    var = call.g.reduce("ReduceMean", call.node("Mul", [d, d], suffix="square"), axes, True,
                        name=call.name + "/var")
    std = call.node("Sqrt", [call.node("Add", [var, call.const("eps", eps)], suffix="eps")],
                    suffix="std")
    call.node("Div", [d, std], call.outputs)


def _broadcast_operand(call, axis_field, what):
    """The Scale/Bias operand shaped to broadcast against x from ``axis`` on."""
    p = getattr(call.param, axis_field)
    rank = len(call.in_shapes[0])
    axis = _axis(p.axis, rank)
    if len(call.inputs) > 1:
        shape = list(call.in_shapes[1])
        target = shape + [1] * (rank - axis - len(shape))
        if axis == 0 and target:
            target[0] = 0  # the batch axis, copied
        return call.reshape(call.inputs[1], target, suffix=what + "_shape")
    blob = call.blobs[0]
    return call.const(what, blob.reshape(list(blob.shape) + [1] * (rank - axis - blob.ndim)))


@register_converter("Scale")
def scale(call):
    s = _broadcast_operand(call, "scale_param", "scale")
    if not call.param.scale_param.bias_term:
        call.node("Mul", [call.inputs[0], s], call.outputs)
        return
    y = call.node("Mul", [call.inputs[0], s], suffix="mul")
    rank = len(call.in_shapes[0])
    axis = _axis(call.param.scale_param.axis, rank)
    bias = call.blobs[-1]
    shape = list(call.in_shapes[1] if len(call.inputs) > 1 else call.blobs[0].shape)
    bias = bias.reshape(shape + [1] * (rank - axis - len(shape)))
    call.node("Add", [y, call.const("bias", bias)], call.outputs)


@register_converter("Bias")
def bias(call):
    b = _broadcast_operand(call, "bias_param", "bias")
    call.node("Add", [call.inputs[0], b], call.outputs)


@register_converter("Softmax")
def softmax(call):
    axis = _axis(call.param.softmax_param.axis, len(call.in_shapes[0]))
    call.node("Softmax", call.inputs, call.outputs, axis=axis)


@register_converter("Concat")
def concat(call):
    call.node("Concat", call.inputs, call.outputs, axis=int(call.layer.axis))


@register_converter("Slice")
def slice_(call):
    axis = int(call.layer.axis)
    sizes = [int(s[axis]) for s in call.out_shapes]
    if axis == 0:
        call.fixes_batch("slices along the batch axis")
    call.node("Split", [call.inputs[0], call.ints("split", sizes)], call.outputs, axis=axis)


@register_converter("Split")
def split(call):
    return [call.inputs[0]] * len(call.outputs)


@register_converter("Flatten")
def flatten(call):
    p = call.param.flatten_param
    shape = call.in_shapes[0]
    rank = len(shape)
    start, end = _axis(p.axis, rank), _axis(p.end_axis, rank)
    target = [0] * start + [-1] + [int(d) for d in shape[end + 1:]]
    call.reshape(call.inputs[0], target, call.outputs)


@register_converter("Reshape")
def reshape(call):
    """Caffe's 0 (copy the bottom's axis) sits at the same output index as ONNX's 0 does,
    so the spec passes through; axes before ``axis`` are copied, those after the reshaped
    range keep their sizes."""
    p = call.param.reshape_param
    shape = call.in_shapes[0]
    rank = len(shape)
    start = p.axis if p.axis >= 0 else rank + p.axis + 1
    end = rank if p.num_axes == -1 else start + p.num_axes
    target = [0] * start + [int(d) for d in p.shape.dim] + [int(d) for d in shape[end:]]
    if not target or target[0] != 0:
        call.fixes_batch("reshapes from the batch axis on")
    call.reshape(call.inputs[0], target, call.outputs)


@register_converter("Eltwise")
def eltwise(call):
    p = call.param.eltwise_param
    E = caffe_pb2.EltwiseParameter
    if p.operation == E.PROD:
        x = call.inputs[0]
        for i, other in enumerate(call.inputs[1:]):
            last = i == len(call.inputs) - 2
            x = call.node("Mul", [x, other], call.outputs if last else None,
                          suffix=None if last else "mul%d" % i)
        return
    if p.operation == E.MAX:
        call.node("Max", call.inputs, call.outputs)
        return
    terms = []
    for i, x in enumerate(call.inputs):
        c = float(p.coeff[i]) if len(p.coeff) else 1.0
        terms.append(x if c == 1.0 else
                     call.node("Mul", [x, call.const("coeff%d" % i, c)], suffix="coeff%d" % i))
    call.node("Sum", terms, call.outputs)


def _top_k(call, x, k, axis, size):
    """TopK of ``x`` along ``axis`` (of ``size`` entries) with Caffe's order of equal values,
    the higher index first (its partial sort of (value, index) pairs, decreasing): TopK of
    the reversed axis, whose equal values come lower index first, indices mapped back."""
    flipped = call.node("Slice", [x, call.ints("reverse/starts", [-1]),
                                  call.ints("reverse/ends", [-(2 ** 63)]),
                                  call.ints("reverse/axes", [axis]),
                                  call.ints("reverse/steps", [-1])], suffix="reverse")
    vals, idx = call.node("TopK", [flipped, call.ints("k", [k])],
                          [call.g.fresh(call.name + "/values"),
                           call.g.fresh(call.name + "/reversed_indices")],
                          suffix="topk", axis=axis, largest=1, sorted=1)
    idx = call.node("Sub", [call.ints("last", [size - 1]), idx], suffix="indices")
    return vals, idx


@register_converter("ArgMax")
def argmax(call):
    p = call.param.argmax_param
    x = call.inputs[0]
    shape = call.in_shapes[0]
    if p.HasField("axis"):
        axis = _axis(p.axis, len(shape))
        if axis == 0:
            call.fixes_batch("ranks along the batch axis")
        vals, idx = _top_k(call, x, int(p.top_k), axis, int(shape[axis]))
        if p.out_max_val:
            call.node("Identity", [vals], call.outputs)
        else:
            call.node("Cast", [idx], call.outputs, to=1)
        return
    flat = call.reshape(x, [0, -1], suffix="flatten")
    vals, idx = _top_k(call, flat, int(p.top_k), 1, int(np.prod(shape[1:], dtype=np.int64)))
    idx = call.node("Cast", [idx], suffix="indices_float", to=1)
    parts = [call.reshape(idx, [0, 1, -1], suffix="indices_shape")]
    if p.out_max_val:
        parts.append(call.reshape(vals, [0, 1, -1], suffix="values_shape"))
    both = call.node("Concat", parts, suffix="concat", axis=1)
    call.reshape(both, keep_batch(call.out_shapes[0]), call.outputs)


@register_converter("Reduction")
def reduction(call):
    p = call.param.reduction_param
    R = caffe_pb2.ReductionParameter
    axis = _axis(p.axis, len(call.in_shapes[0]))
    x = call.reshape(call.inputs[0], [0] * axis + [-1], suffix="flatten")
    op = {R.SUM: "ReduceSum", R.ASUM: "ReduceL1", R.SUMSQ: "ReduceSumSquare",
          R.MEAN: "ReduceMean"}[p.operation]
    coeff = float(p.coeff)
    out = call.outputs if coeff == 1.0 else None
    y = call.g.reduce(op, x, [axis], False, out, name=call.name + ("" if out else "/reduce"))
    if coeff != 1.0:
        call.node("Mul", [y, call.const("coeff", coeff)], call.outputs)


@register_converter("Tile")
def tile(call):
    p = call.param.tile_param
    rank = len(call.in_shapes[0])
    repeats = [1] * rank
    repeats[_axis(p.axis, rank)] = int(p.tiles)
    call.node("Tile", [call.inputs[0], call.ints("repeats", repeats)], call.outputs)


@register_converter("MVN")
def mvn(call):
    p = call.param.mvn_param
    x = call.inputs[0]
    rank = len(call.out_shapes[0])
    if len(call.in_shapes[0]) < rank:  # Caffe's top is (num, channels, height, width)
        x = call.reshape(x, keep_batch(call.out_shapes[0]), suffix="4d")
    axes = list(range(1 if p.across_channels else 2, rank))
    mean = call.g.reduce("ReduceMean", x, axes, True, name=call.name + "/mean")
    if not p.normalize_variance:
        call.node("Sub", [x, mean], call.outputs)
        return
    d = call.node("Sub", [x, mean], suffix="centre")
    var = call.g.reduce("ReduceMean", call.node("Mul", [d, d], suffix="square"), axes, True,
                        name=call.name + "/var")
    std = call.node("Sqrt", [var], suffix="std")
    # eps is added to the standard deviation, as Caffe does
    den = call.node("Add", [std, call.const("eps", float(p.eps))], suffix="eps")
    call.node("Div", [d, den], call.outputs)


@register_converter("Embed")
def embed(call):
    p = call.param.embed_param
    blobs = call.blobs
    idx = call.node("Cast", [call.inputs[0]], suffix="indices", to=7)  # INT64
    if not p.bias_term:
        call.node("Gather", [call.const("weight", blobs[0]), idx], call.outputs, axis=0)
        return
    y = call.node("Gather", [call.const("weight", blobs[0]), idx], suffix="gather", axis=0)
    call.node("Add", [y, call.const("bias", blobs[1].reshape(-1))], call.outputs)


@register_converter("Parameter")
def parameter(call):
    """The blob itself, a constant of the graph (of its own shape: no batch axis to vary)."""
    call.out_dims = [[int(d) for d in call.out_shapes[0]]]
    return [call.const("value", call.layer.blobs[0].data)]
