"""The hand-made cases of the SSD fork's C++ tests (weiliu89/caffe, src/caffe/test/): their
inputs and expected values as data, checked against pycaffe-lite's box utilities and layers.
Where a fork test computes its expectation with code, the expectation is written here as a
hand formula."""

import lmdb
import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.layers.detection.multibox_util import MBL, conf_loss_per_prior
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import empty_blobs, make_layer

from helpers.ssd import blob_of, gt_rows


def softplus(x):
    return np.log1p(np.exp(x))


def run_layer(text, bottom, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, top[0].data.copy()


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
