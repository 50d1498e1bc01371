"""The YOLO ports' Reorg, YoloDetectionOutput and Yolov3DetectionOutput layers: the forks'
loops written out here as the reference, gradients, and OpenCV's Reorg."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def fork_reorg(x, s, forward):
    """MobileNet-YOLO's reorg_cpu loop, as written in the fork (bottom dims given)."""
    b_n, b_c, b_h, b_w = x.shape
    xf, out = x.ravel(), np.zeros(x.size)
    t_c, t_w, t_h = b_c // (s * s), b_w * s, b_h * s
    for n in range(b_n):
        for c in range(b_c):
            for h in range(b_h):
                for w in range(b_w):
                    bi = w + b_w * (h + b_h * (c + b_c * n))
                    c2, off = c % t_c, c // t_c
                    ti = (w * s + off % s) + t_w * ((h * s + off // s) + t_h * (c2 + t_c * n))
                    if forward:
                        out[ti] = xf[bi]
                    else:
                        out[bi] = xf[ti]
    return out


@pytest.mark.parametrize("reverse", [False, True])
def test_reorg_against_the_forks_loop_and_gradient(reverse):
    text = 'type: "Reorg" reorg_param { stride: 2 reverse: %s }' % str(reverse).lower()
    layer, bottom, top = check_layer(text, [(2, 8, 4, 6)])
    # the fork calls reorg_cpu(..., forward = reverse)
    np.testing.assert_array_equal(top[0].data.ravel(), fork_reorg(bottom[0].data, 2, reverse))
    assert top[0].shape == ((2, 2, 8, 12) if reverse else (2, 32, 2, 3))


def test_reorg_equals_opencv(tmp_path):
    cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    text = ('name: "yolov2" input: "data" input_shape { dim: 1 dim: 8 dim: 4 dim: 6 }\n'
            'layer { name: "reorg" type: "Reorg" bottom: "data" top: "reorg" '
            'reorg_param { stride: 2 } }\n')
    path = tmp_path / "reorg.prototxt"
    path.write_text(text)
    x = np.random.default_rng(0).uniform(-1, 1, (1, 8, 4, 6)).astype(np.float32)
    net = caffe.Net(str(path), caffe.TEST)
    ours = net.forward(data=x)["reorg"]
    cvnet = cv2.dnn.readNetFromCaffe(str(path))
    cvnet.setInput(x)
    np.testing.assert_array_equal(cvnet.forward(), ours)


def sig(v):
    return 1 / (1 + np.exp(-v))


def fork_nms(preds, threshold):
    """ApplyNms of the fork on (score, label, x, y, w, h) sorted best first."""
    def iou(a, b):
        def overlap(x1, w1, x2, w2):
            return min(x1 + w1 / 2, x2 + w2 / 2) - max(x1 - w1 / 2, x2 - w2 / 2)
        w, h = overlap(a[2], a[4], b[2], b[4]), overlap(a[3], a[5], b[3], b[5])
        inter = 0 if w < 0 or h < 0 else w * h
        return inter / (a[4] * a[5] + b[4] * b[5] - inter)
    gone = set()
    for i in range(len(preds)):
        if i in gone:
            continue
        for j in range(i + 1, len(preds)):
            if j not in gone and iou(preds[i], preds[j]) >= threshold:
                gone.add(j)
    return [p for i, p in enumerate(preds) if i not in gone]


def rows_of(preds):
    return np.array([[0, lab + 1, s, x - w / 2, y - h / 2, x + w / 2, y + h / 2]
                     for s, lab, x, y, w, h in preds])


def test_yolov2_detection_output_against_the_forks_loops():
    classes, boxes, side = 3, 2, 4
    biases = [1.0, 1.5, 2.5, 2.0]
    rng = np.random.default_rng(4)
    x = rng.normal(0, 1.5, (1, boxes * (5 + classes), side, side))
    text = ('type: "YoloDetectionOutput" yolo_detection_output_param { num_classes: %d '
            'num_box: %d confidence_threshold: 0.2 nms_threshold: 0.3 %s }'
            % (classes, boxes, " ".join("biases: %g" % b for b in biases)))
    layer = make_layer(text)
    bottom, top = random_blobs([x]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    preds = []
    for j in range(side):
        for i in range(side):
            for n in range(boxes):
                v = x[0, n * (5 + classes):(n + 1) * (5 + classes), j, i]
                p = np.exp(v[5:] - v[5:].max())
                p /= p.sum()
                score = sig(v[4]) * p.max()
                if score >= 0.2:
                    preds.append((score, int(p.argmax()), (i + sig(v[0])) / side,
                                  (j + sig(v[1])) / side, np.exp(v[2]) * biases[2 * n] / side,
                                  np.exp(v[3]) * biases[2 * n + 1] / side))
    preds.sort(key=lambda p: -p[0])
    expected = rows_of(fork_nms(preds, 0.3))
    assert 1 < len(expected) < len(preds)  # NMS removed some, kept several
    np.testing.assert_allclose(top[0].data.reshape(-1, 7), expected, rtol=1e-12, atol=1e-12)


def test_yolov3_detection_output_against_the_forks_loops():
    classes, num = 2, 2
    biases = [10, 14, 23, 27, 37, 58, 81, 82]
    mask = [2, 3, 0, 1]
    scales = [32, 16]
    rng = np.random.default_rng(7)
    heads = [rng.normal(0, 1.5, (1, num * (5 + classes), 2, 3)),
             rng.normal(0, 1.5, (1, num * (5 + classes), 4, 6))]
    text = ('type: "Yolov3DetectionOutput" yolov3_detection_output_param { num_classes: %d '
            'num_box: %d confidence_threshold: 0.3 nms_threshold: 0.45 mask_group_num: 2 %s %s '
            '%s }' % (classes, num, " ".join("biases: %g" % b for b in biases),
                      " ".join("mask: %d" % m for m in mask),
                      " ".join("anchors_scale: %d" % s for s in scales)))
    layer = make_layer(text)
    bottom, top = random_blobs(heads), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    preds = []
    for t, x in enumerate(heads):
        h, w = x.shape[2:]
        for s in range(h * w):
            row, col = divmod(s, w)
            for n in range(num):
                v = x[0, n * (5 + classes):(n + 1) * (5 + classes), row, col]
                m = mask[n + 2 * t]
                for c in range(classes):
                    score = sig(v[5 + c]) * sig(v[4])
                    if score > 0.3:
                        preds.append((score, c, (col + sig(v[0])) / w, (row + sig(v[1])) / h,
                                      np.exp(v[2]) * biases[2 * m] / (w * scales[t]),
                                      np.exp(v[3]) * biases[2 * m + 1] / (h * scales[t])))
    preds.sort(key=lambda p: -p[0])
    expected = rows_of(fork_nms(preds, 0.45))
    assert 1 < len(expected) < len(preds)
    np.testing.assert_allclose(top[0].data.reshape(-1, 7), expected, rtol=1e-12, atol=1e-12)


def test_no_detection_gives_the_forks_placeholder_rows():
    x = np.full((2, 7, 2, 2), -20.0)
    text = ('type: "YoloDetectionOutput" yolo_detection_output_param { num_classes: 2 '
            'num_box: 1 biases: 1 biases: 1 }')
    layer = make_layer(text)
    bottom, top = random_blobs([x]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    np.testing.assert_array_equal(top[0].data.reshape(-1, 7),
                                  [[0, -1, -1, -1, -1, -1, -1], [1, -1, -1, -1, -1, -1, -1]])


def test_darknet2caffe_mish_param_reads(tmp_path):
    path = tmp_path / "mish.prototxt"
    path.write_text('name: "yolov4" input: "data" input_shape { dim: 1 dim: 2 dim: 3 dim: 3 }\n'
                    'layer { name: "mish" type: "Mish" bottom: "data" top: "mish" '
                    'mish_param { engine: CAFFE } }\n')
    net = caffe.Net(str(path), caffe.TEST)
    x = np.linspace(-3, 3, 18, dtype=np.float32).reshape(1, 2, 3, 3)
    np.testing.assert_allclose(net.forward(data=x)["mish"], x * np.tanh(np.log1p(np.exp(x))),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("text,shapes,match", [
    ('type: "Reorg" reorg_param { stride: 2 }', [(1, 6, 4, 4)], "does not divide by stride 2"),
    ('type: "Reorg"', [(1, 8, 4, 4)], "stride is required"),
    ('type: "Yolov3DetectionOutput" yolov3_detection_output_param { num_classes: 1 num_box: 1 '
     'biases: [1, 1] mask: 0 anchors_scale: 32 mask_group_num: 2 }', [(1, 6, 2, 2)],
     "mask_group_num is 2 but the layer has 1 bottoms"),
    ('type: "YoloDetectionOutput" yolo_detection_output_param { num_classes: 2 num_box: 1 '
     'biases: [1, 1] }', [(1, 8, 2, 2)], "has 8 channels; expected 7"),
])
def test_bad_parameters_and_shapes_are_clear_errors(text, shapes, match):
    layer = make_layer(text)
    with pytest.raises(caffe.CaffeError, match=match):
        layer.SetUp(random_blobs(shapes), empty_blobs(1))
