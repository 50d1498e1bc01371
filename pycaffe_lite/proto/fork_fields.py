"""Fields that Caffe forks numbered differently from this schema, found again after a read.

A fork's parameter message keeps the fork's number here unless BVLC Caffe (or a fork already
in this schema) uses that number for something else, or several forks claim it. Then the
fork's field takes a number from 1000 up: a prototxt spells the field by name and reads
unchanged, but a binary file written by the fork still carries it under the fork's number.
Parsed with this schema, those bytes land in another field or are kept as unknown fields
(protobuf keeps them and writes them back unchanged); :func:`restore` finds them again and
moves them into this schema's field, deciding by the layer's type and the value's wire type.

LayerParameter 149 is the crowded number: NVCaffe's ``debug`` (a bool), Intel Caffe's
``engine`` (a string), MobileNet-YOLO's ``reorg_param``, R-FCN's ``psroi_pooling_param`` and
darknet2caffe's ``upsample_param`` (messages). A varint there is NVCaffe's; a string naming an
engine is Intel's; other bytes go to the parameter message of the layer's type. The tables
below (:data:`LAYER_CLAIMS`, :data:`TRANSFORM_CLAIMS`) list every such claim; docs/forks.md
has them as a table.

What is still unknown after :func:`restore` is listed by :func:`unknown_fields`, with the fork
that defines the number where one is known.
"""

import logging
import re
from typing import NamedTuple, Optional

from google.protobuf.unknown_fields import UnknownFieldSet

from . import fork_layer_fields
from .tolerant import ENVELOPE, ENVELOPE_TAG
from .wire import (FIXED32, FIXED64, LEN, VARINT, decode_varint, encode_varint,  # noqa: F401
                   fields)


log = logging.getLogger(__name__)

_WIRE_OF_TYPE = {"double": FIXED64, "float": FIXED32, "fixed64": FIXED64, "fixed32": FIXED32,
                 "sfixed64": FIXED64, "sfixed32": FIXED32, "string": LEN, "bytes": LEN,
                 "message": LEN, "group": 3}

# The engine names Intel Caffe writes in LayerParameter.engine (before an optional ":devices")
INTEL_ENGINES = ("CAFFE", "CUDNN", "MKL2017", "MKLDNN", "MLSL", "DEFAULT")


class Claim(NamedTuple):
    """A fork's field that this schema holds under another number.

    ``number`` and ``wire_type``: how the fork's bytes arrive; ``field``: this schema's field
    (same message) for them. With ``layer_types`` the claim holds for layers of those types
    only, whatever this schema reads at that number; without, it holds for any layer, but only
    for bytes this schema does not read itself (another wire type, or an unknown number).
    ``marked``: the bytes look the same as a field this schema reads there, so the claim
    holds only in a message that shows another field of the same fork. ``inner``: for a
    message, ``(the fork's number, this schema's)`` pairs for the fields inside it, renumbered
    as it moves."""

    fork: str
    number: int
    wire_type: int
    field: str
    layer_types: frozenset = None
    marked: bool = False
    inner: tuple = None


def _types(*names):
    return frozenset(names)


# LayerParameter: checked in order; the first claim that matches a field takes it.
LAYER_CLAIMS = (
    Claim("Intel Caffe", 149, LEN, "engine"),  # only a string naming an engine (see _engine)
    Claim("DeepLab/PSPNet", 143, LEN, "interp_param", _types("Interp")),
    Claim("Intel Caffe", 148, LEN, "smooth_l1_loss_param", _types("SmoothL1Loss")),
    Claim("MobileNet-YOLO", 149, LEN, "reorg_param", _types("Reorg")),
    Claim("R-FCN", 149, LEN, "psroi_pooling_param", _types("PSROIPooling")),
    Claim("darknet2caffe", 149, LEN, "upsample_param", _types("Upsample")),
    Claim("Intel Caffe", 153, LEN, "psroi_pooling_param", _types("PSROIPooling")),
    Claim("Intel Caffe", 154, LEN, "roi_pooling_param", _types("ROIPooling")),
    Claim("Intel Caffe", 159, LEN, "reorg_param", _types("Reorg")),
    Claim("NVCaffe", 151, LEN, "recurrent_param", _types("RNN", "LSTM")),
    Claim("NVCaffe", 145, VARINT, "forward_type"),
    Claim("NVCaffe", 146, VARINT, "backward_type"),
    Claim("NVCaffe", 147, VARINT, "forward_math"),
    Claim("NVCaffe", 148, VARINT, "backward_math"),
    Claim("NVCaffe", 149, VARINT, "debug"),
)

# TransformationParameter: NVCaffe numbers its own fields 8-23 and moves the SSD fork's to
# 208-214. Its img_rand_resize_upper (11) has the wire type of SSD's crop_h (11): NVCaffe's
# only where the message shows another NVCaffe field.
TRANSFORM_CLAIMS = (
    Claim("NVCaffe", 8, VARINT, "use_gpu_transform"),
    Claim("NVCaffe", 9, VARINT, "random_seed"),
    Claim("NVCaffe", 10, VARINT, "img_rand_resize_lower"),
    Claim("NVCaffe", 11, VARINT, "img_rand_resize_upper", marked=True),
    Claim("NVCaffe", 12, FIXED32, "rand_resize_ratio_lower"),
    Claim("NVCaffe", 13, FIXED32, "rand_resize_ratio_upper"),
    Claim("NVCaffe", 14, FIXED32, "vertical_stretch_lower"),
    Claim("NVCaffe", 208, LEN, "resize_param"),
    Claim("NVCaffe", 209, LEN, "noise_param"),
    Claim("NVCaffe", 210, LEN, "emit_constraint"),
    Claim("NVCaffe", 211, VARINT, "crop_h"),
    Claim("NVCaffe", 212, VARINT, "crop_w"),
    Claim("NVCaffe", 213, LEN, "distort_param"),
    Claim("NVCaffe", 214, LEN, "expand_param"),
    Claim("Intel Caffe", 15, LEN, "random_resize_param"),
    Claim("Intel Caffe", 16, LEN, "random_aspect_ratio_param"),
)
# NVCaffe's transformation fields that keep the fork's number: their presence marks a message
_NVCAFFE_TRANSFORM_OWN = frozenset(range(15, 24))

# Parameter messages with claims of their own: message name -> claims (checked in the layer's
# fields of that type)
# BatchNormParameter: Intel Caffe's fields whose numbers are NVCaffe's here
BATCH_NORM_CLAIMS = (
    Claim("Intel Caffe", 4, VARINT, "engine"),
    Claim("Intel Caffe", 5, VARINT, "use_weight_bias"),
    Claim("Intel Caffe", 6, VARINT, "bias_term"),
    Claim("Intel Caffe", 7, LEN, "filler"),
    Claim("Intel Caffe", 8, LEN, "bias_filler"),
)

MESSAGE_CLAIMS = {"TransformationParameter": TRANSFORM_CLAIMS,
                  "BatchNormParameter": BATCH_NORM_CLAIMS}


# The layer fields of the segmentation, YOLO, R-FCN and CTPN forks (fork_layer_fields) join
# the claims above.
LAYER_CLAIMS += tuple(Claim(f.fork, f.number, f.wire_type, f.field, frozenset(f.types),
                            inner=fork_layer_fields.INNER_NUMBERS.get((f.fork, f.number)))
                      for f in fork_layer_fields.LAYER_FIELDS)
for _message, _number, _wire, _field in fork_layer_fields.MESSAGE_FIELDS:
    MESSAGE_CLAIMS[_message] = MESSAGE_CLAIMS.get(_message, ()) + (
        Claim("pycaffe-lite (earlier numbering)", _number, _wire, _field),)

# Numbers that forks define and this schema does not read (message -> number -> forks), for
# the message about an unknown field. The claims above are added below.
FORK_NUMBERS = {
    "LayerParameter": {150: ("Intel Caffe (multinode)",), 152: ("NVCaffe (trt_param)",
                                                                  "Intel Caffe"),
                       155: ("Intel Caffe (spatial_dropout_param)",),
                       209: ("Intel Caffe (region_loss_param)",),
                       10001: ("CaffeOnSpark (source_class, a string)",
                               "R-FCN (psroi_pooling_param)"),
                       10010: ("CaffeOnSpark (cos_data_param)",)},
    # CaffeOnSpark (yahoo/caffe, the caffe-public of yahoo/CaffeOnSpark)
    "MemoryDataParameter": {10000: ("CaffeOnSpark (share_in_parallel)",),
                            10001: ("CaffeOnSpark (source)",),
                            10002: ("CaffeOnSpark (dataframe_column_select)",),
                            10003: ("CaffeOnSpark (image_encoded)",),
                            10004: ("CaffeOnSpark (dataframe_format)",)},
    "PoolingParameter": {40: ("NVCaffe (torch_pooling)",)},
    "DropoutParameter": {3: ("NVCaffe (random_seed)",)},
    "ConvolutionParameter": {19: ("NVCaffe (cudnn_convolution_algo_seeker)",
                                  "Intel Caffe (relu, a fused ReLU)"),
                             20: ("NVCaffe (conv_algos_override)",
                                  "Intel Caffe (negative_slope)"),
                             24: ("Intel Caffe (fusion_type)",)},
}
for _message, _claims in [("LayerParameter", LAYER_CLAIMS)] + list(MESSAGE_CLAIMS.items()):
    for _c in _claims:
        _known = FORK_NUMBERS.setdefault(_message, {}).setdefault(_c.number, ())
        FORK_NUMBERS[_message][_c.number] = _known + ("%s (%s)" % (_c.fork, _c.field),)

# Text files name their fields: a name this schema lacks, with the fork that defines it.
FORK_FIELD_NAMES = {
    ("LayerParameter", "multinode"): "Intel Caffe",
    ("LayerParameter", "spatial_dropout_param"): "Intel Caffe",
    ("LayerParameter", "region_loss_param"): "Intel Caffe",
    ("LayerParameter", "box_annotator_ohem_param"): "Intel Caffe",
    ("LayerParameter", "trt_param"): "NVCaffe",
    ("LayerParameter", "detectnet_groundtruth_param"): "NVCaffe",
    ("LayerParameter", "detectnet_augmentation_param"): "NVCaffe",
    ("PoolingParameter", "avg_include_pad"): "Intel Caffe",
    ("PoolingParameter", "torch_pooling"): "NVCaffe",
    ("DropoutParameter", "random_seed"): "NVCaffe",
    ("ConvolutionParameter", "cudnn_convolution_algo_seeker"): "NVCaffe",
    ("ConvolutionParameter", "conv_algos_override"): "NVCaffe",
    ("NetParameter", "multinode"): "Intel Caffe",
    ("NetParameter", "compile_net_state"): "Intel Caffe",
    ("TransformationParameter", "flow"): "Intel Caffe",
    ("TransformationParameter", "bgr2rgb"): "Intel Caffe",
    ("TransformationParameter", "pad"): "Intel Caffe",
    ("LayerParameter", "source_class"): "CaffeOnSpark",
    ("LayerParameter", "cos_data_param"): "CaffeOnSpark",
    ("MemoryDataParameter", "share_in_parallel"): "CaffeOnSpark",
    ("MemoryDataParameter", "source"): "CaffeOnSpark",
    ("MemoryDataParameter", "dataframe_column_select"): "CaffeOnSpark",
    ("MemoryDataParameter", "image_encoded"): "CaffeOnSpark",
    ("MemoryDataParameter", "dataframe_format"): "CaffeOnSpark",
}
# NVCaffe's and Intel Caffe's layer options that change results and are not run here
# (Intel's fused ReLU, label smoothing, SELU's lambda, ...): a text file using them stops
# naming the fork. (NVCaffe's LARC, ramp-up, min_lr, momentum and weight decay policies and
# testing of the last epochs, and Intel Caffe's solver options, are in the schema and run:
# pycaffe_lite/solvers/nvcaffe.py, last_epochs.py and intel.py.)
FORK_FIELD_NAMES.update({
    ("ELUParameter", "lambda"): "NVCaffe",
    ("LossParameter", "label_smoothing"): "NVCaffe (and Intel Caffe)",
    ("LossParameter", "pre_fixed_normalizer"): "Intel Caffe",
    ("ImageDataParameter", "short_side"): "NVCaffe",
    ("ImageDataParameter", "threads"): "NVCaffe",
    ("ImageDataParameter", "cache"): "NVCaffe",
    ("ImageDataParameter", "precache"): "NVCaffe",
    ("ImageDataParameter", "dataset_share_per_node"): "NVCaffe",
    ("ImageDataParameter", "min_height"): "Intel Caffe",
    ("ImageDataParameter", "min_width"): "Intel Caffe",
    ("ConvolutionParameter", "relu"): "Intel Caffe",
    ("ConvolutionParameter", "negative_slope"): "Intel Caffe",
    ("ConvolutionParameter", "conv_algorithm"): "Intel Caffe",
    ("ConvolutionParameter", "fusion_type"): "Intel Caffe",
    ("InnerProductParameter", "relu"): "Intel Caffe",
    ("InnerProductParameter", "negative_slope"): "Intel Caffe",
    ("ReLUParameter", "fuse"): "Intel Caffe",
    ("ROIPoolingParameter", "pooled_size"): "Intel Caffe",
    ("FillerParameter", "scale"): "Intel Caffe",
    ("PoolingParameter", "kernel_size_3d"): "Intel Caffe",
    ("DataParameter", "side"): "Intel Caffe",
    ("LayerParameter", "split_param"): "Intel Caffe",
})
# FlowNet 2.0 (lmb-freiburg/flownet2) and the CRNN port (yalecyu/crnn.caffe): their layers
# (Correlation, FlowWarp, Resample, DataAugmentation, ...; ContinuationIndicator, CtcLoss)
# are not provided.
FORK_FIELD_NAMES.update({("LayerParameter", name): "FlowNet 2.0" for name in (
    "coeff_schedule_param", "augmentation_param", "correlation_param", "l1_loss_param",
    "writer_param", "reader_param", "mean_param", "resample_param", "downsample_param",
    "lpq_loss_param", "flow_warp_param", "reshape_every_iter")})
FORK_FIELD_NAMES.update({("LayerParameter", name): "CRNN (crnn.caffe)" for name in (
    "ctc_loss_param", "continuation_indicator_param", "labelsequence_accuracy_param")})
# caffe-yolov2's DetectionOutput (gklz1982/caffe-yolov2: YOLOv2 decoding under SSD's type
# name, its fields in DetectionOutputParameter) is not provided.
FORK_FIELD_NAMES.update({("DetectionOutputParameter", name): "caffe-yolov2 (gklz1982)"
                         for name in ("side", "num_box", "coords", "nms_threshold", "biases",
                                      "label_map_file")})
# MobileNet-YOLO's training (eric612/MobileNet-YOLO: its AnnotatedData options for YOLO and
# segmentation labels, its augmentation, the Yolov3 and YoloSeg losses, its segmentation
# evaluation) is not provided; its deploy layers are.
FORK_FIELD_NAMES.update({(message, name): "MobileNet-YOLO (eric612/MobileNet-YOLO)"
                         for message, names in (
    ("AnnotatedDataParameter", ("yolo_data_type", "yolo_data_jitter", "train_diffcult",
                                "single_class", "seg_scales", "seg_resize_width",
                                "seg_resize_height", "difficult_label_warmup")),
    ("TransformationParameter", ("enable_classf_aug", "min_scaling_factor",
                                 "max_scaling_factor", "max_rotation_angle",
                                 "contrast_brightness_adjustment", "smooth_filtering",
                                 "min_contrast", "max_contrast", "max_brightness_shift",
                                 "max_smooth", "max_color_shift", "min_side_min",
                                 "min_side_max", "min_side", "apply_probability",
                                 "debug_params", "cvt_bgr2rgb")),
    ("LayerParameter", ("yolov3_param", "yolo_seg_param", "segmentation_evaluate_param")))
                         for name in names})

# DeepLab v2's layers that are not provided (BiasChannel, DomainTransform, ...): their fields.
FORK_FIELD_NAMES.update({("LayerParameter", field): fork for fork, field in
                         fork_layer_fields.NOT_PROVIDED_TYPES.values() if field})


# Enum values of forks that this schema lacks: (the enum's name within caffe, the value) -> who
# defines it. Intel Caffe's LossParameter.NormalizationMode (and R-FCN's, whose published
# train files normalize their box loss so) has PRE_FIXED, with pre_fixed_normalizer.
FORK_ENUM_VALUES = {
    ("LossParameter.NormalizationMode", "PRE_FIXED"): "Intel Caffe's and R-FCN's forks",
}


def fork_of_enum_value(enum_name, value):
    """Who defines the enum value ``enum_name.value`` where this schema lacks it, or None."""
    return FORK_ENUM_VALUES.get((enum_name, value))


def fork_of_field(message_name, field_name):
    """The fork that defines ``message_name.field_name`` where this schema lacks it, or None."""
    return FORK_FIELD_NAMES.get((message_name, field_name))


def _reads(descriptor, number, wire):
    """Whether this schema reads ``number`` with ``wire`` type in the message ``descriptor``."""
    field = descriptor.fields_by_number.get(number)
    if field is None:
        return False
    if field.type == field.TYPE_MESSAGE:
        kind = "message"
    else:
        kind = {field.TYPE_DOUBLE: "double", field.TYPE_FLOAT: "float",
                field.TYPE_STRING: "string", field.TYPE_BYTES: "bytes",
                field.TYPE_FIXED64: "fixed64", field.TYPE_FIXED32: "fixed32",
                field.TYPE_SFIXED64: "sfixed64", field.TYPE_SFIXED32: "sfixed32"}.get(
                    field.type, "varint")
    expected = _WIRE_OF_TYPE.get(kind, VARINT)
    if wire == LEN and expected != LEN and field.is_repeated:
        return True  # a packed repeated scalar
    return wire == expected


def _engine(payload):
    """Whether length-delimited bytes are Intel Caffe's engine string."""
    try:
        text = payload.decode("ascii")
    except UnicodeDecodeError:
        return False
    return text.split(":", 1)[0].strip().upper() in INTEL_ENGINES


def _remap(message, claims, layer_type=None):
    """Move the fork fields of ``message`` found by ``claims`` to this schema's numbers, in
    place. Returns the forks whose fields were moved (a set, empty when nothing changed)."""
    descriptor = message.DESCRIPTOR
    try:
        parsed = list(fields(message.SerializePartialToString()))
    except ValueError:  # a group among the unknown fields: no Caffe fork writes one
        return set()
    moved, out, forks, pending = [], [], set(), []
    for number, wire, raw, value in parsed:
        as_read = (number, wire, raw)
        if number == ENVELOPE and wire == LEN:
            # a field set aside on reading (its bytes are not this schema's type there): a
            # fork's claim may still take it
            number, wire, raw, value = _opened(value)
        claim = _claim_for(descriptor, claims, number, wire, value, layer_type)
        if claim is None:
            out.append(as_read)
        elif claim.marked:
            pending.append((claim, wire, raw, as_read))
        else:
            moved.append((claim, wire, raw, as_read))
            forks.add(claim.fork)
    numbers = {n for n, _, _ in out}
    if claims is TRANSFORM_CLAIMS and numbers & _NVCAFFE_TRANSFORM_OWN:
        forks.add("NVCaffe")  # its fields that keep their numbers mark the message too
    for claim, wire, raw, as_read in pending:
        if claim.fork in forks:
            moved.append((claim, wire, raw, as_read))
            forks.add(claim.fork)
        else:
            out.append(as_read)
    # a field already set under this schema's number (bytes written here) is left as it is
    numbers = {n for n, _, _ in out}
    for entry in [m for m in moved if _number(descriptor, m[0]) in numbers]:
        moved.remove(entry)
        out.append(entry[3])
    if not moved:
        return set()
    forks = {claim.fork for claim, _, _, _ in moved}
    rebuilt = b"".join(encode_varint(n << 3 | w) + raw for n, w, raw in out)
    rebuilt += b"".join(encode_varint(_number(descriptor, c) << 3 | w) +
                        (_renumbered(_unwrapped(raw), c.inner) if c.inner else
                         _unwrapped(raw) if w == LEN else raw)
                        for c, w, raw, _ in moved)
    original = message.SerializePartialToString()
    message.Clear()
    try:
        message.MergeFromString(rebuilt)
    except Exception:  # the fork's bytes are not this schema's field either: leave them
        message.Clear()
        message.MergeFromString(original)
        return set()
    return forks


def _rewritten(raw, each):
    """A length-delimited value (``raw``: its length and payload) whose payload's fields are
    each replaced by ``each(number, wire type, raw bytes after the tag, value)`` (bytes of
    whole fields); ``raw`` as it is where the payload is not a message (refused where it is
    parsed)."""
    try:
        _, body = decode_varint(raw, 0)
        payload = b"".join(each(n, w, r, value) for n, w, r, value in fields(raw[body:]))
    except ValueError:
        return raw
    return encode_varint(len(payload)) + payload


def _renumbered(raw, pairs):
    """A length-delimited value with the fields of its payload renumbered by ``pairs``
    ((from, to), ...); other fields kept as they are."""
    numbers = dict(pairs)
    return _rewritten(raw, lambda n, w, r, _: encode_varint(numbers.get(n, n) << 3 | w) + r)


def _unwrapped(raw):
    """A length-delimited value with the envelopes inside it opened: the fields that did not
    decode as the field it was read as (another field at the fork's number) take their own
    places again before the value moves to its field."""
    if ENVELOPE_TAG not in raw:
        return raw

    def opened(n, w, r, value):
        if n == ENVELOPE and w == LEN:
            return bytes(value)
        return encode_varint(n << 3 | w) + (_unwrapped(r) if w == LEN else r)
    return _rewritten(raw, opened)


def _opened(payload):
    """(number, wire type, raw bytes after the tag, value) of the field in an envelope."""
    try:
        return next(fields(payload))
    except (ValueError, StopIteration):
        return ENVELOPE, LEN, payload, payload


def _number(descriptor, claim):
    return descriptor.fields_by_name[claim.field].number


def _claim_for(descriptor, claims, number, wire, value, layer_type):
    for claim in claims:
        if claim.number != number or claim.wire_type != wire:
            continue
        target = descriptor.fields_by_name.get(claim.field)
        if target is None or target.number == number:
            continue  # this schema has no such field (yet), or reads it at the fork's number
        if claim.field == "engine" and wire == LEN and not _engine(value):
            continue
        if claim.layer_types is not None:
            if layer_type in claim.layer_types:
                return claim
            continue
        if claim.marked or not _reads(descriptor, number, wire):
            return claim
    return None


_TYPED = frozenset(t for c in LAYER_CLAIMS if c.layer_types for t in c.layer_types)


def restore(net_param):
    """Move fork fields read under other numbers into this schema's fields, in place: each
    layer's own (:data:`LAYER_CLAIMS`) and those of its parameter messages listed in
    :data:`MESSAGE_CLAIMS`. Returns the number of layers changed."""
    changed = 0
    for layer in net_param.layer:
        forks = set()
        if layer.type in _TYPED or len(UnknownFieldSet(layer)):
            forks |= _remap(layer, LAYER_CLAIMS, layer.type)
        for field, value in layer.ListFields():
            claims = MESSAGE_CLAIMS.get(getattr(field.message_type, "name", None))
            if claims and not field.is_repeated and _suspect(value):
                forks |= _remap(value, claims)
        if forks:
            changed += 1
    return changed


def _suspect(param):
    """Whether a parameter message may hold fork fields under other numbers."""
    if len(UnknownFieldSet(param)):
        return True
    return param.DESCRIPTOR.name == "TransformationParameter" and any(
        param.HasField(f.name) for f in param.DESCRIPTOR.fields
        if f.number in _NVCAFFE_TRANSFORM_OWN)


# ---- what is left unknown ------------------------------------------------------------------

class Unknown(NamedTuple):
    """A field nothing here reads: where it is (``NetParameter.layer[0] (layer 'data')``), the
    message, its number and wire type, the forks that define the number there, and, when this
    schema reads the number itself, the field it declares (the bytes are not that)."""

    place: str
    message: str
    number: int
    wire_type: int
    forks: tuple
    declared: Optional[str] = None


def unknown_fields(message, where=""):
    """Every field still unknown in ``message`` and the messages inside it (a list of
    :class:`Unknown`), the fields set aside on reading (:mod:`.tolerant`) among them."""
    found = []
    name = message.DESCRIPTOR.name
    for item in UnknownFieldSet(message):
        number, wire = item.field_number, item.wire_type
        if number == ENVELOPE and wire == LEN:
            number, wire, _, _ = _opened(item.data)
        forks = FORK_NUMBERS.get(name, {}).get(number, ())
        field = message.DESCRIPTOR.fields_by_number.get(number)
        declared = field and "%s (%s)" % (field.name, _kind(field))
        found.append(Unknown(where or name, name, number, wire, forks, declared))
    if not _holds_messages(message.DESCRIPTOR):
        return found  # a Datum, say: nothing inside to look into (records are many)
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE or field.message_type.name == "BlobProto":
            continue
        items = value if field.is_repeated else [value]
        for i, item in enumerate(items):
            label = getattr(item, "name", "") if field.name in ("layer", "layers") else ""
            place = "%s.%s" % (where or name, field.name)
            if field.is_repeated:
                place += "[%d]" % i
            if label:
                place += " (layer %r)" % label
            found.extend(unknown_fields(item, place))
    return found


_HOLDS_MESSAGES = {}


def _holds_messages(descriptor):
    known = _HOLDS_MESSAGES.get(descriptor.full_name)
    if known is None:
        known = _HOLDS_MESSAGES[descriptor.full_name] = any(
            f.type == f.TYPE_MESSAGE for f in descriptor.fields)
    return known


def _kind(field):
    if field.type == field.TYPE_MESSAGE:
        return "a %s" % field.message_type.name
    return {field.TYPE_STRING: "a string", field.TYPE_BYTES: "bytes", field.TYPE_BOOL: "a bool",
            field.TYPE_FLOAT: "a float", field.TYPE_DOUBLE: "a double",
            field.TYPE_ENUM: "an enum"}.get(field.type, "an integer")


_WIRE_NAMES = {VARINT: "a varint", FIXED64: "8 bytes", LEN: "length-delimited bytes",
               FIXED32: "4 bytes"}


def describe_unknown(entry):
    """One line about an unknown field from :func:`unknown_fields`."""
    kind = _WIRE_NAMES.get(entry.wire_type, "wire type %d" % entry.wire_type)
    if entry.declared:
        text = ("%s: field %d of %s (wire type %d, %s) does not decode as this schema's %s; "
                "its bytes are kept unread and written back unchanged"
                % (entry.place, entry.number, entry.message, entry.wire_type, kind,
                   entry.declared))
        if entry.forks:
            text += "; forks that use %d there: %s" % (entry.number, ", ".join(entry.forks))
        return text
    text = "%s: field %d of %s (wire type %d, %s) is not in this schema" % (
        entry.place, entry.number, entry.message, entry.wire_type, kind)
    if entry.forks:
        text += "; it is %s" % " or ".join(entry.forks)
    return text


def report_unknown(message, source, seen=None, limit=20):
    """Log one warning for each field of a binary ``message`` that nothing here reads. With
    ``seen`` (a set kept by the caller across records of one source), a field already reported
    at the same place and number is not reported again."""
    entries = unknown_fields(message)
    if not entries:
        return entries
    if seen is not None:
        def key(e):  # the same field of another record, or of another item of a list
            return re.sub(r"\[\d+\]", "[]", e.place), e.number, e.wire_type

        entries = [e for e in entries if key(e) not in seen]
        seen.update(key(e) for e in entries)
    for entry in entries[:limit]:
        log.warning("%s: %s (ignored)", source, describe_unknown(entry))
    if len(entries) > limit:
        log.warning("%s: %d more unknown fields", source, len(entries) - limit)
    return entries
