"""Bringing legacy Caffe net and solver definitions up to the current format.

Caffe changed its file formats several times and kept reading the old ones by rewriting them on
load (``src/caffe/util/upgrade_proto.cpp``). This module performs the same rewrites, step by
step and in the same order, on the protobuf messages of :mod:`pycaffe_lite.proto.caffe_pb2`:

1. V0 nets (``layers { layer { type: "conv" ... } }``) become V1 nets; separate ``padding``
   layers are folded into the ``pad`` of the convolution or pooling layer they feed.
2. Transformation fields that V1 data layers kept in their own parameters (``scale``,
   ``mean_file``, ``crop_size``, ``mirror``) move into ``transform_param``.
3. V1 nets (``layers { type: CONVOLUTION ... }``) become current nets (``layer { type:
   "Convolution" ... }``); ``blobs_lr`` and ``weight_decay`` become ``param`` specs.
4. Net-level ``input`` / ``input_shape`` / ``input_dim`` become a leading ``Input`` layer.
5. BatchNorm layers that list their three statistics blobs as ``param`` specs have those
   specs pinned to ``lr_mult: 0`` and ``decay_mult: 0``.

Solvers: the ``solver_type`` enum becomes the ``type`` string.

Where Caffe would abort, or would carry on with a net that no longer means what the file said,
a :class:`~pycaffe_lite.errors.ProtoError` naming the file and the layer is raised instead.
"""

import logging

from .errors import ProtoError
from .proto import caffe_pb2

log = logging.getLogger("pycaffe_lite")

_V1 = caffe_pb2.V1LayerParameter
_V0 = caffe_pb2.V0LayerParameter
_SOLVER = caffe_pb2.SolverParameter

__all__ = [
    "net_needs_batch_norm_upgrade",
    "net_needs_data_upgrade",
    "net_needs_input_upgrade",
    "net_needs_upgrade",
    "net_needs_v0_to_v1_upgrade",
    "net_needs_v1_to_v2_upgrade",
    "solver_needs_upgrade",
    "upgrade_net_as_needed",
    "upgrade_net_batch_norm",
    "upgrade_net_data_transformation",
    "upgrade_net_input",
    "upgrade_solver_as_needed",
    "upgrade_v0_net",
    "upgrade_v1_layer_type",
    "upgrade_v1_net",
]

# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------

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

# V1 data layer types whose own parameters carried the transformation fields.
_V1_DATA_PARAM_FIELDS = {
    _V1.DATA: "data_param",
    _V1.IMAGE_DATA: "image_data_param",
    _V1.WINDOW_DATA: "window_data_param",
}
_TRANSFORM_FIELDS = ("scale", "mean_file", "crop_size", "mirror")

# Every *_param message of a V1 layer; each has a same-named field in LayerParameter.
_V1_PARAM_MESSAGES = tuple(
    f.name for f in _V1.DESCRIPTOR.fields
    if f.name.endswith("_param") and f.message_type is not None
)

_SOLVER_TYPE_NAMES = {
    _SOLVER.SGD: "SGD",
    _SOLVER.NESTEROV: "Nesterov",
    _SOLVER.ADAGRAD: "AdaGrad",
    _SOLVER.RMSPROP: "RMSProp",
    _SOLVER.ADADELTA: "AdaDelta",
    _SOLVER.ADAM: "Adam",
}


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------

def _describe(kind, index, name):
    """How an error message refers to one layer: ``layers #2 ('conv1')``."""
    label = f"{kind} #{index}"
    return f"{label} ('{name}')" if name else label


def _has(message, field):
    return message.HasField(field)


def _assign(message, field, value):
    """Set, append to or copy into ``message.field`` according to the field's kind."""
    desc = message.DESCRIPTOR.fields_by_name[field]
    is_repeated = getattr(desc, "is_repeated", None)
    if is_repeated is None:  # older protobuf releases
        is_repeated = desc.label == desc.LABEL_REPEATED
    if desc.message_type is not None:
        target = getattr(message, field)
        (target.add() if is_repeated else target).CopyFrom(value)
    elif is_repeated:
        getattr(message, field).append(value)
    else:
        setattr(message, field, value)


def _copy_messages(dst, src):
    for item in src:
        dst.add().CopyFrom(item)


# --------------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------------

def net_needs_v0_to_v1_upgrade(net_param):
    """Whether any ``layers`` entry holds a V0 ``layer`` definition."""
    return any(_has(entry, "layer") for entry in net_param.layers)


def net_needs_data_upgrade(net_param):
    """Whether a V1 data layer keeps transformation fields in its own parameters."""
    for entry in net_param.layers:
        field = _V1_DATA_PARAM_FIELDS.get(entry.type)
        if field is None:
            continue
        params = getattr(entry, field)
        if any(_has(params, name) for name in _TRANSFORM_FIELDS):
            return True
    return False


def net_needs_v1_to_v2_upgrade(net_param):
    """Whether the net uses the deprecated ``layers`` (V1) field at all."""
    return len(net_param.layers) > 0


def net_needs_input_upgrade(net_param):
    """Whether the net declares its inputs with net-level ``input`` fields."""
    return len(net_param.input) > 0


def _batch_norm_needs_fix(layer):
    if layer.type != "BatchNorm" or len(layer.param) != 3:
        return False
    return any(spec.lr_mult != 0 or spec.decay_mult != 0 for spec in layer.param)


def net_needs_batch_norm_upgrade(net_param):
    """Whether a BatchNorm layer lists three ``param`` specs that are not yet all frozen.

    Caffe flags every BatchNorm layer with exactly three specs; specs already at
    ``lr_mult: 0, decay_mult: 0`` are what the upgrade produces, so they are not flagged here
    (the upgrade is then idempotent).
    """
    return any(_batch_norm_needs_fix(layer) for layer in net_param.layer)


def net_needs_upgrade(net_param):
    """Whether :func:`upgrade_net_as_needed` would change ``net_param``."""
    return (net_needs_v0_to_v1_upgrade(net_param)
            or net_needs_data_upgrade(net_param)
            or net_needs_v1_to_v2_upgrade(net_param)
            or net_needs_input_upgrade(net_param)
            or net_needs_batch_norm_upgrade(net_param))


# --------------------------------------------------------------------------------------------
# V0 -> V1
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# Data transformation fields of V1 data layers
# --------------------------------------------------------------------------------------------

def upgrade_net_data_transformation(net_param):
    """Move ``scale``/``mean_file``/``crop_size``/``mirror`` of V1 data layers (in place)."""
    for entry in net_param.layers:
        field = _V1_DATA_PARAM_FIELDS.get(entry.type)
        if field is None:
            continue
        params = getattr(entry, field)
        transform = entry.transform_param
        # Caffe touches both messages for every data layer, so they are present afterwards.
        params.SetInParent()
        transform.SetInParent()
        for name in _TRANSFORM_FIELDS:
            if _has(params, name):
                setattr(transform, name, getattr(params, name))
                params.ClearField(name)


# --------------------------------------------------------------------------------------------
# V1 -> current
# --------------------------------------------------------------------------------------------

def upgrade_v1_layer_type(enum_value):
    """The current type string of a ``V1LayerParameter.LayerType`` (``""`` for ``NONE``)."""
    try:
        return _V1_TYPE_NAMES[int(enum_value)]
    except (KeyError, TypeError, ValueError):
        raise ProtoError(f"unknown V1LayerParameter layer type {enum_value!r}") from None


def _upgrade_v1_layer(v1, index, source):
    """One V1 ``layers`` entry as a current LayerParameter."""
    where = _describe("layers", index, v1.name)
    if not _has(v1, "type") or v1.type == _V1.NONE:
        raise ProtoError(
            f"{where}: V1 layer without a known type (missing, NONE, or a number this "
            "version does not know)", path=source)
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


def upgrade_v1_net(net_param, source="<string>"):
    """Rewrite the V1 ``layers`` of a net (in place) as current ``layer`` entries."""
    if len(net_param.layer) > 0:
        raise ProtoError(
            "the net has both deprecated 'layers' (V1) and current 'layer' entries; "
            "use one form for all layers", path=source)
    upgraded = [_upgrade_v1_layer(v1, i, source) for i, v1 in enumerate(net_param.layers)]
    net_param.ClearField("layers")
    net_param.layer.extend(upgraded)


# --------------------------------------------------------------------------------------------
# Net-level inputs -> Input layer
# --------------------------------------------------------------------------------------------

def _legacy_input_shapes(net_param, source):
    """One BlobShape per net input, from ``input_shape`` or ``input_dim``; validated."""
    inputs = list(net_param.input)
    n_shapes, n_dims = len(net_param.input_shape), len(net_param.input_dim)
    if n_shapes and n_dims:
        raise ProtoError("the net gives both input_shape and input_dim; use only one of them",
                         path=source)
    if n_shapes:
        if n_shapes != len(inputs):
            raise ProtoError(
                f"the net has {len(inputs)} input(s) {inputs} but {n_shapes} input_shape "
                "entries; give one per input", path=source)
        return [shape for shape in net_param.input_shape]
    if n_dims % 4 or n_dims != 4 * len(inputs):
        raise ProtoError(
            f"the net has {len(inputs)} input(s) {inputs} but {n_dims} input_dim values; "
            "give exactly four (num, channels, height, width) per input", path=source)
    dims = list(net_param.input_dim)
    return [caffe_pb2.BlobShape(dim=dims[4 * i:4 * i + 4]) for i in range(len(inputs))]


def upgrade_net_input(net_param, source="<string>"):
    """Replace net-level inputs (in place) by an ``Input`` layer placed first.

    Inputs without any shape (as in old binary models) are simply dropped, as in Caffe.
    """
    if net_param.input_shape or net_param.input_dim:
        shapes = _legacy_input_shapes(net_param, source)
        input_layer = caffe_pb2.LayerParameter(name="input", type="Input")
        input_layer.top.extend(net_param.input)
        _copy_messages(input_layer.input_param.shape, shapes)
        rest = list(net_param.layer)
        reordered = caffe_pb2.NetParameter()
        reordered.layer.add().CopyFrom(input_layer)
        reordered.layer.extend(rest)
        net_param.ClearField("layer")
        net_param.layer.extend(reordered.layer)
    for field in ("input", "input_shape", "input_dim"):
        net_param.ClearField(field)


# --------------------------------------------------------------------------------------------
# BatchNorm
# --------------------------------------------------------------------------------------------

def upgrade_net_batch_norm(net_param):
    """Freeze the three statistics ``param`` specs of old BatchNorm layers (in place).

    Current BatchNorm keeps its mean, variance and scale-factor blobs out of the solver by
    itself; old definitions had to list three specs with ``lr_mult: 0``. As in Caffe, each such
    spec gets ``lr_mult`` and ``decay_mult`` 0; names and share modes are kept.
    """
    for layer in net_param.layer:
        if layer.type == "BatchNorm" and len(layer.param) == 3:
            for spec in layer.param:
                spec.lr_mult = 0.0
                spec.decay_mult = 0.0


# --------------------------------------------------------------------------------------------
# Drivers
# --------------------------------------------------------------------------------------------

def upgrade_net_as_needed(net_param, source="<string>"):
    """Upgrade ``net_param`` in place to the current format; True if anything changed.

    Raises :class:`ProtoError` (naming ``source`` and the layer) for definitions that cannot be
    upgraded faithfully.
    """
    if len(net_param.layers) > 0 and len(net_param.layer) > 0:
        raise ProtoError(
            "the net has both deprecated 'layers' entries and current 'layer' entries; "
            "use one form for all layers", path=source)
    upgraded = False
    if net_needs_v0_to_v1_upgrade(net_param):
        log.info("Attempting to upgrade input file specified using deprecated "
                 "V0LayerParameter: %s", source)
        upgrade_v0_net(net_param, source)
        log.info("Successfully upgraded file specified using deprecated V0LayerParameter")
        log.warning("%s uses V0 layer definitions, which only old Caffe versions write; "
                    "consider saving the upgraded net", source)
        upgraded = True
    if net_needs_data_upgrade(net_param):
        log.info("Attempting to upgrade input file specified using deprecated "
                 "transformation parameters: %s", source)
        upgrade_net_data_transformation(net_param)
        log.info("Successfully upgraded file specified using deprecated data transformation "
                 "parameters.")
        upgraded = True
    if net_needs_v1_to_v2_upgrade(net_param):
        log.info("Attempting to upgrade input file specified using deprecated "
                 "V1LayerParameter: %s", source)
        upgrade_v1_net(net_param, source)
        log.info("Successfully upgraded file specified using deprecated V1LayerParameter")
        upgraded = True
    if net_needs_input_upgrade(net_param):
        log.info("Attempting to upgrade input file specified using deprecated "
                 "input fields: %s", source)
        upgrade_net_input(net_param, source)
        log.info("Successfully upgraded file specified using deprecated input fields.")
        upgraded = True
    if net_needs_batch_norm_upgrade(net_param):
        log.info("Attempting to upgrade batch norm layers using deprecated params: %s",
                 source)
        upgrade_net_batch_norm(net_param)
        log.info("Successfully upgraded batch norm layers using deprecated params.")
        upgraded = True
    return upgraded


def solver_needs_upgrade(solver_param):
    """Whether the solver names its update rule with the deprecated ``solver_type`` enum."""
    return solver_param.HasField("solver_type")


def upgrade_solver_as_needed(solver_param, source="<string>"):
    """Upgrade ``solver_param`` in place; True if anything changed.

    ``solver_type`` becomes the ``type`` string. If ``type`` is set as well it must name the
    same rule, otherwise a :class:`ProtoError` is raised.
    """
    if not solver_needs_upgrade(solver_param):
        return False
    log.info("Attempting to upgrade input file specified using deprecated "
             "'solver_type' field (enum): %s", source)
    enum_value = solver_param.solver_type
    type_name = _SOLVER_TYPE_NAMES.get(enum_value)
    if type_name is None:
        raise ProtoError(f"unknown solver_type {enum_value}", path=source)
    if solver_param.HasField("type") and solver_param.type != type_name:
        raise ProtoError(
            f"solver_type: {_SOLVER.SolverType.Name(enum_value)} (deprecated) and type: "
            f"\"{solver_param.type}\" disagree; keep only type", path=source)
    solver_param.type = type_name
    solver_param.ClearField("solver_type")
    log.info("Successfully upgraded file specified using deprecated 'solver_type' field "
             "(enum) to 'type' field (string).")
    return True
