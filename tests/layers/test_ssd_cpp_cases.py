"""The hand-made cases of the SSD fork's C++ tests (weiliu89/caffe, src/caffe/test/): their
inputs and expected values as data, checked against pycaffe-lite's box utilities and layers.
Where a fork test computes its expectation with code, the expectation is written here as a
hand formula."""

import lmdb
import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.layers.detection import bbox_util as bu
from pycaffe_lite.layers.detection.average_precision import average_precision
from pycaffe_lite.layers.detection.detection_output_files import output_box
from pycaffe_lite.layers.detection.multibox_util import (MBL, conf_loss_per_prior,
                                                         read_ground_truth)
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing.gradient_check import GradientChecker
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer

from helpers.ssd import blob_of, gt_rows


def softplus(x):
    return np.log1p(np.exp(x))


def run_layer(text, bottom, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, top[0].data.copy()


# SSD test_bbox_util.cpp FillBBoxes: two ground-truth boxes (labels 1 and 2) and six
# predictions; the comments give each prediction's overlap with them.
GT = np.array([[0.1, 0.1, 0.3, 0.3], [0.3, 0.3, 0.6, 0.5]])
PRED = np.array([[0.1, 0.0, 0.4, 0.3],     # 4/9 with gt 0, 0 with gt 1
                 [0.0, 0.1, 0.2, 0.3],     # 2/6, 0
                 [0.2, 0.1, 0.4, 0.4],     # 2/8, 1/11
                 [0.4, 0.3, 0.7, 0.5],     # 0, 4/8
                 [0.5, 0.4, 0.7, 0.7],     # 0, 1/11
                 [0.7, 0.7, 0.8, 0.8]])    # 0, 0


def test_jaccard_overlap_and_bbox_size():
    # TestJaccardOverlap: partial overlap, containment, apart; TestBBoxSize: a line and an
    # inverted box have size 0
    ref = np.array([[0.2, 0.3, 0.3, 0.5]])
    other = np.array([[0.1, 0.1, 0.3, 0.4], [0.1, 0.1, 0.4, 0.6], [0.0, 0.0, 0.1, 0.1]])
    np.testing.assert_allclose(bu.jaccard(ref, other)[0], [1 / 7, 2 / 15, 0], atol=1e-12)
    boxes = np.array([[0.2, 0.3, 0.3, 0.5], [0.2, 0.3, 0.2, 0.5], [0.2, 0.3, 0.1, 0.5]])
    np.testing.assert_allclose(bu.bbox_size(boxes), [0.02, 0, 0], atol=1e-12)
    np.testing.assert_allclose(bu.jaccard(PRED, GT),
                               [[4 / 9, 0], [2 / 6, 0], [2 / 8, 1 / 11], [0, 4 / 8],
                                [0, 1 / 11], [0, 0]], atol=1e-12)


@pytest.mark.parametrize("gt,match_type,threshold,indices", [
    (GT[:1], bu.BIPARTITE, -1, [0, -1, -1, -1, -1, -1]),        # LableOneBipartite
    (GT, bu.BIPARTITE, -1, [0, -1, -1, 1, -1, -1]),             # LableAllBipartite
    (GT[:1], bu.PER_PREDICTION, 0.3, [0, 0, -1, -1, -1, -1]),   # LableOnePerPrediction
    (GT, bu.PER_PREDICTION, 0.3, [0, 0, -1, 1, -1, -1]),        # LableAllPerPrediction
    (GT, bu.PER_PREDICTION, 0.001, [0, 0, 0, 1, 1, -1]),        # LableAllPerPredictionEx
])
def test_match_bbox(gt, match_type, threshold, indices):
    # SSD test_bbox_util.cpp TestMatchBBox*: the overlaps are each prediction's best
    # overlap with the ground truth taken (label 1: the first box only)
    got, overlaps = bu.match(gt, PRED, match_type, threshold)
    assert got.tolist() == indices
    best = [4 / 9, 2 / 6, 2 / 8, 4 / 8, 1 / 11, 0] if len(gt) == 2 else \
        [4 / 9, 2 / 6, 2 / 8, 0, 0, 0]
    np.testing.assert_allclose(overlaps, best, atol=1e-12)


def test_encode_decode_fork_values():
    # TestEncodeBBoxCorner / CenterSize, TestDecodeBBoxCorner / CenterSize
    prior, box = np.array([[0.1, 0.1, 0.3, 0.3]]), np.array([[0.0, 0.2, 0.4, 0.5]])
    v1, v2 = np.full((1, 4), 0.1), np.array([[0.1, 0.1, 0.2, 0.2]])
    cases = [(bu.CORNER, v1, True, [-0.1, 0.1, 0.1, 0.2]),
             (bu.CORNER, v1, False, [-1, 1, 1, 2]),
             (bu.CENTER_SIZE, v2, True, [0, 0.75, np.log(2), np.log(1.5)]),
             (bu.CENTER_SIZE, v2, False, [0, 7.5, np.log(2) * 5, np.log(1.5) * 5])]
    for code, var, in_target, offsets in cases:
        np.testing.assert_allclose(bu.encode(prior, var, code, in_target, box)[0], offsets,
                                   atol=1e-12)
        np.testing.assert_allclose(bu.decode(prior, var, code, in_target,
                                             np.array([offsets]))[0], box[0], atol=1e-12)
    # CORNER offsets (-1, 1, 1, 2) with the variance taken as in the target: added as they are
    np.testing.assert_allclose(bu.decode(prior, v1, bu.CORNER, True,
                                         np.array([[-1.0, 1, 1, 2]]))[0],
                               [-0.9, 1.1, 1.3, 2.3], atol=1e-12)


def test_decode_bboxes():
    # TestDecodeBBoxesCorner / CenterSize: priors i = 1..4 from 0.1 i to 0.1 i + 0.2
    i = np.arange(1, 5)[:, None]
    priors = np.hstack([0.1 * i, 0.1 * i, 0.1 * i + 0.2, 0.1 * i + 0.2])
    odd, even = i % 2, (i + 1) % 2
    offsets = np.hstack([-odd, even, even, odd]).astype(float)
    var = np.full((4, 4), 0.1)
    for in_target, step in ((False, 0.1), (True, 1.0)):
        want = np.hstack([0.1 * i - odd * step, 0.1 * i + even * step,
                          0.1 * i + 0.2 + even * step, 0.1 * i + 0.2 + odd * step])
        np.testing.assert_allclose(bu.decode(priors, var, bu.CORNER, in_target, offsets),
                                   want, atol=1e-12)
    var = np.tile([0.1, 0.1, 0.2, 0.2], (4, 1))
    want = np.hstack([(i - 1) * 0.1, 0.2 + (i - 1) * 0.1, 0.4 + (i - 1) * 0.1,
                      0.5 + (i - 1) * 0.1])
    for in_target, scale in ((True, 1), (False, 10 / np.array([1, 1, 2, 2]))):
        offsets = np.tile([0, 0.75, np.log(2), np.log(1.5)], (4, 1)) * scale
        np.testing.assert_allclose(bu.decode(priors, var, bu.CENTER_SIZE, in_target,
                                             offsets), want, atol=1e-12)


def test_get_ground_truth():
    # TestGetGroundTruth: row i of image ceil(i / 2), label i, difficult i % 2
    rows = [[np.ceil(k / 2), k, 0, 0.1, 0.1, 0.3, 0.3, k % 2] for k in range(4)]
    got = read_ground_truth(None, rows, 4, -1, True)
    assert {i: g.labels.tolist() for i, g in got.items()} == {0: [0], 1: [1, 2], 2: [3]}
    assert {i: g.difficult.tolist() for i, g in got.items()} == \
        {0: [False], 1: [True, False], 2: [True]}
    np.testing.assert_allclose(got[1].boxes, [[0.1, 0.1, 0.3, 0.3]] * 2)
    got = read_ground_truth(None, rows, 4, -1, False)     # the difficult boxes skipped
    assert {i: g.labels.tolist() for i, g in got.items()} == {0: [0], 1: [2]}


# TestApplyNMS / TestApplyNMSFast: overlaps 1/3 (boxes 0, 1), 2/8 (0, 3), 0 (0, 2)
NMS_BOXES = np.array([[0.1, 0.1, 0.3, 0.3], [0.2, 0.1, 0.4, 0.3], [0.2, 0.0, 0.4, 0.2],
                      [0.1, 0.2, 0.4, 0.4]])
NMS_SCORES = np.array([0.8, 0.7, 0.4, 0.5])


@pytest.mark.parametrize("threshold,top_k,score_threshold,kept", [
    (0.3, -1, 0.0, [0, 3, 2]), (0.3, 2, 0.0, [0]), (0.2, 3, 0.0, [0]), (0.2, -1, 0.5, [0])])
def test_apply_nms(threshold, top_k, score_threshold, kept):
    assert bu.nms_fast(NMS_BOXES, NMS_SCORES, score_threshold, threshold, 1.0,
                       top_k).tolist() == kept
    if score_threshold == 0:
        assert bu.nms(NMS_BOXES, NMS_SCORES, threshold, top_k).tolist() == kept


# TestComputeAP: 11 detections (score, true positive), 5 positives
AP_SCORES = [1.0, 1.0, 0.9, 0.9, 0.8, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4]
AP_TP = [0, 1, 1, 0, 1, 0, 1, 0, 0, 0, 1]


@pytest.mark.parametrize("version,ap,cut", [
    ("Integral", 0.558528, 0.2), ("MaxIntegral", 0.591861, 0.2),
    ("11point", 0.598662, 2 / 11)])
def test_compute_ap(version, ap, cut):
    assert average_precision(AP_SCORES, AP_TP, 5, version) == pytest.approx(ap, abs=1e-5)
    # the last 4 detections cut: recall stops at 0.8, losing the last precision (5 / 11)
    # over the last recall step (0.2), or over 2 of the 11 points
    assert average_precision(AP_SCORES[:7], AP_TP[:7], 5, version) == \
        pytest.approx(ap - 5 / 11 * cut, abs=1e-5)


def test_output_bbox():
    # TestOutputBBox: the box (-0.1, 0.3, 0.3, 0.5) on a 300 x 500 (height x width) image
    box, rp = [-0.1, 0.3, 0.3, 0.5], caffe_pb2.ResizeParameter
    assert output_box(box, 300, 500) == [0, 90, 150, 150]
    resize = rp(height=300, width=300, resize_mode=rp.WARP)
    assert output_box(box, 300, 500, resize) == [0, 90, 150, 150]
    resize.resize_mode = rp.FIT_SMALL_SIZE
    assert output_box(box, 300, 500, resize) == [0, 90, 150, 150]
    resize.height_scale = resize.width_scale = 300
    assert output_box(box, 300, 500, resize) == [0, 90, 90, 150]
    resize.resize_mode = rp.FIT_LARGE_SIZE_AND_PAD
    assert output_box(box, 300, 500, resize) == [0, 50, 150, 150]
    assert output_box(box, 500, 300, resize) == [0, 150, 50, 250]


# SSD test_bbox_util.cpp TestComputeConfLoss / TestComputeConfLossMatch with background 0
# (the fork's -1 cases call ComputeConfLoss directly: MultiBoxLoss's background_label_id is a
# uint32): 2 images x 2 priors x 2 classes, scores sign * idx * 0.1 (sign -1 for image 0).
CONF = np.array([[[0.0, -0.1], [-0.2, -0.3]], [[0.4, 0.5], [0.6, 0.7]]])
# the background everywhere but image 1's prior 0, matched to a box of label 1
TARGET = np.array([[0, 0], [1, 0]])


def test_compute_conf_loss_logistic():
    # sigmoid cross-entropy summed over the classes: softplus(x) - x * t
    for target in (np.zeros((2, 2), dtype=int), TARGET):
        onehot = np.stack([target == 0, target == 1], axis=-1)
        want = (softplus(CONF) - CONF * onehot).sum(axis=-1)
        np.testing.assert_allclose(conf_loss_per_prior(CONF, target, MBL.LOGISTIC), want,
                                   rtol=1e-12)


def test_compute_conf_loss_softmax():
    # the two scores of every prior differ by 0.1: the loss is -log(1 / (1 + e^-0.1)) where
    # the target is the larger score, -log(e^-0.1 / (1 + e^-0.1)) where it is the smaller
    big, small = -np.log(1 / (1 + np.exp(-0.1))), -np.log(np.exp(-0.1) / (1 + np.exp(-0.1)))
    got = conf_loss_per_prior(CONF, TARGET, MBL.SOFTMAX)
    np.testing.assert_allclose(got, [[big, big], [big, small]], rtol=1e-12)


# Three hand-placed priors: prior 0 a ground-truth box, priors 1 and 2 apart from it.
PRIORS = np.array([[0.1, 0.1, 0.4, 0.4], [0.6, 0.6, 0.9, 0.9], [0.6, 0.1, 0.9, 0.4]])


# SSD test_detection_output_layer.cpp: 2 images, 4 priors of 0.3 x 0.3 centred on a 2 x 2
# grid of step 0.5 (variances 0.1), 2 classes; the prior blob is 2 x 2 x 16 x 1 (one copy per
# image: the fork reads the first). Scores: j * 0.2 where image and class have the same
# parity, else 1 - j * 0.2 (prior j). CORNER offsets +-(i + c / 2 + 0.5) (sign by column for
# x, by row for y; c the location class), times the variance 0.1.
def detection_output_bottoms(share_location):
    grid = [((w + 0.5) * 0.5, (h + 0.5) * 0.5) for h in range(2) for w in range(2)]
    boxes = np.array([[x - 0.15, y - 0.15, x + 0.15, y + 0.15] for x, y in grid])
    prior = np.zeros((2, 2, 16, 1))
    prior[:, 0, :, 0] = boxes.reshape(-1)
    prior[:, 1] = 0.1
    j, c = np.arange(4)[:, None], np.arange(2)[None, :]
    conf = np.stack([np.where(i % 2 == c % 2, j * 0.2, 1 - j * 0.2) for i in range(2)])
    classes = 1 if share_location else 2
    loc = np.zeros((2, 4, classes, 4))
    for i in range(2):
        for k, (sx, sy) in enumerate([(1, 1), (-1, 1), (1, -1), (-1, -1)]):
            for cl in range(classes):
                v = i + cl / 2 + 0.5
                loc[i, k, cl] = [sx * v, sy * v, sx * v, sy * v]
    return [blob_of(loc.reshape(2, -1, 1, 1)), blob_of(conf.reshape(2, -1, 1, 1)),
            blob_of(prior)]


@pytest.mark.parametrize("share,background,top_k,rows", [
    # TestForwardShareLocation
    (True, 0, None, ["0 1 1.0 0.15 0.15 0.45 0.45", "0 1 0.8 0.55 0.15 0.85 0.45",
                     "0 1 0.6 0.15 0.55 0.45 0.85", "0 1 0.4 0.55 0.55 0.85 0.85",
                     "1 1 0.6 0.45 0.45 0.75 0.75", "1 1 0.0 0.25 0.25 0.55 0.55"]),
    # TestForwardShareLocationTopK
    (True, 0, 2, ["0 1 1.0 0.15 0.15 0.45 0.45", "0 1 0.8 0.55 0.15 0.85 0.45",
                  "1 1 0.6 0.45 0.45 0.75 0.75"]),
    # TestForwardNoShareLocation
    (False, -1, None, ["0 0 0.6 0.55 0.55 0.85 0.85", "0 0 0.4 0.15 0.55 0.45 0.85",
                       "0 0 0.2 0.55 0.15 0.85 0.45", "0 0 0.0 0.15 0.15 0.45 0.45",
                       "0 1 1.0 0.20 0.20 0.50 0.50", "0 1 0.8 0.50 0.20 0.80 0.50",
                       "0 1 0.6 0.20 0.50 0.50 0.80", "0 1 0.4 0.50 0.50 0.80 0.80",
                       "1 0 1.0 0.25 0.25 0.55 0.55", "1 0 0.4 0.45 0.45 0.75 0.75",
                       "1 1 0.6 0.40 0.40 0.70 0.70"]),
    # TestForwardNoShareLocationTopK
    (False, -1, 2, ["0 0 0.6 0.55 0.55 0.85 0.85", "0 0 0.4 0.15 0.55 0.45 0.85",
                    "0 1 1.0 0.20 0.20 0.50 0.50", "0 1 0.8 0.50 0.20 0.80 0.50",
                    "1 0 1.0 0.25 0.25 0.55 0.55", "1 1 0.6 0.40 0.40 0.70 0.70"]),
    # TestForwardNoShareLocationNeg0
    (False, 0, None, ["0 1 1.0 0.20 0.20 0.50 0.50", "0 1 0.8 0.50 0.20 0.80 0.50",
                      "0 1 0.6 0.20 0.50 0.50 0.80", "0 1 0.4 0.50 0.50 0.80 0.80",
                      "1 1 0.6 0.40 0.40 0.70 0.70"]),
    # TestForwardNoShareLocationNeg0TopK
    (False, 0, 2, ["0 1 1.0 0.20 0.20 0.50 0.50", "0 1 0.8 0.50 0.20 0.80 0.50",
                   "1 1 0.6 0.40 0.40 0.70 0.70"]),
])
def test_detection_output_fork_cases(share, background, top_k, rows):
    text = ('type: "DetectionOutput" detection_output_param { num_classes: 2 '
            'share_location: %s background_label_id: %d nms_param { nms_threshold: 0.1 %s } }'
            % (str(share).lower(), background, "" if top_k is None else "top_k: %d" % top_k))
    for dtype in (np.float32, np.float64):
        bottom = detection_output_bottoms(share)
        bottom = [blob_of(b.data, dtype) for b in bottom]
        _, out = run_layer(text, bottom, dtype)
        want = np.array([[float(v) for v in r.split()] for r in rows])
        assert out.shape == (1, 1, len(rows), 7)
        np.testing.assert_allclose(out[0, 0], want, atol=1e-6)


def test_multibox_loss_reads_the_first_images_priors():
    # SSD test_multibox_loss_layer.cpp feeds a prior blob of num_ x 2 x 4P; as the fork
    # (num_priors = height / 4, the first image's data read) the loss is the one of the
    # first image's priors whatever the later copies hold.
    prior = np.concatenate([PRIORS.reshape(-1), np.full(12, 0.1)]).reshape(1, 2, 12, 1)
    rng = np.random.default_rng(0)
    conf = rng.normal(size=(2, 6))
    loc = rng.normal(0, 0.3, (2, 12))
    gt = gt_rows([(0, 1) + tuple(PRIORS[0]), (1, 1) + tuple(PRIORS[2])])
    text = ('type: "MultiBoxLoss" propagate_down: true propagate_down: true '
            'propagate_down: false propagate_down: false multibox_loss_param { num_classes: 2 '
            'neg_pos_ratio: 1 }')
    _, single = run_layer(text, [blob_of(loc), blob_of(conf), blob_of(prior), gt])
    batched = np.concatenate([prior, rng.uniform(size=prior.shape)])
    _, first = run_layer(text, [blob_of(loc), blob_of(conf), blob_of(batched), gt])
    assert float(single) > 0 and float(first) == float(single)


# SSD test_annotated_data_layer.cpp: record i has groups g = 0 .. i-1 (group_label g), group g
# has g annotations (instance_id a, difficult a % 2) on box b * 0.1 .. min(b * 0.1 + 0.2, 1)
# with b = a (unique_annotation) or g; the pixels are 0, 1, 2, ... (unique_pixel).
def fork_record(i, height, width, unique_annotation, channels=2):
    anno = caffe_pb2.AnnotatedDatum(type=caffe_pb2.AnnotatedDatum.BBOX)
    anno.datum.channels, anno.datum.height, anno.datum.width = channels, height, width
    anno.datum.data = bytes(range(channels * height * width))
    for g in range(i):
        group = anno.annotation_group.add(group_label=g)
        for a in range(g):
            b = a if unique_annotation else g
            group.annotation.add(instance_id=a, bbox=caffe_pb2.NormalizedBBox(
                xmin=b * 0.1, ymin=b * 0.1, xmax=min(b * 0.1 + 0.2, 1.0),
                ymax=min(b * 0.1 + 0.2, 1.0), difficult=bool(a % 2)))
    return anno


def fork_rows(item, i, unique_annotation):
    rows = []
    for g in range(i):
        for a in range(g):
            b = a if unique_annotation else g
            hi = min(b * 0.1 + 0.2, 1.0)
            rows.append([item, g, a, b * 0.1, b * 0.1, hi, hi, a % 2])
    return rows


def annotated_net(tmp_path, records, batch, phase, transform=""):
    path = tmp_path / "db"
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, r in enumerate(records):
            txn.put(b"%d" % i, r.SerializeToString())
    env.close()
    proto = tmp_path / "net.prototxt"
    proto.write_text('layer { name: "data" type: "AnnotatedData" top: "data" top: "label" '
                     'transform_param { %s } data_param { source: "%s" batch_size: %d '
                     'backend: LMDB prefetch: 0 } }' % (transform, path, batch))
    return caffe.Net(str(proto), phase)


def close(net):
    for layer in net.layers:
        if hasattr(layer, "close"):
            layer.close()


@pytest.mark.parametrize("unique_annotation", [False, True])
def test_annotated_data_read(tmp_path, unique_annotation):
    # TestRead: a batch of the 6 records (10 x 10), scale 3; one label row per box of the
    # batch, item by item, groups and instances in record order
    records = [fork_record(i, 10, 10, unique_annotation) for i in range(6)]
    net = annotated_net(tmp_path, records, 6, caffe.TRAIN, "scale: 3")
    try:
        net.forward()
        data, label = net.blobs["data"].data, net.blobs["label"].data
        assert data.shape == (6, 2, 10, 10)
        np.testing.assert_array_equal(data, np.broadcast_to(
            3 * np.arange(200, dtype=np.float32).reshape(2, 10, 10), data.shape))
        want = [r for i in range(6) for r in fork_rows(i, i, unique_annotation)]
        assert label.shape == (1, 1, 20, 8)
        np.testing.assert_allclose(label[0, 0], want, atol=1e-6)
    finally:
        close(net)


@pytest.mark.parametrize("unique_annotation", [False, True])
def test_annotated_data_reshape(tmp_path, unique_annotation):
    # TestReshape: record i is (i % 2 + 1) x (i % 4 + 1); with batches of one record the
    # data top takes each record's size (TEST phase); records 0 and 1 have no box (a row
    # of -1), record 2 one box (group 1)
    records = [fork_record(i, i % 2 + 1, i % 4 + 1, unique_annotation) for i in range(6)]
    net = annotated_net(tmp_path, records, 1, caffe.TEST)
    try:
        for i in range(3):
            net.forward()
            data, label = net.blobs["data"].data, net.blobs["label"].data
            shape = (1, 2, i % 2 + 1, i % 4 + 1)
            assert data.shape == shape
            np.testing.assert_array_equal(data.reshape(-1), np.arange(data.size))
            want = fork_rows(0, i, unique_annotation) or [[-1] * 8]
            assert label.shape == (1, 1, len(want), 8)
            np.testing.assert_allclose(label[0, 0], want, atol=1e-6)
    finally:
        close(net)


def test_annotated_data_test_phase_crop_is_centred(tmp_path):
    # TestReadCrop(TEST): crop_size 1 of 10 x 10 images takes pixel (4, 4) of each channel
    # ((ceil(10 / 2) - 1) * 10 + ceil(10 / 2) - 1 + 100 c), times the scale 3
    records = [fork_record(i, 10, 10, False) for i in range(6)]
    net = annotated_net(tmp_path, records, 6, caffe.TEST, "scale: 3 crop_size: 1")
    try:
        for _ in range(2):
            net.forward()
            data = net.blobs["data"].data
            assert data.shape == (6, 2, 1, 1)
            np.testing.assert_array_equal(data[:, :, 0, 0], [[3 * 44, 3 * 144]] * 6)
    finally:
        close(net)


# SSD test_prior_box_layer.cpp: a 10 x 10 map on a 100 x 100 image, min_size 4, max_size 9
def prior_boxes(text, feat=(1, 1, 10, 10), img=(1, 3, 100, 100)):
    bottom = [blob_of(np.zeros(feat), np.float32), blob_of(np.zeros(img), np.float32)]
    _, out = run_layer('type: "PriorBox" prior_box_param { %s }' % text, bottom, np.float32)
    return out


@pytest.mark.parametrize("text,per_cell", [
    ("min_size: 4 max_size: 9", 2),                                           # TestSetup
    ("min_size: 4 min_size: 14 max_size: 9 max_size: 19", 4),                 # MultiSize
    ("min_size: 4", 1),                                                       # NoMaxSize
    ("min_size: 4 min_size: 14", 2),                                 # MultiSizeNoMaxSize
    ("min_size: 4 max_size: 9 aspect_ratio: 1 aspect_ratio: 2 flip: false", 3),  # Ratio1
    ("min_size: 4 max_size: 9 aspect_ratio: 2 aspect_ratio: 3 flip: false", 4),  # NoFlip
    ("min_size: 4 max_size: 9 aspect_ratio: 2 aspect_ratio: 3", 6),          # AspectRatio
    ("min_size: 4 min_size: 14 max_size: 9 max_size: 19 aspect_ratio: 2 aspect_ratio: 3",
     12),                                                               # RatioMultiSize
])
def test_prior_box_setup_counts(text, per_cell):
    assert prior_boxes(text).shape == (1, 2, 100 * per_cell * 4)


R2 = np.sqrt(2.0)
# the first cell's boxes (centre 0.05): 4 x 4, sqrt(4 * 9) = 6 wide, then ratio 2 and 1 / 2
CELL0 = [[0.03, 0.03, 0.07, 0.07], [0.02, 0.02, 0.08, 0.08],
         [0.05 - 0.02 * R2, 0.05 - 0.01 * R2, 0.05 + 0.02 * R2, 0.05 + 0.01 * R2],
         [0.05 - 0.01 * R2, 0.05 - 0.02 * R2, 0.05 + 0.01 * R2, 0.05 + 0.02 * R2]]


def test_prior_box_aspect_ratio_multi_size_clip():
    # TestCPUAspectRatioMultiSize: min 4 and 8, max 9 and 18, ratio 2 with flip, clip; each
    # size's boxes follow the previous size's, and clipping cuts the first cell's larger ones
    out = prior_boxes("min_size: 4 min_size: 8 max_size: 9 max_size: 18 aspect_ratio: 2 "
                      "clip: true")
    boxes = out[0, 0].reshape(10, 10, 8, 4)
    want = CELL0 + [[0.01, 0.01, 0.09, 0.09], [0, 0, 0.11, 0.11],
                    [0, 0.05 - 0.04 / R2, 0.05 + 0.04 * R2, 0.05 + 0.04 / R2],
                    [0.05 - 0.04 / R2, 0, 0.05 + 0.04 / R2, 0.05 + 0.04 * R2]]
    np.testing.assert_allclose(boxes[0, 0], want, atol=1e-6)
    np.testing.assert_allclose(boxes[4, 4, :4], np.array(CELL0) + 0.4, atol=1e-6)
    np.testing.assert_allclose(out[0, 1], 0.1, atol=1e-7)


def test_prior_box_fixed_step():
    # TestCPUFixStep: a 20 x 10 map on a 200 x 100 image with img_size 100 and step 10:
    # rows past the 10th reach beyond 1 (not clipped)
    out = prior_boxes("min_size: 4 max_size: 9 aspect_ratio: 2 img_size: 100 step: 10",
                      (1, 1, 20, 10), (1, 3, 200, 100))
    boxes = out[0, 0].reshape(20, 10, 4, 4)
    np.testing.assert_allclose(boxes[0, 0], CELL0, atol=1e-6)
    np.testing.assert_allclose(boxes[14, 4], np.array(CELL0) + [0.4, 1.4, 0.4, 1.4],
                               atol=1e-6)


@pytest.mark.parametrize("difficult,rows", [
    # TestForward
    (True, ["-1 1 3 -1 -1", "-1 2 1 -1 -1", "0 1 0.9 1 0", "0 1 0.7 1 0", "0 1 0.3 0 1",
            "1 1 0.2 1 0", "1 2 0.8 0 1", "1 2 0.1 1 0", "1 3 0.2 0 1", "2 1 0.2 0 1"]),
    # TestForwardSkipDifficult: the detection on the difficult box counts as neither
    (False, ["-1 1 2 -1 -1", "-1 2 1 -1 -1", "0 1 0.9 0 0", "0 1 0.7 1 0", "0 1 0.3 0 1",
             "1 1 0.2 1 0", "1 2 0.8 0 1", "1 2 0.1 1 0", "1 3 0.2 0 1", "2 1 0.2 0 1"]),
])
def test_detection_evaluate_fork_case(difficult, rows):
    # SSD test_detection_evaluate_layer.cpp: 3 classes, background 0, overlap 0.3; image 2
    # has no ground truth and label 3 is no class of the ground truth
    gt = [[0, 1, 0, 0.1, 0.1, 0.3, 0.3, 0], [0, 1, 0, 0.6, 0.6, 0.8, 0.8, 1],
          [1, 2, 0, 0.3, 0.3, 0.6, 0.5, 0], [1, 1, 0, 0.7, 0.1, 0.9, 0.3, 0]]
    det = [[0, 1, 0.3, 0.1, 0.0, 0.4, 0.3], [0, 1, 0.7, 0.0, 0.1, 0.2, 0.3],
           [0, 1, 0.9, 0.7, 0.6, 0.8, 0.8], [1, 2, 0.8, 0.2, 0.1, 0.4, 0.4],
           [1, 2, 0.1, 0.4, 0.3, 0.7, 0.5], [1, 1, 0.2, 0.8, 0.1, 1.0, 0.3],
           [1, 3, 0.2, 0.8, 0.1, 1.0, 0.3], [2, 1, 0.2, 0.8, 0.1, 1.0, 0.3]]
    text = ('type: "DetectionEvaluate" detection_evaluate_param { num_classes: 3 '
            'background_label_id: 0 overlap_threshold: 0.3 evaluate_difficult_gt: %s }'
            % str(difficult).lower())
    bottom = [blob_of(np.array(det).reshape(1, 1, 8, 7), np.float32),
              blob_of(np.array(gt).reshape(1, 1, 4, 8), np.float32)]
    _, out = run_layer(text, bottom, np.float32)
    want = [[float(v) for v in r.split()] for r in rows]
    assert out.shape == (1, 1, 10, 5)
    np.testing.assert_allclose(out[0, 0], want, atol=1e-6)


# SSD test_multibox_loss_layer.cpp: 3 images (the second without ground truth), 3 classes,
# priors of a 2 x 2 map on a 20 x 20 image (min 5, max 10, ratio 3 with flip: 16 priors)
MBL_GT = [(0, 1, 0.1, 0.1, 0.3, 0.3), (2, 1, 0.1, 0.1, 0.3, 0.3), (2, 2, 0.2, 0.2, 0.4, 0.4),
          (2, 2, 0.6, 0.6, 0.8, 0.9, 1)]


def multibox_bottoms(share_location):
    prior = prior_boxes("min_size: 5 max_size: 10 aspect_ratio: 3 flip: true",
                        (1, 1, 2, 2), (1, 3, 20, 20)).astype(np.float64)
    rng = np.random.default_rng(1701)
    loc = rng.normal(0, 0.5, (3, 16 * (1 if share_location else 3) * 4))
    conf = rng.normal(0, 1, (3, 16 * 3))
    return [blob_of(loc), blob_of(conf), blob_of(prior), gt_rows(MBL_GT)]


def multibox_text(params, propagate=(True, True)):
    down = " ".join("propagate_down: %s" % str(p).lower() for p in propagate + (False, False))
    return 'type: "MultiBoxLoss" %s multibox_loss_param { num_classes: 3 %s }' % (down, params)


@pytest.mark.parametrize("share,match,use_prior,mining", [
    (share, match, use_prior, mining) for share in (True, False)
    for match in ("BIPARTITE", "PER_PREDICTION") for use_prior in (True, False)
    for mining in ("NONE", "MAX_NEGATIVE", "HARD_EXAMPLE") if share or mining == "NONE"])
def test_multibox_loss_setup_accepts_the_forks_options(share, match, use_prior, mining):
    # TestSetUp: every match type, prior use and mining type (mining with shared locations)
    params = ("share_location: %s match_type: %s use_prior_for_matching: %s mining_type: %s"
              % (str(share).lower(), match, str(use_prior).lower(), mining))
    layer, loss = run_layer(multibox_text(params), multibox_bottoms(share))
    assert np.isfinite(loss) and layer.num_matches > 0


@pytest.mark.parametrize("params,propagate", [
    # TestLocGradient: loc only
    ("loc_loss_type: L2 match_type: BIPARTITE mining_type: MAX_NEGATIVE "
     "use_difficult_gt: false", (True, False)),
    ("share_location: false match_type: PER_PREDICTION mining_type: NONE",
     (True, False)),
    # TestConfGradient: conf only, background 0
    ("conf_loss_type: LOGISTIC match_type: PER_PREDICTION mining_type: HARD_EXAMPLE "
     "background_label_id: 0", (False, True)),
    ("conf_loss_type: SOFTMAX match_type: BIPARTITE mining_type: MAX_NEGATIVE "
     "use_difficult_gt: false background_label_id: 0", (False, True)),
])
def test_multibox_loss_gradient_fork_cases(params, propagate):
    bottom = multibox_bottoms("share_location: false" not in params)
    checker = GradientChecker(1e-3, 2e-3, seed=1701)
    index = 0 if propagate[0] else 1
    checker.check_gradient_exhaustive(make_layer(multibox_text(params, propagate)), bottom,
                                      empty_blobs(1), check_bottom=[index])


def test_smooth_l1_loss_with_the_ssd_forks_weight_bottom():
    # SSD smooth_L1_loss_layer.cpp takes a third bottom, weights w: the loss is
    # sum(f(w * (a - b))) / N with f(d) = 0.5 d^2 where |d| < 1, else |d| - 0.5
    a = np.array([[0.2, -3.0, 1.0], [1.5, 0.0, 0.4]])
    b = np.array([[0.0, 0.0, 0.0], [0.0, 0.1, -0.4]])
    w = np.array([[1.0, 0.5, 0.0], [2.0, 1.0, 3.0]])
    layer, bottom, top = check_layer('type: "SmoothL1Loss"', [a, b, w], check_bottom=[0, 1])
    # w * d = 0.2, -1.5, 0, 3, -0.1, 2.4
    want = (0.5 * 0.04 + 1.0 + 0 + 2.5 + 0.5 * 0.01 + 1.9) / 2
    assert float(top[0].data) == pytest.approx(want, rel=1e-12)
