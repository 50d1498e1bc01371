"""The public SSD deploy nets (MobileNet-SSD, OpenCV's res10 face detector) exported whole,
DetectionOutput included, with seeded weights: onnxruntime finds the same detections (rows
in the same order: image, class, score; detections whose scores tie to float rounding may come
in either order) as our forward."""

import os

import numpy as np
import pytest

import pycaffe_lite as caffe
from helpers.onnx_runtime import onnx, run_ort
from pycaffe_lite import onnx as caffe_onnx
from test_ssd_opencv import DATA, random_weights


def assert_same_rows(theirs, ours, tol):
    """Each row of ``theirs`` (image, label, score, box) matches, within ``tol`` (absolute
    and relative), a row of ``ours`` that no other row matched, and its scores follow ours:
    a permutation only among rows whose scores agree to ``tol``."""
    a, b = theirs.reshape(-1, 7).astype(np.float64), ours.reshape(-1, 7).astype(np.float64)
    np.testing.assert_allclose(a[:, 2], b[:, 2], rtol=tol, atol=tol)
    used = np.zeros(len(b), bool)
    for row in a:
        near = ~used & np.all(np.abs(b - row) <= tol + tol * np.abs(row), axis=1)
        assert near.any(), "no detection of ours matches %s" % (row,)
        used[np.argmax(near)] = True


@pytest.mark.slow
@pytest.mark.parametrize("name,conf_scale,min_dets,num_labels", [
    ("res10_deploy.prototxt", 0.2, 50, 1),
    ("mobilenet_ssd_deploy.prototxt", 1.0, 40, 3),
])
def test_public_ssd_nets_export_whole(tmp_path, name, conf_scale, min_dets, num_labels):
    caffe.set_random_seed(3)
    net = caffe.Net(os.path.join(DATA, name), caffe.TEST)   # the public file, unchanged
    random_weights(net, 0, conf_scale)
    path = tmp_path / "ssd.onnx"
    model, report = caffe_onnx.export(net, str(path))
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    assert report["inputs"] == ["data"] and report["outputs"] == ["detection_out"]
    types = {n.op_type for n in model.graph.node}
    assert {"NonMaxSuppression", "TopK"} <= types and "PriorBox" not in types
    rng = np.random.default_rng(0)
    for batch in (1, 2):
        x = rng.uniform(-1, 1, (batch, 3, 300, 300)).astype(np.float32)
        net.blobs["data"].reshape(*x.shape)
        net.reshape()
        ours = net.forward(data=x)["detection_out"].copy()
        theirs = run_ort(model, {"data": x})["detection_out"]
        found = ours[0, 0]
        # a real test: many detections of spread-out scores, every image, several classes
        assert len(found) >= min_dets * batch / 2 and (found[:, 1] >= 0).all()
        assert set(found[:, 0]) == set(range(batch))
        assert len(set(found[:, 1])) >= num_labels
        assert found[:, 2].max() - found[:, 2].min() > 0.02
        assert theirs.shape == ours.shape
        np.testing.assert_array_equal(theirs[..., :2], ours[..., :2])
        assert_same_rows(theirs, ours, tol=1e-4)
