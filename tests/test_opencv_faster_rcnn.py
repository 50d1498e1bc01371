"""OpenCV's DetectionOutput on pixel boxes (``normalized_bbox: false``), the post-processing of
OpenCV's Faster R-CNN nets: the schema field, the layer against OpenCV's
``modules/dnn/src/layers/detection_output_layer.cpp`` written out here and against cv2.dnn
itself, OpenCV's ``faster_rcnn_zf.prototxt`` run whole, and the exporters' refusal.

Reference: OpenCV's ``DetectionOutputLayerImpl`` (``GetLocPredictions``,
``GetConfidenceScores``, ``GetPriorBBoxes``, ``DecodeBBox`` and ``BBoxSize`` with
``normalized_bbox`` false, ``JaccardOverlap<false>``, ``processDetections_``,
``outputDetections_``, ``getMemoryShapes``) and ``nms.inl.hpp`` (``GetMaxScoreIndex``,
``NMSFast_``).
"""

import os

import numpy as np
import pytest
from google.protobuf import text_format
from helpers.wire_bytes import tag, varint

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")
F = np.float32

NET = """
input: "loc" input_shape { dim: %(n)d dim: %(loc)d }
input: "conf" input_shape { dim: %(n)d dim: %(conf)d }
input: "prior" input_shape { dim: 1 dim: %(pc)d dim: %(p4)d }
%(image)s
layer { name: "det" type: "DetectionOutput" bottom: "loc" bottom: "conf" bottom: "prior"
        %(image_bottom)s top: "det"
        detection_output_param { num_classes: %(C)d %(param)s normalized_bbox: false } }
"""
# OpenCV's faster_rcnn_zf.prototxt, lines 406-420
ZF_PARAM = """share_location: false background_label_id: 0 nms_param { nms_threshold: 0.3 }
    code_type: CENTER_SIZE keep_top_k: 100 variance_encoded_in_target: true"""


# ---- OpenCV's detection_output_layer.cpp, written out ---------------------------------------
def cv_size(b):
    """BBoxSize(bbox, normalized = false)."""
    if b[2] < b[0] or b[3] < b[1]:
        return F(0)
    return (b[2] - b[0] + F(1)) * (b[3] - b[1] + F(1))


def cv_overlap(a, b):
    """JaccardOverlap<false>."""
    inter = [max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])]
    i = cv_size(inter)
    if i > 0:
        return i / (cv_size(a) + cv_size(b) - i)
    return F(0)


def cv_decode(prior, var, code, box, clip, bounds):
    """DecodeBBox with normalized_bbox false (float arithmetic; .5 products exact)."""
    d = [box[j] if var is None else var[j] * box[j] for j in range(4)]
    if code == "CORNER":
        out = [prior[j] + d[j] for j in range(4)]
    else:
        pw = prior[2] - prior[0] + F(1)
        ph = prior[3] - prior[1] + F(1)
        pcx = prior[0] + pw * F(.5)
        pcy = prior[1] + ph * F(.5)
        cx = d[0] * pw + pcx
        cy = d[1] * ph + pcy
        w = F(np.exp(d[2])) * pw
        h = F(np.exp(d[3])) * ph
        out = [cx - w * F(.5), cy - h * F(.5), cx + w * F(.5), cy + h * F(.5)]
    if clip:
        xmax, ymax = bounds
        out = [max(min(out[0], xmax), F(0)), max(min(out[1], ymax), F(0)),
               max(min(out[2], xmax), F(0)), max(min(out[3], ymax), F(0))]
    return out


def cv_nms(boxes, scores, threshold, nms_threshold, top_k):
    """NMSFast_ with eta 1 (GetMaxScoreIndex: a stable sort, top_k when positive)."""
    pairs = sorted([(s, i) for i, s in enumerate(scores) if s > threshold],
                   key=lambda p: -p[0])
    if 0 < top_k < len(pairs):
        pairs = pairs[:top_k]
    kept = []
    for _, i in pairs:
        if all(cv_overlap(boxes[i], boxes[k]) <= nms_threshold for k in kept):
            kept.append(i)
    return kept


def cv_forward(loc, conf, prior, C, share, background, code, vet, keep_top_k,
               threshold=0.0, nms_threshold=0.3, top_k=-1, clip=False, image_hw=None):
    """DetectionOutputLayerImpl::forward on the CPU: rows (keep_top_k * num, 7)."""
    num = loc.shape[0]
    L = 1 if share else C
    P = prior.shape[2] // 4
    pri = prior.reshape(-1)
    out = np.zeros((keep_top_k * num, 7), F)
    count = 0
    bounds = None if image_hw is None else (F(image_hw[1] - 1), F(image_hw[0] - 1))
    for i in range(num):
        lo = loc[i].reshape(P, L, 4)
        sc = conf[i].reshape(P, C)
        decoded = {}
        for c in range(L):
            label = -1 if share else c
            if label == background:
                continue
            decoded[label] = [cv_decode(pri[4 * p:4 * p + 4],
                                        None if vet else pri[4 * (P + p):4 * (P + p) + 4],
                                        code, lo[p, c], clip, bounds) for p in range(P)]
        indices = {}
        for c in range(C):
            if c == background:
                continue
            indices[c] = cv_nms(decoded[-1 if share else c], list(sc[:, c]), F(threshold),
                                F(nms_threshold), top_k)
        total = sum(len(v) for v in indices.values())
        if keep_top_k > -1 and total > keep_top_k:
            pairs = sorted([(sc[p, c], c, p) for c in indices for p in indices[c]],
                           key=lambda t: -t[0])[:keep_top_k]
            indices = {}
            for _, c, p in pairs:
                indices.setdefault(c, []).append(p)
        found = [(sc[p, c], c, p) for c in sorted(indices) for p in indices[c]]
        for s, c, p in sorted(found, key=lambda t: -t[0]):       # outputDetections_
            out[count] = [i, c, s] + list(decoded[-1 if share else c][p])
            count += 1
    return out


# ---- the layer on its own --------------------------------------------------------------------
def inputs(n, P, C, L, vet, seed, spread=0.3):
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0, 60, (P, 2))
    boxes = np.concatenate([xy, xy + rng.uniform(4, 40, (P, 2))], 1)
    prior = boxes.reshape(-1)
    if not vet:
        prior = np.concatenate([prior, rng.uniform(0.1, 0.3, (P, 4)).reshape(-1)])
    logits = rng.normal(0, 2, (n, P, C))
    prob = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    return {"loc": rng.normal(0, spread, (n, P * L * 4)).astype(F),
            "conf": prob.reshape(n, -1).astype(F),
            "prior": prior.reshape(1, 1 if vet else 2, -1).astype(F)}


def run_both(tmp_path, data, C, param, image=None):
    """Our rows and cv2.dnn's for one DetectionOutput net on ``data``."""
    extra = "" if image is None else \
        'input: "image" input_shape { dim: 1 dim: 3 dim: %d dim: %d }' % image
    path = tmp_path / "det.prototxt"
    path.write_text(NET % {"n": data["loc"].shape[0], "loc": data["loc"].shape[1],
                           "conf": data["conf"].shape[1], "pc": data["prior"].shape[1],
                           "p4": data["prior"].shape[2], "C": C, "param": param,
                           "image": extra,
                           "image_bottom": "" if image is None else 'bottom: "image"'})
    feed = dict(data)
    if image is not None:
        feed["image"] = np.zeros((1, 3) + image, F)
    net = caffe.Net(str(path), caffe.TEST)
    net.forward(**feed)
    cvnet = cv2.dnn.readNetFromCaffe(str(path))
    for name, value in feed.items():
        cvnet.setInput(value, name)
    return net.blobs["det"].data.copy(), cvnet.forward("det")


@pytest.mark.parametrize("case", [
    # OpenCV's Faster R-CNN form: per-class boxes, CENTER_SIZE, no variances; keep_top_k cuts
    dict(n=1, P=30, C=4, share=False, code="CENTER_SIZE", vet=True, keep=12,
         extra="nms_param { nms_threshold: 0.3 }"),
    # two images, shared boxes, variances in the prior blob, a threshold, top_k
    dict(n=2, P=25, C=3, share=True, code="CENTER_SIZE", vet=False, keep=40,
         extra="confidence_threshold: 0.2 nms_param { nms_threshold: 0.45 top_k: 9 }",
         threshold=0.2, nms=0.45, top_k=9),
    # CORNER, clipped to a 48 x 56 image (the fourth bottom), fewer detections than rows
    dict(n=1, P=20, C=3, share=False, code="CORNER", vet=False, keep=60,
         extra="clip: true nms_param { nms_threshold: 0.3 }", clip=True, image=(48, 56),
         spread=8.0),
])
def test_layer_equals_opencvs_code_and_cv2(tmp_path, case):
    """Decoding with the +1 widths, clipping to the image, the pixel overlap, per-class
    suppression, keep_top_k across classes, rows by score and zero padding: equal to OpenCV's
    C++ written out here and to cv2.dnn (the SSD fork's normalised decoding, its class order
    and its -1 placeholder would all differ)."""
    L = 1 if case["share"] else case["C"]
    data = inputs(case["n"], case["P"], case["C"], L, case["vet"], seed=case["P"],
                  spread=case.get("spread", 0.3))
    param = "share_location: %s background_label_id: 0 code_type: %s keep_top_k: %d %s %s" % (
        "true" if case["share"] else "false", case["code"], case["keep"],
        "variance_encoded_in_target: true" if case["vet"] else "", case["extra"])
    mine, theirs = run_both(tmp_path, data, case["C"], param, case.get("image"))
    ref = cv_forward(data["loc"], data["conf"], data["prior"], case["C"], case["share"], 0,
                     case["code"], case["vet"], case["keep"], case.get("threshold", 0.0),
                     case.get("nms", 0.3), case.get("top_k", -1), case.get("clip", False),
                     case.get("image"))
    assert mine.shape == theirs.shape == (1, 1, case["keep"] * case["n"], 7)
    found = ref[ref[:, 2] > 0]
    assert 5 < len(found)
    if case["n"] == 1 and case["keep"] == 12:                # keep_top_k cuts here
        uncut = cv_forward(data["loc"], data["conf"], data["prior"], case["C"], False, 0,
                           case["code"], True, 1000)
        assert (uncut[:, 2] > 0).sum() > len(found) == 12
    assert len(np.unique(found[:, 2])) == len(found)           # no score ties
    np.testing.assert_allclose(mine.reshape(-1, 7), ref, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-4)


def test_no_detection_is_rows_of_zeros(tmp_path):
    """Every score under confidence_threshold: OpenCV's top stays zeros (the SSD fork writes
    a row of -1 per image)."""
    data = inputs(1, 10, 3, 3, True, seed=1)
    mine, theirs = run_both(tmp_path, data, 3, "share_location: false keep_top_k: 5 "
                            "background_label_id: 0 nms_param { nms_threshold: 0.3 } "
                            "code_type: CENTER_SIZE variance_encoded_in_target: true "
                            "confidence_threshold: 0.999")
    assert mine.shape == theirs.shape == (1, 1, 5, 7)
    assert not mine.any() and not theirs.any()


@pytest.mark.parametrize("param, message", [
    ("keep_top_k: 5 clip: true", "clip with normalized_bbox: false needs the image"),
    ("keep_top_k: -1", "needs keep_top_k >= 1"),
    ("keep_top_k: 5 code_type: CORNER_SIZE", "CORNER or CENTER_SIZE, not CORNER_SIZE"),
    ("keep_top_k: 5 nms_param { nms_threshold: 0 }", "needs nms_threshold > 0"),
    ("keep_top_k: 5", "the prior blob holds 80 values; 10 priors x 4 expected"),
])
def test_bad_parameters_name_the_layer(tmp_path, param, message):
    """OpenCV's limits (its output holds keep_top_k rows per image; its CV_Asserts) and the
    prior blob's size: errors naming the layer, never a wrong result."""
    channels = 2 if "prior blob" in message else 1
    path = tmp_path / "det.prototxt"
    path.write_text(NET % {"n": 1, "loc": 120, "conf": 30, "pc": channels, "p4": 40, "C": 3,
                           "param": "share_location: false variance_encoded_in_target: true "
                           + param, "image": "", "image_bottom": ""})
    with pytest.raises(CaffeError) as exc:
        caffe.Net(str(path), caffe.TEST)
    assert "det" in str(exc.value) and message in str(exc.value)


# ---- the schema ------------------------------------------------------------------------------
def test_normalized_bbox_reads_by_name_and_binary_ten_is_visualize(tmp_path):
    """Text files name the field (number 1001 here, default true as OpenCV's); OpenCV's
    binary bytes for it (field 10) are the SSD fork's visualize, which is refused with a
    message naming OpenCV's field."""
    p = caffe_pb2.DetectionOutputParameter()
    assert p.normalized_bbox is True
    assert p.DESCRIPTOR.fields_by_name["normalized_bbox"].number == 1001
    text = 'num_classes: 3 normalized_bbox: false keep_top_k: 5'
    read = caffe_pb2.DetectionOutputParameter()
    text_format.Parse(text, read)
    assert read.HasField("normalized_bbox") and read.normalized_bbox is False
    opencv_true = tag(10, 0) + varint(1)       # opencv-caffe.proto: normalized_bbox = 10
    read = caffe_pb2.DetectionOutputParameter.FromString(opencv_true)
    assert read.visualize is True and read.normalized_bbox is True
    path = tmp_path / "det.prototxt"
    path.write_text((NET % {"n": 1, "loc": 120, "conf": 30, "pc": 1, "p4": 40, "C": 3,
                            "param": ZF_PARAM, "image": "", "image_bottom": ""})
                    .replace("normalized_bbox: false", "visualize: true"))
    with pytest.raises(CaffeError) as exc:
        caffe.Net(str(path), caffe.TEST)
    assert "visualize is not supported" in str(exc.value)
    assert "normalized_bbox has this field's number, 10" in str(exc.value)


# ---- the whole file --------------------------------------------------------------------------
def zf_file(post_nms_topn):
    """OpenCV's faster_rcnn_zf.prototxt at 96 x 112, the fully connected layers narrowed to
    32 outputs, and (cut down for the test) post_nms_topn proposals: fewer than the image
    yields, so OpenCV's Proposal pads no zero rois that its DetectionOutput would score."""
    with open(os.path.join(REAL, "opencv_faster_rcnn_zf.prototxt")) as f:
        text = f.read()
    text = text.replace("num_output: 4096", "num_output: 32").replace(
        "dim: 224\n  dim: 224", "dim: 96\n  dim: 112")
    text = text.replace("scale: 32\n  }", "scale: 32\n    post_nms_topn: %d\n  }" % post_nms_topn)
    assert "post_nms_topn" in text
    return text


def test_opencv_faster_rcnn_zf_file_runs_whole_as_cv2(tmp_path):
    """The whole file with random weights: rois, class probabilities, box deltas and the
    detections (keep_top_k 100 of more, by score across classes, pixel boxes) equal cv2.dnn's
    (it stopped at normalized_bbox with an error naming OpenCV)."""
    path = tmp_path / "zf.prototxt"
    path.write_text(zf_file(50))
    caffe.set_random_seed(0)
    net = caffe.Net(str(path), caffe.TEST)
    rng = np.random.default_rng(2)
    scales = {"rpn_bbox_pred": 0.002}
    for name, blobs in net.params.items():
        for blob in blobs:
            fan_in = max(1, blob.count // blob.shape[0])
            gain = 3.0 if name == "cls_score" else 0.3 if name == "bbox_pred" else 1.0
            blob.data[...] = rng.normal(0, scales.get(name, gain / np.sqrt(fan_in)),
                                        blob.shape)
    weights = tmp_path / "zf.caffemodel"
    net.save(str(weights))
    data = rng.uniform(0, 1, net.blobs["data"].shape).astype(F)
    info = np.array([[600, 900, 1.0]], F)
    net.forward(data=data, im_info=info)
    cvnet = cv2.dnn.readNetFromCaffe(str(path), str(weights))
    cvnet.setInput(data, "data")
    cvnet.setInput(info, "im_info")
    rois, cls_prob, bbox_pred, det = cvnet.forward(["proposal", "cls_prob", "bbox_pred",
                                                    "detection_out"])
    assert tuple(net.blobs["rois"].shape) == rois.shape == (50, 5)
    np.testing.assert_allclose(net.blobs["rois"].data, rois, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(net.blobs["cls_prob"].data, cls_prob, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(net.blobs["bbox_pred"].data, bbox_pred, rtol=1e-4, atol=1e-5)
    mine = net.blobs["detection_out"].data
    assert mine.shape == det.shape == (1, 1, 100, 7)
    rows = det.reshape(-1, 7)
    assert (rows[:, 2] > 0).all() and len(np.unique(rows[:, 2])) == 100   # no ties, all kept
    assert len(np.unique(rows[:, 1])) > 5 and np.all(np.diff(rows[:, 2]) < 0)
    np.testing.assert_allclose(mine, det, rtol=1e-5, atol=1e-4)


# ---- exporters -------------------------------------------------------------------------------
@pytest.mark.parametrize("command, flag, engine", [("export_onnx", "--output", "ONNX"),
                                                    ("export_pytorch", "--output-dir",
                                                     "PyTorch")])
def test_exporters_refuse_pixel_boxes_naming_the_layer(tmp_path, capsys, command, flag,
                                                       engine):
    from pycaffe_lite import cli

    path = tmp_path / "det.prototxt"
    path.write_text(NET % {"n": 1, "loc": 120, "conf": 30, "pc": 1, "p4": 40, "C": 3,
                           "param": ZF_PARAM, "image": "", "image_bottom": ""})
    rc = cli.main([command, "--model", str(path), "--random_weights", flag,
                   str(tmp_path / "out")])
    assert rc not in (0, None)
    err = capsys.readouterr().err
    assert "det" in err and "normalized_bbox: false" in err and engine in err
