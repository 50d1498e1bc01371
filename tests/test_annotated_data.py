"""AnnotatedData (SSD fork) and its box geometry, sampling and augmentation, against hand
computations."""

import math

import lmdb
import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.data import anno_transform as at
from pycaffe_lite.data import sampler
from pycaffe_lite.data.annotation import BoxList, Boxes, boxes_of
from pycaffe_lite.data.datum import DataError
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2


class FakeRng:
    """Hands out the given draws in order: ``uniform`` values and ``integers`` values."""

    def __init__(self, uniform=(), integers=()):
        self.u = list(uniform)
        self.i = list(integers)

    def uniform(self, low=0.0, high=1.0):
        v = self.u.pop(0)
        assert low <= v <= high, (low, v, high)
        return v

    def integers(self, n):
        v = self.i.pop(0)
        assert 0 <= v < n
        return v


def _boxes(rows, labels=None):
    rows = np.asarray(rows, np.float64).reshape(-1, 4)
    n = len(rows)
    return Boxes(np.asarray(labels if labels is not None else [1] * n), np.arange(n),
                 rows, np.zeros(n, bool))


def _image(h=10, w=20, c=3):
    return (np.arange(h * w * c) % 251).astype(np.uint8).reshape(h, w, c)


# ---- geometry ---------------------------------------------------------------------------
def test_jaccard_and_coverage_by_hand():
    a = [0.0, 0.0, 0.5, 0.5]
    b = [[0.25, 0.25, 0.75, 0.75], [0.6, 0.6, 1.0, 1.0], [0.0, 0.0, 0.25, 0.5]]
    # intersection 0.0625; union 0.25 + 0.25 - 0.0625
    assert sampler.jaccard(a, b) == pytest.approx([0.0625 / 0.4375, 0.0, 0.125 / 0.25])
    # coverage of a: intersection / size(a); of each b: intersection / size(b)
    assert sampler.coverage_of_box(a, b) == pytest.approx([0.25, 0.0, 0.5])
    assert sampler.coverage_by_box(b, a) == pytest.approx([0.25, 0.0, 1.0])


def test_project_clips_and_drops_outside_boxes():
    window = [0.25, 0.2, 0.75, 0.8]
    keep, proj = sampler.project(window, [[0.1, 0.1, 0.5, 0.5], [0.0, 0.0, 0.2, 0.2],
                                          [0.6, 0.7, 0.9, 0.95]])
    assert keep.tolist() == [True, False, True]
    np.testing.assert_allclose(proj, [[0.0, 0.0, 0.5, 0.5], [0.7, 0.5 / 0.6, 1.0, 1.0]])


def test_emit_constraint_center_and_min_overlap():
    window = [0.25, 0.2, 0.75, 0.8]
    boxes = [[0.1, 0.1, 0.5, 0.5], [0.6, 0.7, 0.9, 0.95]]
    emit = caffe_pb2.EmitConstraint()
    # centres (0.3, 0.3) inside; (0.75, 0.825) below the window (x on the border counts)
    assert sampler.meet_emit_constraint(window, boxes, emit).tolist() == [True, False]
    emit.emit_type = emit.MIN_OVERLAP
    emit.emit_overlap = 0.4
    # coverage of each box by the window: 0.25*0.3/0.16 = 0.46875; 0.15*0.1/0.075 = 0.2
    assert sampler.meet_emit_constraint(window, boxes, emit).tolist() == [True, False]


def test_sample_box_formula():
    s = caffe_pb2.Sampler(min_scale=0.3, max_scale=1.0, min_aspect_ratio=0.5,
                          max_aspect_ratio=2.0)
    box = sampler.sample_box(s, FakeRng([0.5, 2.0, 0.1, 0.2]))
    w, h = 0.5 * math.sqrt(2), 0.5 / math.sqrt(2)
    np.testing.assert_allclose(box, [0.1, 0.2, 0.1 + w, 0.2 + h])
    # the aspect ratio is clamped to [scale^2, 1/scale^2]: 0.5 -> 1 for scale 1
    box = sampler.sample_box(s, FakeRng([1.0, 0.5, 0.0, 0.0]))
    np.testing.assert_allclose(box, [0, 0, 1, 1])


def test_sample_constraint_semantics():
    objects = [[0.0, 0.0, 0.5, 0.5]]
    c = caffe_pb2.SampleConstraint()
    assert sampler.satisfies([0.9, 0.9, 1.0, 1.0], objects, c)  # no bounds: always
    c.min_jaccard_overlap = 0.5
    assert sampler.satisfies([0.0, 0.0, 0.5, 0.6], objects, c)  # IoU 0.25/0.3
    assert sampler.satisfies([0.0, 0.0, 0.5, 1.0], objects, c)  # IoU exactly 0.5
    assert not sampler.satisfies([0.0, 0.0, 0.75, 1.0], objects, c)  # IoU 1/3
    c = caffe_pb2.SampleConstraint(max_jaccard_overlap=0.1)
    assert not sampler.satisfies([0.0, 0.0, 0.5, 0.6], objects, c)
    c = caffe_pb2.SampleConstraint(min_object_coverage=0.9)
    assert sampler.satisfies([0.0, 0.0, 0.9, 0.9], objects, c)
    assert not sampler.satisfies([0.0, 0.0, 0.4, 0.9], objects, c)  # covers 0.8 of it
    assert not sampler.satisfies([0.0, 0.0, 1.0, 1.0], [], c)


def test_generated_samples_meet_their_constraint():
    bs = caffe_pb2.BatchSampler(max_sample=1, max_trials=50)
    bs.sampler.min_scale, bs.sampler.max_scale = 0.3, 1.0
    bs.sampler.min_aspect_ratio, bs.sampler.max_aspect_ratio = 0.5, 2.0
    bs.sample_constraint.min_jaccard_overlap = 0.3
    objects = np.array([[0.2, 0.2, 0.6, 0.7], [0.7, 0.1, 0.9, 0.3]])
    rng = np.random.default_rng(3)
    found = 0
    for _ in range(100):
        patches = sampler.generate_samples(objects, [bs, bs], rng)
        assert len(patches) <= 2  # max_sample 1 per sampler
        for p in patches:
            found += 1
            w, h = p[2] - p[0], p[3] - p[1]
            assert 0 <= p[0] and p[2] <= 1 + 1e-9 and 0 <= p[1] and p[3] <= 1 + 1e-9
            assert 0.3 - 1e-9 <= math.sqrt(w * h) <= 1 + 1e-9
            assert 0.5 - 1e-6 <= w / h <= 2 + 1e-6
            assert sampler.jaccard(p, objects).max() >= 0.3
    assert found > 50
    # a sampler that does not use the original image makes nothing
    bs.use_original_image = False
    assert sampler.generate_samples(objects, [bs], rng) == []


# ---- augmentation ------------------------------------------------------------------------
def test_crop_to_patch_moves_pixels_and_boxes():
    img = _image()
    boxes = _boxes([[0.1, 0.1, 0.5, 0.5], [0.6, 0.7, 0.9, 0.95]], [1, 2])
    out, got = at.crop_to(img, boxes, np.array([0.25, 0.2, 0.75, 0.8]))
    # w_off = int(0.25*20) = 5, width = 10; h_off = int(0.2*10) = 2, height = int(8 - 2) = 6
    np.testing.assert_array_equal(out, img[2:8, 5:15])
    np.testing.assert_allclose(got.boxes, [[0.0, 0.0, 0.5, 0.5], [0.7, 0.5 / 0.6, 1.0, 1.0]])
    assert got.labels.tolist() == [1, 2]
    emit = caffe_pb2.EmitConstraint()  # CENTER drops the second box
    _, got = at.crop_to(img, boxes, np.array([0.25, 0.2, 0.75, 0.8]), emit)
    assert got.labels.tolist() == [1]


def test_expand_places_image_on_mean_canvas():
    img = _image()
    boxes = _boxes([[0.1, 0.1, 0.5, 0.5]])
    p = caffe_pb2.ExpansionParameter(prob=0.5, max_expand_ratio=2.0)
    # draws: prob 0.3 (<= 0.5: expand), ratio 1.5, h_off 2.7 -> 2, w_off 4.2 -> 4
    out, got = at.expand(img, boxes, p, np.array([7, 8, 9]), FakeRng([0.3, 1.5, 2.7, 4.2]))
    assert out.shape == (15, 30, 3)
    np.testing.assert_array_equal(out[2:12, 4:24], img)
    mask = np.ones((15, 30), bool)
    mask[2:12, 4:24] = False
    assert (out[mask] == [7, 8, 9]).all()
    # window (-4/20, -2/10, 26/20, 13/10): x' = (x + 0.2) / 1.5
    np.testing.assert_allclose(got.boxes, [[0.2, 0.2, 0.7 / 1.5, 0.7 / 1.5]])
    # prob draw above prob: unchanged
    out, got = at.expand(img, boxes, p, 0, FakeRng([0.6]))
    assert out is img and got is boxes


def test_final_transform_mirror_mean_scale_and_centre_crop():
    tp = caffe_pb2.TransformationParameter(mirror=True, crop_size=8, scale=0.5)
    tp.mean_value.extend([1, 2, 3])
    img = _image()
    boxes = _boxes([[0.1, 0.2, 0.3, 0.4], [0.5, 0.0, 0.9, 1.0]])
    out = np.zeros((3, 8, 8), np.float32)
    # mirror draw 1; TEST: centre crop h_off (10-8)//2 = 1, w_off (20-8)//2 = 6
    got = at.final_transform(img, boxes, tp, caffe.TEST, np.array([1, 2, 3], np.float32)
                             .reshape(3, 1, 1), FakeRng(integers=[1]), out)
    crop = img[1:9, 6:14][:, ::-1].transpose(2, 0, 1).astype(np.float32)
    np.testing.assert_allclose(out, (crop - np.array([1, 2, 3]).reshape(3, 1, 1)) * 0.5)
    # window x [0.3, 0.7], y [0.1, 0.9]: box 1 is outside; box 2 -> x [0.5, 1], y [0, 1],
    # mirrored to x [0, 0.5]
    assert got.instance.tolist() == [1]
    np.testing.assert_allclose(got.boxes, [[0.0, 0.0, 0.5, 1.0]], atol=1e-12)


def test_warp_resize_keeps_normalized_boxes_and_matches_opencv():
    cv2 = pytest.importorskip("cv2")
    tp = caffe_pb2.TransformationParameter()
    tp.resize_param.height, tp.resize_param.width = 6, 9
    img = _image()
    out = np.zeros((3, 6, 9), np.float32)
    got = at.final_transform(img, _boxes([[-0.1, 0.2, 0.5, 1.2]]), tp, caffe.TRAIN, None,
                             FakeRng(), out)
    ref = cv2.resize(img, (9, 6), interpolation=cv2.INTER_LINEAR).transpose(2, 0, 1)
    assert np.abs(out - ref).max() <= 1
    np.testing.assert_allclose(got.boxes, [[0.0, 0.2, 0.5, 1.0]])


def test_brightness_and_contrast_by_hand():
    p = caffe_pb2.DistortionParameter(brightness_prob=1, brightness_delta=32,
                                      contrast_prob=1, contrast_lower=0.5, contrast_upper=1.5)
    img = np.array([[[0, 100, 250]]], np.uint8)
    # order draw 0.7 (> 0.5: brightness, contrast, saturation, hue, order); brightness
    # (prob 0.2, delta 10.4), contrast (prob 0.1, factor 1.25), saturation/hue/order skipped
    out = at.distort(img, p, FakeRng([0.7, 0.2, 10.4, 0.1, 1.25, 0.9, 0.9, 0.9]))
    # each step saturates to uint8 (round half to even): 0 -> 10 -> 12.5 -> 12,
    # 100 -> 110 -> 137.5 -> 138, 250 -> 255 -> 255
    assert out.tolist() == [[[12, 138, 255]]]


# ---- the layer --------------------------------------------------------------------------
def _anno_datum(img, rows, encoded=False):
    """rows: (label, xmin, ymin, xmax, ymax, difficult)."""
    a = caffe_pb2.AnnotatedDatum()
    d = a.datum
    if encoded:
        from pycaffe_lite.data.datum import encode_image
        d.data = encode_image(img, "png")
        d.encoded = True
    else:
        d.channels, d.height, d.width = img.shape[2], img.shape[0], img.shape[1]
        d.data = img.transpose(2, 0, 1).tobytes()
    d.label = 5
    a.type = a.BBOX
    lst = BoxList(a)
    for label, *box, diff in rows:
        lst.add(label, *box, diff)
    return a


def _close(net):
    for layer in net.layers:
        if hasattr(layer, "close"):
            layer.close()


def _write_db(path, records):
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, r in enumerate(records):
            txn.put(b"%08d" % i, r.SerializeToString())
    env.close()


def _net(tmp_path, source, body="", batch=2, phase="TEST", extra=""):
    proto = tmp_path / "net.prototxt"
    proto.write_text("""layer { name: "data" type: "AnnotatedData" top: "data" top: "label"
      transform_param { %s }
      data_param { source: "%s" batch_size: %d backend: LMDB prefetch: 0 }
      annotated_data_param { %s } }""" % (body, source, batch, extra))
    return caffe.Net(str(proto), getattr(caffe, phase))


RECORDS = [
    ([(2, 0.1, 0.2, 0.5, 0.6, False), (1, 0.0, 0.0, 0.3, 0.3, True),
      (2, 0.6, 0.6, 0.9, 1.0, False)]),
    ([(3, 0.5, 0.5, 0.75, 0.75, False)]),
    ([]),
]


@pytest.fixture
def db(tmp_path):
    rng = np.random.default_rng(0)
    imgs = [rng.integers(0, 256, (12, 16, 3)).astype(np.uint8) for _ in RECORDS]
    path = tmp_path / "anno_lmdb"
    _write_db(path, [_anno_datum(im, rows, encoded=(i == 1))
                     for i, (im, rows) in enumerate(zip(imgs, RECORDS))])
    return path, imgs


def test_layer_test_phase_label_layout_and_pixels(tmp_path, db):
    path, imgs = db
    net = _net(tmp_path, path, "mean_value: 10 scale: 2")
    try:
        net.forward()
        data, label = net.blobs["data"].data, net.blobs["label"].data
        assert data.shape == (2, 3, 12, 16)
        for i in range(2):
            ref = (imgs[i].transpose(2, 0, 1).astype(np.float32) - 10) * 2
            np.testing.assert_array_equal(data[i], ref)
        # groups in order of first appearance (2 then 1), instances counted per group
        expect = [[0, 2, 0, 0.1, 0.2, 0.5, 0.6, 0], [0, 2, 1, 0.6, 0.6, 0.9, 1.0, 0],
                  [0, 1, 0, 0.0, 0.0, 0.3, 0.3, 1], [1, 3, 0, 0.5, 0.5, 0.75, 0.75, 0]]
        assert label.shape == (1, 1, 4, 8)
        np.testing.assert_allclose(label[0, 0], expect, rtol=1e-6)
        net.forward()  # record 2 (no boxes) and record 0 again
        label = net.blobs["label"].data
        assert label.shape == (1, 1, 3, 8)
        assert label[0, 0, :, 0].tolist() == [1, 1, 1]
    finally:
        _close(net)


def test_layer_batch_without_boxes_gives_minus_one(tmp_path):
    path = tmp_path / "empty_lmdb"
    _write_db(path, [_anno_datum(_image(), [])])
    net = _net(tmp_path, path, batch=1)
    try:
        net.forward()
        np.testing.assert_array_equal(net.blobs["label"].data, -np.ones((1, 1, 1, 8)))
    finally:
        _close(net)


def test_layer_without_annotation_type_outputs_datum_labels(tmp_path):
    a = _anno_datum(_image(), [])
    a.ClearField("type")
    path = tmp_path / "cls_lmdb"
    _write_db(path, [a])
    net = _net(tmp_path, path, batch=3)
    try:
        net.forward()
        assert net.blobs["label"].data.tolist() == [5, 5, 5]
    finally:
        _close(net)


def _train_batches(tmp_path, source, seed, n=3):
    caffe.set_random_seed(seed)
    body = ("mirror: true resize_param { height: 10 width: 10 } emit_constraint { } "
            "expand_param { prob: 0.5 max_expand_ratio: 3 }")
    extra = ("batch_sampler { } batch_sampler { sampler { min_scale: 0.3 max_scale: 1 "
             "min_aspect_ratio: 0.5 max_aspect_ratio: 2 } sample_constraint { "
             "min_jaccard_overlap: 0.1 } max_sample: 1 max_trials: 50 }")
    net = _net(tmp_path, source, body, batch=3, phase="TRAIN", extra=extra)
    out = []
    try:
        for _ in range(n):
            net.forward()
            out.append((net.blobs["data"].data.copy(), net.blobs["label"].data.copy()))
    finally:
        _close(net)
    return out


def test_train_augmentation_is_deterministic_by_seed_and_boxes_stay_valid(tmp_path, db):
    path, _ = db
    a = _train_batches(tmp_path, path, 7)
    b = _train_batches(tmp_path, path, 7)
    c = _train_batches(tmp_path, path, 8)
    for (da, la), (db_, lb) in zip(a, b):
        np.testing.assert_array_equal(da, db_)
        np.testing.assert_array_equal(la, lb)
    assert any(not np.array_equal(x[0], y[0]) for x, y in zip(a, c))
    for data, label in a:
        assert data.shape == (3, 3, 10, 10)
        rows = label[0, 0]
        rows = rows[rows[:, 0] >= 0]
        assert ((rows[:, 3:7] >= 0) & (rows[:, 3:7] <= 1)).all()
        assert (rows[:, 5] > rows[:, 3]).all() and (rows[:, 6] > rows[:, 4]).all()
        assert set(rows[:, 1].tolist()) <= {1, 2, 3}


def test_layer_errors_name_the_problem(tmp_path, db):
    path, _ = db
    with pytest.raises(CaffeError, match="min_scale"):
        _net(tmp_path, path, extra="batch_sampler { sampler { min_scale: 0 } }")
    with pytest.raises(CaffeError, match="FIT_SMALL_SIZE"):
        _net(tmp_path, path, "resize_param { resize_mode: FIT_SMALL_SIZE height: 4 width: 4 }")
    with pytest.raises(CaffeError, match="smaller than the crop"):
        _net(tmp_path, path, "crop_size: 40")
    with pytest.raises(CaffeError, match="layer 'data'.*sets noise_param.*not implemented"):
        _net(tmp_path, path, "noise_param { prob: 0.5 }")
    with pytest.raises(DataError, match="max_expand_ratio"):
        at.expand(_image(), _boxes([]), caffe_pb2.ExpansionParameter(max_expand_ratio=0.5),
                  0, FakeRng([0.0]))


def test_boxes_of_reads_groups_in_order():
    a = _anno_datum(_image(), RECORDS[0])
    b = boxes_of(a)
    assert b.labels.tolist() == [2, 2, 1]
    assert b.instance.tolist() == [0, 1, 0]
    assert b.difficult.tolist() == [False, False, True]


def test_label_missing_from_the_label_map_names_record_and_label(tmp_path, db):
    path, _ = db
    labelmap = tmp_path / "labelmap.prototxt"
    labelmap.write_text('item { name: "bg" label: 0 } item { name: "a" label: 1 } '
                        'item { name: "b" label: 2 }')
    net = _net(tmp_path, path, batch=2, extra='label_map_file: "%s"' % labelmap)
    try:
        with pytest.raises(CaffeError, match=r"layer 'data'.*record 1 .*label 3"):
            net.forward()  # record 1 has a box of label 3
    finally:
        _close(net)
