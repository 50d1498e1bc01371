"""More published Caffe files (OpenCV's own Caffe test nets, nets of the Caffe forks) build
with made-up weights and compute what Caffe computes: checked against OpenCV's Caffe importer
reading the files we write, or against the fork's C++ written out in NumPy."""

import os

import numpy as np
import pytest
from helpers.rpn_proposals import py_faster_rcnn_proposals

import pycaffe_lite as caffe
from pycaffe_lite.errors import ProtoError
from pycaffe_lite.proto import caffe_pb2

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


def test_channel_shared_prelu_saves_as_caffe_and_opencv_reads_it(tmp_path):
    """OpenCV's layer_prelu.prototxt: a per-channel PReLU then a channel-shared one, whose slope
    is a blob of no axes. BVLC's Blob::ToProto (src/caffe/blob.cpp) adds one shape dim per
    axis, so for that blob it writes no `shape` message at all; we wrote an empty one, and
    OpenCV's importer then refused the whole .caffemodel (a Mat of 0 dims)."""
    prototxt = os.path.join(REAL, "opencv_layer_prelu.prototxt")
    net = caffe.Net(prototxt, caffe.TEST)
    rng = np.random.default_rng(5)
    net.params["prelu_1"][0].data[...] = rng.uniform(0.1, 0.5, 6)
    net.params["output"][0].data[...] = 0.3
    weights = tmp_path / "prelu.caffemodel"
    net.save(str(weights))
    saved = caffe_pb2.NetParameter.FromString(weights.read_bytes())
    shared = [layer for layer in saved.layer if layer.name == "output"][0].blobs[0]
    assert not shared.HasField("shape") and list(shared.data) == pytest.approx([0.3])
    again = caffe.Net(prototxt, str(weights), caffe.TEST)
    assert again.params["output"][0].data.shape == ()

    x = rng.uniform(-2, 2, (2, 6, 75, 113)).astype(np.float32)
    ours = net.forward(input=x)["output"]
    slope = net.params["prelu_1"][0].data.reshape(1, 6, 1, 1)
    first = np.where(x > 0, x, x * slope)
    np.testing.assert_allclose(ours, np.where(first > 0, first, first * 0.3), rtol=1e-6)
    cvnet = cv2.dnn.readNetFromCaffe(prototxt, str(weights))
    cvnet.setInput(x)
    np.testing.assert_allclose(ours, cvnet.forward("output"), rtol=1e-5, atol=1e-6)


REFINEDET_HEAD = """
name: "refinedet_head"
input: "odm_loc" input_shape { dim: 2 dim: %(loc)d }
input: "odm_conf" input_shape { dim: 2 dim: %(conf)d }
input: "arm_priorbox" input_shape { dim: 1 dim: 2 dim: %(loc)d }
input: "arm_conf" input_shape { dim: 2 dim: %(arm)d }
input: "arm_loc" input_shape { dim: 2 dim: %(loc)d }
layer { name: "detection_out" type: "DetectionOutput" bottom: "odm_loc" bottom: "odm_conf"
        bottom: "arm_priorbox" bottom: "arm_conf" bottom: "arm_loc" top: "detection_out"
        detection_output_param { num_classes: 3 share_location: true background_label_id: 0
          nms_param { nms_threshold: 0.45 top_k: 1000 } code_type: CENTER_SIZE
          keep_top_k: 500 confidence_threshold: 0.1 objectness_score: 0.35 } }
"""


def _center_size_decode(priors, variances, offsets):
    """RefineDet's DecodeBBox (src/caffe/util/bbox_util.cpp), CENTER_SIZE, variances applied."""
    w, h = priors[:, 2] - priors[:, 0], priors[:, 3] - priors[:, 1]
    cx = variances[:, 0] * offsets[:, 0] * w + (priors[:, 0] + priors[:, 2]) / 2
    cy = variances[:, 1] * offsets[:, 1] * h + (priors[:, 1] + priors[:, 3]) / 2
    bw = np.exp(variances[:, 2] * offsets[:, 2]) * w
    bh = np.exp(variances[:, 3] * offsets[:, 3]) * h
    return np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1)


def _greedy_nms(boxes, scores, threshold, iou_limit):
    """ApplyNMSFast at eta 1: scores above the threshold in descending order, each kept unless
    it overlaps a kept box by more than iou_limit."""
    kept = []
    for i in sorted(np.flatnonzero(scores > threshold), key=lambda i: (-scores[i], i)):
        ok = True
        for j in kept:
            ix = max(0.0, min(boxes[i, 2], boxes[j, 2]) - max(boxes[i, 0], boxes[j, 0]))
            iy = max(0.0, min(boxes[i, 3], boxes[j, 3]) - max(boxes[i, 1], boxes[j, 1]))
            inter = ix * iy
            area = lambda b: (b[2] - b[0]) * (b[3] - b[1])  # noqa: E731
            if inter / (area(boxes[i]) + area(boxes[j]) - inter) > iou_limit:
                ok = False
                break
        if ok:
            kept.append(i)
    return kept


def test_refinedet_detection_output_refines_anchors_and_drops_low_objectness(tmp_path):
    """RefineDet's DetectionOutput (sfzhang15/RefineDet, detection_output_layer.cpp Forward_cpu
    with bottom[3] and bottom[4], bbox_util.cpp OSGetConfidenceScores and
    CasRegDecodeBBoxesAll): a prior whose ARM objectness (its second score) is below
    objectness_score counts as background (score 1 for label 0, 0 for the rest); the priors
    are decoded by the ARM offsets first and the ODM offsets against those. Its deploy files
    (VGG16/ResNet101 x VOC/COCO, 320/512) were refused: objectness_score was not a field and
    DetectionOutput took exactly three bottoms."""
    P, C, N = 12, 3, 2
    rng = np.random.default_rng(11)
    centres = rng.uniform(0.2, 0.8, (P, 2))
    sizes = rng.uniform(0.1, 0.3, (P, 2))
    priors = np.concatenate([centres - sizes / 2, centres + sizes / 2], axis=1)
    variances = np.tile([0.1, 0.1, 0.2, 0.2], (P, 1))
    prior_blob = np.stack([priors.ravel(), variances.ravel()])[None].astype(np.float32)
    arm_loc = rng.normal(0, 1, (N, P * 4)).astype(np.float32)
    odm_loc = rng.normal(0, 1, (N, P * 4)).astype(np.float32)
    objectness = rng.uniform(0, 1, (N, P)).astype(np.float32)
    arm_conf = np.stack([1 - objectness, objectness], axis=2).reshape(N, -1)
    logits = rng.normal(0, 2, (N, P, C))
    odm_conf = (np.exp(logits) / np.exp(logits).sum(2, keepdims=True)).astype(np.float32)
    prototxt = tmp_path / "refinedet.prototxt"
    prototxt.write_text(REFINEDET_HEAD % {"loc": P * 4, "conf": P * C, "arm": P * 2})
    net = caffe.Net(str(prototxt), caffe.TEST)
    ours = net.forward(odm_loc=odm_loc, odm_conf=odm_conf.reshape(N, -1),
                       arm_priorbox=prior_blob, arm_conf=arm_conf,
                       arm_loc=arm_loc)["detection_out"].reshape(-1, 7)

    pri, var = prior_blob[0, 0].reshape(P, 4), prior_blob[0, 1].reshape(P, 4)
    rows = []
    for i in range(N):
        scores = odm_conf[i].astype(np.float64).copy()
        low = objectness[i] < np.float32(0.35)
        scores[low] = [1.0, 0.0, 0.0]
        anchors = _center_size_decode(pri, var, arm_loc[i].reshape(P, 4)).astype(np.float32)
        boxes = _center_size_decode(anchors, var, odm_loc[i].reshape(P, 4))
        for c in range(1, C):
            for k in _greedy_nms(boxes, scores[:, c], 0.1, 0.45):
                rows.append([i, c, scores[k, c], *boxes[k]])
    assert 0 < low.sum() < P
    expected = np.array(rows)
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6)


def test_refinedet_detection_output_is_refused_by_the_exporters(tmp_path, capsys):
    """The ONNX and PyTorch writers convert the SSD fork's three-bottom DetectionOutput; the
    RefineDet form is refused with the layer named (not a Python unpacking error, nor a
    module that leaves the ARM's bottoms out)."""
    from pycaffe_lite import cli

    prototxt = tmp_path / "refinedet.prototxt"
    prototxt.write_text(REFINEDET_HEAD % {"loc": 48, "conf": 36, "arm": 24})
    for args in (["export_onnx", "--output", str(tmp_path / "m.onnx")],
                 ["export_pytorch", "--output-dir", str(tmp_path / "pt")]):
        code = cli.main(args + ["--model", str(prototxt), "--random_weights"])
        err = capsys.readouterr().err
        assert code not in (0, None)
        assert "layer 'detection_out'" in err and "RefineDet's form" in err, err


# OpenCV's testdata/dnn/layers/correlation.prototxt (opencv/opencv at commit
# 89b5e32c84965e09f9df1f9fc56b62249ddeb0e7), a FlowNet 2.0 layer, unchanged; and the recurrent
# part of yalecyu/crnn.caffe's examples/crnn/deploy.prototxt (lines 499-526), with an input.
FLOWNET_CORRELATION = """name: "Correlation"
input: "input_0"
input: "input_1"
input_shape {
  dim: 1
  dim: 3
  dim: 2
  dim: 2
}
input_shape {
  dim: 1
  dim: 3
  dim: 2
  dim: 2
}
layer {
  name: "corr"
  type: "Correlation"
  bottom: "input_0"
  bottom: "input_1"
  top: "out"
  correlation_param {
    pad: 1
    kernel_size: 1
    max_displacement: 1
    stride_1: 1
    stride_2: 1
  }
}
"""
CRNN_RECURRENT = """input: "permuted_data" input_shape { dim: 13 dim: 1 dim: 512 }
layer {
    name: "indicator"
    type: "ContinuationIndicator"
    top: "indicator"
    continuation_indicator_param {
        time_step:  13
        batch_size: 1
    }
}
layer {
    name: "lstm1"
    type: "LSTM"
    bottom: "permuted_data"
    bottom: "indicator"
    top: "lstm1"
    recurrent_param {
        num_output: 128
    }
}
"""

# caffe-yolov2's YOLOv2 DetectionOutput: examples/indoor/eval_detection/deploy_output.prototxt
# lines 1086-1109, a tab made spaces (Ewenwan/caffe-yolov2, a copy of gklz1982/caffe-yolov2,
# at commit 2dc710f77799267ca5e0d5aacee312cfd222853e), with an input.
YOLOV2_DETECTION_OUTPUT = """input: "conv22" input_shape { dim: 1 dim: 70 dim: 13 dim: 13 }
layer {
  name: "detection_out"
  type: "DetectionOutput"
  bottom: "conv22"
  top: "detection_out"
  include {
    phase: TEST
  }
  detection_output_param {
    num_classes: 9
    coords: 4
    confidence_threshold: 0.60
    biases: 0.738768
    biases: 0.874946
    biases: 2.42204
    biases: 2.65704
    biases: 4.30971
    biases: 7.04493
    biases: 10.246
    biases: 4.59428
    biases: 12.6868
    biases: 11.8741
  }
}
"""


@pytest.mark.parametrize("text, line, field, fork", [
    (FLOWNET_CORRELATION, 22, "correlation_param", "FlowNet 2.0"),
    (CRNN_RECURRENT, 6, "continuation_indicator_param", "CRNN (crnn.caffe)"),
    (YOLOV2_DETECTION_OUTPUT, 12, "coords", "caffe-yolov2 (gklz1982)")])
def test_files_of_forks_not_provided_are_refused_naming_the_fork(tmp_path, text, line, field, fork):
    """FlowNet 2.0's layers (OpenCV's tests load its Correlation, FlowWarp, Resample,
    DataAugmentation), the CRNN port's ContinuationIndicator and caffe-yolov2's YOLOv2
    DetectionOutput (its own fields under SSD's type name) are not
    provided: the error names the file, the line and the fork that defines the field, as for
    the other forks' fields this schema lacks (it named only the field)."""
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    with pytest.raises(ProtoError) as exc:
        caffe.Net(str(path), caffe.TEST)
    message = str(exc.value)
    assert "net.prototxt:%d:" % line in message and field in message
    assert "(a field of the %s fork, not supported here)" % fork in message


def test_pvanet_proposal_layer_reads_the_ratios_of_its_param_str():
    """PVANet's test nets (sanghoon/pva-faster-rcnn, models/pvanet/example_train/test.prototxt
    and pva9.1/*.pt; the layer is fixtures/real/pvanet_proposal.prototxt) give the Python
    proposal layer 'ratios' beside 'scales': 7 x 6 = 42 anchors a cell. The built-in layer
    read only the scales, so it expected 18 anchors and refused the RPN's 84 channels (a file
    with three other ratios would have run with the wrong anchors)."""
    net = caffe.Net(os.path.join(REAL, "pvanet_proposal.prototxt"), caffe.TEST)
    h, w, a = 4, 6, 42
    rng = np.random.default_rng(8)
    fg = rng.uniform(0, 1, (1, a, h, w))
    prob = np.concatenate([1 - fg, fg], axis=1).astype(np.float32)
    deltas = rng.normal(0, 0.3, (1, 4 * a, h, w)).astype(np.float32)
    info = np.array([[h * 16 - 7, w * 16 - 2, 0.8, 0.8, 0, 0]], np.float32)
    out = net.forward(rpn_cls_prob_reshape=prob, rpn_bbox_pred=deltas, im_info=info)
    # sanghoon/pva-faster-rcnn's lib/rpn/proposal_layer.py is py-faster-rcnn's (the same
    # defaults: 6000 before NMS, 300 after, overlap 0.7) with the ratios of its param_str
    rois, scores = py_faster_rcnn_proposals(prob, deltas, info, scales=(2, 3, 5, 9, 16, 32),
                                            ratios=(0.333, 0.5, 0.667, 1, 1.5, 2, 3))
    assert len(rois) > 20
    assert out["rois"].shape == rois.shape
    np.testing.assert_allclose(out["rois"], rois, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out["scores"].ravel(), scores, rtol=1e-6)
