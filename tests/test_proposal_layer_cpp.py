"""The C++ ``Proposal`` layer (``proposal_param``) of PVANet's Caffe and OpenCV's Faster R-CNN
nets: its schema numbers, the layer against OpenCV's dnn module and against PVANet's
``proposal_layer.cpp`` written out here, whole published files, and the exporters.

References: sanghoon/caffe (branch dev_pvanet, commit 6068dd04, the Caffe of
sanghoon/pva-faster-rcnn) ``src/caffe/layers/proposal_layer.cpp`` (``generate_anchors``,
``transform_box``, ``sort_box``, ``enumerate_proposals_cpu``, ``Forward_cpu``) and
``src/caffe/util/nms.cpp`` (``nms_cpu``); OpenCV's ``modules/dnn/src/layers/proposal_layer.cpp``
(no minimum-size filter, its tops padded to ``post_nms_topn`` rows).
"""

import os

import numpy as np
import pytest
from helpers.opencv_rows import rows_beside_opencv
from helpers.rpn_proposals import decode_clip, grid_boxes
from helpers.wire_bytes import fork_layer, length_delimited, tag, varint_field

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2, protoio

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")

PROPOSAL_NET = """
input: "scores" input_shape { dim: 1 dim: %(a2)d dim: %(h)d dim: %(w)d }
input: "deltas" input_shape { dim: 1 dim: %(a4)d dim: %(h)d dim: %(w)d }
input: "im_info" input_shape { dim: 1 dim: %(info)d }
layer { name: "proposal" type: "Proposal" bottom: "scores" bottom: "deltas" bottom: "im_info"
        top: "rois" top: "roi_scores" proposal_param { %(param)s } }
layer { name: "scores_copy" type: "Power" bottom: "roi_scores" top: "scores_copy" }
"""
# PVANet's models/pvanet_obsolete/comp/test.pt lines 3143-3152 (sanghoon/pva-faster-rcnn at
# commit b0dc7d255da61188dda01e8760078b6991d6f7e2)
PVANET_PARAM = """ratio: 0.5 ratio: 0.667 ratio: 1.0 ratio: 1.5 ratio: 2.0
    scale: 3 scale: 6 scale: 9 scale: 16 scale: 32
    base_size: 16
    feat_stride: 16
    pre_nms_topn: 12000
    post_nms_topn: 200
    nms_thresh: 0.7
    min_size: 16"""


def rpn_inputs(anchors, h, w, info, seed=0, spread=0.1):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, 2, (1, 2, anchors, h, w))
    prob = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    return {"scores": prob.reshape(1, 2 * anchors, h, w).astype(np.float32),
            "deltas": rng.normal(0, spread, (1, 4 * anchors, h, w)).astype(np.float32),
            "im_info": np.array([info], np.float32)}


def write_net(tmp_path, param, anchors, h, w, info=3):
    path = tmp_path / "proposal.prototxt"
    path.write_text(PROPOSAL_NET % {"a2": 2 * anchors, "a4": 4 * anchors, "h": h, "w": w,
                                    "info": info, "param": param})
    return path


def ours(path, inputs):
    net = caffe.Net(str(path), caffe.TEST)
    net.forward(**inputs)
    return net.blobs["rois"].data.copy(), net.blobs["roi_scores"].data.copy()


def opencv(path, inputs):
    cvnet = cv2.dnn.readNetFromCaffe(str(path))
    for name, value in inputs.items():
        cvnet.setInput(value, name)
    rois, scores = cvnet.forward(["proposal", "scores_copy"])
    return rois.reshape(-1, 5), scores.reshape(-1)


# ---- PVANet's proposal_layer.cpp, written out ------------------------------------------------
def fork_anchors(base, ratios, scales):
    """generate_anchors: ROUND(x) = (int)(x + 0.5), in float."""
    f = np.float32
    center = 0.5 * (base - 1)
    out = []
    for r in ratios:
        rw = float(int(float(np.sqrt(f(base * base) / f(r))) + 0.5))
        rh = float(int(float(f(rw) * f(r)) + 0.5))
        for s in scales:
            sw, sh = 0.5 * (rw * s - 1), 0.5 * (rh * s - 1)
            out.append([center - sw, center - sh, center + sw, center + sh])
    return out


def fork_sort_box(items, start, end, num_top):
    """sort_box: the fork's partial quicksort on [x1, y1, x2, y2, score] rows, in place."""
    pivot = items[start][4]
    left, right = start + 1, end
    while left <= right:
        while left <= end and items[left][4] >= pivot:
            left += 1
        while right > start and items[right][4] <= pivot:
            right -= 1
        if left <= right:
            items[left], items[right] = items[right], items[left]
            left += 1
            right -= 1
    if right > start:
        items[start], items[right] = items[right], items[start]
    if start < right - 1:
        fork_sort_box(items, start, right - 1, num_top)
    if right + 1 < num_top and right + 1 < end:
        fork_sort_box(items, right + 1, end, num_top)


def fork_iou(a, b):
    if a[0] > b[2] or a[1] > b[3] or a[2] < b[0] or a[3] < b[1]:
        return 0.0
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]) + 1)
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]) + 1)
    area = lambda r: (r[2] - r[0] + 1) * (r[3] - r[1] + 1)  # noqa: E731
    return iw * ih / (area(a) + area(b) - iw * ih)


def fork_forward(inputs, base, ratios, scales, stride, min_size, pre, post, thresh):
    """Forward_cpu for one image: (rois (R, 5), scores (R,))."""
    info = [float(v) for v in inputs["im_info"][0]]
    img_h, img_w, scale_h, scale_w = info[0], info[1], info[2], info[3]
    min_h, min_w = min_size * scale_h, min_size * scale_w
    # enumerate_proposals_cpu: each cell's anchors (cell-major), transform_box (the deltas
    # applied and the box clipped as in py-faster-rcnn), then the score times the size test
    boxes, fg, deltas = grid_boxes(fork_anchors(base, ratios, scales), inputs["scores"],
                                   inputs["deltas"], stride)
    items = []
    for box, score in zip(decode_clip(boxes, deltas, img_h, img_w).tolist(), fg.tolist()):
        ok = (box[2] - box[0] + 1 >= min_w) * (box[3] - box[1] + 1 >= min_h)
        items.append(box + [ok * score])
    fork_sort_box(items, 0, len(items) - 1, pre)
    count = min(len(items), pre)
    dead = [False] * count
    kept = []
    for i in range(count):
        if dead[i]:
            continue
        kept.append(i)
        if len(kept) == post:
            break
        for j in range(i + 1, count):
            if not dead[j] and fork_iou(items[i], items[j]) > thresh:
                dead[j] = True
    rois = np.array([[0.0] + items[i][:4] for i in kept])
    return rois, np.array([items[i][4] for i in kept])


# ---- the schema ------------------------------------------------------------------------------
def test_proposal_param_reads_with_both_forks_numbers(tmp_path):
    """PVANet's LayerParameter number (8266713) reads as it is; OpenCV's (201, the SSD fork's
    multibox_loss_param here) moves to proposal_param in a Proposal layer and stays
    multibox_loss_param in a MultiBoxLoss layer. The fields inside are numbered alike."""
    def fork_param(number):
        inner = (varint_field(1, 8) + varint_field(2, 12) + varint_field(3, 4) +
                 tag(4, 5) + np.float32(0.5).tobytes() + tag(4, 5) + np.float32(2).tobytes() +
                 tag(5, 5) + np.float32(3).tobytes() + varint_field(6, 50) +
                 varint_field(7, 9) + tag(8, 5) + np.float32(0.6).tobytes())
        return length_delimited(number, inner)

    data = b"".join(length_delimited(100, layer) for layer in (
        fork_layer("pva", "Proposal", ["s", "d", "i"], ["rois"], fork_param(8266713)),
        fork_layer("cv", "Proposal", ["s", "d", "i"], ["rois"], fork_param(201)),
        fork_layer("loss", "MultiBoxLoss", ["a"], ["l"],
                   length_delimited(201, varint_field(4, 21)))))
    path = tmp_path / "net.caffemodel"
    path.write_bytes(data)
    param = protoio.read_net_param(str(path))
    for layer in param.layer[:2]:
        p = layer.proposal_param
        assert layer.HasField("proposal_param") and not layer.HasField("multibox_loss_param")
        assert (p.feat_stride, p.base_size, p.min_size, p.pre_nms_topn, p.post_nms_topn) == (
            8, 12, 4, 50, 9)
        assert list(p.ratio) == [0.5, 2] and list(p.scale) == [3]
        assert p.nms_thresh == pytest.approx(0.6)
    assert param.layer[2].multibox_loss_param.num_classes == 21
    assert not param.layer[2].HasField("proposal_param")
    defaults = caffe_pb2.ProposalParameter()
    assert (defaults.feat_stride, defaults.base_size, defaults.min_size, defaults.pre_nms_topn,
            defaults.post_nms_topn) == (16, 16, 16, 6000, 300)
    assert defaults.nms_thresh == pytest.approx(0.7)


# ---- the layer -------------------------------------------------------------------------------
def test_pvanet_layer_equals_opencvs(tmp_path):
    """PVANet's parameters (25 anchors, 200 proposals), an image large enough that no box is
    under the minimum size (OpenCV has no such filter): both tops equal OpenCV's, whose tops
    are padded with zeros to 200 rows."""
    inputs = rpn_inputs(25, 4, 5, [600, 800, 1.0])
    path = write_net(tmp_path, PVANET_PARAM, 25, 4, 5)
    rois, scores = ours(path, inputs)
    cv_rois, cv_scores = opencv(path, inputs)
    assert 20 < len(rois) < 200 and rois.shape == (len(scores), 5) and scores.ndim == 1
    np.testing.assert_allclose(rois, cv_rois[:len(rois)], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(scores, cv_scores[:len(rois)], rtol=1e-6)
    np.testing.assert_array_equal(cv_rois[len(rois):], 0)
    assert np.all(np.diff(scores) <= 0)


def test_anchor_sizes_round_half_up_as_opencv(tmp_path):
    """base_size 12, ratio 0.5: width round(16.97) = 17, height 17 * 0.5 = 8.5 rounds to 9
    in the C++ layer and OpenCV ((int)(x + 0.5), floor(x + 0.5)); NumPy's round (the Python
    layer's) gives 8. The proposals equal OpenCV's."""
    param = ("feat_stride: 8 base_size: 12 min_size: 4 ratio: 0.5 ratio: 1.5 scale: 1 "
             "scale: 2 pre_nms_topn: 60 post_nms_topn: 40 nms_thresh: 0.6")
    inputs = rpn_inputs(4, 5, 6, [300, 400, 1.0], seed=3, spread=0.0)
    inputs["deltas"][...] = 0  # the anchors themselves, clipped
    path = write_net(tmp_path, param, 4, 5, 6)
    rois, scores = ours(path, inputs)
    cv_rois, cv_scores = opencv(path, inputs)
    assert 10 < len(rois) <= 40
    np.testing.assert_allclose(rois, cv_rois[:len(rois)], rtol=1e-6, atol=1e-4)
    np.testing.assert_allclose(scores, cv_scores[:len(rois)], rtol=1e-6)
    # an anchor of ratio 0.5, scale 1 is 17 x 9 pixels; decoded with zero deltas (the
    # forks' x2 = centre + w / 2) and unclipped, its box spans 18 x 10 (width x height)
    sizes = {(round(r[3] - r[1] + 1, 3), round(r[4] - r[2] + 1, 3)) for r in rois
             if r[1] > 0 and r[2] > 0}
    assert (18.0, 10.0) in sizes and (18.0, 9.0) not in sizes


def test_layer_equals_pvanets_code_with_the_minimum_size(tmp_path):
    """PVANet's 4-value im_info (height, width, the height's scale, the width's): a box lower
    than min_size * 1.5 or narrower than min_size * 0.75 keeps its place with score 0 (the
    fork multiplies its score by the size test); the best pre_nms_topn go through the NMS.
    Against the fork's Forward_cpu written out (its quicksort, its NMS)."""
    ratios, scales = (0.5, 0.667, 1.0, 1.5, 2.0), (1, 2)
    param = ("feat_stride: 16 base_size: 16 min_size: 16 %s %s pre_nms_topn: 100 "
             "post_nms_topn: 90 nms_thresh: 0.7"
             % (" ".join("ratio: %g" % r for r in ratios),
                " ".join("scale: %g" % s for s in scales)))
    inputs = rpn_inputs(10, 3, 4, [52, 60, 1.5, 0.75], seed=5, spread=0.4)
    path = write_net(tmp_path, param, 10, 3, 4, info=4)
    rois, scores = ours(path, inputs)
    fork_rois, fork_scores = fork_forward(inputs, 16, ratios, scales, 16, 16, 100, 90, 0.7)
    positive = fork_scores > 0
    assert 10 < positive.sum() < len(fork_scores)  # some proposals scored 0 by the filter
    n = int(positive.sum())
    np.testing.assert_allclose(rois[:n], fork_rois[:n], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(scores[:n], fork_scores[:n], rtol=1e-6)
    # the rest score 0, as in the fork, and each is under the minimum size (the fork's
    # quicksort leaves equal scores in an order of its own: which of them come is not compared)
    assert len(scores) > n and np.all(scores[n:] == 0)
    tail = rois[n:]
    assert np.all((tail[:, 4] - tail[:, 2] + 1 < 24) | (tail[:, 3] - tail[:, 1] + 1 < 12))


def test_pre_nms_topn_cuts_before_the_nms(tmp_path):
    """Only the best pre_nms_topn boxes are candidates: with 7 of them and no overlap above
    0.99, the 7 best boxes come out, in the fork's order."""
    param = ("ratio: 0.5 ratio: 1 ratio: 2 scale: 8 scale: 16 scale: 32 pre_nms_topn: 7 "
             "post_nms_topn: 300 nms_thresh: 0.99")
    inputs = rpn_inputs(9, 3, 3, [500, 500, 1.0, 1.0], seed=7)
    path = write_net(tmp_path, param, 9, 3, 3, info=4)
    rois, scores = ours(path, inputs)
    fork_rois, fork_scores = fork_forward(inputs, 16, (0.5, 1, 2), (8, 16, 32), 16, 16, 7, 300,
                                          0.99)
    assert len(fork_rois) == 7
    np.testing.assert_allclose(rois, fork_rois, rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(scores, fork_scores, rtol=1e-6)


@pytest.mark.parametrize("param, inputs, message", [
    ("scale: 8", (2, 2), "at least one ratio and one scale"),
    ("ratio: 1 scale: 8 ratio: -1", (4, 8), "positive"),
    ("ratio: 1 ratio: 2 scale: 8", (2, 8), "(1, 4, H, W) for 2 anchors (2 ratios x 1 scales)"),
])
def test_bad_parameters_and_shapes_name_the_layer(tmp_path, param, inputs, message):
    path = tmp_path / "bad.prototxt"
    path.write_text(PROPOSAL_NET % {"a2": inputs[0], "a4": inputs[1], "h": 2, "w": 2,
                                    "info": 3, "param": param})
    with pytest.raises(CaffeError) as exc:
        caffe.Net(str(path), caffe.TEST)
    assert "proposal" in str(exc.value) and message in str(exc.value)


# PVANet's C++ proposal layer: models/pvanet_obsolete/comp/test.pt lines 3135-3153
# (sanghoon/pva-faster-rcnn at commit b0dc7d255da61188dda01e8760078b6991d6f7e2), with inputs
# (its im_info has 6 values, as the file declares); its proposal_param is PVANET_PARAM
PVANET_PROPOSAL = """input: "rpn_cls_prob_reshape" input_shape { dim: 1 dim: 50 dim: 4 dim: 6 }
input: "rpn_bbox_pred" input_shape { dim: 1 dim: 100 dim: 4 dim: 6 }
input: "im_info" input_shape { dim: 1 dim: 6 }
layer {
  name: 'proposal'
  type: 'Proposal'
  bottom: 'rpn_cls_prob_reshape'
  bottom: 'rpn_bbox_pred'
  bottom: 'im_info'
  top: 'rois'
  top: 'scores'
  proposal_param {
    %s
  }
}
""" % PVANET_PARAM


def test_pvanet_obsolete_proposal_layer_runs_as_the_fork(tmp_path):
    """The layer as PVANet's obsolete test nets spell it (it was refused naming the fork):
    on a 64 x 96 image scaled by 0.8 and 0.6, rois and scores equal the fork's code."""
    path = tmp_path / "pvanet.prototxt"
    path.write_text(PVANET_PROPOSAL)
    inputs = rpn_inputs(25, 4, 6, [64, 96, 0.8, 0.6, 1, 1], seed=11, spread=0.3)
    net = caffe.Net(str(path), caffe.TEST)
    net.forward(rpn_cls_prob_reshape=inputs["scores"], rpn_bbox_pred=inputs["deltas"],
                im_info=inputs["im_info"])
    rois, scores = net.blobs["rois"].data, net.blobs["scores"].data
    fork_rois, fork_scores = fork_forward(inputs, 16, (0.5, 0.667, 1.0, 1.5, 2.0),
                                          (3, 6, 9, 16, 32), 16, 16, 12000, 200, 0.7)
    n = int((fork_scores > 0).sum())
    assert 50 < n and scores.shape == (len(rois),)
    np.testing.assert_allclose(rois[:n], fork_rois[:n], rtol=1e-5, atol=1e-3)
    np.testing.assert_allclose(scores[:n], fork_scores[:n], rtol=1e-6)
    # boxes under the minimum size follow with score 0, as many as in the fork here
    assert len(rois) == len(fork_rois) > n and np.all(scores[n:] == 0)

# ---- whole nets against OpenCV ---------------------------------------------------------------
SMALL_FASTER_RCNN = """
name: "small_faster_rcnn"
input: "data" input_shape { dim: 1 dim: 3 dim: 64 dim: 80 }
input: "im_info" input_shape { dim: 1 dim: 3 }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 stride: 4
                            weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 4
                            weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu2" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "rpn_conv" type: "Convolution" bottom: "conv2" top: "rpn_conv"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1
                            weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "rpn_relu" type: "ReLU" bottom: "rpn_conv" top: "rpn_conv" }
layer { name: "rpn_cls_score" type: "Convolution" bottom: "rpn_conv" top: "rpn_cls_score"
        convolution_param { num_output: 30 kernel_size: 1
                            weight_filler { type: "gaussian" std: 1 } } }
layer { name: "rpn_bbox_pred" type: "Convolution" bottom: "rpn_conv" top: "rpn_bbox_pred"
        convolution_param { num_output: 60 kernel_size: 1
                            weight_filler { type: "gaussian" std: 0.03 } } }
layer { name: "rpn_cls_score_reshape" type: "Reshape" bottom: "rpn_cls_score"
        top: "rpn_cls_score_reshape" reshape_param { shape { dim: 0 dim: 2 dim: -1 dim: 0 } } }
layer { name: "rpn_cls_prob" type: "Softmax" bottom: "rpn_cls_score_reshape"
        top: "rpn_cls_prob" }
layer { name: "rpn_cls_prob_reshape" type: "Reshape" bottom: "rpn_cls_prob"
        top: "rpn_cls_prob_reshape" reshape_param { shape { dim: 0 dim: 30 dim: -1 dim: 0 } } }
layer { name: "proposal" type: "Proposal" bottom: "rpn_cls_prob_reshape"
        bottom: "rpn_bbox_pred" bottom: "im_info" top: "rois" top: "roi_scores"
        proposal_param { ratio: 0.5 ratio: 0.667 ratio: 1.0 ratio: 1.5 ratio: 2.0
                         scale: 3 scale: 6 scale: 16 base_size: 16 feat_stride: 16
                         pre_nms_topn: 200 post_nms_topn: 100 nms_thresh: 0.7 min_size: 16 } }
layer { name: "roi_pool" type: "ROIPooling" bottom: "conv2" bottom: "rois" top: "pool"
        roi_pooling_param { pooled_w: 2 pooled_h: 2 spatial_scale: 0.0625 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
        inner_product_param { num_output: 12 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "fc_relu" type: "ReLU" bottom: "fc" top: "fc" }
layer { name: "cls_score" type: "InnerProduct" bottom: "fc" top: "cls_score"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "bbox_pred" type: "InnerProduct" bottom: "fc" top: "bbox_pred"
        inner_product_param { num_output: 16 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "cls_prob" type: "Softmax" bottom: "cls_score" top: "cls_prob" }
layer { name: "scores_copy" type: "Power" bottom: "roi_scores" top: "scores_copy" }
"""


def against_opencv(tmp_path, text, info, outputs, seed=0, randomize=False):
    """The net here and in OpenCV with the same (random) weights, on one random image: for
    each output blob (blob -> OpenCV layer), our rows and OpenCV's first as many (OpenCV
    pads the proposals)."""
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    caffe.set_random_seed(seed)
    net = caffe.Net(str(path), caffe.TEST)
    rng = np.random.default_rng(seed)
    if randomize:  # a published file's layers have no fillers: small random weights
        for name, blobs in net.params.items():
            for blob in blobs:
                fan_in = max(1, blob.count // blob.shape[0])
                scale = 0.002 if name == "rpn_bbox_pred" else 1.0 / np.sqrt(fan_in)
                blob.data[...] = rng.normal(0, scale, blob.shape)
    weights = tmp_path / "net.caffemodel"
    net.save(str(weights))
    data = rng.uniform(0, 1, net.blobs["data"].shape).astype(np.float32)
    info = np.array([info], np.float32)
    net.forward(data=data, im_info=info)
    return dict(zip(outputs, rows_beside_opencv(net, path, weights,
                                                {"data": data, "im_info": info}, outputs)))


def test_small_faster_rcnn_net_equals_opencv(tmp_path):
    """Convolutions, the RPN heads, Proposal (PVANet's anchors), ROIPooling and the class and
    box heads: every output equals OpenCV's (an image large enough for no box to fall under
    the minimum size, which OpenCV does not apply)."""
    outs = against_opencv(tmp_path, SMALL_FASTER_RCNN, [640, 800, 1.0], {
        "rois": "proposal", "scores_copy": "scores_copy", "cls_prob": "cls_prob",
        "bbox_pred": "bbox_pred"})
    rois, cv_rois = outs["rois"]
    assert 10 < len(rois) < 100
    np.testing.assert_allclose(rois, cv_rois, rtol=1e-5, atol=1e-3)
    for name in ("scores_copy", "cls_prob", "bbox_pred"):
        mine, theirs = outs[name]
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5, err_msg=name)


def opencv_file(name, narrow):
    """OpenCV's test net up to its post-processing (OpenCV's own DetectionOutput on pixel
    boxes: tests/test_opencv_faster_rcnn.py), the fully connected layers narrowed to
    ``narrow`` outputs to keep the random weights small."""
    with open(os.path.join(REAL, name)) as f:
        text = f.read()
    text = text.split("# ======== Postprocessing")[0]
    return text.replace("num_output: 4096", "num_output: %d" % narrow).replace(
        "dim: 224\n  dim: 224", "dim: 96\n  dim: 112")


def test_opencv_faster_rcnn_zf_file_equals_opencv(tmp_path):
    """OpenCV's faster_rcnn_zf.prototxt (testdata/dnn; fixtures/real/README.md) with random
    weights at 96 x 112: the proposals, class probabilities and box deltas equal OpenCV's."""
    outs = against_opencv(tmp_path, opencv_file("opencv_faster_rcnn_zf.prototxt", 32),
                          [600, 900, 1.0], {"rois": "proposal", "cls_prob": "cls_prob",
                                            "bbox_pred": "bbox_pred"},
                          seed=2, randomize=True)
    rois, cv_rois = outs["rois"]
    assert 10 < len(rois) < 300
    np.testing.assert_allclose(rois, cv_rois, rtol=1e-5, atol=1e-3)
    for name in ("cls_prob", "bbox_pred"):
        mine, theirs = outs[name]
        np.testing.assert_allclose(mine, theirs, rtol=1e-4, atol=1e-5, err_msg=name)


# ---- exporters -------------------------------------------------------------------------------
@pytest.mark.parametrize("command, flag, engine", [("export_onnx", "--output", "ONNX"),
                                                    ("export_pytorch", "--output-dir",
                                                     "PyTorch")])
def test_exporters_refuse_the_layer_naming_it(tmp_path, capsys, command, flag, engine):
    """As for the Python proposal layer: the layer has no equivalent there, and the error
    names it and its type."""
    from pycaffe_lite import cli

    path = write_net(tmp_path, PVANET_PARAM, 25, 4, 5)
    rc = cli.main([command, "--model", str(path), "--random_weights", flag,
                   str(tmp_path / "out")])
    assert rc not in (0, None)
    assert ("layer 'proposal' of type Proposal has no %s equivalent" % engine
            in capsys.readouterr().err)
