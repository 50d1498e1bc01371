"""ONNX op -> Caffe layers, one importer per op: ``fn(ctx, node)`` appends the layers (see
:class:`.import_.ImportContext`). Only ops whose ONNX semantics a Caffe layer reproduces
exactly are accepted; anything else is an error naming the node."""

import numpy as np

from ..blob import fill_blobproto
from ..ops.pooling import window_extents
from ..proto import caffe_pb2

IMPORTERS = {}


def importer(*ops):
    def wrap(fn):
        for op in ops:
            IMPORTERS[op] = fn
        return fn
    return wrap


def attrs(node):
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _name(node):
    return node.name or node.output[0]


def _set_2d(param, field, values):
    """A 2-D geometry as ``field_h``/``field_w`` when the two differ (and nothing returned:
    Caffe takes either those or the repeated ``field``), else its one value to append to
    ``field``."""
    values = [int(v) for v in values]
    if values[0] != values[1]:
        setattr(param, field + "_h", values[0])
        setattr(param, field + "_w", values[1])
        return []
    return values[:1]


def _read(ctx, node, i):
    """Whether the node's output ``i`` is named and read (by a node or as a graph output): a
    second output nothing reads (a Dropout's mask, a MaxPool's Indices, as the model zoo's
    nets name them) is left out of the conversion."""
    return len(node.output) > i and bool(node.output[i]) and \
        ctx.consumers.get(node.output[i], 0) > 0


def _pads(ctx, node, a, kernel, strides, dilations):
    """The begin and end pads of a Conv or pool: ``pads``, or those ``auto_pad`` gives on the
    input's static spatial sizes (SAME: ``ceil(size / stride)`` outputs, the odd pad at the
    end for SAME_UPPER, at the beginning for SAME_LOWER; VALID: none)."""
    n = len(kernel)
    mode = a.get("auto_pad", b"NOTSET")
    mode = mode.decode() if isinstance(mode, bytes) else str(mode)
    if mode == "NOTSET":
        return [int(p) for p in a.get("pads", [0] * (2 * n))]
    if mode == "VALID":
        return [0] * (2 * n)
    if mode not in ("SAME_UPPER", "SAME_LOWER") or node.op_type == "ConvTranspose":
        raise ctx.error(node, "auto_pad %s has no Caffe equivalent (give explicit pads)" % mode)
    sizes = ctx.shape(node.input[0], node)[2:]
    begin, end = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        begin.append(small if mode == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return begin + end


def _symmetric_pads(ctx, node, a, kernel, strides, dilations):
    n = len(kernel)
    pads = _pads(ctx, node, a, kernel, strides, dilations)
    if pads[:n] != pads[n:]:
        raise ctx.error(node, "asymmetric pads %s have no Caffe equivalent" % pads)
    return pads[:n]


# -- convolution ---------------------------------------------------------------------------
@importer("Conv")
def conv(ctx, node):
    a = attrs(node)
    w = ctx.const(node.input[1], node, "weight")
    n = w.ndim - 2
    pads = _symmetric_pads(ctx, node, a, list(w.shape[2:]),
                           [int(s) for s in a.get("strides", [1] * n)],
                           [int(d) for d in a.get("dilations", [1] * n)])
    group = int(a.get("group", 1))
    bias = len(node.input) > 2 and node.input[2]
    blobs = [w] + ([ctx.const(node.input[2], node, "bias")] if bias else [])
    lp = ctx.layer("Convolution" if node.op_type == "Conv" else "Deconvolution", _name(node),
                   [node.input[0]], [node.output[0]], blobs)
    p = lp.convolution_param
    p.num_output = w.shape[0] if node.op_type == "Conv" else w.shape[1] * group
    p.bias_term = bool(bias)
    if group != 1:
        p.group = group
    kernel = list(w.shape[2:])
    strides = [int(s) for s in a.get("strides", [1] * n)]
    dil = [int(d) for d in a.get("dilations", [1] * n)]
    if n == 2:
        p.kernel_size.extend(_set_2d(p, "kernel", kernel))
        if any(strides) and strides != [1, 1]:
            p.stride.extend(_set_2d(p, "stride", strides))
        if any(pads):
            p.pad.extend(_set_2d(p, "pad", pads))
    else:
        p.kernel_size.extend(kernel)
        p.stride.extend(strides)
        p.pad.extend(pads)
    if dil != [1] * n:
        p.dilation.extend(dil[:1] if len(set(dil)) == 1 else dil)


@importer("BatchNormalization")
def batch_norm(ctx, node):
    a = attrs(node)
    if a.get("training_mode", 0):
        raise ctx.error(node, "training_mode batch normalization does not convert")
    scale, bias, mean, var = (ctx.const(n, node) for n in node.input[1:5])
    mid = node.output[0] + "/bn"
    lp = ctx.layer("BatchNorm", _name(node) + "/bn", [node.input[0]], [mid],
                   [mean, var, np.ones(1, np.float32)])
    lp.batch_norm_param.use_global_stats = True
    lp.batch_norm_param.eps = float(a.get("epsilon", 1e-5))
    sp = ctx.layer("Scale", _name(node), [mid], [node.output[0]], [scale, bias])
    sp.scale_param.bias_term = True


# -- pooling -------------------------------------------------------------------------------
def _caffe_pooled(size, k, s, p):
    out = -(-(size + 2 * p - k) // s) + 1
    if p > 0 and (out - 1) * s >= size + p:
        out -= 1
    return out


def _onnx_pooled(size, k, s, begin, end, ceil_mode):
    span = size + begin + end - k
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + begin:
        out -= 1  # onnxruntime drops a last window that starts in the right padding
    return out


@importer("MaxPool", "AveragePool")
def pool(ctx, node):
    a = attrs(node)
    x = node.input[0]
    explicit = ctx.padded.pop(x, None)
    if explicit is not None:
        x = explicit[0]
    shape = ctx.shape(x, node)
    if len(shape) != 4:
        raise ctx.error(node, "only 1-D and 2-D pooling convert to Caffe (input %s)" % (shape,))
    indices = _read(ctx, node, 1)
    if indices and (a.get("storage_order", 0) or explicit is not None):
        raise ctx.error(node, "its Indices output '%s' is read, and converts only in row-major "
                              "order (storage_order 0)" % node.output[1])
    if any(d != 1 for d in a.get("dilations", [1, 1])) or a.get("storage_order", 0):
        raise ctx.error(node, "dilated pooling / storage_order have no Caffe equivalent")
    kernel = [int(k) for k in a["kernel_shape"]]
    strides = [int(s) for s in a.get("strides", [1, 1])]
    pads = _pads(ctx, node, a, kernel, strides, [1, 1])
    begin, end = pads[:2], pads[2:]
    ceil_mode = int(a.get("ceil_mode", 0))
    is_max = node.op_type == "MaxPool"
    include = bool(a.get("count_include_pad", 0))
    if explicit is not None:
        if is_max or any(begin) or explicit[1] != explicit[2]:
            raise ctx.error(node, "a Pad before it converts only for an AveragePool with no "
                                  "begin pads of its own, padded equally on both sides")
        caffe_pad = explicit[1]
        begin = caffe_pad
        end = [e + q for e, q in zip(end, explicit[2])]
    else:
        caffe_pad = begin
    if ceil_mode and begin != end:
        raise ctx.error(node, "ceil_mode with asymmetric pads has no Caffe equivalent")
    sizes = shape[2:]
    caffe_out = [_caffe_pooled(n, k, s, q) for n, k, s, q in zip(sizes, kernel, strides,
                                                                   caffe_pad)]
    onnx_out = [_onnx_pooled(n, k, s, b, e, ceil_mode)
                for n, k, s, b, e in zip(sizes, kernel, strides, begin, end)]
    if any(c < o for c, o in zip(caffe_out, onnx_out)):
        raise ctx.error(node, "ONNX pools %s windows where Caffe's rounding gives %s"
                        % (onnx_out, caffe_out))
    factors = None
    if not is_max:  # ONNX's divisor over Caffe's, per output row and column
        axes = []
        for i in range(2):
            onnx_clip = sizes[i] + end[i] if explicit is None else sizes[i] + caffe_pad[i]
            # ONNX clips a window to its own padding when that counts, else to the input
            lo, hi = (-begin[i], onnx_clip) if include or explicit is not None else \
                (0, sizes[i])
            theirs = window_extents(onnx_out[i], kernel[i], strides[i], begin[i], lo, hi)
            ours = window_extents(onnx_out[i], kernel[i], strides[i], caffe_pad[i],
                                  -caffe_pad[i], sizes[i] + caffe_pad[i])
            if min(theirs) <= 0:
                raise ctx.error(node, "a window of its average lies wholly in the padding "
                                      "(ONNX divides by 0 there)")
            axes.append(ours.astype(np.float64) / theirs.astype(np.float64))
        factors = np.outer(axes[0], axes[1]).astype(np.float32)
        if np.all(factors == 1.0):
            factors = None
    top = node.output[0] if caffe_out == onnx_out and factors is None else \
        node.output[0] + "/caffe_pool"
    if indices and caffe_out != onnx_out:
        raise ctx.error(node, "its Indices output '%s' is read, and converts only where Caffe's "
                              "windows are ONNX's (%s, not %s)" % (node.output[1], onnx_out,
                                                                  caffe_out))
    lp = ctx.layer("Pooling", _name(node), [x], [top] + ([top + "/mask"] if indices else []))
    if indices:  # Caffe's mask h W + w, plus the plane's offset (n C + c) H W: ONNX's index
        _plane_offsets(ctx, node, top + "/mask", shape)
    p = lp.pooling_param
    p.pool = caffe_pb2.PoolingParameter.MAX if is_max else caffe_pb2.PoolingParameter.AVE
    _pool_geometry(p, kernel, strides, caffe_pad)
    if caffe_out != onnx_out:
        top = _drop_last_windows(ctx, node, top, caffe_out, onnx_out, factors is None)
    if factors is not None:
        # Caffe's AVE divides a border window by its extent in the padded input; ONNX by its
        # extent in the input (count_include_pad 0) or in its own padding: a fixed Scale
        # per position (not learnt) turns the one into the other
        lp = ctx.layer("Scale", _name(node) + "/divisor", [top], [node.output[0]], [factors])
        lp.scale_param.axis, lp.scale_param.num_axes = 2, 2
        lp.param.add(lr_mult=0, decay_mult=0)


def _plane_offsets(ctx, node, mask, shape):
    n, c, h, w = shape
    offsets = (np.arange(n * c, dtype=np.float64) * h * w).reshape(n, c).astype(np.float32)
    lp = ctx.layer("Bias", _name(node) + "/indices", [mask], [node.output[1]], [offsets])
    lp.bias_param.axis, lp.bias_param.num_axes = 0, 2
    lp.param.add(lr_mult=0, decay_mult=0)


def _pool_geometry(p, kernel, strides, pads):
    if kernel[0] == kernel[1]:
        p.kernel_size = kernel[0]
    else:
        p.kernel_h, p.kernel_w = kernel
    if strides[0] == strides[1]:
        p.stride = strides[0]
    else:
        p.stride_h, p.stride_w = strides
    if pads[0] == pads[1]:
        if pads[0]:
            p.pad = pads[0]
    else:
        p.pad_h, p.pad_w = pads


def _drop_last_windows(ctx, node, blob, caffe_out, onnx_out, final=True):
    """Floor-mode pooling: Caffe rounds up, so its extra last row / column of windows is
    sliced off (the windows before it are the same) and silenced; the blob left (the node's
    output when ``final``)."""
    spare = []
    for axis, (c, o) in enumerate(zip(caffe_out, onnx_out)):
        if c == o:
            continue
        last = final and (axis == 1 or caffe_out[1] == onnx_out[1])
        top = node.output[0] if last else "%s/rows%d" % (blob, axis)
        extra = "%s/spare%d" % (blob, axis)
        lp = ctx.layer("Slice", _name(node) + "/floor%d" % axis, [blob], [top, extra])
        lp.slice_param.axis = axis + 2
        lp.slice_param.slice_point.append(o)
        spare.append(extra)
        blob = top
    ctx.layer("Silence", _name(node) + "/spare", spare, [])
    return blob


@importer("GlobalMaxPool", "GlobalAveragePool")
def global_pool(ctx, node):
    lp = ctx.layer("Pooling", _name(node), [node.input[0]], [node.output[0]])
    lp.pooling_param.pool = (caffe_pb2.PoolingParameter.MAX if node.op_type == "GlobalMaxPool"
                             else caffe_pb2.PoolingParameter.AVE)
    lp.pooling_param.global_pooling = True


@importer("LRN")
def lrn(ctx, node):
    a = attrs(node)
    lp = ctx.layer("LRN", _name(node), [node.input[0]], [node.output[0]])
    p = lp.lrn_param
    p.local_size = int(a["size"])
    if p.local_size % 2 == 0:
        raise ctx.error(node, "Caffe's LRN needs an odd size, got %d" % p.local_size)
    p.alpha = float(a.get("alpha", 1e-4))
    p.beta = float(a.get("beta", 0.75))
    p.k = float(a.get("bias", 1.0))


# -- element-wise --------------------------------------------------------------------------
SIMPLE = {"Relu": "ReLU", "Sigmoid": "Sigmoid", "Tanh": "TanH", "Abs": "AbsVal",
          "Exp": "Exp", "Log": "Log", "Softplus": "BNLL", "Mish": "Mish"}


@importer(*SIMPLE)
def simple(ctx, node):
    ctx.layer(SIMPLE[node.op_type], _name(node), [node.input[0]], [node.output[0]])


@importer("LeakyRelu")
def leaky_relu(ctx, node):
    lp = ctx.layer("ReLU", _name(node), [node.input[0]], [node.output[0]])
    lp.relu_param.negative_slope = float(attrs(node).get("alpha", 0.01))


@importer("Elu")
def elu(ctx, node):
    lp = ctx.layer("ELU", _name(node), [node.input[0]], [node.output[0]])
    lp.elu_param.alpha = float(attrs(node).get("alpha", 1.0))


@importer("PRelu")
def prelu(ctx, node):
    slope = ctx.const(node.input[1], node, "slope")
    shape = ctx.shape(node.input[0], node)
    shared = slope.size == 1  # Caffe's channel-shared slope is a blob of no axes
    # ONNX broadcasts the slope from the last axis: per channel only when it is (C, 1, ..)
    full = (1,) * (len(shape) - slope.ndim) + tuple(slope.shape)
    if not shared and (slope.ndim > len(shape) or len(shape) < 2 or full[1] != shape[1] or
                       slope.size != shape[1]):
        raise ctx.error(node, "slopes of shape %s on an input of shape %s are not per channel "
                              "(ONNX aligns them with the last axes)" % (slope.shape, shape))
    lp = ctx.layer("PReLU", _name(node), [node.input[0]], [node.output[0]],
                   [slope.reshape(()) if shared else slope.reshape(-1)])
    if shared:
        lp.prelu_param.channel_shared = True


@importer("Clip")
def clip(ctx, node):
    a = attrs(node)
    lo = a.get("min") if len(node.input) < 2 or not node.input[1] else \
        float(ctx.const(node.input[1], node, "min"))
    hi = a.get("max") if len(node.input) < 3 or not node.input[2] else \
        float(ctx.const(node.input[2], node, "max"))
    lo = -3.4028234663852886e38 if lo is None else float(lo)
    hi = 3.4028234663852886e38 if hi is None else float(hi)
    if lo > hi:
        raise ctx.error(node, "min %g is greater than max %g (ONNX then gives max everywhere; "
                              "Caffe's Clip needs min <= max)" % (lo, hi))
    if lo == 0.0 and hi == 6.0:
        ctx.layer("ReLU6", _name(node), [node.input[0]], [node.output[0]])
        return
    lp = ctx.layer("Clip", _name(node), [node.input[0]], [node.output[0]])
    lp.clip_param.min, lp.clip_param.max = lo, hi


@importer("Identity", "Dropout")
def identity(ctx, node):
    mask = _read(ctx, node, 1)
    if mask and (node.op_type != "Dropout" or ctx.opset < 7):
        raise ctx.error(node, "its mask output '%s' is read, and the dropout mask has no Caffe "
                              "equivalent" % node.output[1])
    if node.op_type == "Dropout":
        a = attrs(node)
        if ctx.opset < 7:  # is_test (default 0) chose the mode
            training = not a.get("is_test", 0)
        else:
            given = len(node.input) > 2 and node.input[2]
            training = given and bool(ctx.const(node.input[2], node, "training_mode").any())
        ratio = a.get("ratio", 0.5)
        if len(node.input) > 1 and node.input[1]:
            ratio = ctx.const(node.input[1], node, "ratio").reshape(-1)[0]
        if training and float(ratio) != 0.0:
            raise ctx.error(node, "training-mode dropout (random) does not convert")
        if mask:  # nothing dropped: all true (a Power of scale 0 ignores its input: 1)
            lp = ctx.layer("Power", _name(node) + "/mask", [node.input[0]], [node.output[1]])
            lp.power_param.scale, lp.power_param.shift = 0.0, 1.0
    ctx.alias[node.output[0]] = ctx.blob(node.input[0])


def softmax_axis(ctx, node, shape):
    """The one axis a Softmax-like ``node`` (Softmax, LogSoftmax) works along, in an input of
    ``shape``: its ``axis`` (ONNX's default changed at opset 13); before opset 13 the axes
    from ``axis`` on, flattened, which is one Caffe axis when the others there are of size 1
    (else an error naming the node)."""
    rank = len(shape)
    axis = int(attrs(node).get("axis", 1 if ctx.opset < 13 else -1))
    axis = axis + rank if axis < 0 else axis
    if ctx.opset < 13:
        big = [i for i in range(axis, rank) if shape[i] != 1]
        if len(big) > 1:
            raise ctx.error(node, "a %s before opset 13 over axes %d.. (flattened, of sizes "
                                  "%s) has no Caffe equivalent" % (node.op_type, axis,
                                                                   shape[axis:]))
        axis = big[0] if big else axis
    return axis


@importer("Softmax")
def softmax(ctx, node):
    axis = softmax_axis(ctx, node, ctx.shape(node.input[0], node))
    lp = ctx.layer("Softmax", _name(node), [node.input[0]], [node.output[0]])
    lp.softmax_param.axis = axis


@importer("Concat")
def concat(ctx, node):
    rank = len(ctx.shape(node.input[0], node))
    axis = int(attrs(node)["axis"])
    lp = ctx.layer("Concat", _name(node), list(node.input), [node.output[0]])
    lp.concat_param.axis = axis + rank if axis < 0 else axis


@importer("Sum", "Max")
def variadic(ctx, node):
    if len(node.input) == 1:  # the identity
        ctx.alias[node.output[0]] = ctx.blob(node.input[0])
        return
    shapes = {ctx.shape(n, node) for n in node.input}
    if len(shapes) != 1:
        raise ctx.error(node, "inputs of different shapes %s do not convert (Caffe's Eltwise "
                              "does not broadcast)" % sorted(shapes))
    lp = ctx.layer("Eltwise", _name(node), list(node.input), [node.output[0]])
    E = caffe_pb2.EltwiseParameter
    lp.eltwise_param.operation = E.SUM if node.op_type == "Sum" else E.MAX


def _broadcast_param(ctx, node, x_shape, c):
    """(axis, param) for a Scale/Bias applying constant ``c`` to ``x``: the range of axes
    where ``c`` is not 1, with ``c`` expanded over that range."""
    rank = len(x_shape)
    if c.ndim > rank:
        raise ctx.error(node, "a constant of shape %s does not broadcast onto %s"
                        % (c.shape, x_shape))
    full = (1,) * (rank - c.ndim) + tuple(c.shape)
    big = [i for i, d in enumerate(full) if d != 1]
    start, end = big[0], big[-1] + 1
    for i in range(start, end):
        if full[i] not in (1, x_shape[i]):
            raise ctx.error(node, "a constant of shape %s does not broadcast onto %s"
                            % (c.shape, x_shape))
    param = np.broadcast_to(c.reshape(full[start:end]), x_shape[start:end])
    return start, np.ascontiguousarray(param, dtype=np.float32)


def zero_scale(ctx, node, x, x_shape, top, zero=0.0):
    """``x * zero`` (0 or -0) as IEEE gives it (NaN for inf and NaN, the sign of the product):
    a Scale by fixed zeros along the last axis, not learnt (Caffe's Power of scale 0 is the
    constant shift^power, whatever the input)."""
    lp = ctx.layer("Scale", _name(node), [x], [top], [np.full(x_shape[-1:], zero, np.float32)])
    lp.scale_param.axis, lp.scale_param.num_axes = len(x_shape) - 1, 1
    lp.param.add(lr_mult=0, decay_mult=0)


@importer("Add", "Sub", "Mul", "Div")
def arithmetic(ctx, node):
    a, b = node.input[0], node.input[1]
    op = node.op_type
    if a not in ctx.consts and b not in ctx.consts:
        if ctx.shape(a, node) != ctx.shape(b, node) or op == "Div":
            raise ctx.error(node, "%s of two tensors converts only as Add/Sub/Mul of equal "
                                  "shapes (Caffe's Eltwise)" % op)
        lp = ctx.layer("Eltwise", _name(node), [a, b], [node.output[0]])
        E = caffe_pb2.EltwiseParameter
        lp.eltwise_param.operation = E.PROD if op == "Mul" else E.SUM
        if op == "Sub":
            lp.eltwise_param.coeff.extend([1.0, -1.0])
        return
    if a in ctx.consts:
        if op in ("Sub", "Div"):
            raise ctx.error(node, "a constant minus / over a tensor has no Caffe layer")
        a, b = b, a
    x_shape = ctx.shape(a, node)
    c = ctx.const(b, node).astype(np.float32)
    if c.ndim > len(x_shape):
        raise ctx.error(node, "a constant of shape %s gives the output more axes than the "
                              "input's %s" % (c.shape, x_shape))
    if op == "Sub":
        c, op = -c, "Add"
    elif op == "Div":
        with np.errstate(divide="ignore"):
            c, op = (1.0 / c).astype(np.float32), "Mul"
    if op == "Mul" and c.size == 1 and float(c.reshape(-1)[0]) == 0.0 and x_shape:
        zero_scale(ctx, node, a, x_shape, node.output[0], float(c.reshape(-1)[0]))
        return
    if c.size == 1:
        lp = ctx.layer("Power", _name(node), [a], [node.output[0]])
        if op == "Add":
            lp.power_param.shift = float(c.reshape(-1)[0])
        else:
            lp.power_param.scale = float(c.reshape(-1)[0])
        return
    axis, param = _broadcast_param(ctx, node, x_shape, c)
    if op == "Mul":
        lp = ctx.layer("Scale", _name(node), [a], [node.output[0]], [param])
        lp.scale_param.axis, lp.scale_param.num_axes = axis, param.ndim
        ctx.scales[node.output[0]] = lp
        return
    # an offset becomes the bias of the InnerProduct or Scale that feeds it when nothing
    # else reads that layer's output, else a Scale by ones with a bias (OpenCV has no Bias)
    ip = ctx.scales.get(a)
    if ip is not None and ip.type == "InnerProduct" and ctx.consumers.get(a, 0) == 1 and \
            axis == ip.inner_product_param.axis and param.shape == (ip.blobs[0].shape.dim[0],):
        ip.top[0] = node.output[0]
        ip.inner_product_param.bias_term = True
        fill_blobproto(ip.blobs.add(), param)
        return
    lp = ctx.scales.get(a)
    fused = (lp is not None and lp.type == "Scale" and ctx.consumers.get(a, 0) == 1
             and not lp.scale_param.bias_term and lp.scale_param.axis == axis
             and tuple(lp.blobs[0].shape.dim) == param.shape)
    if fused:
        lp.top[0] = node.output[0]
    else:
        lp = ctx.layer("Scale", _name(node), [a], [node.output[0]],
                       [np.ones(param.shape, np.float32)])
        lp.scale_param.axis, lp.scale_param.num_axes = axis, param.ndim
    lp.scale_param.bias_term = True
    fill_blobproto(lp.blobs.add(), param)


# -- inner product and shapes --------------------------------------------------------------
@importer("Gemm")
def gemm(ctx, node):
    a = attrs(node)
    if a.get("transA", 0):
        raise ctx.error(node, "transA has no Caffe equivalent")
    w = ctx.const(node.input[1], node, "B").astype(np.float32, copy=False)
    w = w if a.get("transB", 0) else w.T
    if a.get("alpha", 1.0) != 1.0:  # (no copies of a large weight otherwise)
        w = w * np.float32(a["alpha"])
    blobs = [w]
    if len(node.input) > 2 and node.input[2]:
        bias = ctx.const(node.input[2], node, "C").astype(np.float32) * np.float32(
            a.get("beta", 1.0))
        if bias.size not in (1, w.shape[0]) or (bias.ndim == 2 and bias.shape[0] != 1):
            raise ctx.error(node, "C of shape %s is not a per-output bias" % (bias.shape,))
        blobs.append(np.broadcast_to(bias.reshape(-1), (w.shape[0],)))
    lp = ctx.layer("InnerProduct", _name(node), [node.input[0]], [node.output[0]], blobs)
    lp.inner_product_param.num_output = w.shape[0]
    lp.inner_product_param.bias_term = len(blobs) > 1


@importer("MatMul")
def matmul(ctx, node):
    if node.input[1] not in ctx.consts or ctx.consts[node.input[1]].ndim != 2:
        raise ctx.error(node, "only a MatMul by a constant 2-D matrix converts (to "
                              "InnerProduct)")
    w = ctx.const(node.input[1], node).astype(np.float32).T
    rank = len(ctx.shape(node.input[0], node))
    lp = ctx.layer("InnerProduct", _name(node), [node.input[0]], [node.output[0]], [w])
    lp.inner_product_param.num_output = w.shape[0]
    lp.inner_product_param.bias_term = False
    lp.inner_product_param.axis = rank - 1
    ctx.scales[node.output[0]] = lp  # an Add of a constant after it becomes its bias


@importer("Flatten")
def flatten(ctx, node):
    shape = ctx.shape(node.input[0], node)
    axis = int(attrs(node).get("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if axis == 1 and len(shape) > 1:  # Caffe's Flatten needs the axis: not of a 1-D input
        ctx.layer("Flatten", _name(node), [node.input[0]], [node.output[0]])
        return
    _reshape_to(ctx, node, ctx.shape(node.output[0], node))


def _reshape_to(ctx, node, out_shape):
    lp = ctx.layer("Reshape", _name(node), [node.input[0]], [node.output[0]])
    dims = list(out_shape)
    if dims and ctx.shape(node.input[0], node)[:1] == tuple(dims[:1]):
        dims[0] = 0  # the batch axis, copied
    lp.reshape_param.shape.dim.extend(dims)


@importer("Reshape", "Squeeze", "Unsqueeze")
def reshape(ctx, node):
    _reshape_to(ctx, node, ctx.shape(node.output[0], node))


@importer("Split")
def split(ctx, node):
    shape = ctx.shape(node.input[0], node)
    axis = int(attrs(node).get("axis", 0))
    axis = axis + len(shape) if axis < 0 else axis
    sizes = [ctx.shape(o, node)[axis] for o in node.output]
    lp = ctx.layer("Slice", _name(node), [node.input[0]], list(node.output))
    lp.slice_param.axis = axis
    lp.slice_param.slice_point.extend(np.cumsum(sizes)[:-1].tolist())
