"""Where SegNet, ENet, PSPNet's BN, DeepLab v2, the YOLO ports, R-FCN, CTPN and OpenCV (its
Proposal layer) put their layer fields, and where this schema puts them.

A prototxt names each field and reads unchanged. A binary file (a ``.caffemodel`` carries
the layer parameters too) holds the fork's number, which here may be a BVLC field (SegNet's
``upsample_param`` is 137, BVLC's ``embed_param``), another fork's field (149 and 150 are each
claimed by several forks), or nothing. :data:`LAYER_FIELDS` lists, for each such field, the
fork, the layer types that use it, the fork's LayerParameter number, the protobuf wire type
of its value and this schema's field; the on-read mapping of
:mod:`pycaffe_lite.proto.fork_fields` decides by layer type and wire type, and renumbers the
fields inside the message where :data:`INNER_NUMBERS` says so (PSPNet's ``bn_param``).
Fields whose fork number this schema also uses (SegNet and ENet's ``bn_param`` 45, ENet's
``dense_image_data_param`` 46, Intel's ``reorg_param`` 159, MobileNet-YOLO's 601 and 602,
caffe-rfcn's ``psroi_pooling_param`` 10001) need no entry.
"""

import collections

ForkField = collections.namedtuple("ForkField", "fork types number wire_type field")

# Protobuf wire type of a length-delimited value (every parameter message).
LENGTH_DELIMITED = 2

PSPNET = "PSPNet (hszhao/PSPNet)"
DEEPLAB = "DeepLab v2 (deeplab-public-ver2)"

LAYER_FIELDS = (
    # BVLC numbers: embed_param 137, tile_param 138, elu_param 140, scale_param 142,
    # input_param 143, swish_param 147.
    ForkField("SegNet (alexgkendall/caffe-segnet)", ("Upsample",), 137, LENGTH_DELIMITED,
              "upsample_param"),
    ForkField("SegNet (alexgkendall/caffe-segnet)", ("DenseImageData",), 138,
              LENGTH_DELIMITED, "dense_image_data_param"),
    ForkField("ENet (TimoSaemann/caffe-enet)", ("Upsample",), 147, LENGTH_DELIMITED,
              "upsample_param"),
    ForkField("CTPN (tianzhi0549/CTPN)", ("Lstm",), 140, LENGTH_DELIMITED, "lstm_param"),
    ForkField("CTPN (tianzhi0549/CTPN)", ("Transpose",), 142, LENGTH_DELIMITED,
              "transpose_param"),
    ForkField("CTPN (tianzhi0549/CTPN)", ("Reverse",), 143, LENGTH_DELIMITED, "reverse_param"),
    # BVLC's crop_param 144
    ForkField(DEEPLAB, ("SegAccuracy",), 144, LENGTH_DELIMITED, "seg_accuracy_param"),
    # BVLC's parameter_param 145
    ForkField(DEEPLAB, ("MatWrite",), 145, LENGTH_DELIMITED, "mat_write_param"),
    # BVLC's recurrent_param 146
    ForkField(DEEPLAB, ("DenseCRF",), 146, LENGTH_DELIMITED, "dense_crf_param"),
    # Numbers BVLC leaves free that several forks claim.
    ForkField("darknet2caffe (YOLOv3/v4 ports)", ("Upsample",), 149, LENGTH_DELIMITED,
              "upsample_param"),
    ForkField("MobileNet-YOLO (eric612/MobileNet-YOLO)", ("Reorg",), 149, LENGTH_DELIMITED,
              "reorg_param"),
    ForkField("py-R-FCN (YuwenXiong/py-R-FCN's Caffe)", ("PSROIPooling",), 149,
              LENGTH_DELIMITED, "psroi_pooling_param"),
    ForkField("MobileNet-YOLO (eric612/MobileNet-YOLO)", ("Upsample",), 150, LENGTH_DELIMITED,
              "upsample_param"),
    ForkField("darknet2caffe (YOLOv4 ports)", ("Mish",), 150, LENGTH_DELIMITED, "mish_param"),
    # NVCaffe's trt_param and Intel Caffe's box_annotator_ohem_param elsewhere
    ForkField(PSPNET, ("BN",), 152, LENGTH_DELIMITED, "bn_param"),
    # the SSD fork's multibox_loss_param 201; PVANet's number, 8266713, is this schema's
    ForkField("OpenCV (opencv-caffe.proto)", ("Proposal",), 201, LENGTH_DELIMITED,
              "proposal_param"),
)

# A fork's parameter message whose fields this schema numbers differently inside: when the
# message moves from the fork's LayerParameter number to ours, its fields are renumbered.
# (fork, the fork's LayerParameter number) -> ((the fork's number, this schema's), ...).
# PSPNet's BNParameter numbers slope_filler, bias_filler, momentum, eps, frozen and engine
# 1-6; here 1-3 are SegNet's bn_mode, scale_filler and shift_filler (the same BNParameter,
# field 45), so PSPNet's take 1000-1005.
INNER_NUMBERS = {
    (PSPNET, 152): ((1, 1000), (2, 1001), (3, 1002), (4, 1003), (5, 1004), (6, 1005)),
}

# Inside parameter messages: (message, the number in the file, wire type, this schema's
# field). This schema numbered UpsampleParameter's ``scale`` 1000 before it took the forks'
# number 1.
MESSAGE_FIELDS = (
    ("UpsampleParameter", 1000, 0, "scale"),
)

# Fork fields inside BVLC's messages whose number BVLC or another fork reads the same way,
# so that the bytes alone cannot say whose they are: (fork, message, the fork's number, wire
# type, this schema's field, what tells them apart). Prototxt files are unambiguous.
UNDECIDABLE_FIELDS = (
    # SegNet's weight_by_label_freqs is 3, BVLC's ``normalization`` (both varints; true reads
    # as VALID); a SegNet file has class_weighting (4) beside it
    ("SegNet", "LossParameter", 3, 0, "weight_by_label_freqs", "class_weighting beside it"),
    # Bayesian SegNet's sample_weights_test is 2, the Fast R-CNN fork's scale_train (both
    # bools of a Dropout layer)
    ("Bayesian SegNet", "DropoutParameter", 2, 0, "sample_weights_test", "nothing"),
)


def fields_for(layer_type, number):
    """The entries of :data:`LAYER_FIELDS` for a layer type and a LayerParameter number."""
    return [f for f in LAYER_FIELDS if f.number == number and layer_type in f.types]


# The two BN layers that share BNParameter (LayerParameter field 45 here) and the fields
# that mark each. A bn_param that sets a PSPNet field is PSPNet's BN; any other (SegNet's
# fields, or none at all) is SegNet's and ENet's, as before PSPNet's was supported.
SEGNET_BN = "SegNet/ENet"
PSPNET_BN = "PSPNet"
BN_FIELDS = {
    SEGNET_BN: ("bn_mode", "scale_filler", "shift_filler"),
    PSPNET_BN: ("slope_filler", "bias_filler", "momentum", "eps", "frozen", "engine"),
}


def bn_kind(bn_param):
    """Which BN layer ``bn_param`` (a BNParameter) configures: :data:`PSPNET_BN` or
    :data:`SEGNET_BN`. A ValueError, naming the fields, where it sets fields of both."""
    found = {kind: [f for f in names if bn_param.HasField(f)]
             for kind, names in BN_FIELDS.items()}
    if found[SEGNET_BN] and found[PSPNET_BN]:
        raise ValueError(
            "bn_param mixes SegNet/ENet's BN fields (%s) with PSPNet's (%s): they are two "
            "different layers; use the fields of one (SegNet/ENet: bn_mode, scale_filler, "
            "shift_filler; PSPNet: slope_filler, bias_filler, momentum, eps, frozen, engine)"
            % (", ".join(found[SEGNET_BN]), ", ".join(found[PSPNET_BN])))
    return PSPNET_BN if found[PSPNET_BN] else SEGNET_BN


# Layer types of the forks that this package does not provide: type -> (the fork, the
# LayerParameter field of its parameters, or None). A net that uses one is refused with the
# layer, its type and the fork; a prototxt that sets the field, with the file, line and fork.
DEEPLAB_IN_PSPNET = "DeepLab v2 (deeplab-public-ver2, also in PSPNet's hszhao/PSPNet)"
NOT_PROVIDED_TYPES = {
    "BiasChannel": (DEEPLAB_IN_PSPNET, "bias_channel_param"),
    "AdaptiveBiasChannel": (DEEPLAB_IN_PSPNET, "adaptive_bias_channel_param"),
    "DomainTransform": (DEEPLAB_IN_PSPNET, "domain_transform_param"),
    "DomainTransformForwardOnly": (DEEPLAB_IN_PSPNET, "domain_transform_param"),
    "SpatialProduct": (DEEPLAB_IN_PSPNET, None),
    "UniqueLabel": (DEEPLAB_IN_PSPNET, "unique_label_param"),
    "MatRead": (DEEPLAB_IN_PSPNET, "mat_read_param"),
}


def not_provided_message(layer_type):
    """Why ``layer_type`` is refused where it is a known fork's layer not provided here, or
    None."""
    entry = NOT_PROVIDED_TYPES.get(layer_type)
    if entry is None:
        return None
    return "a layer of %s that pycaffe-lite does not implement" % entry[0]


def types_of_field(field_name):
    """The not-provided layer types whose parameters ``field_name`` holds (sorted)."""
    return sorted(t for t, (_, field) in NOT_PROVIDED_TYPES.items() if field == field_name)
