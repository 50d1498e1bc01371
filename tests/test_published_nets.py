"""Published deploy nets, read unchanged from tests/fixtures/real (sources in its README):
MobileNet v1 and v2 (shicai), SqueezeNet 1.0, MTCNN's four nets, FCN-8s (VOC), DIGITS'
FCN-AlexNet, PeleeNet, SE-ResNet-50 and SE-BN-Inception (SENet), Xception with the depthwise
fork type, DPN-68 and ResNeXt-26 (soeaver/caffe-model).

Each one loads as published; its blob shapes are those the paper or the repository states;
with seeded random weights written to a .caffemodel, every blob agrees with OpenCV's
independent Caffe importer (cv2.dnn.readNetFromCaffe, layer fusion off: each blob is compared
with the output of the last layer writing it, so an in-place chain is checked at its end) to
the model zoo's tolerance (rtol 1e-4 of each entry, 1e-4 of the blob's largest magnitude near
zero), with probabilities that are not saturated; the folded net (the default for a TEST net
with weights) gives the same logits and outputs; the ONNX export runs in onnxruntime, with a
batch of two on its dynamic batch axis, and agrees; ``summary`` (its MACs against a count
from the prototxt) and ``draw_net`` read each file. DIGITS' LeNet, one file for three
stages, is read with and without its deploy stage.
"""

import os
import re

import numpy as np
import pytest
from test_model_zoo import close, fill_random

import pycaffe_lite as caffe
from pycaffe_lite.errors import LayerError, NetError, ShapeError
from pycaffe_lite import draw
from pycaffe_lite.summary import summarize

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


def path(key):
    return os.path.join(REAL, NETS[key]["file"])


def file_to_run(key, folder):
    """The file the value tests run: the published one, or for a net with "narrow" a copy in
    ``folder`` whose named layers have fewer outputs. FCN-8s' fc6 and fc7 are 4096-wide
    convolutions holding 118 M of its 134 M parameters; at 256 wide the geometry (pad 100,
    the 7 x 7 fc6, the deconvolutions and crops) is the file's and the blobs are 20x lighter
    to write, read and export. The width of VGG-16-sized weights is covered by test_model_zoo."""
    narrow = NETS[key].get("narrow")
    if not narrow:
        return path(key)
    text = open(path(key)).read()
    for layer, width in narrow.items():
        # the first num_output after the layer's name: its convolution_param's
        pattern = r'(name: "%s".*?num_output: )\d+' % re.escape(layer)
        text, n = re.subn(pattern, lambda m: m.group(1) + str(width), text, count=1,
                          flags=re.S)
        assert n == 1, (key, layer)
    out = folder / ("%s_narrowed.prototxt" % key)
    out.write_text(text)
    return str(out)


# file; the input shape the tests run (None: the file's own); the blob before the last
# Softmax (checked to be spread out, so that agreement is not agreement on a saturated or
# constant output); shapes (batch axis left out) as the paper or repository states them
NETS = {
    # MobileNets (Howard et al. 2017), Table 1: 112 x 112 x 32 after the first convolution,
    # then 64 @ 112, 128 @ 56, 256 @ 28, 512 @ 14, 1024 @ 7, average pooling to 1 x 1
    "mobilenet_v1": dict(file="shicai_mobilenet_v1_deploy.prototxt", shape=None, logits="fc7",
                         shapes={"conv1": (32, 112, 112), "conv2_1/sep": (64, 112, 112),
                                 "conv2_2/sep": (128, 56, 56), "conv3_2/sep": (256, 28, 28),
                                 "conv4_2/sep": (512, 14, 14), "conv5_6/sep": (1024, 7, 7),
                                 "conv6/sep": (1024, 7, 7), "pool6": (1024, 1, 1),
                                 "fc7": (1000, 1, 1), "prob": (1000, 1, 1)}),
    # MobileNetV2 (Sandler et al. 2018), Table 2: 32 @ 112, bottlenecks of 16 @ 112,
    # 24 @ 56, 32 @ 28, 64 @ 14 (this file keeps 28 until conv4_7), 96 @ 14, 160 @ 7, 320 @ 7,
    # a 1 x 1 convolution to 1280 @ 7 and average pooling
    "mobilenet_v2": dict(file="shicai_mobilenet_v2_deploy.prototxt", shape=None, logits="fc7",
                         shapes={"conv1": (32, 112, 112), "conv2_1/linear": (16, 112, 112),
                                 "conv2_2/linear": (24, 56, 56), "conv3_2/linear": (32, 28, 28),
                                 "conv4_3/linear": (64, 28, 28), "conv4_7/linear": (96, 14, 14),
                                 "conv5_3/linear": (160, 7, 7), "conv6_3/linear": (320, 7, 7),
                                 "conv6_4": (1280, 7, 7), "pool6": (1280, 1, 1),
                                 "fc7": (1000, 1, 1)}),
    # SqueezeNet (Iandola et al. 2016), Table 1, for the 227 x 227 input of this file:
    # conv1 96 @ 111, maxpool1 96 @ 55, fire2-4 128/128/256 @ 55, maxpool4 @ 27,
    # fire5-8 256/384/384/512 @ 27, maxpool8 @ 13, avgpool10 1 x 1; the file's 1 x 1 conv10
    # has pad: 1, which makes it 15 x 15 (the table's 13 x 13 is without)
    "squeezenet_v1.0": dict(file="squeezenet_v1.0_deploy.prototxt", shape=(2, 3, 227, 227),
                            logits="pool10",
                            shapes={"conv1": (96, 111, 111), "pool1": (96, 55, 55),
                                    "fire2/concat": (128, 55, 55), "fire4/concat": (256, 55, 55),
                                    "pool4": (256, 27, 27), "fire6/concat": (384, 27, 27),
                                    "fire8/concat": (512, 27, 27), "pool8": (512, 13, 13),
                                    "conv10": (1000, 15, 15), "pool10": (1000, 1, 1)}),
    # MTCNN (Zhang et al. 2016), Figure 2: P-Net 12 -> 10 x 10 x 10 -> 5 x 5 x 10 ->
    # 3 x 3 x 16 -> 1 x 1 x 32 -> 2 and 4 outputs; fully convolutional, so it also runs on a
    # 31 x 45 image (two of them): (31 - 2) / 2 rounded up = 15, 13, 11 positions down
    "mtcnn_pnet": dict(file="mtcnn_det1.prototxt", shape=None, logits="conv4-1",
                       shapes={"conv1": (10, 10, 10), "pool1": (10, 5, 5), "conv2": (16, 3, 3),
                               "conv3": (32, 1, 1), "prob1": (2, 1, 1), "conv4-2": (4, 1, 1)}),
    "mtcnn_pnet_image": dict(file="mtcnn_det1.prototxt", shape=(2, 3, 31, 45),
                             logits="conv4-1",
                             shapes={"conv1": (10, 29, 43), "pool1": (10, 15, 22),
                                     "conv3": (32, 11, 18), "prob1": (2, 11, 18),
                                     "conv4-2": (4, 11, 18)}),
    # R-Net: 24 -> 22 x 22 x 28 -> 11 x 11 x 28 -> 9 x 9 x 48 -> 4 x 4 x 48 -> 3 x 3 x 64 ->
    # 128 -> 2, 4
    "mtcnn_rnet": dict(file="mtcnn_det2.prototxt", shape=None, logits="conv5-1",
                       shapes={"conv1": (28, 22, 22), "pool1": (28, 11, 11), "conv2": (48, 9, 9),
                               "pool2": (48, 4, 4), "conv3": (64, 3, 3), "conv4": (128,),
                               "prob1": (2,), "conv5-2": (4,)}),
    # O-Net: 48 -> 46 x 46 x 32 -> 23 x 23 x 32 -> 21 x 21 x 64 -> 10 x 10 x 64 ->
    # 8 x 8 x 64 -> 4 x 4 x 64 -> 3 x 3 x 128 -> 256 -> 2, 4, 10
    "mtcnn_onet": dict(file="mtcnn_det3.prototxt", shape=None, logits="conv6-1",
                       shapes={"conv1": (32, 46, 46), "pool1": (32, 23, 23),
                               "conv2": (64, 21, 21), "pool2": (64, 10, 10),
                               "conv3": (64, 8, 8), "pool3": (64, 4, 4), "conv4": (128, 3, 3),
                               "conv5": (256,), "prob1": (2,), "conv6-2": (4,),
                               "conv6-3": (10,)}),
    # the landmark refinement net of MTCNN v2: 15 channels sliced into five 3-channel patches
    "mtcnn_lnet": dict(file="mtcnn_det4.prototxt", shape=None, logits="fc5_1",
                       shapes={"data241": (3, 24, 24), "data245": (3, 24, 24),
                               "fc4": (256,), "fc5_1": (2,), "fc5_5": (2,)}),
    # FCN (Long et al. 2015): the score map is cropped back to the input's size, here an odd
    # 37 x 53 (pad 100 on conv1_1 makes every size work)
    "fcn8s": dict(file="voc_fcn8s_deploy.prototxt", shape=(1, 3, 37, 53), logits="score",
                  shapes={"score": (21, 37, 53)}, narrow={"fc6": 256, "fc7": 256}),
    # DIGITS' FCN-AlexNet at its own 500 x 356 input and at 61 x 47: the 63 x 63 stride 32
    # deconvolution gives 32 (n - 1) + 63, cropped at offset 18 to the input's size
    "fcn_alexnet": dict(file="digits_fcn_alexnet_deploy.prototxt", shape=None, logits="score",
                        shapes={"data_preprocessed": (3, 500, 356),
                                "score_fr_21classes": (21, 16, 12),
                                "upscore_21classes": (21, 543, 415), "score": (21, 500, 356)}),
    "fcn_alexnet_small": dict(file="digits_fcn_alexnet_deploy.prototxt", shape=(1, 3, 61, 47),
                              logits="score",
                              shapes={"conv1": (96, 63, 60), "pool5": (256, 7, 7),
                                      "score_fr_21classes": (21, 2, 2),
                                      "upscore_21classes": (21, 95, 95), "score": (21, 61, 47)}),
    # PeleeNet (Wang et al. 2018), Table 1: stem 32 @ 56, stages of 128 @ 28, 256 @ 14,
    # 512 @ 7, 704 @ 7, global average pooling
    "peleenet": dict(file="peleenet.prototxt", shape=None, logits="classifier",
                     shapes={"stem/concat": (64, 56, 56), "stem3": (32, 56, 56),
                             "stage1_tb/pool": (128, 28, 28), "stage2_tb/pool": (256, 14, 14),
                             "stage3_tb/pool": (512, 7, 7), "stage4_tb": (704, 7, 7),
                             "global_pool": (704, 1, 1), "classifier": (1000,)}),
    # SENet (Hu et al. 2018), Table 1: ResNet-50's stages with a squeeze to C / 16
    "se_resnet50": dict(file="se_resnet50.prototxt", shape=None, logits="classifier",
                        shapes={"conv1/7x7_s2": (64, 112, 112), "pool1/3x3_s2": (64, 56, 56),
                                "conv2_1_1x1_down": (16, 1, 1), "conv2_3": (256, 56, 56),
                                "conv3_4": (512, 28, 28), "conv4_6": (1024, 14, 14),
                                "conv5_3_1x1_down": (128, 1, 1), "conv5_3": (2048, 7, 7),
                                "pool5/7x7_s1": (2048, 1, 1), "classifier": (1000,)}),
    "se_bn_inception": dict(file="se_bn_inception.prototxt", shape=None,
                            logits="classifier",
                            shapes={"inception_3a/concat": (256, 28, 28),
                                    "inception_3b/concat": (320, 28, 28),
                                    "inception_5b_prob_reshape": (1024,),
                                    "classifier": (1000,)}),
    # Xception (Chollet 2017), Figure 5: 149 x 149 x 32, 147 x 147 x 64, 128 @ 74, 256 @ 37,
    # 728 @ 19 through the middle flow, 1024 @ 10, 1536 and 2048 @ 10
    # (its random-weight logits spread so far that the Softmax saturates: scaled down)
    "xception_dw": dict(file="soeaver_xception-dw.prototxt", shape=None, logits="classifier",
                        logit_scale=0.002,
                        shapes={"conv1": (32, 149, 149), "conv2": (64, 147, 147),
                                "xception1_elewise": (128, 74, 74),
                                "xception2_elewise": (256, 37, 37),
                                "xception11_elewise": (728, 19, 19),
                                "xception12_elewise": (1024, 10, 10), "conv3_2": (1536, 10, 10),
                                "conv4_2": (2048, 10, 10), "pool_ave": (2048, 1, 1)}),
    # DPN-68 (Chen et al. 2017), Table 1: 56 x 56, 28, 14, 7 stages; each block splits its
    # 1 x 1 output into a residual path and a densely connected path
    "dpn68": dict(file="soeaver_dpn68-extra.prototxt", shape=None, logits="classifier",
                  shapes={"conv1": (10, 112, 112), "pool1": (10, 56, 56),
                          "dpn1_match_conv_split1": (64, 56, 56),
                          "dpn1_match_conv_split2": (32, 56, 56),
                          "dpn20_match_conv_split1": (512, 7, 7), "classifier": (1000,)}),
    # ResNeXt-26 32x4d: this fork's ceil_mode: false max pooling gives 56, not Caffe's 57
    "resnext26": dict(file="soeaver_resnext26-32x4d-priv.prototxt", shape=None,
                      logits="classifier",
                      shapes={"conv1": (64, 112, 112), "pool1": (64, 56, 56),
                              "resx1_conv2": (128, 56, 56), "resx3_elewise": (512, 28, 28),
                              "resx7_conv3": (2048, 7, 7), "classifier": (1000,)}),
}
# nets whose tests take over ~2 s on a shared two-core machine
SLOW = {"fcn8s", "fcn_alexnet", "fcn_alexnet_small", "peleenet", "se_resnet50",
        "se_bn_inception", "xception_dw", "dpn68", "resnext26"}


def params(keys, slow=SLOW):
    return [pytest.param(k, marks=pytest.mark.slow) if k in slow else k for k in keys]


def build(key, weights=None, file=None, **kw):
    file = file or path(key)
    net = caffe.Net(file, weights, caffe.TEST, **kw) if weights else \
        caffe.Net(file, caffe.TEST)
    shape = NETS[key]["shape"]
    if shape is not None:
        net.blobs[net.inputs[0]].reshape(*shape)
        net.reshape()
    return net


def fill(net, seed):
    rng = fill_random(net, seed)
    for layer in net.layers:
        if layer.type == "PReLU":  # slopes as trained nets have them
            layer.blobs[0].data[...] = rng.uniform(0.05, 0.5, layer.blobs[0].shape)
    return rng


def inputs(net, rng):
    return {name: rng.uniform(-1.0, 1.0, net.blobs[name].shape).astype(np.float32)
            for name in net.inputs}


# FCN-8s' 134 M parameters take a second to allocate
@pytest.mark.parametrize("key", params(sorted(NETS), {"fcn8s"}))
def test_published_file_loads_with_the_stated_shapes(key):
    net = build(key)
    for blob, shape in NETS[key]["shapes"].items():
        assert net.blobs[blob].shape[1:] == shape, (key, blob)


def opencv_text(key, folder, source):
    """The file as OpenCV is to read it. OpenCV's importer computes Axpy as
    bottom[0] * bottom[2] + bottom[1], SENet's layer (src/caffe/layers/axpy_layer.cpp of
    hujie-frank/SENet) bottom[0] * bottom[1] + bottom[2]: for OpenCV the last two bottoms of
    each Axpy are swapped, so that it computes SENet's value."""
    if key != "se_resnet50":
        return source
    lines = open(source).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i].strip() == 'type: "Axpy"':
            a, x, y = lines[i + 1:i + 4]
            assert all(s.strip().startswith("bottom:") for s in (a, x, y))
            out += [a, y, x]
            i += 3
        i += 1
    text = folder / "se_resnet50_for_opencv.prototxt"
    text.write_text("\n".join(out))
    return str(text)


def last_writers(net):
    """(layer, top index) of the last layer writing each blob, for the layers OpenCV keeps: a
    blob computed in place (Convolution, BatchNorm, Scale, ReLU on one blob) is compared once,
    as it stands at the end, which each layer of the chain goes into."""
    last = {}
    for name, layer in zip(net._layer_names, net.layers):
        if layer.type in ("Input", "Split", "Silence"):
            continue
        for i, top in enumerate(net.top_names[name]):
            last[top] = (name, i)
    return last


def opencv_outputs(cvnet, net, last):
    """OpenCV's value of each blob: the output of the blob's last writer."""
    layers = sorted({name for name, _ in last.values()})
    single = [name for name in layers if len(net.top_names[name]) == 1]
    got = {name: [value] for name, value in zip(single, cvnet.forward(single))}
    for name in layers:
        if name not in got:  # Slice: all its tops
            got[name] = list(cvnet.forwardAndRetrieve([name])[0])
    return {top: got[name][i] for top, (name, i) in last.items()}


def every_blob_agrees_with_opencv(cv2, key, net, feeds, prototxt, weights):
    """OpenCV's Caffe importer (layer fusion off) reads ``prototxt`` and ``weights``: each blob
    of ``net``, as its last writer leaves it, equals OpenCV's to the zoo's tolerance (at least
    five blobs compared)."""
    cvnet = cv2.dnn.readNetFromCaffe(str(prototxt), str(weights))
    cvnet.enableFusion(False)
    for name, value in feeds.items():
        cvnet.setInput(value, name)
    last = last_writers(net)
    theirs = opencv_outputs(cvnet, net, last)
    for top, value in theirs.items():
        ours = net.blobs[top].data
        assert value.size == ours.size, "%s: %s shape %s vs OpenCV %s" % (
            key, top, ours.shape, value.shape)
        close(ours, value, "%s: blob %s (layer %s) vs OpenCV" % (key, top, last[top][0]))
    assert len(theirs) >= 5


def agree_with_opencv(key, tmp_path):
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    caffe.set_random_seed(5)
    source = file_to_run(key, tmp_path)
    net = build(key, file=source)
    rng = fill(net, seed=sum(map(ord, key)))
    for blob in net.params.get(NETS[key]["logits"], [])[:1]:
        blob.data[...] *= NETS[key].get("logit_scale", 1.0)
    feeds = inputs(net, rng)
    outputs = {k: v.copy() for k, v in net.forward(**feeds).items()}
    logits = net.blobs[NETS[key]["logits"]].data.copy()
    assert np.isfinite(logits).all() and logits.std() > 0.05, "%s: logits spread" % key
    softmax = [net.top_names[n][0] for n, layer in zip(net._layer_names, net.layers)
               if layer.type == "Softmax"]
    for name in softmax:  # probabilities not saturated to 0 / 1
        assert net.blobs[name].data.max() < 0.999, (key, name)

    weights = tmp_path / ("%s.caffemodel" % key)
    net.save(str(weights))
    every_blob_agrees_with_opencv(cv2, key, net, feeds, opencv_text(key, tmp_path, source),
                                  weights)

    # the weights file read back folded (the default for a TEST net with weights) gives the
    # same logits and outputs
    folded = build(key, str(weights), file=source)
    for name, value in folded.forward(**feeds).items():
        close(value, outputs[name], "%s: %s folded vs unfolded" % (key, name))
    close(folded.blobs[NETS[key]["logits"]].data, logits, "%s: logits folded" % key)
    return net, source, weights, feeds, outputs


@pytest.mark.parametrize("key", params(sorted(NETS)))
def test_every_layer_agrees_with_opencv_and_the_export_with_onnxruntime(key, tmp_path):
    net, source, weights, feeds, outputs = agree_with_opencv(key, tmp_path)

    from helpers.onnx_runtime import run_ort

    from pycaffe_lite import onnx as caffe_onnx
    # the net the weights file was written from: the file holds its weights exactly (its
    # folded reading agreed above), so it is not read a third time
    model, report = caffe_onnx.export(net, tmp_path / ("%s.onnx" % key))
    # a batch of two through the dynamic batch axis
    twice = {k: np.concatenate([v, v[::-1] * 0.5]) for k, v in feeds.items()}
    for name, value in twice.items():
        net.blobs[name].reshape(*value.shape)
    net.reshape()
    ours = {k: v.copy() for k, v in net.forward(**twice).items()}
    got = run_ort(model, twice)
    assert sorted(report["outputs"]) == sorted(ours)
    for name, value in ours.items():
        close(got[name].reshape(value.shape), value, "%s: %s onnxruntime" % (key, name))


def test_se_resnet50_axpy_is_senets():
    """SENet's Axpy (its axpy_layer.cpp): top = a * x + y, a one scale per sample and channel
    (N x C x 1 x 1), x and y N x C x H x W; checked on the first block's residual sum."""
    net = build("se_resnet50")
    rng = fill(net, seed=3)
    net.forward(end="conv2_1", **inputs(net, rng))
    a = net.blobs["conv2_1_1x1_up"].data.astype(np.float64)  # the Sigmoid, in place
    x = net.blobs["conv2_1_1x1_increase"].data.astype(np.float64)
    y = net.blobs["conv2_1_1x1_proj"].data.astype(np.float64)
    assert a.shape == (1, 256, 1, 1) and 0 < a.min() and a.max() < 1
    np.testing.assert_allclose(net.blobs["conv2_1"].data, a * x + y, rtol=1e-6, atol=1e-6)


CONVOLUTIONS = ("Convolution", "ConvolutionDepthwise", "DepthwiseConvolution")


def macs_from_the_file(net):
    """Multiply-accumulates from each layer's parameters in the prototxt and its blob shapes:
    a convolution does (input channels / group) x kernel area for each top element (the
    depthwise types one input channel each), a deconvolution (output channels / group) x
    kernel area for each bottom element, an inner product a row of its input for each
    output."""
    total = {}
    for name, layer in zip(net._layer_names, net.layers):
        p = layer.layer_param
        bottom = net.blobs[net.bottom_names[name][0]] if net.bottom_names[name] else None
        top = net.blobs[net.top_names[name][0]]
        if layer.type in CONVOLUTIONS + ("Deconvolution",):
            cp = p.convolution_param
            area = (cp.kernel_h * cp.kernel_w if cp.HasField("kernel_h")
                    else int(np.prod(list(cp.kernel_size) * 2 if len(cp.kernel_size) == 1
                                     else cp.kernel_size)))
            if layer.type == "Deconvolution":
                total[name] = bottom.count * cp.num_output // cp.group * area
            elif layer.type == "Convolution":
                total[name] = top.count * bottom.shape[1] // cp.group * area
            else:
                total[name] = top.count * area
        elif layer.type == "InnerProduct":
            total[name] = top.count * (bottom.count // bottom.shape[0])
    return total


@pytest.mark.parametrize("key", params(sorted(NETS), {"fcn8s"}))
def test_summary_and_draw_net_read_the_file(key):
    net = build(key)
    summary = summarize(net)
    rows = {row["name"]: row for row in summary["layers"]}
    assert summary["params"] == sum(b.count for layer in net.layers for b in layer.blobs)
    expected = macs_from_the_file(net)
    assert {name: rows[name]["macs"] for name in expected} == expected
    assert summary["macs"] == sum(expected.values())
    for name, layer in zip(net._layer_names, net.layers):
        if layer.type in CONVOLUTIONS + ("Deconvolution", "InnerProduct"):
            assert rows[name]["element_ops"] == 0, name  # counted as MACs, not twice
    dot = draw.get_dot_graph(path(key))
    for name in net._layer_names:
        if net.layers[list(net._layer_names).index(name)].type != "Split":
            assert '"%s' % name in dot, name


def test_command_line_tools_on_a_published_file(tmp_path, capsys):
    """export_onnx, summary and draw_net from the command line on MTCNN's R-Net with a
    .caffemodel of seeded random weights: the ONNX file agrees with the net in
    onnxruntime."""
    import json

    from helpers.onnx_runtime import onnx, run_ort

    from pycaffe_lite import cli
    net = build("mtcnn_rnet")
    rng = fill(net, seed=7)
    weights, model = tmp_path / "rnet.caffemodel", tmp_path / "rnet.onnx"
    net.save(str(weights))
    x = rng.uniform(-1.0, 1.0, (3, 3, 24, 24)).astype(np.float32)
    net.blobs["data"].reshape(*x.shape)
    net.reshape()
    ours = {k: v.copy() for k, v in net.forward(data=x).items()}
    assert cli.main(["export_onnx", "--model", path("mtcnn_rnet"), "--weights", str(weights),
                     "--output", str(model)]) == 0
    got = run_ort(onnx.load(str(model)), {"data": x})
    assert sorted(got) == ["conv5-2", "prob1"]
    for name, value in ours.items():
        close(got[name], value, "R-Net %s: export_onnx in onnxruntime" % name)
    capsys.readouterr()
    assert cli.main(["summary", "--model", path("mtcnn_rnet"), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["net"] == "RNet" and summary["params"] == sum(
        b.count for layer in net.layers for b in layer.blobs)
    assert cli.main(["draw_net", path("mtcnn_rnet"), str(tmp_path / "rnet.dot")]) == 0
    dot = (tmp_path / "rnet.dot").read_text()
    assert dot.startswith('digraph "RNet"') and '"conv5-2_InnerProduct"' in dot


# DIGITS' standard networks are one file for training, validation and deployment, chosen by
# stage ("train", "val", "deploy"); DIGITS writes the deploy net's input and the last layer's
# num_output itself.
DIGITS_LENET = os.path.join(REAL, "digits_lenet.prototxt")


def test_digits_lenet_without_a_stage_names_the_layers_its_state_leaves_out():
    with pytest.raises(NetError) as info:
        caffe.Net(DIGITS_LENET, caffe.TEST)
    message = str(info.value)
    assert "unknown bottom blob 'scaled' (layer 'conv1', bottom index 0)" in message
    assert "'train-data' (include { stage: \"train\" })" in message
    assert "'val-data' (include { stage: \"val\" })" in message
    assert "'scale' (include { stage: \"deploy\" })" in message
    assert "phase TEST, level 0, no stage" in message


def test_digits_lenet_deploy_stage(tmp_path):
    # no layer at all writes the deploy stage's 'data': the message says only that
    with pytest.raises(NetError, match="unknown bottom blob 'data' \\(layer 'scale', "
                       "bottom index 0\\): no earlier layer produces it$"):
        caffe.Net(DIGITS_LENET, caffe.TEST, stages=["deploy"])
    deploy = tmp_path / "deploy.prototxt"
    deploy.write_text('input: "data" input_shape { dim: 2 dim: 1 dim: 28 dim: 28 }\n'
                      + open(DIGITS_LENET).read())
    with pytest.raises(LayerError, match="layer 'ip2' \\(type InnerProduct\\): "
                       "inner_product_param.num_output must be > 0, got 0"):
        caffe.Net(str(deploy), caffe.TEST, stages=["deploy"])
    deploy.write_text(deploy.read_text().replace("#num_output: 10", "num_output: 10"))
    net = caffe.Net(str(deploy), caffe.TEST, stages=["deploy"])
    assert [layer.type for layer in net.layers] == [
        "Input", "Power", "Convolution", "Pooling", "Convolution", "Pooling", "InnerProduct",
        "ReLU", "InnerProduct", "Softmax"]
    x = np.random.default_rng(2).uniform(0, 255, (2, 1, 28, 28)).astype(np.float32)
    out = net.forward(data=x)["softmax"]
    np.testing.assert_allclose(net.blobs["scaled"].data, x * np.float32(0.0125), rtol=1e-6)
    assert out.shape == (2, 10)
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-5)


def test_mtcnn_pnet_on_a_larger_image_says_to_reshape_first():
    """MTCNN runs P-Net over an image pyramid: an image larger than the file's 12 x 12 is
    refused with the way to run it, which then gives the map of (30 - 2) / 2 - 4 = 10 x 10
    positions."""
    net = build("mtcnn_pnet")
    image = np.zeros((1, 3, 30, 30), np.float32)
    with pytest.raises(ShapeError, match=r"input 'data' has shape \(1, 3, 30, 30\), the "
                       r"net expects \(1, 3, 12, 12\) \(reshape the blob and call "
                       r"net.reshape\(\) first\)"):
        net.forward(data=image)
    net.blobs["data"].reshape(*image.shape)
    net.reshape()
    assert net.forward(data=image)["prob1"].shape == (1, 2, 10, 10)
