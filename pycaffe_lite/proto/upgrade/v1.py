"""V1 nets (``layers { type: CONVOLUTION ... }``) to current nets (``layer { type:
"Convolution" ... }``); ``blobs_lr`` and ``weight_decay`` become ``param`` specs."""

from ...errors import ProtoError
from .. import caffe_pb2
from ._common import _V1, _copy_messages, _describe, _has, log

# V1 layer type enum -> current layer type string.
_V1_TYPE_NAMES = {
    _V1.NONE: "",
    _V1.ABSVAL: "AbsVal",
    _V1.ACCURACY: "Accuracy",
    _V1.ARGMAX: "ArgMax",
    _V1.BNLL: "BNLL",
    _V1.CONCAT: "Concat",
    _V1.CONTRASTIVE_LOSS: "ContrastiveLoss",
    _V1.CONVOLUTION: "Convolution",
    _V1.DECONVOLUTION: "Deconvolution",
    _V1.DATA: "Data",
    _V1.DROPOUT: "Dropout",
    _V1.DUMMY_DATA: "DummyData",
    _V1.EUCLIDEAN_LOSS: "EuclideanLoss",
    _V1.ELTWISE: "Eltwise",
    _V1.EXP: "Exp",
    _V1.FLATTEN: "Flatten",
    _V1.HDF5_DATA: "HDF5Data",
    _V1.HDF5_OUTPUT: "HDF5Output",
    _V1.HINGE_LOSS: "HingeLoss",
    _V1.IM2COL: "Im2col",
    _V1.IMAGE_DATA: "ImageData",
    _V1.INFOGAIN_LOSS: "InfogainLoss",
    _V1.INNER_PRODUCT: "InnerProduct",
    _V1.LRN: "LRN",
    _V1.MEMORY_DATA: "MemoryData",
    _V1.MULTINOMIAL_LOGISTIC_LOSS: "MultinomialLogisticLoss",
    _V1.MVN: "MVN",
    _V1.POOLING: "Pooling",
    _V1.POWER: "Power",
    _V1.RELU: "ReLU",
    _V1.SIGMOID: "Sigmoid",
    _V1.SIGMOID_CROSS_ENTROPY_LOSS: "SigmoidCrossEntropyLoss",
    _V1.SILENCE: "Silence",
    _V1.SOFTMAX: "Softmax",
    _V1.SOFTMAX_LOSS: "SoftmaxWithLoss",
    _V1.SPLIT: "Split",
    _V1.SLICE: "Slice",
    _V1.TANH: "TanH",
    _V1.WINDOW_DATA: "WindowData",
    _V1.THRESHOLD: "Threshold",
}

# Every *_param message of a V1 layer; each has a same-named field in LayerParameter.
_V1_PARAM_MESSAGES = tuple(
    f.name for f in _V1.DESCRIPTOR.fields
    if f.name.endswith("_param") and f.message_type is not None
)


def net_needs_v1_to_v2_upgrade(net_param):
    """Whether the net uses the deprecated ``layers`` (V1) field at all."""
    return len(net_param.layers) > 0


def upgrade_v1_layer_type(enum_value):
    """The current type string of a ``V1LayerParameter.LayerType`` (``""`` for ``NONE``)."""
    try:
        return _V1_TYPE_NAMES[int(enum_value)]
    except (KeyError, TypeError, ValueError):
        raise ProtoError(f"unknown V1LayerParameter layer type {enum_value!r}") from None


def _upgrade_v1_layer(v1, index, source, weights=False):
    """One V1 ``layers`` entry as a current LayerParameter.

    In a net definition a layer needs a type. In a weights file (``weights``) a layer whose
    type is missing, NONE or a number this schema does not know (another fork's layer, such as
    an early V1 CROP = 40) becomes a layer without a type, as in Caffe: its blobs are still
    copied by name."""
    where = _describe("layers", index, v1.name)
    untyped = not _has(v1, "type") or v1.type == _V1.NONE
    if untyped and not weights:
        raise ProtoError(
            f"{where}: V1 layer without a known type (missing, NONE, or a number this "
            "version does not know)", path=source)
    if untyped:
        log.warning("%s: %s: V1 layer without a known type (missing, NONE, or a number this "
                    "version does not know); kept without a type, its %d blob(s) copied by "
                    "layer name", source, where, len(v1.blobs))
    if _has(v1, "layer"):
        raise ProtoError(f"{where}: V1 layer still holds a V0 'layer' definition",
                         path=source)
    layer = caffe_pb2.LayerParameter()
    layer.bottom.extend(v1.bottom)
    layer.top.extend(v1.top)
    if _has(v1, "name"):
        layer.name = v1.name
    _copy_messages(layer.include, v1.include)
    _copy_messages(layer.exclude, v1.exclude)
    if not untyped:
        layer.type = upgrade_v1_layer_type(v1.type)
    _copy_messages(layer.blobs, v1.blobs)

    # Per-blob settings, spread over four parallel lists in V1, become one ParamSpec each.
    n_specs = max(len(v1.param), len(v1.blob_share_mode), len(v1.blobs_lr),
                  len(v1.weight_decay))
    for _ in range(n_specs):
        layer.param.add()
    for spec, name in zip(layer.param, v1.param):
        spec.name = name
    for spec, mode in zip(layer.param, v1.blob_share_mode):
        spec.share_mode = caffe_pb2.ParamSpec.DimCheckMode.Value(_V1.DimCheckMode.Name(mode))
    for spec, lr in zip(layer.param, v1.blobs_lr):
        spec.lr_mult = lr
    for spec, decay in zip(layer.param, v1.weight_decay):
        spec.decay_mult = decay

    layer.loss_weight.extend(v1.loss_weight)
    for field in _V1_PARAM_MESSAGES:
        if _has(v1, field):
            getattr(layer, field).CopyFrom(getattr(v1, field))
    return layer


def upgrade_v1_net(net_param, source="<string>", weights=False):
    """Rewrite the V1 ``layers`` of a net (in place) as current ``layer`` entries; with
    ``weights`` (the net of a weights file) a layer of unknown type is kept without one."""
    if len(net_param.layer) > 0:
        raise ProtoError(
            "the net has both deprecated 'layers' (V1) and current 'layer' entries; "
            "use one form for all layers", path=source)
    upgraded = [_upgrade_v1_layer(v1, i, source, weights)
                for i, v1 in enumerate(net_param.layers)]
    net_param.ClearField("layers")
    net_param.layer.extend(upgraded)
