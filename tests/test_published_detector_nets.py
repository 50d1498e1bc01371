"""Published single-shot detectors, read unchanged from tests/fixtures/real (sources in its
README): Pelee's SSD deploy net for VOC (Robert-JunWang/Pelee) and MobileNet-YOLO's
MobileNet-YOLOv3-Lite (eric612/MobileNet-YOLO).

With seeded random weights every blob agrees with OpenCV's Caffe importer. Where OpenCV
computes a layer otherwise than the fork, a translation is made for OpenCV alone, and the
layer itself is checked against the fork's C++ written out in NumPy:

- the SSD fork's PriorBox truncates each min_size and max_size to an integer
  (``int min_size_ = min_sizes_[s];`` in src/caffe/layers/prior_box_layer.cpp), OpenCV does
  not: Pelee's sizes (21.28, 45.6, ...) are given to OpenCV truncated;
- OpenCV has no DepthwiseConvolution type: it gets a Convolution with the same group;
- nor MobileNet-YOLO's Yolov3DetectionOutput: left out, its rows are checked against the
  fork's decoding written out.
"""

import os
import re

import numpy as np
import pytest
from test_model_zoo import close
from test_published_fork_nets import compare_with_opencv
from test_published_nets import fill
from test_ssd_opencv import canonical

import pycaffe_lite as caffe

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")
PELEE = os.path.join(REAL, "pelee_voc_deploy_merged.prototxt")
YOLOV3_LITE = os.path.join(REAL, "mobilenet_yolov3_lite_deploy.prototxt")


def fork_priors(feature_h, feature_w, img, min_size, max_size, ratios, variance,
                offset=0.5):
    """The SSD fork's PriorBoxLayer::Forward_cpu for one min_size (and max_size), flip on,
    clip off, the step image / feature: per cell (row-major) a square of side int(min_size),
    one of side sqrt(int(min_size) * int(max_size)), then for each ratio r and 1 / r a box
    int(min_size) * sqrt(r) wide, int(min_size) / sqrt(r) high; corners over the image size,
    then the variances."""
    s, m = int(min_size), int(max_size)
    sides = [(s, s), (np.sqrt(s * m), np.sqrt(s * m))]
    for r in ratios:
        for q in (r, 1.0 / r):
            sides.append((s * np.sqrt(q), s / np.sqrt(q)))
    step_w, step_h = np.float32(img) / feature_w, np.float32(img) / feature_h
    rows = []
    for h in range(feature_h):
        for w in range(feature_w):
            cx, cy = (w + offset) * step_w, (h + offset) * step_h
            for bw, bh in sides:
                rows.append([(cx - bw / 2.0) / img, (cy - bh / 2.0) / img,
                             (cx + bw / 2.0) / img, (cy + bh / 2.0) / img])
    boxes = np.asarray(rows, np.float32).ravel()
    return np.stack([boxes, np.tile(np.float32(variance), len(rows))])[None]


# Pelee (Wang et al. 2018), Section 4: 304 x 304 input, five (here six) scales of feature
# maps, 19 x 19, 19 x 19 (the residual prediction blocks), 10, 5, 3, 1; 2 + 2 x 2 priors a
# cell for ratios 2 and 3
PELEE_MAPS = [("ext/pm1", 19, 21.28, 45.6), ("ext/pm2", 19, 45.6, 100.32),
              ("ext/pm3", 10, 100.32, 155.04), ("ext/pm4", 5, 155.04, 209.76),
              ("ext/pm5", 3, 209.76, 264.48), ("ext/pm6", 1, 264.48, 319.2)]


def test_pelee_priors_are_the_ssd_forks():
    net = caffe.Net(PELEE, caffe.TEST)
    net.forward(data=np.zeros(net.blobs["data"].shape, np.float32))
    total = 0
    for name, size, lo, hi in PELEE_MAPS:
        ours = net.blobs[name + "_mbox_priorbox"].data
        reference = fork_priors(size, size, 304, lo, hi, (2.0, 3.0), (0.1, 0.1, 0.2, 0.2))
        np.testing.assert_allclose(ours, reference, rtol=0, atol=2e-7, err_msg=name)
        total += size * size * 6
    assert net.blobs["mbox_priorbox"].shape == (1, 2, total * 4)
    assert net.blobs["mbox_conf_flatten"].shape == (1, total * 21)


def for_opencv(source, folder):
    """The text OpenCV is to read: sizes truncated, DepthwiseConvolution as Convolution, no
    Yolov3DetectionOutput (not in OpenCV)."""
    text = open(source).read()
    text = re.sub(r'layer \{\s*name: "detection_out"\s*type: "Yolov3DetectionOutput".*?\n\}\n',
                  "", text, flags=re.S)
    text = re.sub(r"(m(?:in|ax)_size: )([0-9.]+)", lambda m: m.group(1) + str(int(float(
        m.group(2)))), text)
    text = text.replace('type: "DepthwiseConvolution"', 'type: "Convolution"')
    out = folder / ("opencv_" + os.path.basename(source))
    out.write_text(text)
    return str(out)


def test_pelee_agrees_with_opencv_blob_for_blob_and_detects_as_it(tmp_path):
    caffe.set_random_seed(2)
    net = caffe.Net(PELEE, caffe.TEST)
    rng = fill(net, seed=21)
    x = rng.uniform(-1.0, 1.0, net.blobs["data"].shape).astype(np.float32)
    found = net.forward(data=x)["detection_out"][0, 0].copy()
    # 200 boxes kept (keep_top_k) of many classes, scores not saturated
    assert len(found) == 200 and len(set(found[:, 1])) >= 5
    assert found[:, 2].max() < 0.99
    weights = tmp_path / "pelee.caffemodel"
    net.save(str(weights))
    cvnet = cv2.dnn.readNetFromCaffe(for_opencv(PELEE, tmp_path), str(weights))
    cvnet.enableFusion(False)
    cvnet.setInput(x)
    assert compare_with_opencv(net, cvnet, leave_out=("detection_out",)) > 200
    theirs = cv2.dnn.readNetFromCaffe(for_opencv(PELEE, tmp_path), str(weights))
    theirs.setInput(x)
    np.testing.assert_allclose(canonical(found), canonical(theirs.forward("detection_out")),
                               rtol=1e-4, atol=1e-5)


def yolov3_reference(heads, anchors, scales, classes, threshold):
    """MobileNet-YOLO's Yolov3DetectionOutputLayer before its NMS, written out: per head t
    (anchors ``anchors[t]``, grid H x W), cell (j, i) and anchor m: x = (i + sigmoid(tx)) / W,
    y = (j + sigmoid(ty)) / H, w = exp(tw) * anchor_w / (W * scale), h likewise; a
    detection for each class whose sigmoid(objectness) * sigmoid(class) exceeds the
    threshold, as (label + 1, score, xmin, ymin, xmax, ymax)."""
    rows = []
    for head, pairs, scale in zip(heads, anchors, scales):
        h_cells, w_cells = head.shape[2:]
        x = head[0].astype(np.float64).reshape(len(pairs), 5 + classes, h_cells, w_cells)
        for j in range(h_cells):
            for i in range(w_cells):
                for m, (aw, ah) in enumerate(pairs):
                    t = x[m, :, j, i]
                    sig = 1 / (1 + np.exp(-t))
                    cx, cy = (i + sig[0]) / w_cells, (j + sig[1]) / h_cells
                    bw = np.exp(t[2]) * aw / (w_cells * scale)
                    bh = np.exp(t[3]) * ah / (h_cells * scale)
                    for c in range(classes):
                        score = sig[4] * sig[5 + c]
                        if score > threshold:
                            rows.append([c + 1, score, cx - bw / 2, cy - bh / 2, cx + bw / 2,
                                         cy + bh / 2])
    return np.asarray(rows)


def iou(a, b):
    """Jaccard overlaps of the (A, 4) and (B, 4) corner boxes (normalized, no + 1)."""
    lo = np.maximum(a[:, None, :2], b[None, :, :2])
    hi = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(hi - lo, 0, None), axis=2)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter)


@pytest.mark.slow
def test_mobilenet_yolov3_lite_heads_agree_with_opencv_and_decode_as_the_fork(tmp_path):
    """MobileNet-YOLOv3-Lite at its 320 x 320 input: two heads of 3 x (5 + 20) channels at
    strides 32 and 16 (10 x 10 and 20 x 20); the stride-32 features go back to 20 x 20
    through a 1 x 1 stride-2 deconvolution (19 x 19) and a 2 x 2 max pooling with pad 1."""
    caffe.set_random_seed(4)
    net = caffe.Net(YOLOV3_LITE, caffe.TEST)
    assert net.blobs["conv19"].shape == (1, 75, 10, 10)
    assert net.blobs["conv20"].shape == (1, 75, 20, 20)
    assert net.blobs["upsample"].shape == (1, 512, 19, 19)
    assert net.blobs["maxpool"].shape == (1, 512, 20, 20)
    rng = fill(net, seed=17)
    for name in ("conv19", "conv20"):  # heads whose scores spread over (0, 1)
        net.params[name][0].data[...] *= 0.1
    x = rng.uniform(-1.0, 1.0, net.blobs["data"].shape).astype(np.float32)
    found = net.forward(data=x)["detection_out"][0, 0].copy()
    weights = tmp_path / "yolo.caffemodel"
    net.save(str(weights))
    cvnet = cv2.dnn.readNetFromCaffe(for_opencv(YOLOV3_LITE, tmp_path), str(weights))
    cvnet.enableFusion(False)
    cvnet.setInput(x)
    assert compare_with_opencv(net, cvnet, leave_out=("detection_out",)) > 30

    # the detections: the fork's decoding of both heads (anchors 3-5 on the stride-32 head,
    # 0-2 on the stride-16 one), each kept row one of them
    biases = np.array([10, 14, 23, 27, 37, 58, 81, 82, 135, 169, 344, 319.0]).reshape(6, 2)
    candidates = yolov3_reference([net.blobs["conv19"].data, net.blobs["conv20"].data],
                                  [biases[3:6], biases[0:3]], [32, 16], 20, 0.01)
    assert len(candidates) > len(found) > 20
    for row in found:
        same = candidates[(candidates[:, 0] == row[1])
                          & (np.abs(candidates[:, 1] - row[2]) <= 1e-5 * row[2])]
        assert len(same), row
        nearest = same[np.argmin(np.abs(same[:, 2:] - row[3:]).max(axis=1))]
        close(row[3:], nearest[2:], "detection %s" % row)
    # greedy NMS across classes at 0.45: the kept rows best first, no two overlapping that
    # much, and every candidate either kept or overlapping a kept row that scores at least
    # as high
    assert (np.diff(found[:, 2]) <= 0).all()
    kept = found[:, 3:].astype(np.float64)
    assert (iou(kept, kept)[np.triu_indices(len(kept), 1)] < 0.45).all()
    overlaps = iou(candidates[:, 2:], kept) >= 0.45
    covered = (overlaps & (found[None, :, 2] >= candidates[:, 1:2] - 1e-6)).any(axis=1)
    assert covered.all()
