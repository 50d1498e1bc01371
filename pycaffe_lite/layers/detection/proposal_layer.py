"""Faster R-CNN's region proposal layer, in its two spellings.

py-faster-rcnn (and R-FCN) name it as a Python layer (``rpn.proposal_layer.ProposalLayer``)::

    layer { name: "proposal" type: "Python"
            bottom: "rpn_cls_prob_reshape" bottom: "rpn_bbox_pred" bottom: "im_info"
            top: "rois"
            python_param { module: "rpn.proposal_layer" layer: "ProposalLayer"
                           param_str: "'feat_stride': 16" } }

When no ``rpn`` package can be imported, the Python layer uses :class:`ProposalLayer` for that
module and class (as OpenCV's dnn module does), so the fork's nets run without its Python tree.

PVANet's Caffe (sanghoon/caffe, ``src/caffe/layers/proposal_layer.cpp``) and OpenCV's Faster
R-CNN samples name the C++ layer, ``type: "Proposal"`` with ``proposal_param``:
:class:`CppProposalLayer`. Both compute anchors, box decoding, clipping, top-N, NMS and top-N
the same way (:func:`propose`); the C++ layer rounds the anchor sizes half up, scores a box
under the minimum size 0 instead of dropping it, and takes its numbers from ``proposal_param``.
"""

import numpy as np

from ...backend import get_array_module, to_host
from ...layer import Layer
from ...registry import register_layer
from ..common.python_param_str import feat_stride_params
from .nms import AT_MOST, greedy, pixel_overlaps

# py-faster-rcnn's configuration (lib/fast_rcnn/config.py) for each phase:
# RPN_PRE_NMS_TOP_N, RPN_POST_NMS_TOP_N, RPN_NMS_THRESH, RPN_MIN_SIZE.
SETTINGS = {"TRAIN": (12000, 2000, 0.7, 16), "TEST": (6000, 300, 0.7, 16)}


def generate_anchors(base_size=16, ratios=(0.5, 1, 2), scales=(8, 16, 32), half_up=False):
    """The fork's reference anchors ``(len(ratios) * len(scales), 4)``: the square
    ``(0, 0, base_size - 1, base_size - 1)`` reshaped to each aspect ratio (height over
    width; sizes rounded as NumPy rounds, half to even, or with ``half_up`` in float32 and
    half up, as the C++ layer's ``(int)(x + 0.5)``), then scaled, around the same centre."""
    size = float(base_size)
    centre = (size - 1) / 2
    out = []
    for ratio in ratios:
        if half_up:
            f32 = np.float32
            w = float(np.floor(np.sqrt(f32(size * size) / f32(ratio)) + f32(0.5)))
            h = float(np.floor(f32(w) * f32(ratio) + f32(0.5)))
        else:
            w = np.round(np.sqrt(size * size / ratio))
            h = np.round(w * ratio)
        for scale in scales:
            sw, sh = w * scale, h * scale
            out.append([centre - (sw - 1) / 2, centre - (sh - 1) / 2,
                        centre + (sw - 1) / 2, centre + (sh - 1) / 2])
    return np.asarray(out, dtype=np.float64).reshape(-1, 4)


def decode_boxes(anchors, deltas):
    """The fork's ``bbox_transform_inv``: anchors ``(K, 4)`` moved by ``dx, dy, dw, dh``."""
    widths = anchors[:, 2] - anchors[:, 0] + 1
    heights = anchors[:, 3] - anchors[:, 1] + 1
    cx = anchors[:, 0] + 0.5 * widths + deltas[:, 0] * widths
    cy = anchors[:, 1] + 0.5 * heights + deltas[:, 1] * heights
    w = np.exp(deltas[:, 2]) * widths
    h = np.exp(deltas[:, 3]) * heights
    return np.stack([cx - 0.5 * w, cy - 0.5 * h, cx + 0.5 * w, cy + 0.5 * h], axis=1)


def nms_pixels(boxes, scores, threshold, limit=-1):
    """The fork's NMS on pixel boxes (areas count both end pixels): indices kept, best
    first (at most ``limit`` when ``limit > -1``); a box is kept when it overlaps each kept
    box by at most ``threshold``. Memory linear in the boxes."""
    order = np.argsort(-scores, kind="stable")
    return order[greedy(boxes[order], threshold, pixel_overlaps, AT_MOST, limit=limit)]


def propose(anchors, feat_stride, scores, deltas, image, min_side, pre_top, post_top,
            threshold, small_score_zero=False):
    """Proposals of one image: ``(boxes (R, 4), scores (R,))``, best first.

    ``anchors`` ``(A, 4)`` are shifted by ``feat_stride`` to each cell of the foreground
    ``scores`` ``(A, H, W)`` and moved by ``deltas`` ``(4A, H, W)``; the boxes are clipped to
    ``image`` (height, width). A box whose width is under ``min_side[1]`` or height under
    ``min_side[0]`` is dropped, or with ``small_score_zero`` kept with score 0 (the C++
    layer). The best ``pre_top`` by score (equal scores in anchor order) go through the NMS
    at ``threshold`` and the first ``post_top`` kept are returned."""
    a, h, w = scores.shape
    sx, sy = np.meshgrid(np.arange(w) * float(feat_stride), np.arange(h) * float(feat_stride))
    shifts = np.stack([sx.ravel(), sy.ravel(), sx.ravel(), sy.ravel()], axis=1)
    boxes = decode_boxes((anchors[None, :, :] + shifts[:, None, :]).reshape(-1, 4),
                         deltas.reshape(a, 4, h, w).transpose(2, 3, 0, 1).reshape(-1, 4))
    scores = scores.transpose(1, 2, 0).reshape(-1)
    boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, image[1] - 1)
    boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, image[0] - 1)
    big = ((boxes[:, 2] - boxes[:, 0] + 1 >= min_side[1]) &
           (boxes[:, 3] - boxes[:, 1] + 1 >= min_side[0]))
    if small_score_zero:
        scores = np.where(big, scores, 0.0)
    else:
        boxes, scores = boxes[big], scores[big]
    order = np.argsort(-scores, kind="stable")[:max(pre_top, 0)]
    boxes, scores = boxes[order], scores[order]
    keep = nms_pixels(boxes, scores, threshold, post_top)
    return boxes[keep], scores[keep]


def _write_proposals(top, boxes, scores, score_shape):
    """``top[0]`` ``(R, 5)`` rows ``0, x1, y1, x2, y2``; ``top[1]`` (if any) the scores in
    ``score_shape(R)``."""
    rois = np.zeros((len(boxes), 5))
    rois[:, 1:] = boxes
    top[0].reshape(*rois.shape)
    y = top[0].write_data()
    y[...] = get_array_module(y).asarray(rois)
    if len(top) > 1:
        top[1].reshape(*score_shape(len(boxes)))
        s = top[1].write_data()
        s[...] = get_array_module(s).asarray(scores.reshape(s.shape))


def _check_rpn_bottoms(layer, bottom, anchors, which):
    """The scores ``(1, 2A, H, W)`` and deltas ``(1, 4A, H, W)`` of ``anchors`` (A of them),
    each wrong shape an error naming the layer; ``which``: what to add after the anchor
    count, and whose rule the single image is."""
    a = len(anchors)
    scores, deltas = bottom[0], bottom[1]
    if scores.num_axes != 4 or scores.shape[1] != 2 * a:
        raise layer.error("scores (bottom 0) must be (1, %d, H, W) for %d anchors%s, got %s"
                          % (2 * a, a, which[0], scores.shape))
    if deltas.shape != (scores.shape[0], 4 * a) + scores.shape[2:]:
        raise layer.error("deltas (bottom 1) must be (1, %d, %d, %d), got %s"
                          % ((4 * a,) + scores.shape[2:] + (deltas.shape,)))
    if scores.shape[0] != 1:
        raise layer.error("only single-image batches are supported (as in the %s), got %d "
                          "images" % (which[1], scores.shape[0]))


def _read_rpn(bottom, a):
    """The foreground scores ``(A, H, W)``, the deltas ``(4A, H, W)`` and im_info as a flat
    float64 array, on the host."""
    scores = to_host(bottom[0].read_data()).astype(np.float64)[0, a:]
    deltas = to_host(bottom[1].read_data()).astype(np.float64)[0]
    info = to_host(bottom[2].read_data()).reshape(-1).astype(np.float64)
    return scores, deltas, info


def _positive_numbers(layer, params, key, default):
    """``params[key]`` (a number or a list of them, all positive), or ``default``."""
    value = params.get(key, default)
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not values or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                             for v in values):
        raise layer.error("python_param param_str '%s' must be positive numbers, got %r"
                          % (key, value))
    return tuple(float(v) for v in values)


class ProposalLayer(Layer):
    """Region proposals from an RPN's scores and box deltas, as py-faster-rcnn (and R-FCN)
    compute them.

    Anchors: the fork's ``generate_anchors`` (base 16, the given ``ratios``, default 0.5, 1,
    2, and ``scales``, default 8, 16, 32; PVANet's files give seven ratios and six scales)
    shifted by ``feat_stride`` to every cell. Each anchor is moved by its deltas
    (``bbox_transform_inv``), clipped to the image (``0 .. width - 1``, ``0 .. height - 1``),
    dropped when a side is under ``16 * im_scale`` pixels; the best ``pre_nms_topN`` by
    foreground score go through NMS (overlap 0.7, areas counting end pixels), and the first
    ``post_nms_topN`` kept are the proposals (TEST 6000 and 300; TRAIN 12000 and 2000).

    Bottoms: scores ``(1, 2A, H, W)`` (background for the A anchors, then foreground: the
    last A channels are read), deltas ``(1, 4A, H, W)``, im_info ``(1, 3)`` (height, width,
    scale). One image only, as in the fork.
    Tops: ``(R, 5)`` rows ``0, x1, y1, x2, y2``; optionally the scores ``(R, 1)``.
    Params: ``python_param { param_str: "'feat_stride': 16, 'scales': [8, 16, 32]" }``
    (``feat_stride`` required; ``ratios`` as in sanghoon/pva-faster-rcnn's
    ``lib/rpn/proposal_layer.py``).
    """

    def setup(self, bottom, top):
        params = feat_stride_params(self)
        self.feat_stride = float(params["feat_stride"])
        self.anchors = generate_anchors(ratios=_positive_numbers(self, params, "ratios",
                                                                 (0.5, 1, 2)),
                                        scales=_positive_numbers(self, params, "scales",
                                                                 (8, 16, 32)))
        if len(bottom) != 3 or len(top) not in (1, 2):
            raise self.error("the proposal layer takes 3 bottoms (scores, deltas, im_info) and "
                             "1 or 2 tops, got %d and %d" % (len(bottom), len(top)))
        top[0].reshape(1, 5)
        if len(top) > 1:
            top[1].reshape(1, 1, 1, 1)

    def reshape(self, bottom, top):
        _check_rpn_bottoms(self, bottom, self.anchors, ("", "fork"))

    def forward(self, bottom, top):
        pre_top, post_top, threshold, min_size = SETTINGS[
            "TRAIN" if self.phase == 0 else "TEST"]
        scores, deltas, info = _read_rpn(bottom, len(self.anchors))
        side = min_size * info[2]
        boxes, scores = propose(self.anchors, self.feat_stride, scores, deltas, info[:2],
                                (side, side), pre_top, post_top, threshold)
        _write_proposals(top, boxes, scores, lambda r: (r, 1))

    def backward(self, top, propagate_down, bottom):
        pass  # the fork's layer propagates no gradient


@register_layer("Proposal")
class CppProposalLayer(Layer):
    """Region proposals as the C++ ``Proposal`` layer computes them: PVANet's Caffe
    (sanghoon/caffe, branch dev_pvanet: ``proposal_layer.cpp``, ``util/nms.cpp``), the layer
    of PVANet's ``models/pvanet_obsolete/*/test.pt`` and OpenCV's Faster R-CNN samples.

    Anchors: ``base_size`` reshaped to each ``ratio`` (sizes rounded half up in float32, as
    ``(int)(x + 0.5)``) times each ``scale``, ratio by ratio; shifted by ``feat_stride`` to
    every cell. Each is moved by its deltas and clipped to the image; one narrower than
    ``min_size * im_info[3]`` or lower than ``min_size * im_info[2]`` keeps its place with
    score 0. The best ``pre_nms_topn`` by score (equal scores in anchor order; the fork's
    quicksort leaves them in an order of its own) go through the NMS (IoU above
    ``nms_thresh`` dropped, areas counting end pixels), and the first ``post_nms_topn`` kept
    are the proposals.

    Bottoms: scores ``(1, 2A, H, W)`` (the last A channels, foreground, are read), deltas
    ``(1, 4A, H, W)``, im_info ``(1, >= 3)``: height, width, scale (PVANet's 4-value form:
    the height's scale, then the width's; with three values the one scale is both).
    Tops: ``(R, 5)`` rows ``0, x1, y1, x2, y2``; optionally the scores ``(R,)``.
    Params: ``proposal_param { feat_stride base_size min_size ratio scale pre_nms_topn
    post_nms_topn nms_thresh }``.
    """

    exact_num_bottom_blobs = 3
    min_num_top_blobs = 1
    max_num_top_blobs = 2

    def setup(self, bottom, top):
        p = self.layer_param.proposal_param
        if not len(p.ratio) or not len(p.scale):
            raise self.error("proposal_param needs at least one ratio and one scale (the "
                             "anchors), got %d and %d" % (len(p.ratio), len(p.scale)))
        bad = [v for v in list(p.ratio) + list(p.scale) if not v > 0]
        if bad:
            raise self.error("proposal_param ratio and scale must be positive, got %r"
                             % bad[0])
        if p.feat_stride <= 0 or p.base_size <= 0 or p.post_nms_topn <= 0:
            raise self.error("proposal_param feat_stride, base_size and post_nms_topn must "
                             "be positive, got %d, %d and %d"
                             % (p.feat_stride, p.base_size, p.post_nms_topn))
        self.param = p
        self.anchors = generate_anchors(p.base_size, list(p.ratio), list(p.scale),
                                        half_up=True)
        top[0].reshape(p.post_nms_topn, 5)
        if len(top) > 1:
            top[1].reshape(p.post_nms_topn)

    def reshape(self, bottom, top):
        _check_rpn_bottoms(self, bottom, self.anchors,
                           (" (%d ratios x %d scales)"
                            % (len(self.param.ratio), len(self.param.scale)), "C++ layer"))
        info = bottom[2]
        if info.count < 3:
            raise self.error("im_info (bottom 2) must hold the image's height, width and "
                             "scale, got shape %s" % (info.shape,))

    def forward(self, bottom, top):
        p = self.param
        scores, deltas, info = _read_rpn(bottom, len(self.anchors))
        scale_w = info[3] if len(info) > 3 else info[2]
        boxes, scores = propose(self.anchors, p.feat_stride, scores, deltas, info[:2],
                                (p.min_size * info[2], p.min_size * scale_w),
                                p.pre_nms_topn, p.post_nms_topn, p.nms_thresh,
                                small_score_zero=True)
        _write_proposals(top, boxes, scores, lambda r: (r,))

    def backward(self, top, propagate_down, bottom):
        pass  # the C++ layer propagates no gradient
