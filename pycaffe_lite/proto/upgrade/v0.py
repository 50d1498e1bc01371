"""V0 nets (``layers { layer { type: "conv" ... } }``) to V1 nets; separate ``padding`` layers
are folded into the ``pad`` of the convolution or pooling layer they feed."""

from ...errors import ProtoError
from .. import caffe_pb2
from ._common import _V0, _V1, _assign, _copy_messages, _describe, _has

# V0 layer type string -> V1 layer type enum.
_V0_TYPES = {
    "accuracy": _V1.ACCURACY,
    "bnll": _V1.BNLL,
    "concat": _V1.CONCAT,
    "conv": _V1.CONVOLUTION,
    "data": _V1.DATA,
    "dropout": _V1.DROPOUT,
    "euclidean_loss": _V1.EUCLIDEAN_LOSS,
    "flatten": _V1.FLATTEN,
    "hdf5_data": _V1.HDF5_DATA,
    "hdf5_output": _V1.HDF5_OUTPUT,
    "im2col": _V1.IM2COL,
    "images": _V1.IMAGE_DATA,
    "infogain_loss": _V1.INFOGAIN_LOSS,
    "innerproduct": _V1.INNER_PRODUCT,
    "lrn": _V1.LRN,
    "multinomial_logistic_loss": _V1.MULTINOMIAL_LOGISTIC_LOSS,
    "pool": _V1.POOLING,
    "relu": _V1.RELU,
    "sigmoid": _V1.SIGMOID,
    "softmax": _V1.SOFTMAX,
    "softmax_loss": _V1.SOFTMAX_LOSS,
    "split": _V1.SPLIT,
    "tanh": _V1.TANH,
    "window_data": _V1.WINDOW_DATA,
}


_CONV_IP = ("conv", "convolution_param"), ("innerproduct", "inner_product_param")
_CONV_POOL = ("conv", "convolution_param"), ("pool", "pooling_param")

# V0 field -> {V0 layer type it is valid for: (V1 *_param field, field inside it)}.
# A target field of None copies the whole message. Repeated targets are appended to.
_V0_FIELDS = {
    "num_output": {t: (p, "num_output") for t, p in _CONV_IP},
    "biasterm": {t: (p, "bias_term") for t, p in _CONV_IP},
    "weight_filler": {t: (p, "weight_filler") for t, p in _CONV_IP},
    "bias_filler": {t: (p, "bias_filler") for t, p in _CONV_IP},
    "pad": {t: (p, "pad") for t, p in _CONV_POOL},
    "kernelsize": {t: (p, "kernel_size") for t, p in _CONV_POOL},
    "group": {"conv": ("convolution_param", "group")},
    "stride": {t: (p, "stride") for t, p in _CONV_POOL},
    "pool": {"pool": ("pooling_param", "pool")},
    "dropout_ratio": {"dropout": ("dropout_param", "dropout_ratio")},
    "local_size": {"lrn": ("lrn_param", "local_size")},
    "alpha": {"lrn": ("lrn_param", "alpha")},
    "beta": {"lrn": ("lrn_param", "beta")},
    "k": {"lrn": ("lrn_param", "k")},
    "source": {
        "data": ("data_param", "source"),
        "hdf5_data": ("hdf5_data_param", "source"),
        "images": ("image_data_param", "source"),
        "window_data": ("window_data_param", "source"),
        "infogain_loss": ("infogain_loss_param", "source"),
    },
    "batchsize": {
        "data": ("data_param", "batch_size"),
        "hdf5_data": ("hdf5_data_param", "batch_size"),
        "images": ("image_data_param", "batch_size"),
        "window_data": ("window_data_param", "batch_size"),
    },
    "rand_skip": {
        "data": ("data_param", "rand_skip"),
        "images": ("image_data_param", "rand_skip"),
    },
    "shuffle_images": {"images": ("image_data_param", "shuffle")},
    "new_height": {"images": ("image_data_param", "new_height")},
    "new_width": {"images": ("image_data_param", "new_width")},
    "concat_dim": {"concat": ("concat_param", "concat_dim")},
    "det_fg_threshold": {"window_data": ("window_data_param", "fg_threshold")},
    "det_bg_threshold": {"window_data": ("window_data_param", "bg_threshold")},
    "det_fg_fraction": {"window_data": ("window_data_param", "fg_fraction")},
    "det_context_pad": {"window_data": ("window_data_param", "context_pad")},
    "det_crop_mode": {"window_data": ("window_data_param", "crop_mode")},
    "hdf5_output_param": {"hdf5_output": ("hdf5_output_param", None)},
}

# V0 fields that go to transform_param whatever the layer type.
_V0_TRANSFORM_FIELDS = {
    "scale": "scale",
    "meanfile": "mean_file",
    "cropsize": "crop_size",
    "mirror": "mirror",
}


def net_needs_v0_to_v1_upgrade(net_param):
    """Whether any ``layers`` entry holds a V0 ``layer`` definition."""
    return any(_has(entry, "layer") for entry in net_param.layers)


def _fold_padding_layers(net_param, source):
    """A copy of a V0 net without ``padding`` layers; their pad moves to the layer they feed."""
    folded = caffe_pb2.NetParameter()
    folded.CopyFrom(net_param)
    folded.ClearField("layers")
    # Blob name -> index of the layer that last wrote it (-1: a net input).
    producer = {name: -1 for name in net_param.input}
    for i, entry in enumerate(net_param.layers):
        v0 = entry.layer
        where = _describe("layers", i, v0.name)
        is_padding = v0.type == "padding"
        if not is_padding:
            folded.layers.add().CopyFrom(entry)
        for j, blob in enumerate(entry.bottom):
            if blob not in producer:
                raise ProtoError(
                    f"{where}: bottom '{blob}' is neither a net input nor the top of an "
                    "earlier layer", path=source)
            src_index = producer[blob]
            if src_index < 0:
                continue
            pad_layer = net_param.layers[src_index]
            if pad_layer.layer.type != "padding":
                continue
            pad_where = _describe("layers", src_index, pad_layer.layer.name)
            if v0.type not in ("conv", "pool"):
                raise ProtoError(
                    f"{where}: padding layer {pad_where} feeds a layer of type '{v0.type}'; "
                    "only 'conv' and 'pool' layers can absorb a padding layer", path=source)
            if len(entry.bottom) != 1:
                raise ProtoError(
                    f"{where}: a layer fed by padding layer {pad_where} must have exactly one "
                    f"bottom, has {len(entry.bottom)}", path=source)
            if len(pad_layer.bottom) != 1 or len(pad_layer.top) != 1:
                raise ProtoError(
                    f"{pad_where}: a padding layer must have exactly one bottom and one top",
                    path=source)
            target = folded.layers[len(folded.layers) - 1]
            target.layer.pad = pad_layer.layer.pad
            target.bottom[j] = pad_layer.bottom[0]
        for blob in entry.top:
            producer[blob] = i
    return folded


def _upgrade_v0_layer(entry, index, source):
    """One V0 ``layers`` entry as a V1 layer."""
    v1 = caffe_pb2.V1LayerParameter()
    v1.bottom.extend(entry.bottom)
    v1.top.extend(entry.top)
    v0 = entry.layer
    where = _describe("layers", index, v0.name)
    if _has(v0, "name"):
        v1.name = v0.name
    layer_type = v0.type
    if _has(v0, "type"):
        if layer_type not in _V0_TYPES:
            raise ProtoError(f"{where}: unknown V0 layer type '{layer_type}'", path=source)
        v1.type = _V0_TYPES[layer_type]
    _copy_messages(v1.blobs, v0.blobs)
    v1.blobs_lr.extend(v0.blobs_lr)
    v1.weight_decay.extend(v0.weight_decay)

    for v0_field, targets in _V0_FIELDS.items():
        if not _has(v0, v0_field):
            continue
        if layer_type not in targets:
            raise ProtoError(
                f"{where}: V0 parameter '{v0_field}' does not apply to layer type "
                f"'{layer_type}'", path=source)
        param_field, field = targets[layer_type]
        value = getattr(v0, v0_field)
        if v0_field == "pool":
            value = caffe_pb2.PoolingParameter.PoolMethod.Value(_V0.PoolMethod.Name(value))
        if field is None:
            getattr(v1, param_field).CopyFrom(value)
        else:
            _assign(getattr(v1, param_field), field, value)

    for v0_field, field in _V0_TRANSFORM_FIELDS.items():
        if _has(v0, v0_field):
            setattr(v1.transform_param, field, getattr(v0, v0_field))
    return v1


def upgrade_v0_net(net_param, source="<string>"):
    """Rewrite a V0 net (in place) as a V1 net.

    Like Caffe, only the name, the layers, ``input``, ``input_dim`` and ``force_backward`` are
    kept.
    """
    for i, entry in enumerate(net_param.layers):
        if not _has(entry, "layer"):
            raise ProtoError(
                f"{_describe('layers', i, entry.name)}: V1-style entry in a net written with "
                "V0 layer definitions; use one form for all layers", path=source)
    folded = _fold_padding_layers(net_param, source)
    upgraded = [_upgrade_v0_layer(entry, i, source) for i, entry in enumerate(folded.layers)]
    net_param.Clear()
    if _has(folded, "name"):
        net_param.name = folded.name
    net_param.layers.extend(upgraded)
    net_param.input.extend(folded.input)
    net_param.input_dim.extend(folded.input_dim)
    if _has(folded, "force_backward"):
        net_param.force_backward = folded.force_backward
