"""py-faster-rcnn's proposal layer (built in for rpn.proposal_layer) and R-FCN's PSROIPooling:
the forks' formulas written out (the proposals in tests/helpers/rpn_proposals.py), numerical
gradients, and OpenCV's dnn module."""

import sys

import numpy as np
import pytest
from helpers.opencv_rows import rows_beside_opencv
from helpers.rpn_proposals import py_faster_rcnn_proposals

import pycaffe_lite as caffe
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

PROPOSAL = """
name: "rpn"
input: "scores" input_shape { dim: 1 dim: 18 dim: %(h)d dim: %(w)d }
input: "deltas" input_shape { dim: 1 dim: 36 dim: %(h)d dim: %(w)d }
input: "im_info" input_shape { dim: 1 dim: 3 }
layer { name: "proposal" type: %(layer)s bottom: "scores" bottom: "deltas" bottom: "im_info"
        top: "rois" }
"""
FORK_LAYER = ('"Python" python_param { module: "rpn.proposal_layer" layer: "ProposalLayer" '
              'param_str: "\'feat_stride\': 16" }')
# OpenCV's own spelling of the same layer (its Faster R-CNN sample nets)
OPENCV_LAYER = ('"Proposal" proposal_param { feat_stride: 16 base_size: 16 min_size: 16 '
                'ratio: 0.5 ratio: 1 ratio: 2 scale: 8 scale: 16 scale: 32 pre_nms_topn: 6000 '
                'post_nms_topn: 300 nms_thresh: 0.7 }')


def rpn_inputs(h, w, seed=0, image=None, spread=0.3):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, (1, 2, 9, h, w))
    prob = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    image = image or (h * 16 - 5, w * 16 - 3)
    return {"scores": prob.reshape(1, 18, h, w).astype(np.float32),
            "deltas": rng.normal(0, spread, (1, 36, h, w)).astype(np.float32),
            "im_info": np.array([list(image) + [1.0]], np.float32)}


def run_net(tmp_path, layer, inputs, h, w):
    path = tmp_path / "rpn.prototxt"
    path.write_text(PROPOSAL % {"h": h, "w": w, "layer": layer})
    net = caffe.Net(str(path), caffe.TEST)
    return net.forward(**inputs)["rois"].copy(), path


def test_builtin_proposal_layer_against_the_forks_code(tmp_path):
    inputs = rpn_inputs(5, 6)
    ours, _ = run_net(tmp_path, FORK_LAYER, inputs, 5, 6)
    expected, _ = py_faster_rcnn_proposals(inputs["scores"], inputs["deltas"],
                                           inputs["im_info"], scales=(8, 16, 32))
    assert 20 < len(expected) < 270  # NMS and the min-size filter removed some
    np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-3)


def test_builtin_proposal_layer_equals_opencvs_proposal(tmp_path):
    # OpenCV's Proposal keeps boxes under the minimum size: an image large enough that
    # clipping leaves none that thin, so the filter removes nothing in either
    inputs = rpn_inputs(4, 5, seed=2, image=(600, 800), spread=0.1)
    ours, _ = run_net(tmp_path, FORK_LAYER, inputs, 4, 5)
    path = tmp_path / "opencv.prototxt"
    path.write_text(PROPOSAL % {"h": 4, "w": 5, "layer": OPENCV_LAYER})
    cvnet = cv2.dnn.readNetFromCaffe(str(path))
    for name, value in inputs.items():
        cvnet.setInput(value, name)
    theirs = cvnet.forward("proposal").reshape(-1, 5)
    # OpenCV's top has post_nms_topn rows, those past the proposals zero
    assert 5 < len(ours) < len(theirs) == 300
    np.testing.assert_array_equal(theirs[len(ours):], 0)
    np.testing.assert_allclose(ours, theirs[:len(ours)], rtol=1e-5, atol=1e-3)


def test_a_real_rpn_module_still_wins(tmp_path, monkeypatch):
    pkg = tmp_path / "rpn"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "proposal_layer.py").write_text(
        "import pycaffe_lite as caffe\n"
        "class ProposalLayer(caffe.Layer):\n"
        "    def setup(self, bottom, top): top[0].reshape(1, 5)\n"
        "    def reshape(self, bottom, top): pass\n"
        "    def forward(self, bottom, top): top[0].data[...] = 7\n"
        "    def backward(self, top, propagate_down, bottom): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        ours, _ = run_net(tmp_path, FORK_LAYER, rpn_inputs(2, 2), 2, 2)
    finally:  # the other tests must not find this module
        sys.modules.pop("rpn.proposal_layer", None)
        sys.modules.pop("rpn", None)
    np.testing.assert_array_equal(ours, np.full((1, 5), 7))


def fork_psroi(x, rois, scale, dim, g):
    """PSROIPoolingForward of the fork, bin by bin (float64)."""
    n_rois = len(rois)
    out = np.zeros((n_rois, dim, g, g))
    _, _, height, width = x.shape
    for n in range(n_rois):
        b = int(rois[n, 0])
        r = np.sign(rois[n, 1:]) * np.floor(np.abs(rois[n, 1:]) + 0.5)
        sw, sh = r[0] * scale, r[1] * scale
        ew, eh = (r[2] + 1) * scale, (r[3] + 1) * scale
        bw, bh = max(ew - sw, 0.1) / g, max(eh - sh, 0.1) / g
        for c in range(dim):
            for ph in range(g):
                for pw in range(g):
                    hs = min(max(int(np.floor(ph * bh + sh)), 0), height)
                    he = min(max(int(np.ceil((ph + 1) * bh + sh)), 0), height)
                    ws = min(max(int(np.floor(pw * bw + sw)), 0), width)
                    we = min(max(int(np.ceil((pw + 1) * bw + sw)), 0), width)
                    if he <= hs or we <= ws:
                        continue
                    ch = (c * g + ph) * g + pw
                    out[n, c, ph, pw] = x[b, ch, hs:he, ws:we].mean()
    return out


ROIS = np.array([[0, 0, 0, 30, 20], [1, 8, 4, 25, 29], [1, 3, 3, 3, 3],
                 [0, 20, 26, 60, 70], [1, -6, 9, 14, 17]], np.float64)
PSROI = 'type: "PSROIPooling" psroi_pooling_param { spatial_scale: 0.25 output_dim: 2 ' \
        'group_size: 3 }'


def test_psroi_pooling_against_the_fork():
    x, rois = random_blobs([(2, 18, 9, 8), ROIS])
    layer, top = make_layer(PSROI), empty_blobs(1)
    layer.SetUp([x, rois], top)
    layer.Forward([x, rois], top)
    np.testing.assert_allclose(top[0].data, fork_psroi(x.data, ROIS, 0.25, 2, 3),
                               rtol=1e-10, atol=1e-12)


def test_psroi_pooling_gradient():
    small = np.array([[0, 0, 0, 13, 9], [1, 4, 2, 21, 17], [0, -3, 5, 9, 30]], np.float64)
    x, rois = random_blobs([(2, 8, 5, 6), small])
    text = PSROI.replace("group_size: 3", "group_size: 2")
    layer, bottom, top = check_layer(text, [x, rois], check_bottom=[0], reshape_batch=False)
    np.testing.assert_allclose(top[0].data, fork_psroi(x.data, small, 0.25, 2, 2),
                               rtol=1e-10, atol=1e-12)


def test_psroi_pooling_equals_opencv(tmp_path):
    text = ('name: "rfcn" input: "data" input_shape { dim: 2 dim: 18 dim: 9 dim: 8 }\n'
            'input: "rois" input_shape { dim: 5 dim: 5 }\n'
            'layer { name: "psroi" type: "PSROIPooling" bottom: "data" bottom: "rois" '
            'top: "psroi" psroi_pooling_param { spatial_scale: 0.25 output_dim: 2 '
            'group_size: 3 } }\n')
    path = tmp_path / "rfcn.prototxt"
    path.write_text(text)
    x = np.random.default_rng(3).uniform(-1, 1, (2, 18, 9, 8)).astype(np.float32)
    rois = ROIS.astype(np.float32)
    net = caffe.Net(str(path), caffe.TEST)
    ours = net.forward(data=x, rois=rois)["psroi"]
    cvnet = cv2.dnn.readNetFromCaffe(str(path))
    cvnet.setInput(x, "data")
    cvnet.setInput(rois, "rois")
    np.testing.assert_allclose(ours, cvnet.forward(), rtol=1e-5, atol=1e-6)


def test_psroi_pooling_needs_its_parameters():
    layer = make_layer('type: "PSROIPooling" psroi_pooling_param { output_dim: 2 }')
    with pytest.raises(caffe.CaffeError,
                       match="spatial_scale, group_size"):
        layer.SetUp(random_blobs([(1, 8, 4, 4), (1, 5)]), empty_blobs(1))


FASTER_RCNN = """
name: "faster_rcnn_head"
input: "feat" input_shape { dim: 1 dim: 4 dim: 5 dim: 6 }
input: "im_info" input_shape { dim: 1 dim: 3 }
layer { name: "rpn_cls_score" type: "Convolution" bottom: "feat" top: "rpn_cls_score"
        convolution_param { num_output: 18 kernel_size: 1
                            weight_filler { type: "gaussian" std: 1 } } }
layer { name: "rpn_bbox_pred" type: "Convolution" bottom: "feat" top: "rpn_bbox_pred"
        convolution_param { num_output: 36 kernel_size: 1
                            weight_filler { type: "gaussian" std: 0.05 } } }
layer { name: "rpn_cls_score_reshape" type: "Reshape" bottom: "rpn_cls_score"
        top: "rpn_cls_score_reshape" reshape_param { shape { dim: 0 dim: 2 dim: -1 dim: 0 } } }
layer { name: "rpn_cls_prob" type: "Softmax" bottom: "rpn_cls_score_reshape"
        top: "rpn_cls_prob" }
layer { name: "rpn_cls_prob_reshape" type: "Reshape" bottom: "rpn_cls_prob"
        top: "rpn_cls_prob_reshape" reshape_param { shape { dim: 0 dim: 18 dim: -1 dim: 0 } } }
layer { name: "proposal" type: %s bottom: "rpn_cls_prob_reshape" bottom: "rpn_bbox_pred"
        bottom: "im_info" top: "rois" }
layer { name: "roi_pool" type: "ROIPooling" bottom: "feat" bottom: "rois" top: "pool"
        roi_pooling_param { pooled_w: 2 pooled_h: 2 spatial_scale: 0.0625 } }
layer { name: "cls_score" type: "InnerProduct" bottom: "pool" top: "cls_score"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "cls_prob" type: "Softmax" bottom: "cls_score" top: "cls_prob" }
"""


def run_both(tmp_path, text, seed, outputs):
    """The net in the fork's syntax here and in OpenCV's (its Proposal layer), with the same
    weights, on one feature map: each output's rows from both (OpenCV pads to 300 rows)."""
    ours_path, cv_path = tmp_path / "fork.prototxt", tmp_path / "opencv.prototxt"
    ours_path.write_text(text % FORK_LAYER)
    cv_path.write_text(text % OPENCV_LAYER)
    caffe.set_random_seed(seed)
    net = caffe.Net(str(ours_path), caffe.TEST)
    weights = tmp_path / "w.caffemodel"
    net.save(str(weights))
    feat = np.random.default_rng(seed + 1).uniform(-1, 1, (1, 4, 5, 6)).astype(np.float32)
    info = np.array([[700, 900, 1.0]], np.float32)  # no box under the minimum size
    net.forward(feat=feat, im_info=info)
    return rows_beside_opencv(net, cv_path, weights, {"feat": feat, "im_info": info}, outputs)


def test_faster_rcnn_net_equals_opencv(tmp_path):
    """A Faster R-CNN head: the same proposals and class probabilities as OpenCV."""
    (rois, cv_rois), (prob, cv_prob) = run_both(
        tmp_path, FASTER_RCNN, 5, {"rois": "proposal", "cls_prob": "cls_prob"})
    assert 10 < len(rois) < 300
    np.testing.assert_allclose(rois, cv_rois, rtol=1e-4, atol=1e-2)
    np.testing.assert_allclose(prob, cv_prob, rtol=1e-4, atol=1e-5)


RFCN_HEAD = FASTER_RCNN.split('layer { name: "roi_pool"')[0] + """
layer { name: "rfcn_cls" type: "Convolution" bottom: "feat" top: "rfcn_cls"
        convolution_param { num_output: 12 kernel_size: 1
                            weight_filler { type: "gaussian" std: 1 } } }
layer { name: "psroipooled_cls_rois" type: "PSROIPooling" bottom: "rfcn_cls" bottom: "rois"
        top: "psroipooled_cls_rois"
        psroi_pooling_param { spatial_scale: 0.0625 output_dim: 3 group_size: 2 } }
layer { name: "ave_cls_score_rois" type: "Pooling" bottom: "psroipooled_cls_rois"
        top: "cls_score" pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "cls_prob" type: "Softmax" bottom: "cls_score" top: "cls_prob" }
"""


def test_rfcn_net_equals_opencv(tmp_path):
    """R-FCN's head (proposals, position-sensitive pooling, voting) against OpenCV."""
    [(prob, cv_prob)] = run_both(tmp_path, RFCN_HEAD, 8, {"cls_prob": "cls_prob"})
    assert len(prob) > 10
    np.testing.assert_allclose(prob, cv_prob, rtol=1e-4, atol=1e-5)
