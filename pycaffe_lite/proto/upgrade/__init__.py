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

from ...errors import ProtoError
from ._common import log
from .data_transform import net_needs_data_upgrade, upgrade_net_data_transformation
from .fields import (net_needs_batch_norm_upgrade, net_needs_input_upgrade,
                     upgrade_net_batch_norm, upgrade_net_input)
from .solver import solver_needs_upgrade, upgrade_solver_as_needed
from .v0 import net_needs_v0_to_v1_upgrade, upgrade_v0_net
from .v1 import (_V1_PARAM_MESSAGES, net_needs_v1_to_v2_upgrade,  # noqa: F401
                 upgrade_v1_layer_type, upgrade_v1_net)

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


def net_needs_upgrade(net_param):
    """Whether :func:`upgrade_net_as_needed` would change ``net_param``."""
    return (net_needs_v0_to_v1_upgrade(net_param)
            or net_needs_data_upgrade(net_param)
            or net_needs_v1_to_v2_upgrade(net_param)
            or net_needs_input_upgrade(net_param)
            or net_needs_batch_norm_upgrade(net_param))


def upgrade_net_as_needed(net_param, source="<string>", weights=False):
    """Upgrade ``net_param`` in place to the current format; True if anything changed.

    Raises :class:`ProtoError` (naming ``source`` and the layer) for definitions that cannot be
    upgraded faithfully. ``weights``: the net of a weights file (a ``.caffemodel``), whose
    layers are only looked up by name: a V1 layer of unknown type is kept without a type (with
    a warning), as Caffe reads it, rather than refused.
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
        upgrade_v1_net(net_param, source, weights)
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
