"""The table of the forks' layer field numbers agrees with the schema it maps onto."""

from pycaffe_lite.proto.fork_layer_fields import LAYER_FIELDS, fields_for
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


def test_fork_binaries_at_the_shared_numbers_parse_into_our_fields():
    """Bytes laid out as the forks write them (their numbers, proto2 unpacked repeated
    values): SegNet's BN (45), ENet's DenseImageData (46), a Reorg (159, Intel's number),
    MobileNet-YOLO's Yolov3DetectionOutput (602) and caffe-rfcn's PSROIPooling (10001)."""
    import struct

    from test_fork_fields import fork_layer, length_delimited, string, tag, varint

    def f32(number, value):
        return tag(number, 5) + struct.pack("<f", value)

    layers = [
        fork_layer("bn", "BN", ["x"], ["y"], length_delimited(45, tag(3, 0) + varint(1))),
        fork_layer("dense", "DenseImageData", [], ["d", "l"], length_delimited(
            46, string(1, "list.txt") + tag(2, 0) + varint(4) + tag(13, 0) + varint(8))),
        fork_layer("reorg", "Reorg", ["y"], ["r"], length_delimited(
            159, tag(1, 0) + varint(2) + tag(2, 0) + varint(1))),
        fork_layer("det", "Yolov3DetectionOutput", ["a", "b"], ["out"], length_delimited(
            602, tag(1, 0) + varint(80) + f32(3, 0.25) + f32(5, 10) + f32(5, 14) +
            tag(6, 0) + varint(32) + tag(6, 0) + varint(16) + tag(8, 0) + varint(1))),
        fork_layer("ps", "PSROIPooling", ["f", "rois"], ["p"], length_delimited(
            10001, f32(1, 0.0625) + tag(2, 0) + varint(21) + tag(3, 0) + varint(7))),
    ]
    net = caffe_pb2.NetParameter.FromString(b"".join(length_delimited(100, lay)
                                                     for lay in layers))
    bn, dense, reorg, det, ps = net.layer
    assert bn.bn_param.bn_mode == caffe_pb2.BNParameter.INFERENCE
    assert (dense.dense_image_data_param.source, dense.dense_image_data_param.batch_size,
            dense.dense_image_data_param.label_divide_factor) == ("list.txt", 4, 8)
    assert (reorg.reorg_param.stride, reorg.reorg_param.reverse) == (2, True)
    p = det.yolov3_detection_output_param
    assert (p.num_classes, p.confidence_threshold, list(p.biases), list(p.anchors_scale),
            list(p.mask)) == (80, 0.25, [10, 14], [32, 16], [1])
    q = ps.psroi_pooling_param
    assert (q.spatial_scale, q.output_dim, q.group_size) == (0.0625, 21, 7)
