"""Darknet .cfg + .weights converted to a Caffe net: every layer's output against an independent
NumPy implementation of Darknet's forward pass (tests/helpers/darknet.py).

Tolerance: the converted net runs in float32, the reference in float64 from the same float32
parameters; outputs agree to ``rtol=1e-5`` with ``atol=2e-6`` times the layer's largest
magnitude (the differences seen are float32 rounding, around 1e-6 relative).
"""

import os

import numpy as np
import pytest
from helpers.darknet import (CLASSIFIER, CLASSIFIER_AVG, REGION_CFG, TINY_YOLO, darknet_forward,
                             maxpool, random_params, weights_bytes)

import pycaffe_lite
from pycaffe_lite.darknet import DarknetError, DarknetWarning, convert, darknet2caffe
from pycaffe_lite.proto import caffe_pb2

RTOL = 1e-5
ATOL = 2e-6
# the output of a whole net, float32 against Darknet's arithmetic in float64: the rounding of
# every layer adds up (about 25 float32 steps of the output's scale on AMD's OpenBLAS kernels)
NET_ATOL = 5e-6


def convert_and_run(tmp_path, cfg_text, seed=0, bn_variant="pjreddie", major=0, minor=2,
                    transpose=False, image=None):
    cfg = tmp_path / "model.cfg"
    cfg.write_text(cfg_text)
    data = weights_bytes(random_params(cfg_text, seed, transpose, bn_variant), major=major,
                         minor=minor)
    (tmp_path / "model.weights").write_bytes(data)
    proto, model = tmp_path / "model.prototxt", tmp_path / "model.caffemodel"
    result = darknet2caffe(str(cfg), str(tmp_path / "model.weights"), str(proto), str(model),
                           bn_variant=bn_variant)
    net = pycaffe_lite.Net(str(proto), str(model), pycaffe_lite.TEST)
    shape = net.blobs["data"].data.shape[1:]
    if image is None:
        image = np.random.default_rng(seed + 100).uniform(0, 1, shape)
    net.blobs["data"].data[...] = image
    net.forward()
    ref = darknet_forward(cfg_text, data, image, bn_variant)
    return result, net, ref


def assert_layers_match(result, net, ref):
    assert len(result.blob_of_layer) == len(ref)
    for i, expected in enumerate(ref):
        got = net.blobs[result.blob_of_layer[i]].data[0]
        assert got.size == expected.size, "layer %d: %s vs %s" % (i, got.shape, expected.shape)
        np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=RTOL,
                                   atol=ATOL * max(1.0, np.abs(expected).max()),
                                   err_msg="layer %d (blob %s)" % (i, result.blob_of_layer[i]))


def test_tiny_yolo_matches_darknet(tmp_path):
    result, net, ref = convert_and_run(tmp_path, TINY_YOLO)
    assert_layers_match(result, net, ref)
    assert result.outputs == ["yolo11", "yolo18"]
    assert net.blobs["yolo11"].data.shape == (1, 21, 4, 5)
    assert net.blobs["yolo18"].data.shape == (1, 21, 8, 10)
    assert result.header == {"major": 0, "minor": 2, "revision": 0, "seen": 12345}
    types = {lp.name: lp.type for lp in result.net_param.layer}
    assert types["maxpool5_crop"] == "Crop"          # size 2 stride 1: Darknet's padding
    assert types["route9_slice0"] == "Slice"         # groups / group_id
    assert types["shortcut8"] == "Eltwise"
    yp = [lp for lp in result.net_param.layer if lp.name == "yolo11"][0].yolo_param
    assert list(yp.mask) == [3, 4, 5] and yp.num == 6 and yp.classes == 2
    assert list(yp.anchors) == [10, 14, 23, 27, 37, 58, 81, 82, 135, 169, 344, 319]
    assert yp.ignore_thresh == pytest.approx(0.7)
    assert any("jitter=.3" in n for n in result.notes)


def test_tiny_yolo_batch_of_two(tmp_path):
    cfg = tmp_path / "m.cfg"
    cfg.write_text(TINY_YOLO)
    data = weights_bytes(random_params(TINY_YOLO, 3))
    result = convert(str(cfg), data, batch_size=2)
    model = tmp_path / "m.caffemodel"
    from pycaffe_lite.proto import protoio
    protoio.write_binary(result.weights_param, str(model))
    net = pycaffe_lite.Net(result.net_param, str(model), pycaffe_lite.TEST)
    images = np.random.default_rng(5).uniform(0, 1, (2, 3, 16, 20))
    net.blobs["data"].data[...] = images
    net.forward()
    for b in range(2):
        ref = darknet_forward(TINY_YOLO, data, images[b])
        np.testing.assert_allclose(net.blobs["yolo18"].data[b], ref[18], rtol=RTOL,
                                   atol=NET_ATOL * max(1.0, np.abs(ref[18]).max()))


def test_alexeyab_batch_norm_variant(tmp_path):
    result, net, ref = convert_and_run(tmp_path, TINY_YOLO, seed=1, bn_variant="alexeyab")
    assert_layers_match(result, net, ref)
    bn = [lp for lp in result.net_param.layer if lp.type == "BatchNorm"][0]
    assert bn.batch_norm_param.eps == pytest.approx(1e-5)


def test_classifier_matches_darknet(tmp_path):
    result, net, ref = convert_and_run(tmp_path, CLASSIFIER, seed=2)
    assert_layers_match(result, net, ref)
    out = net.blobs[result.outputs[0]].data
    assert out.shape == (1, 5)
    np.testing.assert_allclose(out.sum(), 1.0, rtol=1e-6)
    types = [lp.type for lp in result.net_param.layer]
    # 3x3/2 maxpool on an even width: Caffe's map has one more column, sliced off
    assert "Slice" in types and "Silence" in types
    assert net.blobs["maxpool1"].data.shape == (1, 6, 4, 5)


def test_classifier_with_avgpool_batchnorm_activation_sections(tmp_path):
    result, net, ref = convert_and_run(tmp_path, CLASSIFIER_AVG, seed=3)
    assert_layers_match(result, net, ref)
    out = net.blobs[result.outputs[0]].data[0]
    np.testing.assert_allclose([out[:3].sum(), out[3:].sum()], [1, 1], rtol=1e-6)


def test_transposed_connected_weights(tmp_path):
    # major or minor above 1000: Darknet stores [connected] weights inputs x outputs
    result, net, ref = convert_and_run(tmp_path, CLASSIFIER, seed=4, major=0, minor=1001,
                                       transpose=True)
    assert_layers_match(result, net, ref)
    assert result.header["minor"] == 1001


def test_connected_flatten_order(tmp_path):
    """[connected] reads its input in Darknet's (c, h, w) order, which is Caffe's too."""
    cfg_text = "[net]\nwidth=3\nheight=2\nchannels=2\n\n[connected]\noutput=1\n" \
               "activation=linear\n"
    weights = np.arange(12, dtype=np.float32)
    data = weights_bytes([np.zeros(1), weights])
    result = convert(cfg_text, data)
    net = pycaffe_lite.Net(result.net_param, pycaffe_lite.TEST)
    from pycaffe_lite.weights import copy_trained_layers_from_param
    copy_trained_layers_from_param(net, result.weights_param)
    image = np.zeros((2, 2, 3))
    image[1, 0, 2] = 1  # c=1, h=0, w=2: flat index 1*6 + 0*3 + 2 = 8
    net.blobs["data"].data[0] = image
    net.forward()
    assert net.blobs["fc0"].data[0, 0] == 8


@pytest.mark.parametrize("softmax,background", [(1, 0), (0, 0), (1, 1)])
def test_region_head_matches_darknet(tmp_path, softmax, background):
    result, net, ref = convert_and_run(tmp_path, REGION_CFG % (softmax, background), seed=5)
    assert_layers_match(result, net, ref)
    rp = [lp for lp in result.net_param.layer if lp.type == "Region"][0].region_param
    assert (rp.classes, rp.coords, rp.num, rp.softmax, rp.background) == \
        (3, 4, 2, bool(softmax), bool(background))
    np.testing.assert_allclose(rp.anchors, [1.08, 1.19, 3.42, 4.41], rtol=1e-6)


# ---- maxpool: Darknet's output size and window placement -----------------------------------
MAXPOOL_CASES = [
    # (size, stride, padding or None for Darknet's default size - 1)
    (2, 2, None), (2, 1, None), (3, 1, None), (3, 2, None), (5, 1, None), (4, 2, None),
    (3, 3, None), (4, 4, None), (2, 2, 0), (3, 2, 0), (3, 1, 0), (3, 2, 1), (2, 2, 2),
    (3, 2, 3), (4, 3, None), (6, 2, 1),
]


@pytest.mark.parametrize("size,stride,padding", MAXPOOL_CASES)
@pytest.mark.parametrize("hw", [(7, 8), (6, 9), (5, 5)])
def test_maxpool_matches_darknet(size, stride, padding, hw):
    h, w = hw
    pad_line = "" if padding is None else "padding=%d\n" % padding
    cfg_text = "[net]\nwidth=%d\nheight=%d\nchannels=2\n\n[maxpool]\nsize=%d\nstride=%d\n%s" \
        % (w, h, size, stride, pad_line)
    p = size - 1 if padding is None else padding
    if (h + p - size) // stride + 1 < 1 or (w + p - size) // stride + 1 < 1:
        with pytest.raises(DarknetError, match="does not fit"):
            convert(cfg_text)
        return
    result = convert(cfg_text)
    net = pycaffe_lite.Net(result.net_param, pycaffe_lite.TEST)
    x = np.random.default_rng(size * 100 + stride).normal(size=(2, h, w))
    net.blobs["data"].data[0] = x
    net.forward()
    expected = maxpool(x, size, stride, p)
    np.testing.assert_array_equal(net.blobs["maxpool0"].data[0], expected.astype(np.float32))


def test_maxpool_yolov3_tiny_stride_one_is_crop_of_padded_pool():
    cfg_text = "[net]\nwidth=13\nheight=13\nchannels=4\n\n[maxpool]\nsize=2\nstride=1\n"
    layers = {lp.name: lp for lp in convert(cfg_text).net_param.layer}
    pool, crop = layers["maxpool0"], layers["maxpool0_crop"]
    assert pool.pooling_param.pad == 1 and pool.pooling_param.kernel_size == 2
    assert list(crop.bottom) == ["maxpool0_full", "data"]
    assert list(crop.crop_param.offset) == [1] and crop.crop_param.axis == 2


def test_maxpool_stride_two_is_plain_pooling():
    cfg_text = "[net]\nwidth=416\nheight=416\nchannels=3\n\n[maxpool]\nsize=2\nstride=2\n"
    net_param = convert(cfg_text).net_param
    assert [lp.type for lp in net_param.layer] == ["Input", "Pooling"]
    assert not net_param.layer[1].pooling_param.HasField("pad")


# ---- structure and errors ------------------------------------------------------------------
def test_structure_only_without_weights(tmp_path):
    proto = tmp_path / "m.prototxt"
    result = darknet2caffe(TINY_YOLO, prototxt=str(proto))
    assert result.weights_param is None and result.header is None
    net = pycaffe_lite.Net(str(proto), pycaffe_lite.TEST)
    net.forward()
    assert net.blobs["yolo18"].data.shape == (1, 21, 8, 10)


def test_blob_parameters_and_param_specs():
    data = weights_bytes(random_params(TINY_YOLO, 7))
    result = convert(TINY_YOLO, data)
    layers = {lp.name: lp for lp in result.weights_param.layer}
    conv = layers["conv0"]
    assert not conv.convolution_param.bias_term
    assert [list(b.shape.dim) for b in conv.blobs] == [[8, 3, 3, 3]]
    assert [list(b.shape.dim) for b in layers["conv0_bn"].blobs] == [[8], [8], [1]]
    assert [list(b.shape.dim) for b in layers["conv0_scale"].blobs] == [[8], [8]]
    assert layers["conv0_bn"].blobs[2].data[0] == 1
    # Darknet decays weights only: biases and scales get decay_mult 0
    assert [p.decay_mult for p in layers["conv10"].param] == [1, 0]
    assert [p.decay_mult for p in layers["conv0_scale"].param] == [0, 0]
    assert [list(b.shape.dim) for b in layers["conv16"].blobs] == [[16, 12, 3, 3]]


def test_batch_norm_pjreddie_variance_folding(tmp_path):
    """Darknet divides by sqrt(var) + 1e-6: eps is 1e-12 and the stored variance
    var + 2e-6 sqrt(var), so that sqrt(stored + eps) = sqrt(var) + 1e-6 (a zero variance
    included, where Darknet divides by 1e-6)."""
    cfg_text = "[net]\nwidth=1\nheight=1\nchannels=1\n\n[convolutional]\nbatch_normalize=1\n" \
               "filters=3\nsize=1\nactivation=linear\n"
    var = np.array([4.0, 1e-10, 0.0], np.float32)
    data = weights_bytes([[0, 0, 0], [1, 1, 1], [0, 0, 0], var, [1, 1, 1]])
    result = convert(cfg_text, data)
    bn = [lp for lp in result.weights_param.layer if lp.type == "BatchNorm"][0]
    stored = np.array(bn.blobs[1].data, np.float64)
    eps = np.float64(np.float32(bn.batch_norm_param.eps))
    np.testing.assert_allclose(np.sqrt(stored + eps), np.sqrt(var.astype(np.float64)) + 1e-6,
                               rtol=1e-6)
    model = tmp_path / "bn.caffemodel"
    from pycaffe_lite.proto import protoio
    protoio.write_binary(result.weights_param, str(model))
    net = pycaffe_lite.Net(result.net_param, str(model), pycaffe_lite.TEST)
    net.blobs["data"].data[...] = 1e-3
    net.forward()
    np.testing.assert_allclose(net.blobs["conv0"].data.ravel(),
                               1e-3 / (np.sqrt(var.astype(np.float64)) + 1e-6), rtol=1e-5)


def test_unconvertible_section_names_line():
    cfg_text = "[net]\nwidth=4\nheight=4\nchannels=1\n\n[lstm]\noutput=2\n"
    with pytest.raises(DarknetError, match=r"<string>:6: layer 0 \[lstm\]: \[lstm\] sections "
                                           r"cannot be converted"):
        convert(cfg_text)


def test_unknown_key_warns_with_line():
    cfg_text = "[net]\nwidth=4\nheight=4\nchannels=1\n\n[convolutional]\nfilters=2\n" \
               "size=1\nactivation=linear\nfliters=3\n"
    with pytest.warns(DarknetWarning, match=r"<string>:10: layer 0 \[convolutional\]: unknown "
                                            r"key fliters=3"):
        convert(cfg_text)


@pytest.mark.parametrize("body,pattern", [
    ("[convolutional]\nfilters=2\nsize=1\nactivation=gelu\n",
     r":10: layer 0 \[convolutional\]: activation=gelu cannot be converted"),
    ("[convolutional]\nfilters=2\nsize=3\nbinary=1\n",
     r":10: layer 0 \[convolutional\]: binary=1 cannot be converted"),
    ("[convolutional]\nfilters=2\nsize=1\ndontload=1\n",
     r":10: layer 0 \[convolutional\]: dontload=1 cannot be converted"),
    ("[convolutional]\nfilters=3\nsize=1\ngroups=2\n",
     r":10: layer 0 \[convolutional\]: groups=2 must divide"),
    ("[route]\nlayers=-1\n", r":8: layer 0 \[route\]: layers refers to layer -1"),
    ("[convolutional]\nfilters=2\nsize=1\n\n[shortcut]\nfrom=0\n\n[shortcut]\nfrom=-3\n",
     r":15: layer 2 \[shortcut\]: from refers to layer -1"),
    ("[convolutional]\nfilters=2\nsize=1\n\n[yolo]\nmask=0\nclasses=1\nnum=1\n",
     r":11: layer 1 \[yolo\]: the layer before gives 2 channels; \[yolo\] with 1 masked anchors "
     r"and classes=1 needs 6"),
    ("[convolutional]\nfilters=6\nsize=1\n\n[yolo]\nmask=0,3\nclasses=1\nnum=2\n",
     r":12: layer 1 \[yolo\]: mask \[0, 3\] refers to anchors \[3\]"),
    ("[upsample]\nstride=0\n", r":8: layer 0 \[upsample\]: stride=0 gives an empty output"),
    ("[convolutional]\nfilters=two\n", r":8: layer 0 \[convolutional\]: filters=two: expected "
                                       r"an integer"),
    ("[softmax]\ntree=data/9k.tree\n", r":8: layer 0 \[softmax\]: tree"),
])
def test_conversion_errors_name_the_line(body, pattern):
    cfg_text = "[net]\nwidth=4\nheight=4\nchannels=2\n\n" \
               "# layer 0 follows\n" + body
    with pytest.raises(DarknetError, match=pattern):
        convert(cfg_text)


def test_shortcut_between_different_shapes_is_refused():
    # other channels alone convert (tests/test_importers_real_files.py); another height and
    # width do not
    cfg_text = "[net]\nwidth=4\nheight=4\nchannels=2\n\n[convolutional]\nfilters=3\nsize=1\n\n" \
               "[convolutional]\nfilters=2\nsize=1\nstride=2\n\n[shortcut]\nfrom=-2\n"
    with pytest.raises(DarknetError, match=r":16: layer 2 \[shortcut\]: layer 0 gives 3x4x4 but "
                                           r"the previous layer gives 2x2x2"):
        convert(cfg_text)


def test_shortcut_alpha_beta_and_activation(tmp_path):
    cfg_text = "[net]\nwidth=3\nheight=3\nchannels=2\n\n[convolutional]\nfilters=2\nsize=1\n" \
               "activation=linear\n\n[shortcut]\nfrom=-2\nalpha=0.5\nbeta=2\n" \
               "activation=logistic\n"
    cfg_text = cfg_text.replace("from=-2", "from=-1")
    result, net, ref = convert_and_run(tmp_path, cfg_text.replace(
        "[shortcut]", "[convolutional]\nfilters=2\nsize=1\nactivation=tanh\n\n[shortcut]"),
        seed=9)
    assert_layers_match(result, net, ref)
    elt = [lp for lp in result.net_param.layer if lp.type == "Eltwise"][0]
    assert list(elt.eltwise_param.coeff) == [0.5, 2.0]


def test_flat_input_connected_network(tmp_path):
    cfg_text = "[net]\ninputs=6\n\n[connected]\noutput=4\nactivation=relu\n\n" \
               "[connected]\noutput=3\nactivation=linear\n\n[softmax]\n"
    result, net, ref = convert_and_run(tmp_path, cfg_text, seed=12,
                                       image=np.linspace(-1, 1, 6))
    assert_layers_match(result, net, ref)
    assert net.blobs["data"].data.shape == (1, 6)


def test_rectangular_strides_and_scale_x_y(tmp_path):
    """AlexeyAB's stride_x / stride_y and [yolo] scale_x_y."""
    cfg_text = "[net]\nwidth=9\nheight=6\nchannels=2\n\n[convolutional]\nfilters=7\n" \
               "size=3\nstride_x=2\nstride_y=1\npad=1\nactivation=leaky\n\n" \
               "[yolo]\nmask=0\nanchors=4,5\nclasses=2\nnum=1\nscale_x_y=1.05\n"
    result, net, ref = convert_and_run(tmp_path, cfg_text, seed=13)
    assert_layers_match(result, net, ref)
    assert net.blobs["conv0"].data.shape == (1, 7, 6, 5)


def test_upsample_scale(tmp_path):
    cfg_text = "[net]\nwidth=3\nheight=2\nchannels=2\n\n[convolutional]\nfilters=2\nsize=1\n" \
               "activation=linear\n\n[upsample]\nstride=3\nscale=0.5\n"
    result, net, ref = convert_and_run(tmp_path, cfg_text, seed=10)
    assert_layers_match(result, net, ref)
    assert net.blobs["upsample1"].data.shape == (1, 2, 6, 9)


def test_outputs_written_files_load(tmp_path):
    cfg = tmp_path / "m.cfg"
    cfg.write_text(CLASSIFIER)
    (tmp_path / "m.weights").write_bytes(weights_bytes(random_params(CLASSIFIER, 11)))
    darknet2caffe(str(cfg), str(tmp_path / "m.weights"), str(tmp_path / "m.prototxt"),
                  str(tmp_path / "m.caffemodel"), solver=str(tmp_path / "s.prototxt"))
    for name in ("m.prototxt", "m.caffemodel", "s.prototxt"):
        assert os.path.getsize(tmp_path / name) > 0
    model = caffe_pb2.NetParameter()
    model.ParseFromString((tmp_path / "m.caffemodel").read_bytes())
    assert sum(len(lp.blobs) for lp in model.layer) == (1 + 3 + 2) + 2 + (1 + 3 + 2) + 2


def test_caffemodel_needs_weights(tmp_path):
    with pytest.raises(DarknetError, match="needs the Darknet .weights"):
        darknet2caffe(CLASSIFIER, None, str(tmp_path / "m.prototxt"),
                      str(tmp_path / "m.caffemodel"))


BATCHNORM_CFG = """\
[net]
width=5
height=4
channels=3

[convolutional]
filters=4
size=3
pad=1
activation=leaky

[batchnorm]

[convolutional]
filters=2
size=1
activation=linear
"""


def _batchnorm_file(bn_variant):
    """A .weights file for BATCHNORM_CFG written in ``bn_variant``'s [batchnorm] layout, and
    the [batchnorm] arrays (biases are 0 where the layout has none)."""
    rng = np.random.default_rng(21)
    conv0 = [rng.normal(0, 0.5, 4), rng.normal(0, 0.4, 4 * 3 * 3 * 3)]
    bn = {"biases": rng.normal(0, 0.5, 4), "scales": rng.uniform(0.5, 1.5, 4),
          "mean": rng.normal(0, 0.3, 4), "var": np.array([0.04, 1.7, 0.3, 2.5])}
    conv2 = [rng.normal(0, 0.5, 2), rng.normal(0, 0.5, 2 * 4)]
    layout = [bn["scales"], bn["mean"], bn["var"]]
    if bn_variant == "alexeyab":
        layout.insert(0, bn["biases"])     # AlexeyAB's parser.c: biases come first
    else:
        bn["biases"] = np.zeros(4)         # pjreddie's parser.c stores none; they stay 0
    arrays = [np.asarray(a, np.float32) for a in conv0 + layout + conv2]
    bn = {k: np.asarray(v, np.float32).astype(np.float64) for k, v in bn.items()}
    return weights_bytes(arrays), bn


@pytest.mark.parametrize("bn_variant", ["pjreddie", "alexeyab"])
def test_batchnorm_section_weights_in_each_variants_layout(tmp_path, bn_variant):
    data, bn = _batchnorm_file(bn_variant)
    result = convert(BATCHNORM_CFG, data, bn_variant=bn_variant)
    model = tmp_path / "bn.caffemodel"
    from pycaffe_lite.proto import protoio
    protoio.write_binary(result.weights_param, str(model))
    net = pycaffe_lite.Net(result.net_param, str(model), pycaffe_lite.TEST)
    image = np.random.default_rng(22).uniform(0, 1, (3, 4, 5))
    net.blobs["data"].data[...] = image
    net.forward()
    # every layer, the one after the [batchnorm] included (no parameter shifted)
    assert_layers_match(result, net, darknet_forward(BATCHNORM_CFG, data, image, bn_variant))
    # the [batchnorm] layer by Darknet's forward_batchnorm_layer at inference: normalize_cpu
    # with the rolling statistics, scale_bias, add_bias
    x = net.blobs["conv0"].data[0].astype(np.float64)
    col = (slice(None), None, None)
    if bn_variant == "pjreddie":
        norm = (x - bn["mean"][col]) / (np.sqrt(bn["var"][col]) + 1e-6)
    else:
        norm = (x - bn["mean"][col]) / np.sqrt(bn["var"][col] + 1e-5)
    expected = norm * bn["scales"][col] + bn["biases"][col]
    np.testing.assert_allclose(net.blobs["batchnorm1"].data[0], expected, rtol=RTOL,
                               atol=ATOL * np.abs(expected).max())
    scale = [lp for lp in result.weights_param.layer if lp.name == "batchnorm1_scale"][0]
    np.testing.assert_array_equal(scale.blobs[1].data, bn["biases"].astype(np.float32))


def test_batchnorm_section_in_the_other_layout_names_the_variant():
    pjreddie, _ = _batchnorm_file("pjreddie")
    # read with biases first, every later parameter shifts and the file runs out in layer 2
    with pytest.raises(DarknetError, match=r"the file ends early: layer 2 \[convolutional\] "
                                           r".*; \[batchnorm\] at <string>:12 is read in "
                                           r"AlexeyAB's layout \(biases, scales, rolling mean, "
                                           r"rolling variance\); for pjreddie's layout .*"
                                           r"--bn-variant pjreddie \(bn_variant='pjreddie'\)$"):
        convert(BATCHNORM_CFG, pjreddie, bn_variant="alexeyab")
    alexeyab, _ = _batchnorm_file("alexeyab")
    with pytest.raises(DarknetError, match=r"16 bytes \(4 values\) are left over .*\[batchnorm\] "
                                           r"at <string>:12 is read in pjreddie's layout "
                                           r"\(scales, rolling mean, rolling variance\); for "
                                           r"AlexeyAB's layout .*--bn-variant alexeyab"):
        convert(BATCHNORM_CFG, alexeyab, bn_variant="pjreddie")


@pytest.mark.parametrize("body,where", [
    ("[convolutional]\nfilters=5000000000\nsize=1\n",
     r":7: layer 0 \[convolutional\]: filters=5000000000"),
    ("[convolutional]\nfilters=2\nsize=4294967297\n",
     r":8: layer 0 \[convolutional\]: size=4294967297"),
    ("[convolutional]\nfilters=2\nsize=1\nstride=99999999999999999999\n",
     r":9: layer 0 \[convolutional\]: stride=99999999999999999999"),
    ("[maxpool]\nsize=2\nstride=-2147483649\n",
     r":8: layer 0 \[maxpool\]: stride=-2147483649"),
    ("[convolutional]\nfilters=6\nsize=1\n\n[yolo]\nmask=0,2147483648\nclasses=1\nnum=2\n",
     r":11: layer 1 \[yolo\]: mask=0,2147483648: entry 2147483648"),
    ("[connected]\noutput=3000000000\n", r":7: layer 0 \[connected\]: output=3000000000"),
])
def test_integer_out_of_int_range_names_the_line_and_the_range(body, where):
    cfg_text = "[net]\nwidth=4\nheight=4\nchannels=2\n\n" + body
    with pytest.raises(DarknetError, match=r"^<string>" + where + r" is out of range: allowed "
                                           r"-2147483648\.\.2147483647"):
        convert(cfg_text)


def test_integers_at_the_int_limit_are_kept():
    cfg_text = "[net]\nwidth=1\nheight=1\nchannels=1\nmax_batches=2147483647\n\n" \
               "[convolutional]\nfilters=2147483647\nsize=1\nactivation=linear\n"
    result = convert(cfg_text)
    conv = [lp for lp in result.net_param.layer if lp.name == "conv0"][0]
    assert conv.convolution_param.num_output == 2147483647
    assert result.solver_param.max_iter == 2147483647


@pytest.mark.parametrize("net,body,where", [
    ("width=65536\nheight=65536\nchannels=1\n", "[convolutional]\nfilters=1\nsize=1\n",
     r"<string>:1: \[net\]: the input, 1x65536x65536, has 4294967296 values"),
    ("width=1024\nheight=1024\nchannels=4\n", "[upsample]\nstride=32\n",
     r"<string>:6: layer 0 \[upsample\]: the output, 4x32768x32768, has 4294967296 values"),
])
def test_layer_output_beyond_int_is_refused(net, body, where):
    with pytest.raises(DarknetError, match=where + r" per image; Darknet's layer sizes are C "
                                                   r"ints \(at most 2147483647\)"):
        convert("[net]\n" + net + "\n" + body)
