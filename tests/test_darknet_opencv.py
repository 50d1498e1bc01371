"""The converted models against OpenCV's own Darknet importer (cv2.dnn.readNetFromDarknet) on
the same .cfg/.weights.

OpenCV names its layers after Darknet's (``conv_0``, ``bn_0``, ``leaky_1``, ...; an
activation carries the number of the next layer), so the Darknet layer -> OpenCV layer maps
below are written out. OpenCV's [yolo] and [region] layers return detections, not the raw
maps: one row per cell and anchor (cell row, cell column, anchor order) holding the decoded
box ``x, y, w, h`` (fractions of the input), the objectness and the class scores times the
objectness, zeroed below 0.2. The test decodes our heads' outputs the same way and compares
the boxes and objectness everywhere and the class scores where OpenCV keeps them.

OpenCV's batch normalisation uses ``sqrt(var + 1e-6)`` where Darknet has ``sqrt(var) +
1e-6``; with the variances used here that differs by less than 1e-6 relative. Tolerance:
``rtol=1e-4`` with ``atol=1e-5`` times the layer's largest magnitude (differences seen: about
3e-6 relative).
"""

import numpy as np
import pytest
from helpers.darknet import CLASSIFIER, REGION_CFG, TINY_YOLO, random_params, weights_bytes

import pycaffe_lite
from pycaffe_lite.darknet import darknet2caffe

cv2 = pytest.importorskip("cv2", reason="OpenCV (opencv-python-headless) is a test extra")

RTOL = 1e-4
ATOL = 1e-5

TINY_YOLO_LAYERS = {
    0: "leaky_1", 1: "pool_1", 2: "leaky_3", 3: "pool_3", 4: "mish_5", 5: "pool_5",
    6: "concat_6", 7: "leaky_8", 8: "leaky_9", 9: "slice_9", 10: "conv_10", 12: "identity_12",
    13: "swish_14", 14: "upsample_14", 15: "concat_15", 16: "leaky_17", 17: "conv_17",
}
CLASSIFIER_LAYERS = {
    0: "leaky_1", 1: "pool_1", 2: "relu_3", 3: "leaky_4", 4: "identity_4",
    5: "fullyConnected_5", 6: "softmax_6",
}
OPENCV_THRESHOLD = 0.2


def both(tmp_path, cfg_text, seed):
    cfg, weights = tmp_path / "m.cfg", tmp_path / "m.weights"
    cfg.write_text(cfg_text)
    weights.write_bytes(weights_bytes(random_params(cfg_text, seed)))
    result = darknet2caffe(str(cfg), str(weights), str(tmp_path / "m.prototxt"),
                           str(tmp_path / "m.caffemodel"))
    ours = pycaffe_lite.Net(str(tmp_path / "m.prototxt"), str(tmp_path / "m.caffemodel"),
                            pycaffe_lite.TEST)
    theirs = cv2.dnn.readNetFromDarknet(str(cfg), str(weights))
    x = np.random.default_rng(seed + 50).uniform(0, 1, ours.blobs["data"].data.shape)
    ours.blobs["data"].data[...] = x
    ours.forward()
    theirs.setInput(x.astype(np.float32))
    return result, ours, theirs


def close(got, expected, what):
    np.testing.assert_allclose(got, expected, rtol=RTOL,
                               atol=ATOL * max(1.0, float(np.abs(expected).max())),
                               err_msg=what)


def compare_layers(result, ours, theirs, mapping):
    names = list(mapping.values())
    for (i, name), out in zip(mapping.items(), theirs.forward(names)):
        got = ours.blobs[result.blob_of_layer[i]].data
        assert got.shape == out.shape, "layer %d: %s vs OpenCV %s %s" % (i, got.shape, name,
                                                                         out.shape)
        close(got, out, "layer %d vs OpenCV's %s" % (i, name))


def compare_detections(raw, rows, anchors, grid_units, input_hw, thresholded=True):
    """Decode our head's output ``raw`` (anchors, entries, H, W) as OpenCV does and compare
    with OpenCV's ``rows``. OpenCV zeroes class scores below 0.2 ([yolo]) or suppressed by
    its non-maximum suppression ([region]); those are compared only with ``thresholded``
    (ours must be below the threshold there)."""
    num, entries, h, w = raw.shape
    cells = raw.transpose(2, 3, 0, 1)                      # H, W, anchor, entry
    col = np.arange(w)[None, :, None]
    row = np.arange(h)[:, None, None]
    if grid_units:   # [region]: anchors in cells
        bw = np.exp(cells[..., 2]) * anchors[:, 0] / w
        bh = np.exp(cells[..., 3]) * anchors[:, 1] / h
    else:            # [yolo]: anchors in input pixels
        bw = np.exp(cells[..., 2]) * anchors[:, 0] / input_hw[1]
        bh = np.exp(cells[..., 3]) * anchors[:, 1] / input_hw[0]
    decoded = np.concatenate([
        ((col + cells[..., 0]) / w)[..., None], ((row + cells[..., 1]) / h)[..., None],
        bw[..., None], bh[..., None], cells[..., 4:5],
        cells[..., 5:] * cells[..., 4:5]], axis=-1).reshape(-1, entries)
    assert rows.shape == decoded.shape
    close(decoded[:, :5], rows[:, :5], "boxes and objectness")
    kept = rows[:, 5:] > 0
    assert kept.any()
    close(decoded[:, 5:][kept], rows[:, 5:][kept], "class scores OpenCV keeps")
    if thresholded:
        assert (decoded[:, 5:][~kept] <= OPENCV_THRESHOLD + 1e-5).all()


@pytest.mark.parametrize("seed", [0, 1])
def test_tiny_yolo_matches_opencv(tmp_path, seed):
    result, ours, theirs = both(tmp_path, TINY_YOLO, seed)
    compare_layers(result, ours, theirs, TINY_YOLO_LAYERS)
    anchors = np.array([10, 14, 23, 27, 37, 58, 81, 82, 135, 169, 344, 319],
                       float).reshape(6, 2)
    for blob, cv_name, mask in (("yolo11", "yolo_11", [3, 4, 5]),
                                ("yolo18", "yolo_18", [0, 1, 2])):
        raw = ours.blobs[blob].data[0]
        raw = raw.reshape(3, 7, *raw.shape[1:])
        compare_detections(raw, theirs.forward(cv_name), anchors[mask], False, (16, 20))


def test_classifier_matches_opencv(tmp_path):
    # OpenCV reads a batch-normalised [connected] layer's parameters in the convolution's order
    # (biases, scales, mean, variance, weights) instead of Darknet's (biases, weights, scales,
    # mean, variance), so its outputs differ from Darknet's there: compare without that.
    cfg_text = CLASSIFIER.replace("[connected]\nbatch_normalize=1\n", "[connected]\n")
    assert cfg_text != CLASSIFIER
    result, ours, theirs = both(tmp_path, cfg_text, 2)
    compare_layers(result, ours, theirs, CLASSIFIER_LAYERS)


def test_region_head_matches_opencv(tmp_path):
    result, ours, theirs = both(tmp_path, REGION_CFG % (1, 0), 3)
    compare_layers(result, ours, theirs, {0: "leaky_1", 1: "conv_1"})
    raw = ours.blobs["region2"].data[0].reshape(2, 8, 6, 8)
    compare_detections(raw, theirs.forward("detection_out"),
                       np.array([[1.08, 1.19], [3.42, 4.41]]), True, (6, 8), thresholded=False)
