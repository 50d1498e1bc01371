"""Current-format nets with deprecated fields: net-level ``input`` / ``input_shape`` /
``input_dim`` become a leading ``Input`` layer; BatchNorm's three statistics ``param`` specs
are frozen."""

from ...errors import ProtoError
from .. import caffe_pb2
from ._common import _copy_messages


def net_needs_input_upgrade(net_param):
    """Whether the net declares its inputs with net-level ``input`` fields."""
    return len(net_param.input) > 0


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
