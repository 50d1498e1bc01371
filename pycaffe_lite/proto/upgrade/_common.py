"""What the upgrade steps share: the legacy message types and a few message helpers."""

import logging

from .. import caffe_pb2

log = logging.getLogger("pycaffe_lite")

_V1 = caffe_pb2.V1LayerParameter
_V0 = caffe_pb2.V0LayerParameter


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
