"""Converters of the Caffe forks' layers: Permute, Normalize, PriorBox (SSD), Interp
(DeepLab / PSPNet), ShuffleChannel (ShuffleNet), ROIPooling (Fast R-CNN),
ConvolutionDepthwise / DepthwiseConvolution (MobileNet, ShuffleNet), Axpy (SENet), BN
(PSPNet, SegNet, ENet) and Reorg (YOLOv2's ports).
DetectionOutput is in :mod:`.ops_detection`."""

from ..blob import Blob
from .builder import keep_batch, register_converter
from .ops_vision import convolution


@register_converter("Permute")
def permute(call):
    call.node("Transpose", call.inputs, call.outputs, perm=[int(a) for a in call.layer.order])


@register_converter("Normalize")
def normalize(call):
    """``x / sqrt(sum x^2 + eps) * scale``, the sum over (C, H, W) with ``across_spatial``,
    over C alone otherwise; eps inside the square root, as the layer."""
    x = call.inputs[0]
    rank = len(call.in_shapes[0])
    axes = list(range(1, rank)) if call.layer.across_spatial else [1]
    sq = call.node("Mul", [x, x], suffix="square")
    total = call.g.reduce("ReduceSum", sq, axes, True, name=call.name + "/sum")
    norm = call.node("Sqrt", [call.node("Add", [total, call.const("eps", call.layer.eps)],
                                        suffix="eps")], suffix="norm")
    unit = call.node("Div", [x, norm], suffix="unit")
    s = call.blobs[0].reshape(-1)
    s = s.reshape(()) if call.layer.channel_shared else s.reshape((1, -1) + (1,) * (rank - 2))
    call.node("Mul", [unit, call.const("scale", s)], call.outputs)


@register_converter("PriorBox")
def prior_box(call):
    """The priors depend only on the shapes of the feature map and the image, which the
    exported graph fixes (only the batch axis is dynamic, and the priors do not depend on
    it): our layer computes them once and they become a constant of the graph."""
    bottom = [Blob(call.in_shapes[0]), Blob(call.in_shapes[1])]
    top = [Blob(call.out_shapes[0])]
    call.layer.forward(bottom, top)
    call.out_dims = [[int(d) for d in call.out_shapes[0]]]  # one copy for every batch size
    return [call.const("priors", top[0].data)]


def _spatial_sizes(call, x, hw):
    """``sizes`` for Resize: the input's N and C (N may be dynamic) with ``hw``."""
    shape = call.node("Shape", [x], suffix="shape")
    nc = call.node("Slice", [shape, call.ints("nc_start", [0]), call.ints("nc_end", [2])],
                   suffix="nc")
    return call.node("Concat", [nc, call.ints("hw", hw)], suffix="sizes", axis=0)


@register_converter("Interp")
def interp(call):
    """The fork samples output ``o`` at ``o * (in - 1) / (out - 1)`` of the cropped input
    (0 for a single output), bilinearly, with the last input row and column repeated:
    ONNX Resize's linear mode with ``align_corners``, which maps the same way (and a single
    output to 0); runtimes work the weights out in another order, so the results agree to
    float rounding. The crop (pad_beg, pad_end <= 0) is a Slice first."""
    x = call.inputs[0]
    layer = call.layer
    h, w = call.in_shapes[0][2:]
    if layer.pad_beg or layer.pad_end:
        begin = -layer.pad_beg
        x = call.node("Slice", [x, call.ints("crop_starts", [begin, begin]),
                                call.ints("crop_ends", [h + layer.pad_end, w + layer.pad_end]),
                                call.ints("crop_axes", [2, 3])], suffix="crop")
    hw = [int(d) for d in call.out_shapes[0][2:]]
    sizes = _spatial_sizes(call, x, hw)
    call.node("Resize", [x, "", "", sizes], call.outputs, mode="linear",
              coordinate_transformation_mode="align_corners")


@register_converter("ShuffleChannel")
def shuffle_channel(call):
    shape = [int(d) for d in call.in_shapes[0]]
    group = call.layer.group
    rest = shape[2:]
    grouped = call.reshape(call.inputs[0], [0, group, shape[1] // group] + rest,
                           suffix="grouped")
    perm = [0, 2, 1] + list(range(3, 3 + len(rest)))
    swapped = call.node("Transpose", [grouped], suffix="transpose", perm=perm)
    call.reshape(swapped, [0, shape[1]] + rest, call.outputs, suffix="reshape")


@register_converter("ROIPooling")
def roi_pooling(call):
    """ONNX MaxRoiPool defines the fork's rounding: corners ``round(x * spatial_scale)``
    (halves away from zero), bins ``floor(i * h / pooled)`` to ``ceil((i + 1) * h /
    pooled)`` of the region's ``max(extent, 1)`` cells, clipped to the map, 0 for an empty
    bin. MaxRoiPool's version 22 (opset 22 on) has no onnxruntime kernel: refused."""
    if call.g.opset > 21:
        raise call.error("MaxRoiPool at opset %d (its version 22) has no onnxruntime kernel, "
                         "the model would not load; export at opset 21 or lower"
                         % call.g.opset)
    layer = call.layer
    rois = call.inputs[1]
    if len(call.in_shapes[1]) != 2:
        rois = call.reshape(rois, [-1, 5], suffix="rois")
    call.node("MaxRoiPool", [call.inputs[0], rois], call.outputs,
              pooled_shape=[layer.pooled_h, layer.pooled_w],
              spatial_scale=float(layer.spatial_scale))


@register_converter("ConvolutionDepthwise", "DepthwiseConvolution")
def depthwise_convolution(call):
    """A Conv with one group per input channel (the layer's weights are already shaped
    ``(num_output, 1, kh, kw)``)."""
    convolution(call, depthwise=True)


@register_converter("Axpy")
def axpy(call):
    """``a * x + y`` with ``a`` (N, C[, 1, 1]) reshaped to broadcast over x."""
    a, x, y = call.inputs
    rank = len(call.in_shapes[1])
    channels = int(call.in_shapes[1][1])
    scale = call.reshape(a, [0, channels] + [1] * (rank - 2), suffix="a")
    prod = call.node("Mul", [scale, x], suffix="ax")
    call.node("Add", [prod, y], call.outputs)



@register_converter("BN")
def fork_bn(call):
    """The forks' BN layer. PSPNet's, with its running statistics (TEST, or ``frozen``):
    BatchNormalization of its slope, bias, mean and variance. SegNet's and ENet's:
    ``bn_mode: INFERENCE`` is ``scale * x + shift``; LEARN normalises by the batch's own
    statistics in every phase (``E[x^2] - E[x]^2``, eps 1e-9), then scales and shifts."""
    layer, x = call.layer, call.inputs[0]
    blobs = [b.reshape(-1) for b in call.blobs]
    if hasattr(layer, "uses_running_stats"):  # PSPNet's
        if not layer.uses_running_stats:
            raise call.error("PSPNet's BN in the TRAIN phase, not frozen, normalises by the "
                             "batch's statistics; export the TEST net")
        call.node("BatchNormalization", [x] + [call.const(n, b) for n, b in zip(
            ("slope", "bias", "mean", "var"), blobs)], call.outputs, epsilon=float(layer.eps))
        return
    if len(call.outputs) > 1:
        raise call.error("the batch mean and variance tops of bn_mode LEARN do not convert")
    shape = [-1] + [1] * (len(call.in_shapes[0]) - 2)  # per channel, broadcast over the rest
    scale = call.const("scale", blobs[0].reshape(shape))
    shift = call.const("shift", blobs[1].reshape(shape))
    if layer.learn:
        axes = [0] + list(range(2, len(call.in_shapes[0])))
        mean = call.g.reduce("ReduceMean", x, axes, True, name=call.name + "/mean")
        square = call.node("Mul", [x, x], suffix="square")
        mean_sq = call.g.reduce("ReduceMean", square, axes, True, name=call.name + "/mean_sq")
        var = call.node("Sub", [mean_sq, call.node("Mul", [mean, mean], suffix="mean_2")],
                        suffix="var")
        std = call.node("Sqrt", [call.node("Add", [var, call.const("eps", 1e-9)],
                                           suffix="var_eps")], suffix="std")
        x = call.node("Div", [call.node("Sub", [x, mean], suffix="centre"), std],
                      suffix="normalised")
    call.node("Add", [call.node("Mul", [x, scale], suffix="scaled"), shift], call.outputs)


@register_converter("Reorg")
def reorg(call):
    """Darknet's reorg (YOLOv2's passthrough) in its element order: the input's memory read
    as ``(N, C / s^2, H, s, W, s)``, transposed, and read as the top's shape (see
    :func:`pycaffe_lite.layers.vision.reorg_layer.darknet_reorg`); reverse: its inverse."""
    layer = call.layer
    s = layer.stride
    _, c, h, w = (int(d) for d in call.in_shapes[0])
    if layer.reverse:
        view, perm = [0, s, s, c // (s * s), h, w], [0, 3, 4, 1, 5, 2]
    else:
        view, perm = [0, c // (s * s), h, s, w, s], [0, 3, 5, 1, 2, 4]
    x = call.reshape(call.inputs[0], view, suffix="blocks")
    x = call.node("Transpose", [x], suffix="order", perm=perm)
    call.reshape(x, keep_batch(call.out_shapes[0]), call.outputs)
