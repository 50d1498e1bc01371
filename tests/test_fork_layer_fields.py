"""The table of the forks' layer field numbers agrees with the schema it maps onto."""

from pycaffe_lite.fork_layer_fields import LAYER_FIELDS, fields_for
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.layers import load_all
from pycaffe_lite.registry import layer_type_list

LAYER = caffe_pb2.LayerParameter.DESCRIPTOR


def test_every_entry_names_a_field_of_ours_under_another_number():
    for entry in LAYER_FIELDS:
        ours = LAYER.fields_by_name[entry.field]
        assert ours.message_type is not None
        assert ours.number != entry.number, entry
        # the fork's number is either unused here or another field's (the clash it maps)
        other = LAYER.fields_by_number.get(entry.number)
        assert other is None or other.name != entry.field


def test_one_mapping_per_layer_type_and_number():
    for entry in LAYER_FIELDS:
        for t in entry.types:
            assert fields_for(t, entry.number) == [entry]


def test_the_mapped_layer_types_exist():
    load_all()
    known = set(layer_type_list())
    missing = {t for e in LAYER_FIELDS for t in e.types} - known
    assert not missing, missing
