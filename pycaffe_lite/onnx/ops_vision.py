"""Converters of Caffe's vision layers: Convolution, Deconvolution, Pooling, LRN, Crop,
Upsample."""

import numpy as np

from ..ops.pooling import empty_window
from ..proto import caffe_pb2
from .builder import register_converter

PP = caffe_pb2.PoolingParameter
LRNP = caffe_pb2.LRNParameter


def _spatial(values, default, n, h=None, w=None):
    """Caffe's repeated geometry field (none, one, or one per axis) or its ``_h``/``_w``."""
    if h is not None:
        return [int(h), int(w)]
    values = [int(v) for v in values]
    if not values:
        return [default] * n
    return values * n if len(values) == 1 else values


def conv_geometry(p, n):
    """(kernel, stride, pad, dilation) of a ConvolutionParameter with ``n`` spatial axes."""
    kernel = _spatial(p.kernel_size, 1, n, *((p.kernel_h, p.kernel_w)
                                             if p.HasField("kernel_h") else ()))
    stride = _spatial(p.stride, 1, n, *((p.stride_h, p.stride_w)
                                        if p.HasField("stride_h") else ()))
    pad = _spatial(p.pad, 0, n, *((p.pad_h, p.pad_w) if p.HasField("pad_h") else ()))
    dilation = _spatial(p.dilation, 1, n)
    return kernel, stride, pad, dilation


def conv_channel_axis(p, rank):
    """The channel axis of a ConvolutionParameter over a bottom of ``rank`` axes (Caffe's
    ``axis``, negative from the end); the axes before it are all "num"."""
    return p.axis + rank if p.axis < 0 else p.axis


@register_converter("Convolution", "Deconvolution")
def convolution(call, depthwise=False):
    """Caffe's channel ``axis`` may be other than 1: the axes before it are all "num", so
    they are folded into one batch axis for the Conv and unfolded after it. ``depthwise``:
    one group per input channel."""
    p = call.param.convolution_param
    rank = len(call.in_shapes[0])
    axis = conv_channel_axis(p, rank)
    group = int(call.in_shapes[0][axis]) if depthwise else int(p.group)
    if 0 in call.out_shapes[0][axis:]:
        _empty_top(call, axis)
        return
    blobs = call.blobs
    n = rank - axis - 1
    _, stride, pad, dilation = conv_geometry(p, n)
    x, out = call.inputs[0], call.outputs
    if axis == 0:  # no "num" axis: one image
        call.fixes_batch("convolves axis 0 as channels (no batch axis)")
    if axis != 1:
        x = call.reshape(x, [1 if axis == 0 else -1] + [int(d) for d in call.in_shapes[0][axis:]],
                         suffix="fold")
        out = [call.g.fresh(call.name + "/folded")]
    inputs = [x, call.const("weight", blobs[0])]
    if p.bias_term:
        inputs.append(call.const("bias", blobs[1].reshape(-1)))
    op = "ConvTranspose" if call.type == "Deconvolution" else "Conv"
    y = call.node(op, inputs, out, kernel_shape=list(blobs[0].shape[2:]), strides=stride,
                  pads=pad + pad, dilations=dilation, group=group)
    if axis != 1:
        shape = [int(d) for d in call.out_shapes[0]]
        call.reshape(y, shape if axis == 0 else [-1] + shape[1:], call.outputs,
                     suffix="unfold")


def _empty_top(call, axis):
    """A deconvolution whose output size is 0 (Caffe gives an empty top; onnxruntime's
    ConvTranspose refuses a size under 1): zeros of the top's shape, the leading "num" axes
    taken from the bottom."""
    rest = call.ints("empty/shape", [int(d) for d in call.out_shapes[0][axis:]])
    if axis:
        lead = call.node("Slice", [call.node("Shape", [call.inputs[0]], suffix="shape"),
                                   call.ints("empty/start", [0]), call.ints("empty/end", [axis])],
                         suffix="lead")
        rest = call.node("Concat", [lead, rest], suffix="top_shape", axis=0)
    call.node("ConstantOfShape", [rest], call.outputs,
              value=call.g.onnx.numpy_helper.from_array(np.zeros(1, np.float32)))


def _pool_geometry(p):
    kernel = [p.kernel_h, p.kernel_w] if p.HasField("kernel_h") else [p.kernel_size] * 2
    stride = [p.stride_h, p.stride_w] if p.HasField("stride_h") else [p.stride] * 2
    pad = [p.pad_h, p.pad_w] if p.HasField("pad_h") else [p.pad] * 2
    return [int(k) for k in kernel], [int(s) for s in stride], [int(q) for q in pad]


def check_windows(call, engine, sizes, kernel, pad, stride, pooled):
    """Refuse a pooling whose rounded-up size adds a window wholly outside the input (no
    ``engine`` pooling makes one)."""
    axis = empty_window(sizes, kernel, pad, stride, pooled)
    if axis is not None:
        raise call.error("kernel %d, stride %d, pad %d over %s %d gives %d windows, the last "
                         "one wholly outside the input (Caffe rounds the size up); %s pooling "
                         "has no such window (a stride at most the kernel has none)"
                         % (kernel[axis], stride[axis], pad[axis], ("height", "width")[axis],
                            sizes[axis], pooled[axis], engine))


@register_converter("Pooling")
def pooling(call):
    """Caffe's pooled size (rounded up, the last window clipped to start inside the input)
    is taken from our net; ONNX pools with no rounding (floor) over explicit pads chosen so
    that exactly those windows exist. AVE divides by the window's overlap with the padded
    input (Caffe's divisor): the input is zero-padded by ``pad`` first, and any extent the
    last window needs beyond that is ONNX padding excluded from the count."""
    p = call.param.pooling_param
    x = call.inputs[0]
    if len(call.outputs) > 1:
        raise call.error("the MAX pooling mask (second top) has no ONNX equivalent")
    if p.global_pooling:
        if p.pool == PP.STOCHASTIC:
            _stochastic(call, x, "GlobalAveragePool", {})
            return
        op = {PP.MAX: "GlobalMaxPool", PP.AVE: "GlobalAveragePool"}[p.pool]
        call.node(op, [x], call.outputs)
        return
    kernel, stride, pad = _pool_geometry(p)
    h, w = call.in_shapes[0][2:]
    oh, ow = call.out_shapes[0][2:]
    check_windows(call, "ONNX", (h, w), kernel, pad, stride, (oh, ow))
    extra = [max(0, (o - 1) * s + k - size - q)
             for o, s, k, size, q in zip((oh, ow), stride, kernel, (h, w), pad)]
    if p.pool == PP.MAX:
        call.node("MaxPool", [x], call.outputs, kernel_shape=kernel, strides=stride,
                  pads=pad + extra)
        return
    if any(pad):
        x = call.node("Pad", [x, call.ints("pads", [0, 0] + pad + [0, 0] + pad)],
                      suffix="pad", mode="constant")
    beyond = [max(0, e - q) for e, q in zip(extra, pad)]
    if p.pool == PP.AVE:
        call.node("AveragePool", [x], call.outputs, kernel_shape=kernel, strides=stride,
                  pads=[0, 0] + beyond, count_include_pad=0)
        return
    _stochastic(call, x, "AveragePool", dict(kernel_shape=kernel, strides=stride,
                                             pads=[0, 0] + beyond, count_include_pad=0))


def _stochastic(call, x, op, attrs):
    """STOCHASTIC at inference: the activations weighted by themselves, sum(x^2) / sum(x),
    and 0 where the window's sum is not positive (as Caffe's test forward); both averages
    share their divisors, which cancel."""
    sq = call.node("Mul", [x, x], suffix="square")
    num = call.node(op, [sq], suffix="sum_sq", **attrs)
    den = call.node(op, [x], suffix="sum", **attrs)
    zero = call.const("zero", 0.0)
    positive = call.node("Greater", [den, zero], suffix="positive")
    safe = call.node("Where", [positive, den, call.const("one", 1.0)], suffix="divisor")
    ratio = call.node("Div", [num, safe], suffix="ratio")
    call.node("Where", [positive, ratio, zero], call.outputs)


@register_converter("LRN")
def lrn(call):
    p = call.param.lrn_param
    size = int(p.local_size)
    if p.norm_region == LRNP.ACROSS_CHANNELS:
        call.node("LRN", call.inputs, call.outputs, size=size, alpha=float(p.alpha),
                  beta=float(p.beta), bias=float(p.k))
        return
    # WITHIN_CHANNEL: x * (1 + alpha * mean(x^2 over a size x size window))^-beta, the window
    # zero-padded by (size - 1) / 2 and always divided by size^2 (as Caffe's AVE pooling at
    # stride 1 does)
    x = call.inputs[0]
    half = (size - 1) // 2
    sq = call.node("Mul", [x, x], suffix="square")
    mean = call.node("AveragePool", [sq], suffix="mean", kernel_shape=[size, size],
                     strides=[1, 1], pads=[half] * 4, count_include_pad=1)
    scaled = call.node("Mul", [mean, call.const("alpha", float(p.alpha))], suffix="alpha")
    base = call.node("Add", [scaled, call.const("one", 1.0)], suffix="one_plus")
    scale = call.node("Pow", [base, call.const("neg_beta", -float(p.beta))], suffix="pow")
    call.node("Mul", [x, scale], call.outputs)


@register_converter("Crop")
def crop(call):
    p = call.param.crop_param
    shape, ref = call.in_shapes[0], call.in_shapes[1]
    rank = len(shape)
    start = p.axis + rank if p.axis < 0 else p.axis
    axes = list(range(start, rank))
    if start == 0:
        call.fixes_batch("crops the batch axis")
    offsets = [int(p.offset[0] if len(p.offset) == 1 else p.offset[i])
               if len(p.offset) else 0 for i in range(len(axes))]
    ends = [o + int(ref[a]) for o, a in zip(offsets, axes)]
    call.node("Slice", [call.inputs[0], call.ints("starts", offsets), call.ints("ends", ends),
                        call.ints("axes", axes)], call.outputs)


@register_converter("Upsample")
def upsample(call):
    if len(call.inputs) > 1:
        raise call.error("max-unpooling (Upsample with a mask bottom, SegNet's) does not "
                         "convert to ONNX")
    s = float(call.param.upsample_param.scale)
    scales = call.const("scales", np.array([1.0, 1.0, s, s], np.float32))
    call.node("Resize", [call.inputs[0], "", scales], call.outputs, mode="nearest",
              coordinate_transformation_mode="asymmetric", nearest_mode="floor")
