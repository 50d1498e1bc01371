"""The forks' published test nets, read unchanged from tests/fixtures/real (sources in its
README): PSPNet-50 for ADE20K (hszhao/PSPNet: its BN layer, the pyramid pooling, Interp),
R-FCN with ResNet-50 (py-R-FCN: PSROIPooling after py-faster-rcnn's Python proposal layer),
py-faster-rcnn's VGG-16 test net and CTPN's deploy net (its Im2col, Lstm, Reverse, Transpose);
MobileNet-YOLO's training file, refused naming the fork.

With seeded random weights every blob agrees with OpenCV's Caffe importer reading the same net
where OpenCV has no layer of the fork's, a translation is made for OpenCV alone: PSPNet's BN
(slope * (x - mean) / sqrt(var + eps) + bias, its TEST form) is written as BatchNorm and Scale
with the same numbers; the proposal layer, which OpenCV cannot run, is checked against
py-faster-rcnn's ProposalLayer written out in NumPy (tests/helpers/rpn_proposals.py), and
OpenCV then takes its rois as an input. CTPN, which OpenCV does not read, is checked against
NumPy written from its layers' definitions.
"""

import os
import re

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.rpn_proposals import py_faster_rcnn_proposals
from test_model_zoo import close
from test_published_nets import fill, last_writers

import pycaffe_lite as caffe
from pycaffe_lite.proto import caffe_pb2, protoio

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")
PSPNET = os.path.join(REAL, "pspnet50_ADE20K_473.prototxt")


def compare_with_opencv(net, cvnet, opencv_name=lambda layer: layer, leave_out=()):
    """Each blob against OpenCV's output of the last layer writing it (an in-place chain is
    compared at its end); returns how many were compared."""
    last = {top: writer for top, writer in last_writers(net).items()
            if writer[0] not in leave_out}
    names = sorted({opencv_name(layer) for layer, _ in last.values()})
    theirs = dict(zip(names, cvnet.forward(names)))
    for top, (layer, index) in last.items():
        assert index == 0, (top, layer)
        ours, value = net.blobs[top].data, theirs[opencv_name(layer)]
        assert value.size == ours.size, (top, ours.shape, value.shape)
        close(ours, value, "blob %s (layer %s) vs OpenCV" % (top, layer))
    return len(last)


def test_pspnet50_ade20k_shapes_as_the_paper_states():
    """PSPNet (Zhao et al. 2017), Figure 3 and Section 3.2 (the file's own input, 473 x 473):
    a dilated ResNet-50 leaves a 1/8 feature map, 60 x 60 x 2048; the pyramid pools it to
    1 x 1, 2 x 2, 3 x 3 and 6 x 6 bins, a 1 x 1 convolution takes each to 1/4 of the
    channels (512), bilinear interpolation back to 60 x 60, concatenated with the map
    (2048 + 4 x 512); ADE20K's 150 classes, interpolated (zoom 8) to the input's size."""
    net = caffe.Net(PSPNET, caffe.TEST)
    shapes = {"conv1_1_3x3_s2": (64, 237, 237), "conv5_3": (2048, 60, 60),
              "conv5_3_pool1": (2048, 1, 1), "conv5_3_pool2": (2048, 2, 2),
              "conv5_3_pool3": (2048, 3, 3), "conv5_3_pool6": (2048, 6, 6),
              "conv5_3_pool6_conv": (512, 6, 6), "conv5_3_pool1_interp": (512, 60, 60),
              "conv5_3_pool6_interp": (512, 60, 60), "conv5_3_concat": (4096, 60, 60),
              "conv5_4": (512, 60, 60), "conv6": (150, 60, 60),
              "conv6_interp": (150, 473, 473)}
    for blob, shape in shapes.items():
        assert net.blobs[blob].shape == (1,) + shape, blob
    assert sum(layer.type == "BN" for layer in net.layers) == sum(
        layer.type == "Convolution" for layer in net.layers) - 1  # all but conv6


def blob_proto(array):
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.append(array.size)
    blob.data.extend(np.asarray(array, np.float32).ravel().tolist())
    return blob


def pspnet_for_opencv(weights, folder):
    """The file and the weights with each BN layer L as a BatchNorm L (its running mean and
    variance, use_global_stats, the same eps) followed in place by a Scale L/scale (its slope
    and bias)."""
    text = protoio.read_net_param(PSPNET)
    saved = caffe_pb2.NetParameter.FromString(open(weights, "rb").read())
    blobs = {layer.name: layer.blobs for layer in saved.layer}
    net_text, model = caffe_pb2.NetParameter(), caffe_pb2.NetParameter()
    net_text.CopyFrom(text)
    del net_text.layer[:]
    for layer in text.layer:
        if layer.type != "BN":
            net_text.layer.add().CopyFrom(layer)
            if len(blobs.get(layer.name, [])):
                model.layer.add(name=layer.name, type=layer.type).blobs.extend(
                    blobs[layer.name])
            continue
        slope, bias, mean, var = [np.asarray(b.data) for b in blobs[layer.name]]
        bn = net_text.layer.add(name=layer.name, type="BatchNorm", bottom=layer.bottom,
                                top=layer.top)
        bn.batch_norm_param.use_global_stats = True
        bn.batch_norm_param.eps = layer.bn_param.eps
        scale = net_text.layer.add(name=layer.name + "/scale", type="Scale", bottom=layer.top,
                                   top=layer.top)
        scale.scale_param.bias_term = True
        model.layer.add(name=layer.name, type="BatchNorm").blobs.extend(
            [blob_proto(mean), blob_proto(var), blob_proto(np.ones(1))])
        model.layer.add(name=layer.name + "/scale", type="Scale").blobs.extend(
            [blob_proto(slope), blob_proto(bias)])
    prototxt, caffemodel = folder / "pspnet_opencv.prototxt", folder / "pspnet_opencv.caffemodel"
    prototxt.write_text(text_format.MessageToString(net_text))
    caffemodel.write_bytes(model.SerializeToString())
    return str(prototxt), str(caffemodel)


@pytest.mark.slow
def test_pspnet50_ade20k_agrees_with_opencv(tmp_path):
    net = caffe.Net(PSPNET, caffe.TEST)
    rng = fill(net, seed=9)
    for layer in net.layers:
        if layer.type == "BN":  # trained statistics: a slope, a bias, a mean, a variance
            b = layer.blobs
            b[0].data[...] = rng.uniform(0.5, 1.0, b[0].shape)
            b[1].data[...] = rng.normal(0.0, 0.1, b[1].shape)
            b[2].data[...] = rng.normal(0.0, 0.1, b[2].shape)
            b[3].data[...] = rng.uniform(0.5, 1.5, b[3].shape)
    x = rng.uniform(-1.0, 1.0, net.blobs["data"].shape).astype(np.float32)
    scores = net.forward(data=x)["conv6_interp"]
    assert scores.shape == (1, 150, 473, 473) and scores.std() > 0.05
    weights = tmp_path / "pspnet.caffemodel"
    net.save(str(weights))

    cvnet = cv2.dnn.readNetFromCaffe(*pspnet_for_opencv(str(weights), tmp_path))
    cvnet.enableFusion(False)
    cvnet.setInput(x)
    kinds = dict(zip(net._layer_names, (layer.type for layer in net.layers)))
    count = compare_with_opencv(
        net, cvnet, lambda layer: layer + "/scale" if kinds[layer] == "BN" else layer)
    assert count > 80


# (file, the layers narrowed for the run: VGG-16's fc6 and fc7 hold 120 M parameters at 4096
# wide; at 256 the geometry is the file's)
DETECTORS = {"rfcn_resnet50": ("rfcn_resnet50_test_agnostic.prototxt", ()),
             "faster_rcnn_vgg16": ("faster_rcnn_vgg16_test.prototxt", ("fc6", "fc7"))}


@pytest.mark.parametrize("key", [pytest.param(k, marks=pytest.mark.slow) for k in DETECTORS])
def test_detector_test_net_proposals_and_heads(key, tmp_path):
    """A 224 x 288 image (im_info 224, 288, 1): the Python proposal layer's rois are
    py-faster-rcnn's (feat_stride 16, scales 8, 16, 32, TEST's 6000 / 300 / 0.7 / 16); every
    other blob, the PSROIPooling and ROIPooling heads on those rois included, agrees with
    OpenCV; there are as many class scores and boxes as rois (R-FCN's class-agnostic boxes:
    8 values, VGG-16's 4 for each of 21 classes)."""
    name, narrow = DETECTORS[key]
    text = open(os.path.join(REAL, name)).read()
    for layer in narrow:
        text, n = re.subn(r'(name: "%s".*?num_output: )\d+' % layer,
                          lambda m: m.group(1) + "256", text, count=1, flags=re.S)
        assert n == 1
    path = tmp_path / name
    path.write_text(text)
    net = caffe.Net(str(path), caffe.TEST)
    assert all(net.blobs[layer].shape[1] == 256 for layer in narrow)
    rng = fill(net, seed=sum(map(ord, key)))
    x = rng.uniform(-1.0, 1.0, (1, 3, 224, 288)).astype(np.float32)
    info = np.array([[224, 288, 1.0]], np.float32)
    net.blobs["data"].reshape(*x.shape)
    net.reshape()
    out = net.forward(data=x, im_info=info)
    rois = net.blobs["rois"].data.copy()
    reference, _ = py_faster_rcnn_proposals(net.blobs["rpn_cls_prob_reshape"].data,
                                            net.blobs["rpn_bbox_pred"].data, info,
                                            scales=(8, 16, 32))
    assert len(reference) > 20
    close(rois, reference, "%s: rois vs py-faster-rcnn's ProposalLayer" % key)
    boxes = 8 if key == "rfcn_resnet50" else 84
    assert out["cls_prob"].shape == (len(rois), 21)
    assert out["bbox_pred"].shape == (len(rois), boxes)
    np.testing.assert_allclose(out["cls_prob"].sum(axis=1), 1.0, rtol=1e-5)

    weights = tmp_path / ("%s.caffemodel" % key)
    net.save(str(weights))
    for_opencv, n = re.subn(r"layer \{\s*name: 'proposal'.*?\n\}\n", "", text, flags=re.S)
    assert n == 1
    for_opencv, n = re.subn(r'input: "im_info"\s*input_shape \{\s*dim: 1\s*dim: 3\s*\}',
                            'input: "rois"\ninput_shape { dim: %d dim: 5 }' % len(rois),
                            for_opencv)
    assert n == 1
    (tmp_path / "opencv.prototxt").write_text(for_opencv)
    cvnet = cv2.dnn.readNetFromCaffe(str(tmp_path / "opencv.prototxt"), str(weights))
    cvnet.enableFusion(False)
    cvnet.setInput(x, "data")
    cvnet.setInput(rois, "rois")
    assert compare_with_opencv(net, cvnet, leave_out=("proposal",)) > 25


MOBILENET_YOLO = "MobileNet-YOLO (eric612/MobileNet-YOLO)"


def test_mobilenet_yolo_training_file_is_refused_naming_the_fork(tmp_path):
    """MobileNet-YOLO's models/yolov3/mobilenet_yolov3_lite_train.prototxt: its deploy layers
    are provided, its training is not (the YOLO options of AnnotatedData, its augmentation,
    the Yolov3 loss layer). The error names the file, the line, the field and the fork, as
    for the other forks' fields (it named only the field)."""
    path = os.path.join(REAL, "mobilenet_yolov3_lite_train.prototxt")
    with pytest.raises(caffe.errors.ProtoError) as exc:
        caffe.Net(path, caffe.TRAIN)
    message = str(exc.value)
    assert "mobilenet_yolov3_lite_train.prototxt:137:" in message
    assert '"yolo_data_type"' in message
    assert "(a field of the %s fork, not supported here)" % MOBILENET_YOLO in message

    # with the data layer's option gone, the loss layer's parameters stop it in the same way
    text = open(path).read().replace("\tyolo_data_type : 1\n", "")
    (tmp_path / "train.prototxt").write_text(text)
    with pytest.raises(caffe.errors.ProtoError) as exc:
        caffe.Net(str(tmp_path / "train.prototxt"), caffe.TRAIN)
    message = str(exc.value)
    assert "train.prototxt:2525:" in message and '"yolov3_param"' in message
    assert MOBILENET_YOLO in message


def ctpn_lstm(x, w_x, w_h, b):
    """CTPN's Lstm (src/caffe/layers/lstm_layer.cpp) over a (T, N, D) sequence from a zero
    state: gates z = W_x x_t + W_h h_{t-1} + b split as i, f, o, g; c = f c + i g,
    h = o tanh(c)."""
    steps, n = x.shape[:2]
    hidden = w_h.shape[1]
    h, c = np.zeros((n, hidden)), np.zeros((n, hidden))
    out = np.zeros((steps, n, hidden))
    for t in range(steps):
        z = x[t] @ w_x.T + h @ w_h.T + b
        i, f, o = (1 / (1 + np.exp(-z[:, k * hidden:(k + 1) * hidden])) for k in range(3))
        c = f * c + i * np.tanh(z[:, 3 * hidden:])
        h = o * np.tanh(c)
        out[t] = h
    return out


def test_ctpn_deploy_runs_its_bidirectional_lstm_over_each_row():
    """CTPN's models/deploy.prototxt (Tian et al. 2016, Section 3.2): VGG-16's conv5 at 1/16
    (here a 96 x 160 image: 6 x 10), the 3 x 3 window around each position as a 3 x 3 x 512
    vector (Im2col), a bidirectional LSTM of 128 units each way along each row, a 512-wide
    fully connected layer, then 2k scores and 2k vertical coordinates for k = 10 anchors, and
    the text proposals: one box and score per anchor of each cell."""
    net = caffe.Net(os.path.join(REAL, "ctpn_deploy.prototxt"), caffe.TEST)
    net.blobs["data"].reshape(1, 3, 96, 160)
    net.reshape()
    rng = fill(net, seed=12)
    for name in ("lstm", "rlstm"):
        for blob in net.params[name]:
            blob.data[...] = rng.uniform(-0.02, 0.02, blob.shape)
    x = rng.uniform(-1.0, 1.0, (1, 3, 96, 160)).astype(np.float32)
    out = net.forward(data=x, im_info=np.array([[96, 160, 1.0]], np.float32))

    conv5 = np.pad(net.blobs["conv5_3"].data[0].astype(np.float64), ((0, 0), (1, 1), (1, 1)))
    windows = np.stack([conv5[:, ky:ky + 6, kx:kx + 10] for ky in range(3) for kx in range(3)],
                       axis=1).reshape(512 * 9, 6, 10)
    close(net.blobs["im2col"].data[0], windows, "Im2col")
    sequence = windows.transpose(2, 1, 0)  # (W, H, C): along each row, rows as the batch
    close(net.blobs["lstm_input"].data, sequence, "lstm_input")
    forward = ctpn_lstm(sequence, *(b.data.astype(np.float64) for b in net.params["lstm"]))
    backward = ctpn_lstm(sequence[::-1], *(b.data.astype(np.float64)
                                           for b in net.params["rlstm"]))[::-1]
    assert 0.05 < forward.std() and np.median(np.abs(forward)) < 0.5  # not saturated
    close(net.blobs["lstm"].data, forward, "forward LSTM")
    close(net.blobs["rlstm"].data, backward, "backward LSTM")
    close(net.blobs["lstm_output"].data[0],
          np.concatenate([forward, backward], axis=2).transpose(2, 1, 0), "BLSTM output")
    assert net.blobs["fc"].shape == (1, 512, 6, 10)
    assert net.blobs["rpn_cls_score"].shape == net.blobs["rpn_bbox_pred"].shape == (
        1, 20, 6, 10)
    # the text-class probabilities, cell by cell (row-major), anchor by anchor
    prob = net.blobs["rpn_cls_prob_reshape"].data[0, 10:].transpose(1, 2, 0).ravel()
    np.testing.assert_array_equal(out["scores"].ravel(), prob)
    assert out["rois"].shape == (600, 4)


INTEL_YOLO = os.path.join(REAL, "intel_yolov2_benchmark_deploy.prototxt")


def test_intel_yolov2_eval_detection_takes_the_image_as_a_third_bottom(tmp_path):
    """Intel Caffe's YOLO v2 files (benchmark/yolo/deploy.prototxt, yolo/yolov2_test*.prototxt,
    int8/yolov2_int8*.prototxt) give EvalDetection three bottoms: the head, the labels and the
    image. The fork's layer declares no bottom count and reads the first two
    (src/caffe/layers/eval_detection_layer.cpp), so the image is carried and unused; such a
    file was refused ("takes exactly 2 bottom blobs, got 3"). The darknet-19 head at 544 x 544
    is 17 x 17 x 5 (20 + 5); the layer gives the same rows as with its first two bottoms
    alone."""
    net = caffe.Net(INTEL_YOLO, caffe.TEST)
    assert net.bottom_names["eval_det"][:2] == ["conv_reg", "label"]
    assert net.bottom_names["eval_det"][2].startswith("data")  # a Split of the image
    assert net.blobs["conv_reg"].shape == (8, 125, 17, 17)
    assert net.blobs["eval_det"].shape == (8, 20 + 17 * 17 * 5 * 4)
    rng = np.random.default_rng(6)
    head = rng.normal(0, 1.5, (8, 125, 17, 17)).astype(np.float32)
    boxes = rng.uniform(0.05, 0.45, (6, 2))
    labels = np.array([[i % 8, 1 + 3 * i % 20, 0, x, y, x + 0.4, y + 0.4, 0]
                       for i, (x, y) in enumerate(boxes)], np.float32).reshape(1, 1, 6, 8)
    net.blobs["conv_reg"].data[...] = head
    net.blobs["label"].reshape(*labels.shape)
    net.blobs["label"].data[...] = labels
    net.reshape()
    ours = net.forward(start="eval_det")["eval_det"].copy()

    text = open(INTEL_YOLO).read()
    layer = re.search(r'layer \{\s*name: "eval_det".*?\n\}\n', text, re.S).group(0)
    alone = tmp_path / "eval_det.prototxt"
    alone.write_text('input: "conv_reg" input_shape { dim: 8 dim: 125 dim: 17 dim: 17 }\n'
                     'input: "label" input_shape { dim: 1 dim: 1 dim: 6 dim: 8 }\n'
                     + layer.replace('  bottom: "data"\n', ""))
    two = caffe.Net(str(alone), caffe.TEST).forward(conv_reg=head, label=labels)["eval_det"]
    np.testing.assert_array_equal(ours, two)
    np.testing.assert_array_equal(ours[:, :20].sum(), 6)  # the ground truth boxes counted


def test_rfcn_training_file_pre_fixed_normalization_is_refused_naming_the_fork():
    """py-R-FCN's train_agnostic.prototxt normalizes its box loss by a fixed count
    (loss_param { normalization: PRE_FIXED pre_fixed_normalizer: 128 }), a value of the
    NormalizationMode of Intel Caffe and of R-FCN's Caffe that this schema does not have. The
    error names the file, the line, the value and the fork (it named only the enum)."""
    path = os.path.join(REAL, "rfcn_resnet50_train_agnostic.prototxt")
    with pytest.raises(caffe.errors.ProtoError) as exc:
        caffe.Net(path, caffe.TRAIN)
    message = str(exc.value)
    assert "rfcn_resnet50_train_agnostic.prototxt:3864:" in message and "PRE_FIXED" in message
    assert "(a value of Intel Caffe's and R-FCN's forks, not supported here)" in message
