"""The forks' published network files (py-faster-rcnn, R-FCN, DeepLab, HED, colorization, the
YOLO and segmentation ports) read unchanged and compute what the fork computes, checked
against independent references: OpenCV's Caffe importer reading the same text, or the
fork's formula written out in NumPy. The files, or the parts of them that matter, are under
tests/fixtures/real (sources in its README)."""

import os

import numpy as np
import pytest
from helpers.rpn_proposals import py_faster_rcnn_proposals

import pycaffe_lite as caffe

cv2 = pytest.importorskip("cv2")

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


def _close(ours, reference, rtol=1e-5):
    ours, reference = np.asarray(ours), np.asarray(reference)
    assert ours.shape == reference.shape
    scale = max(float(np.abs(reference).max()), 1e-30)
    assert float(np.abs(ours - reference).max()) <= rtol * scale


def test_faster_rcnn_coco_proposal_param_str_with_a_yaml_tuple():
    """py-faster-rcnn's COCO nets (and py-R-FCN's) write the proposal layer's param_str in
    YAML's block style, one entry a line, with a tagged tuple: "'feat_stride': 16 \\n'scales':
    !!python/tuple [4, 8, 16, 32]". It must read, and give the fork's 12 anchors a cell
    (3 ratios x 4 scales)."""
    path = os.path.join(REAL, "faster_rcnn_coco_proposal.prototxt")
    net = caffe.Net(path, caffe.TEST)
    h, w = 5, 7
    rng = np.random.default_rng(3)
    logits = rng.normal(0, 2, (1, 2, 12 * h, w)).astype(np.float32)
    deltas = rng.normal(0, 0.4, (1, 48, h, w)).astype(np.float32)
    info = np.array([[h * 16 - 5, w * 16 - 3, 1.0]], np.float32)
    rois = net.forward(rpn_cls_score_reshape=logits, rpn_bbox_pred=deltas,
                       im_info=info)["rois"].copy()
    e = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    prob = (e / e.sum(axis=1, keepdims=True)).reshape(1, 24, h, w)
    reference, _ = py_faster_rcnn_proposals(prob, deltas, info, scales=(4, 8, 16, 32))
    assert len(reference) > 10
    _close(rois, reference)


def _hed_fork_offsets(net_param):
    """The offsets HED's Crop (caffe-future's) computed, for each Crop layer: the map from
    its first bottom back to 'data' (the common blob with its second bottom), composed from
    each layer's filter map (convolution, pooling: bottom = s * top + (k - 1) / 2 - p;
    deconvolution the inverse), evaluated at top coordinate 0 and negated."""
    producer = {}
    for layer in net_param.layer:
        for t in layer.top:
            producer.setdefault(t, layer)
    offsets = {}
    for layer in net_param.layer:
        if layer.type != "Crop":
            continue
        scale, shift = 1.0, 0.0   # coordinate in the current blob = scale * x + shift
        blob = layer.bottom[0]
        while blob != layer.bottom[1]:
            src = producer[blob]
            if src.type in ("Convolution", "Deconvolution"):
                p = src.convolution_param
                k = p.kernel_size[0]
                s = p.stride[0] if len(p.stride) else 1
                pad = p.pad[0] if len(p.pad) else 0
            elif src.type == "Pooling":
                p = src.pooling_param
                k, s, pad = p.kernel_size, p.stride, p.pad
            else:
                k = s = 1
                pad = 0
            a, b = s, (k - 1) / 2.0 - pad          # bottom = a * top + b
            if src.type == "Deconvolution":
                a, b = 1.0 / s, -b / s             # its map runs the other way
            scale, shift = a * scale, a * shift + b
            blob = src.bottom[0]
        assert scale == 1.0
        offsets[layer.bottom[0]] = -shift
    return offsets


def test_hed_crop_without_crop_param_warns_and_docs_give_the_forks_offsets(caplog):
    """HED's deploy.prototxt crops its side outputs with caffe-future's Crop, which took its
    offsets from the net; here (as in BVLC Caffe and OpenCV) it crops at 0. Building the net
    says so for each of the five Crop layers, and the offsets docs/fork-layers.md gives for
    this file are the ones the fork's rule computes."""
    from pycaffe_lite.proto import protoio
    path = os.path.join(REAL, "hed_deploy.prototxt")
    with caplog.at_level("WARNING", logger="pycaffe_lite"):
        net = caffe.Net(path, caffe.TEST)
    warned = [r.getMessage() for r in caplog.records if "(Crop) has no crop_param" in
              r.getMessage()]
    assert len(warned) == 5
    assert all("layer 'crop'" in m and "offset 0" in m for m in warned)
    assert net.blobs["upscore-dsn5"].data.shape[2:] == net.blobs["data"].data.shape[2:]

    fork = _hed_fork_offsets(protoio.read_net_param(path))
    assert fork == {"score-dsn1-up": 34, "score-dsn2-up": 35, "score-dsn3-up": 36,
                    "score-dsn4-up": 38, "score-dsn5-up": 42}
    with open(os.path.join(HERE, "..", "docs", "fork-layers.md")) as f:
        docs = " ".join(f.read().split())
    assert "offset: 34" in docs
    for blob, offset in fork.items():
        if blob != "score-dsn1-up":
            assert "%d for `%s`" % (offset, blob) in docs
