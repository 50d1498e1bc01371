"""NVCaffe, Intel Caffe and the other forks that share LayerParameter numbers: their binary
files (built here byte by byte with the forks' numbers) and their prototxt files read, build
and run; where OpenCV dnn reads the same file, the outputs agree."""

import logging
import os
import re
import struct

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.proto import fork_fields, protoio
from pycaffe_lite.errors import ProtoError
from pycaffe_lite.proto.fork_fields import encode_varint as varint
from pycaffe_lite.proto import caffe_pb2

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "fixtures", "forks")
BVLC_TSV = os.path.join(HERE, "fixtures", "caffe_proto_fields.tsv")
SSD_TSV = os.path.join(HERE, "fixtures", "ssd_fork_proto_fields.tsv")


def tag(number, wire):
    return varint(number << 3 | wire)


def ld(number, payload):
    return tag(number, 2) + varint(len(payload)) + payload


def vint(number, value):
    return tag(number, 0) + varint(value)


def f32(number, value):
    return tag(number, 5) + struct.pack("<f", value)


def layer_bytes(name, type_, bottoms=(), tops=(), extra=b""):
    out = ld(1, name.encode()) + ld(2, type_.encode())
    out += b"".join(ld(3, b.encode()) for b in bottoms) + b"".join(ld(4, t.encode())
                                                                    for t in tops)
    return out + extra


def net_bytes(*layers, extra=b""):
    return ld(1, b"fork") + extra + b"".join(ld(100, layer) for layer in layers)


def read(tmp_path, data, name="fork.caffemodel"):
    path = tmp_path / name
    path.write_bytes(data)
    return protoio.read_net_param(str(path)), path


def _rows(path):
    with open(path) as f:
        return [line.rstrip("\n").split("\t") for line in f
                if line.strip() and not line.startswith("#")]


# ---- schema: the fields that moved ----------------------------------------------------------
def test_moved_fields_take_our_numbers_only_where_a_number_is_taken():
    """Each fork field listed as moved has this schema's number; its fork number is one that
    BVLC, the SSD fork or another fork kept here uses in that message (or LayerParameter 149,
    claimed by several forks); it moves to a number from 1000 up, or to the field of the same
    name that another fork numbers (Intel's and NVCaffe's BatchNorm engine and bias_filler)."""
    kept = [r for r in _rows(os.path.join(FIXTURES, "nvcaffe_intel_fork_proto_fields.tsv"))
            if r[0] == "field"]
    taken = {(r[1], int(r[3])) for r in _rows(BVLC_TSV) + _rows(SSD_TSV) + kept
             if r[0] == "field"}
    shared = {(r[1], r[2], int(r[3])) for r in kept}
    moved = _rows(os.path.join(FIXTURES, "nvcaffe_intel_moved_fields.tsv"))
    assert len(moved) >= 20
    for message, name, fork, fork_number, ours in moved:
        field = caffe_pb2.DESCRIPTOR.message_types_by_name[message].fields_by_name[name]
        assert field.number == int(ours), (message, name)
        if (message, name, int(ours)) in shared:
            continue  # the same field, as the other fork numbers it
        assert (message, int(fork_number)) in taken or (message, fork_number) == \
            ("LayerParameter", "149"), (message, name, fork)
        assert int(ours) >= 1000 or int(ours) == 8266712, (message, name)  # Fast R-CNN's


# ---- NVCaffe binaries -----------------------------------------------------------------------
def fp16_blob(values):
    values = np.asarray(values, np.float32)
    shape = ld(7, ld(1, b"".join(varint(d) for d in values.shape)))
    return shape + vint(10, 2) + ld(12, values.astype("<f2").tobytes())


def test_nvcaffe_binary_types_debug_and_float16_weights(tmp_path, caplog):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((3, 2, 1, 1)).astype(np.float32)
    stats = [rng.uniform(-1, 1, 3), rng.uniform(0.5, 2, 3), [1.0], rng.uniform(0.5, 2, 3),
             rng.uniform(-1, 1, 3)]
    data = net_bytes(
        layer_bytes("data", "Input", tops=["data"],
                    extra=ld(143, ld(1, ld(1, varint(2) + varint(2) + varint(4) + varint(4))))),
        layer_bytes("conv", "Convolution", ["data"], ["conv"],
                    vint(145, 2) + vint(146, 2) + vint(147, 1) + vint(148, 1) + vint(149, 1) +
                    ld(7, fp16_blob(w)) + ld(106, vint(1, 3) + vint(2, 0) + ld(4, varint(1)))),
        layer_bytes("bn", "BatchNorm", ["conv"], ["bn"],
                    vint(145, 2) + b"".join(ld(7, fp16_blob(s)) for s in stats) +
                    ld(139, vint(7, 1) + f32(3, 1e-4))),
        extra=vint(11, 2) + vint(12, 2) + f32(15, 8.0) + vint(20, 1))
    param, path = read(tmp_path, data)
    conv, bn = param.layer[1], param.layer[2]
    assert (conv.forward_type, conv.backward_type) == (caffe_pb2.FLOAT16,) * 2
    assert (conv.forward_math, conv.backward_math) == (caffe_pb2.FLOAT,) * 2
    assert conv.debug and bn.forward_type == caffe_pb2.FLOAT16
    # BVLC's fields at those numbers stay empty
    assert not conv.HasField("parameter_param") and not conv.HasField("clip_param")
    assert param.default_forward_type == caffe_pb2.FLOAT16 and param.global_grad_scale == 8
    assert bn.batch_norm_param.scale_bias
    with caplog.at_level(logging.INFO):
        net = caffe.Net(str(path), caffe.TEST)
    assert "FLOAT16 run as this net's float type" in caplog.text
    w16 = w.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(net.params["conv"][0].data, w16)
    x = rng.standard_normal((2, 2, 4, 4)).astype(np.float32)
    out = net.forward(data=x)["bn"]
    s16 = [np.asarray(s, np.float32).astype(np.float16).astype(np.float64) for s in stats]
    conv_out = np.einsum("oc,nchw->nohw", w16[:, :, 0, 0].astype(np.float64), x)
    expected = (conv_out - s16[0][:, None, None]) / np.sqrt(s16[1][:, None, None] + 1e-4) * \
        s16[3][:, None, None] + s16[4][:, None, None]
    np.testing.assert_allclose(out, expected, rtol=2e-5, atol=2e-5)
    # the same weights through copy_from into a net from the fork's prototxt
    deploy = caffe.Net(
        'default_forward_type: FLOAT16 layer { name: "data" type: "Input" top: "data" '
        'input_param { shape { dim: 2 dim: 2 dim: 4 dim: 4 } } } layer { name: "conv" '
        'type: "Convolution" bottom: "data" top: "conv" forward_type: FLOAT16 debug: true '
        'convolution_param { num_output: 3 bias_term: false kernel_size: 1 } } layer { '
        'name: "bn" type: "BatchNorm" bottom: "conv" top: "bn" batch_norm_param { '
        'scale_bias: true eps: 0.0001 } }', caffe.TEST)
    deploy.copy_from(str(path))
    np.testing.assert_array_equal(deploy.forward(data=x)["bn"], out)


def test_nvcaffe_transform_recurrent_and_moved_ssd_fields(tmp_path):
    resize = f32(1, 1.0) + vint(3, 300) + vint(4, 300)  # ResizeParameter prob, height, width
    transform = (f32(1, 0.5) + vint(3, 224) + vint(10, 224) + vint(11, 272) + f32(12, 1.0) +
                 f32(14, 0.9) + f32(15, 1.1) + ld(208, resize) + vint(211, 100) +
                 vint(212, 120))
    data = net_bytes(layer_bytes("data", "Data", tops=["data"], extra=ld(100, transform)),
                     layer_bytes("rnn", "RNN", extra=ld(151, vint(1, 4)) + vint(146, 2)))
    param = read(tmp_path, data)[0]
    # NVCaffe numbers recurrent_param 151 (BVLC: 146, NVCaffe's backward_type there)
    rnn = param.layer[1]
    assert rnn.recurrent_param.num_output == 4 and rnn.backward_type == caffe_pb2.FLOAT16
    tp = param.layer[0].transform_param
    assert (tp.img_rand_resize_lower, tp.img_rand_resize_upper) == (224, 272)
    assert tp.rand_resize_ratio_lower == 1.0
    assert tp.vertical_stretch_lower == pytest.approx(0.9)
    assert tp.vertical_stretch_upper == pytest.approx(1.1)
    assert (tp.crop_h, tp.crop_w) == (100, 120)
    assert (tp.resize_param.height, tp.resize_param.width) == (300, 300)
    assert tp.crop_size == 224 and tp.scale == 0.5


def test_ssd_crop_h_stays_ssds_without_an_nvcaffe_field(tmp_path):
    """Field 11 is SSD's crop_h and NVCaffe's img_rand_resize_upper (both varints): NVCaffe's
    only where the message shows another NVCaffe field."""
    data = net_bytes(layer_bytes("data", "Data", tops=["data"],
                                 extra=ld(100, vint(11, 96) + vint(12, 128))))
    tp = read(tmp_path, data)[0].layer[0].transform_param
    assert (tp.crop_h, tp.crop_w) == (96, 128) and not tp.HasField("img_rand_resize_upper")


# ---- Intel Caffe binaries -------------------------------------------------------------------
def test_intel_binary_engine_strings_and_fork_layer_options(tmp_path):
    data = net_bytes(
        layer_bytes("data", "Input", tops=["data"],
                    extra=ld(143, ld(1, ld(1, varint(1) + varint(2) + varint(6) + varint(6))))),
        layer_bytes("conv", "Convolution", ["data"], ["conv"],
                    ld(149, b"MKLDNN") + ld(106, vint(1, 2) + ld(4, varint(3)) +
                                            ld(7, ld(1, b"xavier")))),
        layer_bytes("pool", "Pooling", ["conv"], ["pool"],
                    ld(149, b"CAFFE") + ld(121, vint(2, 2) + vint(3, 2))),
        layer_bytes("loss", "SmoothL1Loss", ["pool", "pool"], ["loss"], ld(148, f32(1, 3.0))),
        layer_bytes("roi", "ROIPooling", extra=ld(154, vint(1, 7) + vint(2, 6) +
                                                   f32(3, 0.0625))),
        layer_bytes("eval", "EvalDetection", extra=ld(301, vint(1, 13) + vint(2, 20) +
                                                       vint(3, 5) + f32(8, 0.45))),
        layer_bytes("clip", "Clip", extra=ld(148, f32(1, -1.0) + f32(2, 1.0))))
    param, path = read(tmp_path, data)
    conv, pool, loss, roi, ev, clip = param.layer[1:]
    assert conv.engine == "MKLDNN" and pool.engine == "CAFFE"
    assert loss.smooth_l1_loss_param.sigma == 3.0 and not loss.HasField("clip_param")
    assert (roi.roi_pooling_param.pooled_h, roi.roi_pooling_param.pooled_w) == (7, 6)
    assert roi.roi_pooling_param.spatial_scale == 0.0625
    assert (ev.eval_detection_param.side, ev.eval_detection_param.num_object) == (13, 5)
    assert ev.eval_detection_param.nms == pytest.approx(0.45)
    # a BVLC Clip layer keeps its clip_param (148) as it is
    assert (clip.clip_param.min, clip.clip_param.max) == (-1.0, 1.0)
    del param.layer[3:]
    net = caffe.Net(param, caffe.TEST)
    layers = dict(zip(net._layer_names, net.layers))
    assert layers["pool"].engine == caffe_pb2.PoolingParameter.CAFFE
    assert net.blobs["pool"].data.shape == (1, 2, 2, 2)


def test_intel_batch_norm_binary_fields_map_past_nvcaffes(tmp_path):
    """Intel's BatchNorm numbers 4-8 are NVCaffe's 5-7 and engine 15 here: by wire type."""
    filler = ld(1, b"constant") + f32(2, 2.0)
    bn = vint(4, 4) + vint(5, 1) + vint(6, 0) + ld(7, filler) + ld(8, ld(1, b"constant")) + \
        vint(10, 1) + f32(3, 1e-3)
    data = net_bytes(
        layer_bytes("data", "Input", tops=["data"],
                    extra=ld(143, ld(1, ld(1, varint(1) + varint(2) + varint(3) + varint(3))))),
        layer_bytes("bn", "BatchNorm", ["data"], ["bn"], ld(139, bn)))
    param = read(tmp_path, data)[0]
    p = param.layer[1].batch_norm_param
    assert p.engine == caffe_pb2.BatchNormParameter.MKLDNN
    assert p.use_weight_bias and p.HasField("use_weight_bias") and not p.bias_term
    assert p.filler.value == 2.0 and p.bias_filler.type == "constant" and p.relu
    assert not p.HasField("scale_filler") and not p.scale_bias
    net = caffe.Net(param, caffe.TEST)
    assert [b.data.shape for b in net.params["bn"]] == [(2,), (2,), (1,), (2,)]
    np.testing.assert_array_equal(net.params["bn"][3].data, [2.0, 2.0])


# ---- the other forks' 149 -------------------------------------------------------------------
def test_149_goes_to_the_message_of_the_layers_type(tmp_path):
    """darknet2caffe's upsample_param, MobileNet-YOLO's reorg_param and R-FCN's
    psroi_pooling_param all arrive in 149; the layer's type decides (checked for those of
    them this schema holds)."""
    msgs = {"Upsample": "upsample_param", "Reorg": "reorg_param",
            "PSROIPooling": "psroi_pooling_param"}
    fields = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    present = {t: f for t, f in msgs.items() if f in fields}
    assert "Upsample" in present
    layers, payloads = [], {}
    for type_, field in present.items():
        message = getattr(caffe_pb2.LayerParameter(), field)
        first = message.DESCRIPTOR.fields[0]
        setattr(message, first.name, 2 if first.cpp_type != first.CPPTYPE_FLOAT else 0.5)
        payloads[type_] = (field, message)
        layers.append(layer_bytes(type_.lower(), type_, extra=ld(149,
                                                                 message.SerializeToString())))
    layers.append(layer_bytes("nv", "ReLU", extra=vint(149, 1)))
    layers.append(layer_bytes("intel", "ReLU", extra=ld(149, b"MKL2017")))
    param = read(tmp_path, net_bytes(*layers))[0]
    for layer in param.layer[:len(present)]:
        field, message = payloads[layer.type]
        assert getattr(layer, field) == message, layer.type
    assert param.layer[-2].debug and param.layer[-1].engine == "MKL2017"
    assert not fork_fields.unknown_fields(param)


# ---- unknown fields -------------------------------------------------------------------------
def test_unknown_binary_field_is_reported_with_its_fork(tmp_path, caplog):
    data = net_bytes(layer_bytes("bn1", "BatchNorm", extra=ld(139, vint(1, 1) + vint(12, 3))),
                     layer_bytes("drop", "Dropout", extra=ld(155, f32(1, 0.5))),
                     layer_bytes("odd", "ReLU", extra=vint(777, 5)))
    with caplog.at_level(logging.WARNING):
        param, path = read(tmp_path, data)
    text = caplog.text
    assert "layer[0] (layer 'bn1').batch_norm_param: field 12 of BatchNormParameter" in text
    assert "layer[1] (layer 'drop'): field 155 of LayerParameter" in text
    assert "Intel Caffe (spatial_dropout_param)" in text
    assert "field 777 of LayerParameter" in text and str(path) in text
    # the read itself goes on: the rest of the layer is there
    assert param.layer[2].name == "odd" and param.layer[0].batch_norm_param.use_global_stats


def test_unknown_text_field_names_line_and_fork(tmp_path):
    path = tmp_path / "intel.prototxt"
    path.write_text('name: "n"\nlayer {\n  name: "bn"\n  type: "BatchNorm"\n'
                    '  batch_norm_param { eps: 0.001 }\n}\nlayer {\n  name: "p"\n'
                    '  type: "Pooling"\n  pooling_param { avg_include_pad: false }\n}\n')
    with pytest.raises(ProtoError) as err:
        protoio.read_net_param(str(path))
    text = str(err.value)
    assert "avg_include_pad" in text and "PoolingParameter" in text
    assert "Intel Caffe" in text and ":10:" in text


# ---- the forks' prototxt files --------------------------------------------------------------
def test_nvcaffe_train_val_reads_with_its_fields():
    param = protoio.read_net_param(os.path.join(FIXTURES,
                                                "nvcaffe_resnet_fp16_train_val.prototxt"))
    assert param.default_forward_type == caffe_pb2.FLOAT16
    assert param.eltwise_mem_sharing and param.global_grad_scale == 8
    data = param.layer[0]
    assert (data.data_param.threads, data.data_param.cache, data.data_param.shuffle) == \
        (4, True, True)
    assert data.transform_param.img_rand_resize_upper == 272
    bn = param.layer[3].batch_norm_param
    assert bn.scale_bias and bn.scale_filler.value == 1
    assert param.layer[2].forward_type == caffe_pb2.FLOAT16


def test_nvcaffe_training_net_builds_with_scale_filler():
    """The train_val file's layers after its data layers build (scale_filler and all, which
    OpenCV refuses) and train one step."""
    param = protoio.read_net_param(os.path.join(FIXTURES,
                                                "nvcaffe_resnet_fp16_train_val.prototxt"))
    inputs = caffe_pb2.LayerParameter(name="in", type="Input", top=["data", "label"])
    inputs.input_param.shape.add().dim.extend([4, 3, 8, 8])
    inputs.input_param.shape.add().dim.extend([4])
    layers = [inputs] + list(param.layer[2:])
    del param.layer[:]
    param.layer.extend(layers)
    net = caffe.Net(param, caffe.TRAIN)
    assert [b.data.shape for b in net.params["conv1/bn"]] == [(8,), (8,), (1,), (8,), (8,)]
    np.testing.assert_array_equal(net.params["conv1/bn"][3].data, 1)
    net.blobs["data"].data[...] = np.random.default_rng(0).standard_normal((4, 3, 8, 8))
    net.blobs["label"].data[...] = [0, 1, 2, 3]
    net.forward()
    net.backward()
    assert np.abs(net.params["conv1/bn"][3].diff).sum() > 0


def _opencv_net(prototxt, caffemodel):
    cv2 = pytest.importorskip("cv2", reason="OpenCV (cv2) is the independent reader")
    return cv2.dnn.readNetFromCaffe(str(prototxt), str(caffemodel))


def _random_weights(net, rng):
    for name, blobs in net.params.items():
        for i, blob in enumerate(blobs):
            blob.data[...] = rng.uniform(0.5, 1.5, blob.data.shape)
        if net.layer_dict[name].type == "BatchNorm":
            blobs[2].data[...] = 1  # NVCaffe's variance correction (and a plain scale 1)


def test_nvcaffe_deploy_matches_opencv(tmp_path):
    proto = os.path.join(FIXTURES, "nvcaffe_deploy_fp16.prototxt")
    net = caffe.Net(proto, caffe.TEST)
    rng = np.random.default_rng(1)
    _random_weights(net, rng)
    weights = tmp_path / "nvcaffe.caffemodel"
    net.save(str(weights))
    x = rng.standard_normal((2, 3, 11, 11)).astype(np.float32)
    ours = net.forward(data=x)["pool"].copy()
    ocv = _opencv_net(proto, weights)
    ocv.setInput(x)
    np.testing.assert_allclose(ours, ocv.forward(), rtol=1e-4, atol=1e-4)


def test_densenet_ceil_mode_matches_opencv(tmp_path):
    proto = os.path.join(FIXTURES, "densenet_ceil_mode.prototxt")
    net = caffe.Net(proto, caffe.TEST)
    # 15 -> conv stride 2: 8 -> MAX 3/2 pad 1 floor: 4 -> AVE 2/2: floor 2, ceil 2
    assert net.blobs["pool1"].data.shape == (1, 8, 4, 4)
    rng = np.random.default_rng(2)
    _random_weights(net, rng)
    weights = tmp_path / "densenet.caffemodel"
    net.save(str(weights))
    x = rng.standard_normal((1, 3, 15, 15)).astype(np.float32)
    out = net.forward(data=x)
    ocv = _opencv_net(proto, weights)
    ocv.setInput(x)
    for name in ("pool1", "pool2", "pool3"):
        np.testing.assert_allclose(out[name] if name in out else net.blobs[name].data,
                                   ocv.forward(name), rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("ceil_mode,round_mode,size", [("false", "", 3), ("true", "", 4),
                                                       ("", "FLOOR", 3), ("false", "CEIL", 3)])
def test_ceil_mode_is_round_mode(ceil_mode, round_mode, size):
    """7 wide, kernel 2, stride 2: floor gives 3, ceil 4; ceil_mode wins over round_mode."""
    extra = (" ceil_mode: %s" % ceil_mode if ceil_mode else "") + \
        (" round_mode: %s" % round_mode if round_mode else "")
    net = caffe.Net(
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 1 dim: 7 '
        'dim: 7 } } } layer { name: "p" type: "Pooling" bottom: "d" top: "p" pooling_param '
        '{ pool: MAX kernel_size: 2 stride: 2%s } }' % extra, caffe.TEST)
    assert net.blobs["p"].data.shape == (1, 1, size, size)


def test_intel_engines_build_and_match_opencv_without_them(tmp_path, caplog):
    """Intel's engine strings, MKL engines and int8 calibration read and run (the int8
    calibration in float with ``int8=False``, as a note says; its int8 run is
    test_int8.py's); OpenCV, which knows none of them, runs the same file with those
    fields removed, and agrees."""
    proto = os.path.join(FIXTURES, "intel_engines_deploy.prototxt")
    with caplog.at_level(logging.INFO):
        net = caffe.Net(proto, caffe.TEST, int8=False)
    assert "int8 calibration (quantization_param, 1 layers) is kept; the layers compute in " \
        "float (int8 turned off)" in caplog.text
    layers = dict(zip(net._layer_names, net.layers))
    assert layers["pool1"].engine == caffe_pb2.PoolingParameter.CAFFE
    rng = np.random.default_rng(3)
    _random_weights(net, rng)
    weights = tmp_path / "intel.caffemodel"
    net.save(str(weights))
    plain = tmp_path / "plain.prototxt"
    text = open(proto).read()
    for cut in (' engine: "MKLDNN:CPU"', ' engine: "MKLDNN"', ' engine: "MKL2017"',
                ' engine: "CAFFE"', " engine: MKL2017", " engine: MKLDNN"):
        text = text.replace(cut, "")
    plain.write_text(re.sub(r"quantization_param \{[^}]*\}", "", text))
    x = rng.standard_normal((1, 3, 10, 10)).astype(np.float32)
    ours = net.forward(data=x)["fc"]
    ocv = _opencv_net(plain, weights)
    ocv.setInput(x)
    np.testing.assert_allclose(ours, ocv.forward(), rtol=1e-4, atol=1e-4)


def test_dropout_scale_train_false_in_a_prototxt():
    """py-faster-rcnn's ``scale_train: false``: TEST output x * (1 - ratio)."""
    net = caffe.Net(
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 2 dim: 3 } } } '
        'layer { name: "drop" type: "Dropout" bottom: "d" top: "o" dropout_param { '
        'dropout_ratio: 0.25 scale_train: false } }', caffe.TEST)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(net.forward(d=x)["o"], x * 0.75, rtol=1e-7)


def test_pspnet_bn_fields_read_and_build_pspnets_layer(tmp_path):
    # The first BN layer of hszhao/PSPNet evaluation/prototxt/pspnet50_ADE20K_473.prototxt
    # (commit 798bdc907c8630e8c3997ebfdd0d7cae0c5ab03b). PSPNet's BNParameter (slope_filler,
    # bias_filler, momentum, eps, frozen; LayerParameter field 152 in the fork) is not
    # SegNet's: it reads by name and builds PSPNet's BN (tests/test_fork_pspnet_bn.py).
    path = tmp_path / "pspnet50.prototxt"
    path.write_text('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 8\ninput_dim: 8\n'
                    'layer {\n  name: "conv1_1_3x3_s2/bn"\n  type: "BN"\n  bottom: "data"\n'
                    '  top: "data"\n  bn_param {\n'
                    '    slope_filler {\n      type: "constant"\n      value: 1\n    }\n'
                    '    bias_filler {\n      type: "constant"\n      value: 0\n    }\n'
                    '    frozen: true\n    momentum: 0.95\n  }\n}\n')
    p = protoio.read_net_param(str(path)).layer[-1].bn_param
    assert (p.slope_filler.value, p.bias_filler.value, p.frozen) == (1.0, 0.0, True)
    assert p.momentum == pytest.approx(0.95) and not p.HasField("scale_filler")
    net = caffe.Net(str(path), caffe.TEST)
    # four blobs: slope 1, bias 0, running mean 0, running variance 1 (frozen): y = x / sqrt(1
    # + 1e-5) with the fork's default eps
    assert len(net.params["conv1_1_3x3_s2/bn"]) == 4
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)
    np.testing.assert_allclose(net.forward(data=x)["data"], x / np.sqrt(1 + 1e-5), rtol=1e-6)
