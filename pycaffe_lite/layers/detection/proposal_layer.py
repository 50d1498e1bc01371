"""py-faster-rcnn's region proposal layer (``rpn.proposal_layer.ProposalLayer``), built in.

Faster R-CNN and R-FCN nets name it as a Python layer::

    layer { name: "proposal" type: "Python"
            bottom: "rpn_cls_prob_reshape" bottom: "rpn_bbox_pred" bottom: "im_info"
            top: "rois"
            python_param { module: "rpn.proposal_layer" layer: "ProposalLayer"
                           param_str: "'feat_stride': 16" } }

When no ``rpn`` package can be imported, the Python layer uses this class for that module
and class (as OpenCV's dnn module does), so the fork's nets run without its Python tree.
"""

import numpy as np

from ...backend import get_array_module, to_host
from ...layer import Layer
from ..common.python_param_str import feat_stride_params
from .nms import AT_MOST, greedy, pixel_overlaps

# py-faster-rcnn's configuration (lib/fast_rcnn/config.py) for each phase:
# RPN_PRE_NMS_TOP_N, RPN_POST_NMS_TOP_N, RPN_NMS_THRESH, RPN_MIN_SIZE.
SETTINGS = {"TRAIN": (12000, 2000, 0.7, 16), "TEST": (6000, 300, 0.7, 16)}


def generate_anchors(base_size=16, ratios=(0.5, 1, 2), scales=(8, 16, 32)):
    """The fork's reference anchors ``(len(ratios) * len(scales), 4)``: the square
    ``(0, 0, base_size - 1, base_size - 1)`` reshaped to each aspect ratio (height over
    width; sizes rounded as NumPy rounds), then scaled, around the same centre."""
    size = float(base_size)
    centre = (size - 1) / 2
    out = []
    for ratio in ratios:
        w = np.round(np.sqrt(size * size / ratio))
        h = np.round(w * ratio)
        for scale in scales:
            sw, sh = w * scale, h * scale
            out.append([centre - (sw - 1) / 2, centre - (sh - 1) / 2,
                        centre + (sw - 1) / 2, centre + (sh - 1) / 2])
    return np.asarray(out, dtype=np.float64)


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
        a = len(self.anchors)
        scores, deltas = bottom[0], bottom[1]
        if scores.num_axes != 4 or scores.shape[1] != 2 * a:
            raise self.error("scores (bottom 0) must be (1, %d, H, W) for %d anchors, got %s"
                             % (2 * a, a, scores.shape))
        if deltas.shape != (scores.shape[0], 4 * a) + scores.shape[2:]:
            raise self.error("deltas (bottom 1) must be (1, %d, %d, %d), got %s"
                             % ((4 * a,) + scores.shape[2:] + (deltas.shape,)))
        if scores.shape[0] != 1:
            raise self.error("only single-image batches are supported (as in the fork), got "
                             "%d images" % scores.shape[0])

    def forward(self, bottom, top):
        pre_top, post_top, threshold, min_size = SETTINGS[
            "TRAIN" if self.phase == 0 else "TEST"]
        a = len(self.anchors)
        scores = to_host(bottom[0].read_data()).astype(np.float64)[:, a:]
        deltas = to_host(bottom[1].read_data()).astype(np.float64)
        info = to_host(bottom[2].read_data()).reshape(-1).astype(np.float64)
        h, w = scores.shape[2:]
        sx, sy = np.meshgrid(np.arange(w) * self.feat_stride, np.arange(h) * self.feat_stride)
        shifts = np.stack([sx.ravel(), sy.ravel(), sx.ravel(), sy.ravel()], axis=1)
        anchors = (self.anchors[None, :, :] + shifts[:, None, :]).reshape(-1, 4)
        deltas = deltas.transpose(0, 2, 3, 1).reshape(-1, 4)
        scores = scores.transpose(0, 2, 3, 1).reshape(-1)
        boxes = decode_boxes(anchors, deltas)
        boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, info[1] - 1)
        boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, info[0] - 1)
        side = min_size * info[2]
        keep = np.flatnonzero((boxes[:, 2] - boxes[:, 0] + 1 >= side) &
                              (boxes[:, 3] - boxes[:, 1] + 1 >= side))
        boxes, scores = boxes[keep], scores[keep]
        order = np.argsort(-scores, kind="stable")[:pre_top]
        boxes, scores = boxes[order], scores[order]
        keep = nms_pixels(boxes, scores, threshold, post_top)
        boxes, scores = boxes[keep], scores[keep]
        rois = np.zeros((len(keep), 5))
        rois[:, 1:] = boxes
        top[0].reshape(*rois.shape)
        y = top[0].write_data()
        y[...] = get_array_module(y).asarray(rois)
        if len(top) > 1:
            top[1].reshape(len(keep), 1)
            s = top[1].write_data()
            s[...] = get_array_module(s).asarray(scores.reshape(-1, 1))

    def backward(self, top, propagate_down, bottom):
        pass  # the fork's layer propagates no gradient
