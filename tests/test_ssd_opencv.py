"""The SSD layers against OpenCV's independent implementation (cv2.dnn): single-layer nets
saved here, and the public deploy nets of OpenCV's res10 face detector and MobileNet-SSD
with seeded random weights (tests/fixtures/ssd/README.md names their sources)."""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "ssd")


def cv_forward(proto, weights, inputs, output):
    net = cv2.dnn.readNetFromCaffe(str(proto), str(weights))
    for name, value in inputs.items():
        net.setInput(value, name)
    return net.forward(output)


def save_and_compare(tmp_path, text, inputs, output, prepare=None, rtol=1e-5, atol=1e-6):
    proto = tmp_path / "net.prototxt"
    proto.write_text(text)
    net = caffe.Net(str(proto), caffe.TEST)
    if prepare is not None:
        prepare(net)
    weights = tmp_path / "net.caffemodel"
    net.save(str(weights))
    ours = net.forward(**inputs)[output].copy()
    theirs = cv_forward(proto, weights, inputs, output)
    assert ours.size == theirs.size
    np.testing.assert_allclose(ours, theirs.reshape(ours.shape), rtol=rtol, atol=atol)
    return ours


def inp(name, *dims):
    return ('layer { name: "%s" type: "Input" top: "%s" input_param { shape { %s } } }\n'
            % (name, name, " ".join("dim: %d" % d for d in dims)))


# SSD's configuration only: OpenCV cannot load the 0-axis scale blob of channel_shared (the
# fork writes it so too) and refuses per-channel scales with across_spatial
@pytest.mark.parametrize("across_spatial,channel_shared", [(False, False)])
def test_normalize_matches_opencv(tmp_path, across_spatial, channel_shared):
    text = inp("data", 2, 5, 4, 3) + (
        'layer { name: "norm" type: "Normalize" bottom: "data" top: "norm" norm_param { '
        'across_spatial: %s channel_shared: %s scale_filler { type: "uniform" min: 1 max: 20 '
        '} } }' % (str(across_spatial).lower(), str(channel_shared).lower()))
    x = np.random.default_rng(0).normal(size=(2, 5, 4, 3)).astype(np.float32)
    save_and_compare(tmp_path, text, {"data": x}, "norm")


def test_permute_matches_opencv(tmp_path):
    text = inp("data", 2, 3, 4, 5) + (
        'layer { name: "perm" type: "Permute" bottom: "data" top: "perm" permute_param { '
        'order: 0 order: 2 order: 3 order: 1 } }')
    x = np.random.default_rng(1).normal(size=(2, 3, 4, 5)).astype(np.float32)
    save_and_compare(tmp_path, text, {"data": x}, "perm", rtol=0, atol=0)


@pytest.mark.parametrize("params", [
    "min_size: 30 max_size: 60 aspect_ratio: 2 flip: true clip: false variance: 0.1 "
    "variance: 0.1 variance: 0.2 variance: 0.2 step: 8 offset: 0.5",
    "min_size: 20 aspect_ratio: 2 aspect_ratio: 3 flip: false clip: true variance: 0.1",
    "min_size: 10 min_size: 25 max_size: 25 max_size: 40 aspect_ratio: 3 clip: false "
    "step_h: 12 step_w: 9 offset: 0.25 variance: 0.2",
])
def test_prior_box_matches_opencv(tmp_path, params):
    text = inp("feat", 1, 2, 5, 6) + inp("data", 1, 3, 40, 48) + (
        'layer { name: "prior" type: "PriorBox" bottom: "feat" bottom: "data" top: "prior" '
        'prior_box_param { %s } }' % params)
    rng = np.random.default_rng(2)
    inputs = {"feat": rng.normal(size=(1, 2, 5, 6)).astype(np.float32),
              "data": rng.normal(size=(1, 3, 40, 48)).astype(np.float32)}
    save_and_compare(tmp_path, text, inputs, "prior", rtol=1e-6, atol=1e-7)


def canonical(rows):
    """Detection rows ordered by image, label, then descending score (OpenCV lists a trimmed
    image's detections by score, the fork by class), without OpenCV's padding: OpenCV
    fills its output up to keep_top_k rows per image with zeros."""
    rows = rows.reshape(-1, 7)
    pad = rows[:, 2] == 0
    assert not rows[pad].any()
    rows = rows[~pad]
    return rows[np.lexsort((-rows[:, 2], rows[:, 1], rows[:, 0]))]


@pytest.mark.parametrize("params", [
    "num_classes: 4 share_location: true background_label_id: 0 nms_param { "
    "nms_threshold: 0.45 top_k: 50 } code_type: CENTER_SIZE keep_top_k: 30 "
    "confidence_threshold: 0.3",
    "num_classes: 4 share_location: true background_label_id: 0 nms_param { "
    "nms_threshold: 0.3 } code_type: CORNER keep_top_k: 500 confidence_threshold: 0.35",
    "num_classes: 4 share_location: true background_label_id: 2 nms_param { "
    "nms_threshold: 0.5 top_k: 20 } "
    "code_type: CENTER_SIZE keep_top_k: 10 "
    "confidence_threshold: 0.3",
])
def test_detection_output_matches_opencv(tmp_path, params):
    rng = np.random.default_rng(3)
    P = 60
    xy = rng.uniform(0, 0.8, (P, 2))
    prior = np.concatenate([xy, xy + rng.uniform(0.1, 0.3, (P, 2))], axis=1)
    var = np.tile([0.1, 0.1, 0.2, 0.2], (P, 1))
    loc_classes = 1 if "share_location: false" not in params else 4
    loc = rng.normal(0, 0.5, (2, P * loc_classes * 4)).astype(np.float32)
    z = rng.normal(0, 1.5, (2, P, 4))
    conf = (np.exp(z) / np.exp(z).sum(axis=2, keepdims=True)).reshape(2, -1)
    inputs = {"loc": loc, "conf": conf.astype(np.float32),
              "prior": np.stack([prior.ravel(), var.ravel()])[None].astype(np.float32)}
    text = (inp("loc", 2, P * loc_classes * 4) + inp("conf", 2, P * 4) +
            inp("prior", 1, 2, P * 4) +
            'layer { name: "det" type: "DetectionOutput" bottom: "loc" bottom: "conf" '
            'bottom: "prior" top: "det" detection_output_param { %s } }' % params)
    proto = tmp_path / "det.prototxt"
    proto.write_text(text)
    net = caffe.Net(str(proto), caffe.TEST)
    weights = tmp_path / "det.caffemodel"
    net.save(str(weights))
    ours = net.forward(**inputs)["det"].copy()
    theirs = cv_forward(proto, weights, inputs, "det")
    assert ours.shape[2] >= 10
    assert set(ours[0, 0, :, 0]) == {0, 1}
    np.testing.assert_allclose(canonical(ours), canonical(theirs), rtol=1e-5, atol=1e-6)


def random_weights(net, seed, conf_scale=1.0):
    """Seeded weights: fillers' values, BatchNorm with real statistics, the confidence heads
    scaled so that the scores spread out."""
    rng = np.random.default_rng(seed)
    for name, blobs in net.params.items():
        if len(blobs) == 3 and blobs[2].data.size == 1:      # BatchNorm
            c = blobs[0].data.size
            blobs[0].data[...] = rng.normal(0, 0.1, c)
            blobs[1].data[...] = rng.uniform(0.5, 1.5, c)
            blobs[2].data[...] = 1
        elif name.endswith("mbox_conf"):
            blobs[0].data[...] *= conf_scale


@pytest.mark.slow
@pytest.mark.parametrize("name,conf_scale,min_dets,labels", [
    ("res10_deploy.prototxt", 0.2, 50, {1}),
    ("mobilenet_ssd_deploy.prototxt", 1.0, 40, None),
])
def test_public_ssd_deploy_nets_detect_as_opencv(tmp_path, name, conf_scale, min_dets,
                                                  labels):
    proto = os.path.join(DATA, name)
    caffe.set_random_seed(3)
    net = caffe.Net(proto, caffe.TEST)   # the public file, unchanged
    random_weights(net, 0, conf_scale)
    weights = tmp_path / "weights.caffemodel"
    net.save(str(weights))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 3, 300, 300)).astype(np.float32)
    ours = net.forward(data=x)["detection_out"].copy()
    theirs = cv_forward(proto, weights, {"data": x}, "detection_out")
    found = ours[0, 0]
    assert len(found) >= min_dets and (found[:, 1] >= 0).all()
    # not saturated: scores below 1 and spread out, boxes of many sizes
    assert found[:, 2].max() < 0.99 and found[:, 2].max() - found[:, 2].min() > 0.02
    assert np.ptp(found[:, 5] - found[:, 3]) > 0.1
    if labels is not None:
        assert set(found[:, 1]) == labels
    else:
        assert len(set(found[:, 1])) >= 3
    np.testing.assert_allclose(canonical(ours), canonical(theirs), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_detect_helper_matches_opencv_preprocessing_and_scales_boxes(tmp_path):
    from pycaffe_lite.detection import detect

    proto = os.path.join(DATA, "mobilenet_ssd_deploy.prototxt")
    caffe.set_random_seed(3)
    net = caffe.Net(proto, caffe.TEST)
    random_weights(net, 0)
    weights = tmp_path / "weights.caffemodel"
    net.save(str(weights))
    image = np.random.default_rng(2).integers(0, 256, (300, 300, 3)).astype(np.uint8)
    found = detect(net, image, mean=(127.5, 127.5, 127.5), scale=1 / 127.5, swap_rb=True,
                   confidence_threshold=0.3, clip=False)
    assert len(found.scores) >= 10
    blob = cv2.dnn.blobFromImage(image, 1 / 127.5, (300, 300), (127.5, 127.5, 127.5),
                                 swapRB=True)
    rows = cv_forward(proto, weights, {"data": blob}, "detection_out").reshape(-1, 7)
    rows = rows[(rows[:, 2] >= 0.3)]
    rows = rows[np.argsort(-rows[:, 2], kind="stable")]
    np.testing.assert_array_equal(found.labels, rows[:, 1])
    np.testing.assert_allclose(found.scores, rows[:, 2], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(found.boxes, rows[:, 3:7] * 300, rtol=1e-4, atol=1e-2)

    wide = np.random.default_rng(3).uniform(0, 255, (200, 320, 3)).astype(np.float32)
    found = detect(net, wide, mean=(127.5,), scale=1 / 127.5)
    rows = net.blobs["detection_out"].data.reshape(-1, 7)
    rows = rows[np.argsort(-rows[:, 2], kind="stable")]
    assert len(found.scores) == len(rows) > 0
    np.testing.assert_allclose(found.boxes, np.clip(rows[:, 3:7] * [320, 200, 320, 200], 0,
                                                    [320, 200, 320, 200]), rtol=1e-6)
    assert (found.boxes[:, 2] <= 320).all() and (found.boxes[:, 3] <= 200).all()


@pytest.mark.parametrize("size", [(480, 640), (120, 200)])  # shrunk, enlarged
def test_detect_preprocessing_resizes_as_blob_from_image(size):
    from pycaffe_lite.detection import preprocess

    image = np.random.default_rng(5).integers(0, 256, size + (3,)).astype(np.uint8)
    ours = preprocess(image, (300, 300), mean=(104, 117, 123), scale=0.5, swap_rb=True)
    theirs = cv2.dnn.blobFromImage(image, 0.5, (300, 300), (104, 117, 123), swapRB=True)
    assert ours.shape == theirs.shape == (1, 3, 300, 300)
    # OpenCV's fixed-point bilinear: equal when shrinking, within one grey level (times the
    # scale) when enlarging
    tolerance = 0 if size[0] > 300 else 0.5
    assert np.abs(ours - theirs).max() <= tolerance


def test_detect_reads_an_output_blob_another_layer_also_reads(tmp_path):
    # the rows may feed another layer (then they are no net output): still read, by name
    from pycaffe_lite.detection import detect

    proto = tmp_path / "net.prototxt"
    proto.write_text("""
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 1 dim: 1 dim: 1 dim: 7 } } }
layer { name: "rows" type: "Power" bottom: "data" top: "rows" power_param { shift: 0 } }
layer { name: "more" type: "Power" bottom: "rows" top: "more" }
""")
    net = caffe.Net(str(proto), caffe.TEST)
    assert net.outputs == ["more"]
    found = detect(net, np.array([[0, 1, 0.5, 0, 0, 1, 1]], np.float32), output_blob="rows")
    assert found.labels.tolist() == [1] and found.scores.tolist() == [0.5]
