"""Upgrading legacy (V0, V1, net-level input, old BatchNorm) nets and old solvers."""

import logging

import pytest
from google.protobuf import text_format

from pycaffe_lite.proto import protoio, upgrade
from pycaffe_lite.errors import ProtoError
from pycaffe_lite.proto import caffe_pb2

V1 = caffe_pb2.V1LayerParameter
SOURCE = "legacy/net.prototxt"


def net(text):
    return protoio.parse_text(text, caffe_pb2.NetParameter())


def solver(text):
    return protoio.parse_text(text, caffe_pb2.SolverParameter())


def upgraded(text, source=SOURCE):
    param = net(text)
    assert upgrade.net_needs_upgrade(param)
    assert upgrade.upgrade_net_as_needed(param, source) is True
    assert not upgrade.net_needs_upgrade(param)
    return param


def by_name(param):
    return {layer.name: layer for layer in param.layer}


def specs(layer):
    return [(p.lr_mult, p.decay_mult) for p in layer.param]


# --------------------------------------------------------------------------------------------
# V1 nets
# --------------------------------------------------------------------------------------------

LENET_V1 = """
name: "LeNetOld"
layers {
  name: "mnist" type: DATA top: "data" top: "label"
  data_param { source: "mnist_train_lmdb" backend: LMDB batch_size: 64
               scale: 0.00390625 mean_file: "mean.binaryproto" crop_size: 24 mirror: true }
  include { phase: TRAIN }
}
layers {
  name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1"
  blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
  convolution_param { num_output: 20 kernel_size: 5 stride: 1
                      weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layers {
  name: "pool1" type: POOLING bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 }
}
layers {
  name: "ip1" type: INNER_PRODUCT bottom: "pool1" top: "ip1"
  blobs_lr: 1 blobs_lr: 2
  param: "ip1_w" param: "ip1_b" blob_share_mode: PERMISSIVE
  inner_product_param { num_output: 500 weight_filler { type: "xavier" } }
}
layers { name: "relu1" type: RELU bottom: "ip1" top: "ip1" relu_param { negative_slope: 0.1 } }
layers {
  name: "ip2" type: INNER_PRODUCT bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 }
}
layers {
  name: "accuracy" type: ACCURACY bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST }
  accuracy_param { top_k: 1 }
}
layers {
  name: "loss" type: SOFTMAX_LOSS bottom: "ip2" bottom: "label" top: "loss"
  loss_weight: 2 exclude { stage: "deploy" }
  loss_param { ignore_label: 255 }
}
"""


def test_v1_lenet_types_and_order():
    param = upgraded(LENET_V1)
    assert param.name == "LeNetOld"
    assert len(param.layers) == 0
    assert [(layer.name, layer.type) for layer in param.layer] == [
        ("mnist", "Data"), ("conv1", "Convolution"), ("pool1", "Pooling"),
        ("ip1", "InnerProduct"), ("relu1", "ReLU"), ("ip2", "InnerProduct"),
        ("accuracy", "Accuracy"), ("loss", "SoftmaxWithLoss")]
    layers = by_name(param)
    assert list(layers["conv1"].bottom) == ["data"]
    assert list(layers["conv1"].top) == ["conv1"]
    assert list(layers["mnist"].top) == ["data", "label"]
    assert list(layers["accuracy"].bottom) == ["ip2", "label"]


def test_v1_param_specs_from_blobs_lr_weight_decay_and_names():
    layers = by_name(upgraded(LENET_V1))
    assert specs(layers["conv1"]) == [(1.0, 1.0), (2.0, 0.0)]
    ip1 = layers["ip1"]
    assert [p.name for p in ip1.param] == ["ip1_w", "ip1_b"]
    assert [p.lr_mult for p in ip1.param] == [1.0, 2.0]
    assert not ip1.param[0].HasField("decay_mult")
    assert ip1.param[0].share_mode == caffe_pb2.ParamSpec.PERMISSIVE
    assert not ip1.param[1].HasField("share_mode")
    assert len(layers["ip2"].param) == 0
    assert len(layers["pool1"].param) == 0


def test_v1_layer_parameters_rules_and_loss_weight_copied():
    layers = by_name(upgraded(LENET_V1))
    conv = layers["conv1"].convolution_param
    assert conv.num_output == 20
    assert list(conv.kernel_size) == [5]
    assert conv.weight_filler.type == "xavier"
    assert conv.bias_filler.type == "constant"
    pool = layers["pool1"].pooling_param
    assert pool.pool == caffe_pb2.PoolingParameter.MAX
    assert (pool.kernel_size, pool.stride) == (2, 2)
    assert layers["ip1"].inner_product_param.num_output == 500
    assert layers["relu1"].relu_param.negative_slope == pytest.approx(0.1)
    assert layers["accuracy"].accuracy_param.top_k == 1
    assert [r.phase for r in layers["accuracy"].include] == [caffe_pb2.TEST]
    assert [r.phase for r in layers["mnist"].include] == [caffe_pb2.TRAIN]
    loss = layers["loss"]
    assert list(loss.loss_weight) == [2.0]
    assert list(loss.exclude[0].stage) == ["deploy"]
    assert loss.loss_param.ignore_label == 255


def test_v1_data_transformation_fields_move_to_transform_param():
    data = by_name(upgraded(LENET_V1))["mnist"]
    t = data.transform_param
    assert t.scale == pytest.approx(0.00390625)
    assert t.mean_file == "mean.binaryproto"
    assert t.crop_size == 24
    assert t.mirror is True
    for field in ("scale", "mean_file", "crop_size", "mirror"):
        assert not data.data_param.HasField(field)
    assert data.data_param.source == "mnist_train_lmdb"
    assert data.data_param.batch_size == 64
    assert data.data_param.backend == caffe_pb2.DataParameter.LMDB


@pytest.mark.parametrize("layer_type, param_field", [
    ("IMAGE_DATA", "image_data_param"), ("WINDOW_DATA", "window_data_param")])
def test_v1_image_and_window_data_transformation(layer_type, param_field):
    param = net(f"""
        layers {{ name: "d" type: {layer_type} top: "data" top: "label"
                  {param_field} {{ source: "list.txt" batch_size: 8 scale: 0.5 mirror: true }} }}
    """)
    assert upgrade.net_needs_data_upgrade(param)
    assert upgrade.upgrade_net_as_needed(param, SOURCE)
    layer = param.layer[0]
    params = getattr(layer, param_field)
    assert layer.transform_param.scale == 0.5
    assert layer.transform_param.mirror is True
    assert not params.HasField("scale") and not params.HasField("mirror")
    assert params.source == "list.txt"


def test_v1_existing_transform_param_is_kept():
    param = upgraded("""
        layers { name: "d" type: DATA top: "data"
                 data_param { source: "db" batch_size: 4 }
                 transform_param { scale: 0.25 crop_size: 10 } }
    """)
    t = param.layer[0].transform_param
    assert (t.scale, t.crop_size) == (0.25, 10)


def test_v1_every_param_message_is_carried_over():
    v1 = caffe_pb2.V1LayerParameter(name="all", type=V1.CONVOLUTION)
    for field in upgrade._V1_PARAM_MESSAGES:
        getattr(v1, field).SetInParent()
    param = caffe_pb2.NetParameter()
    param.layers.add().CopyFrom(v1)
    upgrade.upgrade_net_as_needed(param, SOURCE)
    layer = param.layer[0]
    assert len(upgrade._V1_PARAM_MESSAGES) >= 30
    for field in upgrade._V1_PARAM_MESSAGES:
        assert layer.HasField(field), field


def test_v1_blobs_are_carried_over():
    param = upgraded("""
        layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "y"
                 blobs { shape { dim: 2 dim: 3 } data: 1 data: 2 data: 3 data: 4 data: 5 data: 6 }
                 blobs { shape { dim: 2 } data: 7 data: 8 } }
    """)
    blobs = param.layer[0].blobs
    assert [list(b.shape.dim) for b in blobs] == [[2, 3], [2]]
    assert list(blobs[1].data) == [7.0, 8.0]


def test_every_v1_layer_type_has_a_type_string():
    for value in V1.LayerType.values():
        name = upgrade.upgrade_v1_layer_type(value)
        if value == V1.NONE:
            assert name == ""
        else:
            assert isinstance(name, str) and name, V1.LayerType.Name(value)
    assert upgrade.upgrade_v1_layer_type(V1.CONVOLUTION) == "Convolution"
    assert upgrade.upgrade_v1_layer_type(V1.SOFTMAX_LOSS) == "SoftmaxWithLoss"
    assert upgrade.upgrade_v1_layer_type(V1.DECONVOLUTION) == "Deconvolution"
    assert upgrade.upgrade_v1_layer_type(V1.IM2COL) == "Im2col"
    assert upgrade.upgrade_v1_layer_type(V1.HDF5_DATA) == "HDF5Data"
    with pytest.raises(ProtoError, match="unknown V1LayerParameter layer type"):
        upgrade.upgrade_v1_layer_type(999)


def test_v1_layer_parameters_all_exist_in_layer_parameter():
    current = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    for field in upgrade._V1_PARAM_MESSAGES:
        assert field in current, field


# --------------------------------------------------------------------------------------------
# V0 nets
# --------------------------------------------------------------------------------------------

ALEXNET_V0 = """
name: "CaffeNetV0"
input: "data"
input_dim: 10 input_dim: 3 input_dim: 227 input_dim: 227
layers {
  layer { name: "conv1" type: "conv" num_output: 96 kernelsize: 11 stride: 4
          weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 0 }
          blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0 }
  bottom: "data" top: "conv1"
}
layers { layer { name: "relu1" type: "relu" } bottom: "conv1" top: "conv1" }
layers {
  layer { name: "pool1" type: "pool" pool: MAX kernelsize: 3 stride: 2 }
  bottom: "conv1" top: "pool1"
}
layers {
  layer { name: "norm1" type: "lrn" local_size: 5 alpha: 0.0001 beta: 0.75 }
  bottom: "pool1" top: "norm1"
}
layers { layer { name: "pad2" type: "padding" pad: 2 } bottom: "norm1" top: "pad2" }
layers {
  layer { name: "conv2" type: "conv" num_output: 256 group: 2 kernelsize: 5 biasterm: false }
  bottom: "pad2" top: "conv2"
}
layers {
  layer { name: "pool2" type: "pool" pool: AVE kernelsize: 3 stride: 2 }
  bottom: "conv2" top: "pool2"
}
layers {
  layer { name: "fc6" type: "innerproduct" num_output: 4096 blobs_lr: 1 blobs_lr: 2 }
  bottom: "pool2" top: "fc6"
}
layers { layer { name: "drop6" type: "dropout" dropout_ratio: 0.4 } bottom: "fc6" top: "fc6" }
layers { layer { name: "prob" type: "softmax" } bottom: "fc6" top: "prob" }
"""


def test_v0_net_layer_types_and_padding_layer_removed():
    param = upgraded(ALEXNET_V0)
    assert param.name == "CaffeNetV0"
    assert [(layer.name, layer.type) for layer in param.layer] == [
        ("input", "Input"), ("conv1", "Convolution"), ("relu1", "ReLU"), ("pool1", "Pooling"),
        ("norm1", "LRN"), ("conv2", "Convolution"), ("pool2", "Pooling"),
        ("fc6", "InnerProduct"), ("drop6", "Dropout"), ("prob", "Softmax")]
    assert len(param.input) == len(param.input_dim) == 0


def test_v0_padding_folds_into_following_conv():
    layers = by_name(upgraded(ALEXNET_V0))
    conv2 = layers["conv2"]
    assert list(conv2.bottom) == ["norm1"]
    assert list(conv2.convolution_param.pad) == [2]
    assert conv2.convolution_param.group == 2
    assert conv2.convolution_param.bias_term is False
    assert list(conv2.convolution_param.kernel_size) == [5]
    assert len(layers["conv1"].convolution_param.pad) == 0


def test_v0_fields_map_to_v1_parameters():
    layers = by_name(upgraded(ALEXNET_V0))
    conv1 = layers["conv1"]
    c = conv1.convolution_param
    assert c.num_output == 96
    assert list(c.kernel_size) == [11]
    assert list(c.stride) == [4]
    assert c.weight_filler.type == "gaussian"
    assert c.weight_filler.std == pytest.approx(0.01)
    assert c.bias_filler.type == "constant"
    assert specs(conv1) == [(1.0, 1.0), (2.0, 0.0)]
    assert layers["pool1"].pooling_param.pool == caffe_pb2.PoolingParameter.MAX
    assert layers["pool1"].pooling_param.kernel_size == 3
    assert layers["pool1"].pooling_param.stride == 2
    assert layers["pool2"].pooling_param.pool == caffe_pb2.PoolingParameter.AVE
    lrn = layers["norm1"].lrn_param
    assert (lrn.local_size, lrn.alpha, lrn.beta) == (5, pytest.approx(1e-4), 0.75)
    assert layers["fc6"].inner_product_param.num_output == 4096
    assert [p.lr_mult for p in layers["fc6"].param] == [1.0, 2.0]
    assert layers["drop6"].dropout_param.dropout_ratio == pytest.approx(0.4)
    assert not layers["relu1"].HasField("relu_param")


def test_v0_inputs_become_input_layer():
    param = upgraded(ALEXNET_V0)
    first = param.layer[0]
    assert list(first.top) == ["data"]
    assert [list(s.dim) for s in first.input_param.shape] == [[10, 3, 227, 227]]


def test_v0_padding_before_pool_and_data_layer_fields():
    param = upgraded("""
        layers { layer { name: "data" type: "data" source: "train_db" batchsize: 32
                         scale: 0.5 meanfile: "m.binaryproto" cropsize: 227 mirror: true
                         rand_skip: 7 }
                 top: "data" top: "label" }
        layers { layer { name: "pad" type: "padding" pad: 1 } bottom: "data" top: "padded" }
        layers { layer { name: "pool" type: "pool" pool: STOCHASTIC kernelsize: 3 }
                 bottom: "padded" top: "pool" }
        layers { layer { name: "cat" type: "concat" concat_dim: 1 }
                 bottom: "pool" bottom: "label" top: "cat" }
    """)
    data, pool, cat = param.layer
    assert data.type == "Data"
    assert (data.data_param.source, data.data_param.batch_size) == ("train_db", 32)
    assert data.data_param.rand_skip == 7
    t = data.transform_param
    assert (t.scale, t.mean_file, t.crop_size, t.mirror) == (0.5, "m.binaryproto", 227, True)
    assert list(pool.bottom) == ["data"]
    assert pool.pooling_param.pad == 1
    assert pool.pooling_param.pool == caffe_pb2.PoolingParameter.STOCHASTIC
    assert cat.concat_param.concat_dim == 1


def test_v0_window_and_image_data_fields():
    param = upgraded("""
        layers { layer { name: "w" type: "window_data" source: "windows.txt" batchsize: 128
                         det_fg_threshold: 0.6 det_bg_threshold: 0.4 det_fg_fraction: 0.3
                         det_context_pad: 16 det_crop_mode: "square" }
                 top: "data" top: "label" }
        layers { layer { name: "i" type: "images" source: "list.txt" batchsize: 2
                         shuffle_images: true new_height: 256 new_width: 128 }
                 top: "img" top: "lbl" }
    """)
    w = param.layer[0].window_data_param
    assert (w.source, w.batch_size) == ("windows.txt", 128)
    assert w.fg_threshold == pytest.approx(0.6)
    assert w.bg_threshold == pytest.approx(0.4)
    assert w.fg_fraction == pytest.approx(0.3)
    assert (w.context_pad, w.crop_mode) == (16, "square")
    assert param.layer[1].type == "ImageData"
    i = param.layer[1].image_data_param
    assert (i.source, i.batch_size, i.shuffle, i.new_height, i.new_width) == (
        "list.txt", 2, True, 256, 128)


def test_v0_force_backward_kept():
    param = upgraded("""
        force_backward: true
        layers { layer { name: "s" type: "sigmoid" } bottom: "x" top: "y" }
        input: "x"
    """)
    assert param.force_backward is True
    # Inputs without shapes are dropped, as Caffe does for old binary models.
    assert [layer.type for layer in param.layer] == ["Sigmoid"]


# --------------------------------------------------------------------------------------------
# Net-level inputs
# --------------------------------------------------------------------------------------------

def test_input_dim_becomes_first_input_layer():
    param = upgraded("""
        name: "deploy"
        input: "data"
        input_dim: 1 input_dim: 3 input_dim: 227 input_dim: 227
        input: "im_info"
        input_dim: 1 input_dim: 3 input_dim: 1 input_dim: 1
        layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
                convolution_param { num_output: 4 kernel_size: 3 } }
        layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
    """)
    assert [layer.name for layer in param.layer] == ["input", "conv1", "relu1"]
    first = param.layer[0]
    assert first.type == "Input"
    assert list(first.top) == ["data", "im_info"]
    assert [list(s.dim) for s in first.input_param.shape] == [[1, 3, 227, 227], [1, 3, 1, 1]]
    assert len(param.input) == len(param.input_dim) == len(param.input_shape) == 0
    assert param.layer[1].convolution_param.num_output == 4


def test_input_shape_becomes_input_layer():
    param = upgraded("""
        input: "data" input_shape { dim: 2 dim: 3 dim: 32 dim: 32 }
        input: "label" input_shape { dim: 2 }
        layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
                inner_product_param { num_output: 10 } }
    """)
    first = param.layer[0]
    assert (first.name, first.type) == ("input", "Input")
    assert list(first.top) == ["data", "label"]
    assert [list(s.dim) for s in first.input_param.shape] == [[2, 3, 32, 32], [2]]
    assert param.layer[1].name == "ip"


def test_v1_net_with_input_dim():
    param = upgraded("""
        input: "data" input_dim: 1 input_dim: 1 input_dim: 28 input_dim: 28
        layers { name: "ip" type: INNER_PRODUCT bottom: "data" top: "ip"
                 inner_product_param { num_output: 10 } }
        layers { name: "prob" type: SOFTMAX bottom: "ip" top: "prob" }
    """)
    assert [(layer.name, layer.type) for layer in param.layer] == [
        ("input", "Input"), ("ip", "InnerProduct"), ("prob", "Softmax")]
    assert list(param.layer[0].input_param.shape[0].dim) == [1, 1, 28, 28]


# --------------------------------------------------------------------------------------------
# BatchNorm
# --------------------------------------------------------------------------------------------

OLD_BATCH_NORM = """
layer { name: "conv" type: "Convolution" bottom: "x" top: "conv"
        param { lr_mult: 1 } convolution_param { num_output: 8 kernel_size: 3 } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv"
        param { lr_mult: 0 } param { lr_mult: 0 } param { lr_mult: 0 }
        batch_norm_param { use_global_stats: false } }
layer { name: "bn_named" type: "BatchNorm" bottom: "conv" top: "bn2"
        param { name: "m" lr_mult: 0 } param { name: "v" lr_mult: 0 } param { name: "f" } }
"""


def test_old_batch_norm_param_specs_are_frozen():
    param = upgraded(OLD_BATCH_NORM)
    layers = by_name(param)
    assert specs(layers["bn"]) == [(0.0, 0.0)] * 3
    assert specs(layers["bn_named"]) == [(0.0, 0.0)] * 3
    assert [p.name for p in layers["bn_named"].param] == ["m", "v", "f"]
    assert layers["bn"].batch_norm_param.use_global_stats is False
    # Other layers' param specs are untouched.
    assert specs(layers["conv"]) == [(1.0, 1.0)]
    assert not layers["conv"].param[0].HasField("decay_mult")


def test_batch_norm_without_three_params_is_current():
    param = net("""
        layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x" }
        layer { name: "bn1" type: "BatchNorm" bottom: "x" top: "y" param { lr_mult: 0 } }
    """)
    before = param.SerializeToString()
    assert not upgrade.net_needs_upgrade(param)
    assert upgrade.upgrade_net_as_needed(param, SOURCE) is False
    assert param.SerializeToString() == before


# --------------------------------------------------------------------------------------------
# Current nets, idempotence, logging, protoio integration
# --------------------------------------------------------------------------------------------

CURRENT = """
name: "Current"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 2 } }
layer { name: "data_layer" type: "Data" top: "d"
        data_param { source: "db" batch_size: 1 scale: 0.5 } }
"""


def test_current_net_is_left_unchanged():
    param = net(CURRENT)
    before = text_format.MessageToString(param)
    assert not upgrade.net_needs_upgrade(param)
    assert upgrade.upgrade_net_as_needed(param, SOURCE) is False
    assert text_format.MessageToString(param) == before


@pytest.mark.parametrize("text", [LENET_V1, ALEXNET_V0, OLD_BATCH_NORM])
def test_upgrade_is_idempotent(text):
    param = upgraded(text)
    once = param.SerializeToString()
    assert upgrade.upgrade_net_as_needed(param, SOURCE) is False
    assert param.SerializeToString() == once


def test_upgrade_logs_like_caffe(caplog):
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        upgrade.upgrade_net_as_needed(net(LENET_V1), "lenet_v1.prototxt")
    text = caplog.text
    assert ("Attempting to upgrade input file specified using deprecated "
            "V1LayerParameter: lenet_v1.prototxt") in text
    assert "Successfully upgraded file specified using deprecated V1LayerParameter" in text
    assert "transformation parameters: lenet_v1.prototxt" in text


def test_protoio_reads_and_upgrades_legacy_file(tmp_path):
    path = tmp_path / "old.prototxt"
    path.write_text(LENET_V1)
    param = protoio.read_net_param(str(path))
    assert len(param.layers) == 0
    assert param.layer[1].type == "Convolution"
    raw = protoio.read_net_param(str(path), upgrade=False)
    assert len(raw.layers) == 8 and len(raw.layer) == 0


# --------------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------------

def assert_error(text, *fragments, source="bad/net.prototxt"):
    param = net(text)
    with pytest.raises(ProtoError) as info:
        upgrade.upgrade_net_as_needed(param, source)
    message = str(info.value)
    assert info.value.path == source
    assert message.startswith(source + ": ")
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_error_v1_and_current_layers_mixed():
    assert_error("""
        layers { name: "old" type: RELU bottom: "x" top: "y" }
        layer { name: "new" type: "ReLU" bottom: "y" top: "z" }
    """, "'layers'", "'layer'")


def test_error_v0_and_current_layers_mixed():
    assert_error("""
        layers { layer { name: "old" type: "relu" } bottom: "x" top: "y" }
        layer { name: "new" type: "ReLU" bottom: "y" top: "z" }
    """, "'layers'", "'layer'")


def test_error_v1_layer_without_type():
    assert_error("""
        layers { name: "ok" type: RELU bottom: "x" top: "y" }
        layers { name: "mystery" bottom: "y" top: "z" }
    """, "layers #1 ('mystery')", "type")


def test_error_v1_layer_of_type_none():
    assert_error('layers { name: "nothing" type: NONE bottom: "x" top: "y" }',
                 "('nothing')", "NONE")


def test_error_v1_layer_of_unknown_enum_number():
    # A binary V1 layer whose type number this proto does not know: protobuf keeps the value
    # as an unknown field, so the layer has no type.
    v1 = caffe_pb2.V1LayerParameter(name="future", bottom=["x"], top=["y"])
    data = v1.SerializeToString() + bytes([5 << 3, 99])  # field 5 (type), varint 99
    param = caffe_pb2.NetParameter()
    param.layers.add().ParseFromString(data)
    with pytest.raises(ProtoError, match=r"model\.caffemodel: .*\('future'\)"):
        upgrade.upgrade_net_as_needed(param, "model.caffemodel")


def test_error_unknown_v0_layer_type():
    assert_error('layers { layer { name: "odd" type: "warp" } bottom: "x" top: "y" }\ninput: "x"',
                 "('odd')", "'warp'")


def test_error_v0_parameter_for_wrong_layer_type():
    assert_error("""
        input: "x"
        layers { layer { name: "r" type: "relu" num_output: 3 } bottom: "x" top: "y" }
    """, "('r')", "num_output", "'relu'")


def test_error_v0_padding_into_non_conv_layer():
    assert_error("""
        input: "x"
        layers { layer { name: "pad" type: "padding" pad: 1 } bottom: "x" top: "p" }
        layers { layer { name: "r" type: "relu" } bottom: "p" top: "y" }
    """, "('r')", "('pad')", "'relu'")


def test_error_v0_unknown_bottom_blob():
    assert_error("""
        layers { layer { name: "r" type: "relu" } bottom: "nowhere" top: "y" }
    """, "('r')", "'nowhere'")


def test_error_v0_net_with_v1_entry():
    assert_error("""
        input: "x"
        layers { layer { name: "a" type: "relu" } bottom: "x" top: "y" }
        layers { name: "b" type: RELU bottom: "y" top: "z" }
    """, "('b')", "V0")


@pytest.mark.parametrize("inputs, fragment", [
    ('input: "data" input_dim: 1 input_dim: 3 input_dim: 8', "3 input_dim"),
    ('input: "a" input: "b" input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8', "2 input(s)"),
    ('input: "a" input_shape { dim: 1 } input_shape { dim: 2 }', "2 input_shape"),
    ('input: "a" input_shape { dim: 1 } input_dim: 1 input_dim: 1 input_dim: 1 input_dim: 1',
     "both input_shape and input_dim"),
])
def test_error_bad_net_level_inputs(inputs, fragment):
    assert_error(inputs + '\nlayer { name: "r" type: "ReLU" bottom: "a" top: "r" }', fragment)


def test_protoio_error_names_file(tmp_path):
    path = tmp_path / "mixed.prototxt"
    path.write_text('layers { name: "v1" type: RELU bottom: "x" top: "y" }\n'
                    'layer { name: "v2" type: "ReLU" bottom: "y" top: "z" }\n')
    with pytest.raises(ProtoError) as info:
        protoio.read_net_param(str(path))
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------------------------
# Solvers
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("enum_name, type_name", [
    ("SGD", "SGD"), ("NESTEROV", "Nesterov"), ("ADAGRAD", "AdaGrad"),
    ("RMSPROP", "RMSProp"), ("ADADELTA", "AdaDelta"), ("ADAM", "Adam")])
def test_solver_type_enum_becomes_string(enum_name, type_name):
    param = solver(f'net: "train.prototxt" base_lr: 0.01 momentum: 0.9 solver_type: {enum_name}')
    assert upgrade.solver_needs_upgrade(param)
    assert upgrade.upgrade_solver_as_needed(param, "solver.prototxt") is True
    assert param.type == type_name
    assert not param.HasField("solver_type")
    assert not upgrade.solver_needs_upgrade(param)
    assert param.base_lr == pytest.approx(0.01)
    assert param.net == "train.prototxt"


def test_current_solver_unchanged():
    param = solver('net: "n.prototxt" type: "Adam" base_lr: 0.001')
    before = param.SerializeToString()
    assert not upgrade.solver_needs_upgrade(param)
    assert upgrade.upgrade_solver_as_needed(param, "solver.prototxt") is False
    assert param.SerializeToString() == before


def test_solver_type_and_matching_enum_accepted():
    param = solver('type: "Nesterov" solver_type: NESTEROV')
    assert upgrade.upgrade_solver_as_needed(param, "solver.prototxt") is True
    assert param.type == "Nesterov"
    assert not param.HasField("solver_type")


def test_solver_type_conflict_is_an_error():
    param = solver('type: "Adam" solver_type: NESTEROV')
    with pytest.raises(ProtoError) as info:
        upgrade.upgrade_solver_as_needed(param, "conf/solver.prototxt")
    assert str(info.value).startswith("conf/solver.prototxt: ")
    assert "NESTEROV" in str(info.value) and "Adam" in str(info.value)


def test_protoio_reads_and_upgrades_legacy_solver(tmp_path):
    path = tmp_path / "solver.prototxt"
    path.write_text('net: "x.prototxt" base_lr: 0.1 solver_type: ADAGRAD\n')
    param = protoio.read_solver_param(str(path))
    assert param.type == "AdaGrad"
    assert not param.HasField("solver_type")
