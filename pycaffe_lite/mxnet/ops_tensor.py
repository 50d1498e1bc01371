"""Converters of MXNet's tensor ops: softmaxes, element-wise and scalar arithmetic, shapes
(Reshape, transpose, slices, Crop, Concat), reductions and the ops that pass data through."""

import numpy as np

from ..proto import caffe_pb2
from .context import converter
from .ops_nn import neuron

E = caffe_pb2.EltwiseParameter


# -- pass-through ------------------------------------------------------------------------------
@converter("BlockGrad", "stop_gradient", "identity", "_copy", "_identity_with_attr_like_rhs",
           "MakeLoss", "make_loss", "LinearRegressionOutput", "MAERegressionOutput")
def passthrough(c, node):
    c.alias(c.bottom(0))


@converter("Dropout")
def dropout(c, node):
    if c.attrs().str("mode", "training") == "always":
        raise c.error("mode=always drops values at inference too; Caffe's Dropout does not")
    c.alias(c.bottom(0))


@converter("Cast", "cast", "amp_cast")
def cast(c, node):
    dtype = c.attrs().str("dtype", "float32")
    if dtype not in ("float32", "float16", "float64"):
        raise c.error("a cast to %s does not convert (Caffe computes in float32)" % dtype)
    c.alias(c.bottom(0))


@converter("LogisticRegressionOutput")
def logistic_output(c, node):
    neuron(c, "Sigmoid", c.bottom(0), c.out())
    c.produce(c.out())


# -- softmaxes ---------------------------------------------------------------------------------
def _softmax(c, x, axis, top, name=None):
    rank = len(c.shape(x))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise c.error("axis %d is out of range for shape %s" % (axis, c.shape(x)))
    lp = c.layer("Softmax", name or c.node.name, [x], [top])
    lp.softmax_param.axis = axis
    return c.configure(lp)


def _log_softmax(c, x, axis, top):
    """log(softmax(x)) as MXNet computes it, finite however far apart the values are (a Log of
    the Softmax gives -inf where the probability underflows): z = x - max(x) and
    z + log(max(softmax(z))), as the largest probability is 1 / sum(exp(z)) >= 1 / n."""
    name = c.node.name
    rank = len(c.shape(x))
    axis = axis + rank if axis < 0 else axis
    if not 0 <= axis < rank:
        raise c.error("axis %d is out of range for shape %s" % (axis, c.shape(x)))
    n = c.shape(x)[axis]

    def spread(blob, what):
        """max along the axis, repeated along it to x's shape"""
        m = neuron(c, "ArgMax", blob, c.blob_name("%s/%s" % (top, what)),
                   "%s/%s" % (name, what), argmax_param__out_max_val=True,
                   argmax_param__axis=axis).top[0]
        if what == "pmax":
            m = neuron(c, "Log", m, c.blob_name(top + "/logpmax"), name + "/logpmax").top[0]
        return neuron(c, "Tile", m, c.blob_name(m + "/tiled"), "%s/%s_tiled" % (name, what),
                      tile_param__axis=axis, tile_param__tiles=n).top[0]

    z = c.layer("Eltwise", name + "/shifted", [x, spread(x, "max")],
                [c.blob_name(top + "/shifted")])
    z.eltwise_param.operation = E.SUM
    z.eltwise_param.coeff.extend([1.0, -1.0])
    c.configure(z)
    p = _softmax(c, z.top[0], axis, c.blob_name(top + "/p"), name + "/softmax")
    lp = c.layer("Eltwise", name, [z.top[0], spread(p.top[0], "pmax")], [top])
    lp.eltwise_param.operation = E.SUM
    c.configure(lp)


@converter("softmax", "log_softmax")
def softmax(c, node):
    a = c.attrs()
    if a.bool("use_length", False):
        raise c.error("use_length (a masked softmax) does not convert")
    x = c.bottom(0)
    temperature = a.float("temperature", 1.0)
    top = c.out()
    if temperature != 1.0:
        x = neuron(c, "Power", x, c.blob_name(top + "/tempered"), node.name + "/temperature",
                   power_param__scale=1.0 / temperature).top[0]
    if node.op == "log_softmax":
        _log_softmax(c, x, a.int("axis", -1), top)
    else:
        _softmax(c, x, a.int("axis", -1), top)
    c.produce(top)


@converter("SoftmaxActivation")
def softmax_activation(c, node):
    x = c.bottom(0)
    mode = c.attrs().str("mode", "instance")
    if mode not in ("instance", "channel"):
        raise c.error("mode %s does not convert" % mode)
    # instance: over the last axis (of a 4-D blob too, as MXNet computes it)
    _softmax(c, x, 1 if mode == "channel" else -1, c.out())
    c.produce(c.out())


@converter("SoftmaxOutput", "Softmax")
def softmax_output(c, node):
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    top = c.out()
    # multi_output: over axis 1 at every position; preserve_shape: over the last axis; else
    # over each item's values (flattened to (N, -1), as MXNet documents it and its own CPU
    # and GPU kernels compute; oneDNN's kernel softmaxes the last axis instead)
    if a.bool("multi_output", False):
        _softmax(c, x, 1, top)
    elif a.bool("preserve_shape", False) or len(shape) <= 2:
        _softmax(c, x, -1, top)
    else:
        flat = c.reshape(x, [shape[0], int(np.prod(shape[1:]))], node.name + "/flat",
                         c.blob_name(top + "/flat"))
        p = _softmax(c, flat, 1, c.blob_name(top + "/flat_p"))
        top = c.reshape(p.top[0], shape, node.name + "/unflat", top)
    c.produce(top)


# -- element-wise ------------------------------------------------------------------------------
def _eltwise(c, node, blobs, op, coeff=()):
    shapes = {c.shape(b) for b in blobs}
    if len(shapes) != 1:
        return False
    lp = c.layer("Eltwise", node.name, blobs, [c.out()])
    lp.eltwise_param.operation = op
    lp.eltwise_param.coeff.extend(coeff)
    c.configure(lp)
    c.produce(c.out())
    return True


def _broadcast_channels(c, node, x, s, kind):
    """``x`` (N, C, H, W) times / plus ``s`` (N, C, 1, 1), or (1, C, 1, 1): Caffe's Scale or
    Bias with the second bottom flattened to (N, C) or (C,)."""
    xs, ss = c.shape(x), c.shape(s)
    if len(xs) != len(ss) or len(xs) < 2 or any(d != 1 for d in ss[2:]) or \
            ss[1] != xs[1] or ss[0] not in (1, xs[0]):
        return False
    axis = 0 if ss[0] == xs[0] and xs[0] != 1 else 1
    want = ss[:2] if axis == 0 else ss[1:2]
    flat = c.reshape(s, want, node.name + "/flat", c.blob_name(node.name + "/flat"))
    lp = c.layer(kind, node.name, [x, flat], [c.out()])
    getattr(lp, "scale_param" if kind == "Scale" else "bias_param").axis = axis
    c.configure(lp)
    c.produce(c.out())
    return True


@converter("elemwise_add", "_Plus", "_plus", "_add", "add_n", "ElementWiseSum",
           "broadcast_add", "broadcast_plus")
def add(c, node):
    blobs = [c.bottom(i) for i in range(len(node.inputs))]
    if _eltwise(c, node, blobs, E.SUM):
        return
    if len(blobs) == 2 and node.op.startswith("broadcast"):
        for big, small in ((0, 1), (1, 0)):  # either operand may be the per-channel one
            if _broadcast_channels(c, node, blobs[big], blobs[small], "Bias"):
                return
    raise c.error("inputs of shapes %s do not convert (equal shapes do, and a per-channel "
                  "N x C x 1 x 1 operand)" % [c.shape(b) for b in blobs])


@converter("elemwise_sub", "_Minus", "_minus", "_sub", "broadcast_sub", "broadcast_minus")
def sub(c, node):
    blobs = [c.bottom(0), c.bottom(1)]
    if not _eltwise(c, node, blobs, E.SUM, (1.0, -1.0)):
        raise c.error("inputs of shapes %s do not convert (equal shapes do)"
                      % [c.shape(b) for b in blobs])


@converter("elemwise_mul", "_Mul", "_mul", "broadcast_mul")
def mul(c, node):
    blobs = [c.bottom(0), c.bottom(1)]
    if _eltwise(c, node, blobs, E.PROD):
        return
    for big, small in ((0, 1), (1, 0)):
        if _broadcast_channels(c, node, blobs[big], blobs[small], "Scale"):
            return
    raise c.error("inputs of shapes %s do not convert (equal shapes do, and N x C x H x W "
                  "by N x C x 1 x 1)" % [c.shape(b) for b in blobs])


@converter("_maximum", "broadcast_maximum")
def maximum(c, node):
    blobs = [c.bottom(0), c.bottom(1)]
    if not _eltwise(c, node, blobs, E.MAX):
        raise c.error("inputs of shapes %s do not convert (equal shapes do)"
                      % [c.shape(b) for b in blobs])


# (scale, shift, power) of Caffe's Power layer, (shift + scale * x) ^ power, for scalar s
SCALAR = {
    "_plus_scalar": lambda s: (1.0, s, 1.0), "_PlusScalar": lambda s: (1.0, s, 1.0),
    "_minus_scalar": lambda s: (1.0, -s, 1.0), "_MinusScalar": lambda s: (1.0, -s, 1.0),
    "_rminus_scalar": lambda s: (-1.0, s, 1.0), "_RMinusScalar": lambda s: (-1.0, s, 1.0),
    "_mul_scalar": lambda s: (s, 0.0, 1.0), "_MulScalar": lambda s: (s, 0.0, 1.0),
    "_div_scalar": lambda s: (1.0 / s, 0.0, 1.0), "_DivScalar": lambda s: (1.0 / s, 0.0, 1.0),
    "_rdiv_scalar": None, "_RDivScalar": None,  # (a reciprocal, then s times it: scalar())
    "_power_scalar": lambda s: (1.0, 0.0, s), "_PowerScalar": lambda s: (1.0, 0.0, s),
}


def _fixed_scale(c, blob, value, name, top):
    """``blob`` times ``value`` by a frozen Scale of one value (x * 0 and x * inf as IEEE
    gives them, where a Power of scale 0 would give its constant)."""
    lp = c.layer("Scale", name, [blob], [top], [np.full((), value, np.float32)], frozen=True)
    lp.scale_param.axis, lp.scale_param.num_axes = 0, 0
    return c.configure(lp)


@converter(*SCALAR)
def scalar(c, node):
    """(shift + scale * x) ^ power (Caffe's Power). ``s / x`` (``_rdiv_scalar``): the
    reciprocal of x (a Power of -1, correctly rounded), times s: two roundings, as a
    division of two blobs (:func:`divide`). By or of the scalar 0: times a frozen Scale of
    inf (``x / 0``: ±inf, NaN for 0) or of 0 (``0 / x``: ±0, NaN for 0), as MXNet gives."""
    s = c.attrs().float("scalar", None)
    if s is None:
        raise c.error("it has no scalar")
    x = c.bottom(0)
    if node.op in ("_rdiv_scalar", "_RDivScalar"):
        recip = neuron(c, "Power", x, c.blob_name(node.name + "/reciprocal"),
                       node.name + "/reciprocal", power_param__power=-1.0).top[0]
        if s == 0.0:
            _fixed_scale(c, recip, 0.0, node.name, c.out())
        else:
            neuron(c, "Power", recip, c.out(), power_param__scale=s)
        c.produce(c.out())
        return
    if s == 0.0 and node.op in ("_div_scalar", "_DivScalar"):
        _fixed_scale(c, x, np.inf, node.name, c.out())
        c.produce(c.out())
        return
    scale, shift, power = SCALAR[node.op](s)
    neuron(c, "Power", c.bottom(0), c.out(), power_param__scale=scale,
           power_param__shift=shift, power_param__power=power)
    c.produce(c.out())


@converter("square", "sqrt", "rsqrt", "reciprocal")
def power_op(c, node):
    power = {"square": 2.0, "sqrt": 0.5, "rsqrt": -0.5, "reciprocal": -1.0}[node.op]
    neuron(c, "Power", c.bottom(0), c.out(), power_param__power=power)
    c.produce(c.out())


# -- shapes ------------------------------------------------------------------------------------
def mxnet_reshape(c, shape, spec, reverse):
    """The shape MXNet's Reshape gives ``shape`` for the codes in ``spec`` (0 copy, -1
    infer, -2 copy the rest, -3 merge two, -4 split one into the next two)."""
    src, spec = list(shape), list(spec)
    if reverse:
        src, spec = src[::-1], spec[::-1]
    out, i, j, infer = [], 0, 0, None
    while j < len(spec):
        v = spec[j]
        if v == 0:
            out.append(src[i])
            i += 1
        elif v == -1:
            infer = len(out)
            out.append(1)
            i += 1
        elif v == -2:
            out.extend(src[i:])
            i = len(src)
        elif v == -3:
            out.append(src[i] * src[i + 1])
            i += 2
        elif v == -4:
            a, b = (spec[j + 1], spec[j + 2]) if not reverse else (spec[j + 2], spec[j + 1])
            if a == -1:
                a = src[i] // b
            elif b == -1:
                b = src[i] // a
            out.extend([a, b] if not reverse else [b, a])
            i += 1
            j += 2
        elif v > 0:
            out.append(v)
            i += 1
        else:
            raise c.error("Reshape code %d is not one MXNet knows" % v)
        j += 1
    total = int(np.prod(shape))
    if infer is not None:
        known = int(np.prod(out)) or 1
        out[infer] = total // known
    if reverse:
        out = out[::-1]
    if int(np.prod(out)) != total:
        raise c.error("Reshape to %s does not fit the input's shape %s" % (spec, shape))
    return out


def _target_shape(c, shape, target, keep_highest):
    """The deprecated ``target_shape`` of old files (used where ``shape`` is not given): the
    one 0 in it inferred; ``keep_highest``: its first size is the input's."""
    if keep_highest:
        target[0] = shape[0]
    zeros = [i for i, v in enumerate(target) if v == 0]
    total = int(np.prod(shape))
    if len(zeros) > 1 or any(v is None or v < 0 for v in target):
        raise c.error("target_shape %s: one size may be 0 (inferred), none negative" % target)
    if zeros:
        known = int(np.prod([v for v in target if v]))
        target[zeros[0]] = total // known if known else 0
    if int(np.prod(target)) != total:
        raise c.error("target_shape %s does not fit the input's shape %s" % (target, shape))
    return target


@converter("Reshape", "reshape")
def reshape(c, node):
    a = c.attrs()
    x = c.bottom(0)
    target = a.tuple("target_shape") or ()
    if not a.tuple("shape") and any(target):
        out = _target_shape(c, c.shape(x), list(target), a.bool("keep_highest", False))
    else:
        out = mxnet_reshape(c, c.shape(x), a.tuple("shape", ()), a.bool("reverse", False))
    top = c.reshape(x, out, node.name, c.out())
    c.produce(top)


@converter("Flatten", "flatten")
def flatten(c, node):
    x = c.bottom(0)
    shape = c.shape(x)
    c.produce(c.reshape(x, [shape[0], int(np.prod(shape[1:]))], node.name, c.out()))


@converter("expand_dims")
def expand_dims(c, node):
    x = c.bottom(0)
    shape = list(c.shape(x))
    axis = c.attrs().int("axis")
    axis = axis + len(shape) + 1 if axis < 0 else axis
    shape.insert(axis, 1)
    c.produce(c.reshape(x, shape, node.name, c.out()))


@converter("squeeze")
def squeeze(c, node):
    x = c.bottom(0)
    shape = c.shape(x)
    axes = c.attrs().tuple("axis")
    axes = [a + len(shape) if a < 0 else a for a in axes] if axes else \
        [i for i, d in enumerate(shape) if d == 1]
    out = [d for i, d in enumerate(shape) if i not in axes] or [1]
    c.produce(c.reshape(x, out, node.name, c.out()))


@converter("transpose")
def transpose(c, node):
    x = c.bottom(0)
    rank = len(c.shape(x))
    axes = c.attrs().tuple("axes") or tuple(range(rank))[::-1]
    axes = [a + rank if a < 0 else a for a in axes]
    if sorted(axes) != list(range(rank)):
        raise c.error("axes %s are not a permutation of %d axes" % (axes, rank))
    if axes == list(range(rank)):
        c.alias(x)
        return
    lp = c.layer("Permute", node.name, [x], [c.out()])
    lp.permute_param.order.extend(axes)
    c.configure(lp)
    c.produce(c.out())


def _range(c, size, begin, end):
    begin = 0 if begin is None else begin
    end = size if end is None else end
    begin = begin + size if begin < 0 else begin
    end = end + size if end < 0 else end
    if not 0 <= begin < end <= size:
        raise c.error("the range [%s, %s) is empty or outside 0..%d" % (begin, end, size))
    return begin, end


def _along_axis(c, default):
    """(attributes, input blob, its shape, the node's ``axis`` made non-negative)."""
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    axis = a.int("axis", default)
    if axis is None or not -len(shape) <= axis < len(shape):
        raise c.error("axis %s is out of range for shape %s" % (axis, shape))
    return a, x, shape, axis + len(shape) if axis < 0 else axis


@converter("slice_axis")
def slice_axis(c, node):
    a, x, shape, axis = _along_axis(c, None)
    end = a.str("end")
    begin, end = _range(c, shape[axis], a.int("begin", 0), None if end is None else int(end))
    top = c.take(x, axis, begin, end, node.name, c.out())
    c.produce(top)


def _clamped(c, axis, size, begin, end):
    """``slice``'s bounds as MXNet takes them: negative ones count from the end, then both are
    clamped to the axis (as Python's slices; slice_axis refuses such bounds instead)."""
    b = 0 if begin is None else begin
    e = size if end is None else end
    b, e = (b + size if b < 0 else b), (e + size if e < 0 else e)
    b, e = min(max(b, 0), size), min(max(e, 0), size)
    if e <= b:
        raise c.error("begin %s, end %s leave axis %d (of size %d) empty: Caffe has no blob "
                      "of no values" % (begin, end, axis, size))
    return b, e


@converter("slice", "crop")
def slice_(c, node):
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    begins, ends = a.tuple("begin", ()), a.tuple("end", ())
    steps = a.tuple("step", ()) or ()
    if any(s not in (None, 1) for s in steps):
        raise c.error("a slice with steps %s does not convert" % (steps,))
    cuts = [(axis,) + _clamped(c, axis, shape[axis], b, e)
            for axis, (b, e) in enumerate(zip(begins, ends))]
    cuts = [cut for cut in cuts if cut[1:] != (0, shape[cut[0]])]
    blob = x
    for k, (axis, b, e) in enumerate(cuts):
        blob = c.take(blob, axis, b, e, node.name, c.out() if k == len(cuts) - 1 else None)
    c.produce(blob)


@converter("SliceChannel", "split")
def slice_channel(c, node):
    a, x, shape, axis = _along_axis(c, 1)
    n = a.int("num_outputs")
    if not n or shape[axis] % n:
        raise c.error("axis %d of size %d does not split into %s equal parts"
                      % (axis, shape[axis], n))
    squeeze = a.bool("squeeze_axis", False)
    if squeeze and shape[axis] != n:
        raise c.error("squeeze_axis needs parts of size 1")
    tops = [c.out(index=i) if not squeeze else c.blob_name(c.out(index=i) + "/part")
            for i in range(n)]
    lp = c.layer("Slice", node.name, [x], tops)
    lp.slice_param.axis = axis
    c.configure(lp)
    for i, top in enumerate(tops):
        if squeeze:
            out = [d for k, d in enumerate(shape) if k != axis]
            top = c.reshape(top, out, "%s/squeeze%d" % (node.name, i), c.out(index=i))
        c.produce(top, i)


@converter("Crop")
def crop(c, node):
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    if a.int("num_args", 1) > 1 or len(node.inputs) > 1:
        h, w = c.in_shape(1)[2:4]
    else:
        h, w = a.tuple("h_w", (0, 0))
    if a.bool("center_crop", False):
        offset = ((shape[2] - h) // 2, (shape[3] - w) // 2)
    else:
        offset = a.tuple("offset", (0, 0))
    blob = c.take(x, 2, offset[0], offset[0] + h, node.name, None if w != shape[3] else
                  c.out())
    blob = c.take(blob, 3, offset[1], offset[1] + w, node.name, c.out())
    c.produce(blob)


@converter("Concat", "concat")
def concat(c, node):
    blobs = [c.bottom(i) for i in range(len(node.inputs))]
    rank = len(c.shape(blobs[0]))
    axis = c.attrs().int("dim", 1)
    lp = c.layer("Concat", node.name, blobs, [c.out()])
    lp.concat_param.axis = axis + rank if axis < 0 else axis
    c.configure(lp)
    c.produce(c.out())


# -- reductions --------------------------------------------------------------------------------
@converter("mean", "sum", "sum_axis")
def reduce_(c, node):
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    rank = len(shape)
    axes = a.tuple("axis")
    axes = set(range(rank)) if not axes else {v + rank if v < 0 else v for v in axes}
    if a.bool("exclude", False):
        axes = set(range(rank)) - axes
    first = min(axes)
    if axes != set(range(first, rank)):
        raise c.error("a reduction over axes %s does not convert: Caffe's Reduction reduces "
                      "the trailing axes from one axis on" % sorted(axes))
    R = caffe_pb2.ReductionParameter
    keep = a.bool("keepdims", False)
    out = list(shape[:first]) + ([1] * (rank - first) if keep else [])
    mid = c.out() if out == list(shape[:first]) and out else c.blob_name(c.out() + "/reduced")
    lp = c.layer("Reduction", node.name, [x], [mid])
    lp.reduction_param.operation = R.MEAN if node.op == "mean" else R.SUM
    lp.reduction_param.axis = first
    c.configure(lp)
    if mid != c.out():
        lp = c.layer("Reshape", node.name + "/shape", [mid], [c.out()])
        lp.reshape_param.shape.dim.extend(out or [1])
        c.configure(lp)
    c.produce(c.out())


@converter("max", "max_axis")
def reduce_max(c, node):
    """One ArgMax (out_max_val, along the axis) per reduced axis longer than 1: a maximum of
    maxima is the maximum, so the axes may go in any order; then the shape MXNet gives."""
    a = c.attrs()
    x = c.bottom(0)
    shape = c.shape(x)
    rank = len(shape)
    axes = a.tuple("axis")
    if axes and any(v is None or not -rank <= v < rank for v in axes):
        raise c.error("axis %s is out of range for shape %s" % (a.str("axis"), shape))
    axes = set(range(rank)) if not axes else {v + rank if v < 0 else v for v in axes}
    if a.bool("exclude", False):
        axes = set(range(rank)) - axes
    keep = a.bool("keepdims", False)
    out = [1 if i in axes else d for i, d in enumerate(shape) if keep or i not in axes] or [1]
    blob = x
    long_axes = sorted(i for i in axes if shape[i] > 1)
    for axis in long_axes:
        # (the node's blob is the last ArgMax's top when that has MXNet's shape)
        last = axis == long_axes[-1] and [1 if i in axes else d
                                          for i, d in enumerate(shape)] == out
        top = c.out() if last else c.blob_name("%s/max%d" % (c.out(), axis))
        blob = neuron(c, "ArgMax", blob, top, "%s/max%d" % (node.name, axis),
                      argmax_param__out_max_val=True, argmax_param__axis=axis).top[0]
    if list(c.shape(blob)) != out:
        lp = c.layer("Reshape", node.name + "/shape", [blob], [c.out()])
        lp.reshape_param.shape.dim.extend(out)
        blob = c.configure(lp).top[0]
    if blob == x:
        c.alias(x)
        return
    c.produce(blob)


@converter("broadcast_div", "elemwise_div", "_div", "_Div")
def divide(c, node):
    """``x / y``: Caffe has no division, so ``y``'s reciprocal (a Power of -1, correctly
    rounded as ``1 / y``), then the product as :func:`mul` forms it (equal shapes: Eltwise
    PROD; broadcast_div by or of an N x C x 1 x 1 operand: Scale). Two roundings, so within
    1.5 units in the last place of MXNet's quotient; ``x / 0`` is ``±inf`` and ``0 / 0``
    NaN as MXNet gives them; a ``y`` beyond 2^126 in magnitude has a subnormal reciprocal and
    one below 2^-128 an infinite one (there the quotient loses digits or overflows)."""
    x, y = c.bottom(0), c.bottom(1)
    xs, ys = c.shape(x), c.shape(y)
    per_channel = node.op.startswith("broadcast") and any(
        len(a) == len(b) >= 2 and a[1] == b[1] and all(d == 1 for d in b[2:]) and
        b[0] in (1, a[0]) for a, b in ((xs, ys), (ys, xs)))
    if xs != ys and not per_channel:
        raise c.error("inputs of shapes %s do not convert (equal shapes do, and an "
                      "N x C x 1 x 1 operand of broadcast_div)" % [xs, ys])
    recip = neuron(c, "Power", y, c.blob_name(node.name + "/reciprocal"),
                   node.name + "/reciprocal", power_param__power=-1.0).top[0]
    blobs = [x, recip]
    if _eltwise(c, node, blobs, E.PROD):
        return
    for big, small in ((0, 1), (1, 0)):
        if _broadcast_channels(c, node, blobs[big], blobs[small], "Scale"):
            return
    raise c.error("inputs of shapes %s do not convert" % [xs, ys])  # (checked above)
