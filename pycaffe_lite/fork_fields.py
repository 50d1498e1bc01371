"""Fields that a Caffe fork numbered differently from this schema, found again after a read.

A fork's parameter message keeps the fork's number here unless BVLC Caffe already uses that
number for something else. Then BVLC keeps it and the fork's field takes a number from 1000
up: a prototxt spells the field by name and reads unchanged, but a binary file written by the
fork still carries it under BVLC's number. Parsed with this schema, those bytes land in BVLC's
field as fields that message does not know (protobuf keeps unknown fields and writes them back
unchanged); :func:`restore` re-reads them as the fork's message and moves them into the fork's
field, so a fork's ``.caffemodel`` reads as its prototxt does.

The one such field so far: DeepLab/PSPNet's ``interp_param`` is field 143 in the fork, which
is BVLC's ``input_param``; here it is ``interp_param = 1003``.
"""

from .proto import caffe_pb2

# layer type -> (BVLC field holding the fork's bytes, this schema's field for them, its message)
RENUMBERED = {
    "Interp": ("input_param", "interp_param", caffe_pb2.InterpParameter),
}


def restore(net_param):
    """Move fork fields read under BVLC's numbers into this schema's fields, in place.

    A layer is changed only when its type is in :data:`RENUMBERED`, the BVLC field is present
    and holds nothing that BVLC's message knows (its bytes are all foreign), and the fork's
    field here is absent. Returns the number of layers changed.
    """
    changed = 0
    for layer in net_param.layer:
        entry = RENUMBERED.get(layer.type)
        if entry is None:
            continue
        bvlc_name, ours, message_class = entry
        if not layer.HasField(bvlc_name) or layer.HasField(ours):
            continue
        held = getattr(layer, bvlc_name)
        if held.ListFields():
            continue  # a real BVLC message: leave it to the layer to complain about
        restored = message_class()
        restored.ParseFromString(held.SerializeToString())
        getattr(layer, ours).CopyFrom(restored)
        layer.ClearField(bvlc_name)
        changed += 1
    return changed
