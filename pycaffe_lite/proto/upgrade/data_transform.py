"""Transformation fields that V1 data layers kept in their own parameters (``scale``,
``mean_file``, ``crop_size``, ``mirror``) move into ``transform_param``."""

from ._common import _V1, _has

# V1 data layer types whose own parameters carried the transformation fields.
_V1_DATA_PARAM_FIELDS = {
    _V1.DATA: "data_param",
    _V1.IMAGE_DATA: "image_data_param",
    _V1.WINDOW_DATA: "window_data_param",
}
_TRANSFORM_FIELDS = ("scale", "mean_file", "crop_size", "mirror")


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
