"""Region proposals written out in NumPy from the forks' sources, independent of
pycaffe_lite's code: the anchors laid over the feature map, the box deltas applied and the
boxes clipped (the step py-faster-rcnn's Python layer and PVANet's C++ layer share), and
py-faster-rcnn's whole ProposalLayer.forward (lib/rpn/proposal_layer.py at TEST)."""

import numpy as np


def grid_boxes(anchors, prob, deltas, stride):
    """The anchors shifted to every cell (cell-major, anchor-minor: row (y * W + x) * A + k),
    with each box's foreground score (prob's second A channels) and its 4 deltas (channels
    4k..4k+3), all in float64."""
    anchors = np.asarray(anchors, np.float64)
    a = len(anchors)
    h, w = prob.shape[2:]
    ys, xs = np.meshgrid(np.arange(h) * stride, np.arange(w) * stride, indexing="ij")
    shifts = np.stack([xs.ravel(), ys.ravel(), xs.ravel(), ys.ravel()], axis=1)
    boxes = (shifts[:, None, :] + anchors[None]).reshape(-1, 4)
    scores = prob[0, a:].astype(np.float64).transpose(1, 2, 0).ravel()
    d = deltas[0].astype(np.float64).reshape(a, 4, h, w).transpose(2, 3, 0, 1).reshape(-1, 4)
    return boxes, scores, d


def decode_clip(boxes, d, img_h, img_w):
    """bbox_transform_inv (widths + 1, the centre moved by dx * w, the sides scaled by
    exp(dw)) and clip_boxes to [0, img_w - 1] x [0, img_h - 1]."""
    bw, bh = boxes[:, 2] - boxes[:, 0] + 1, boxes[:, 3] - boxes[:, 1] + 1
    cx, cy = boxes[:, 0] + 0.5 * bw + d[:, 0] * bw, boxes[:, 1] + 0.5 * bh + d[:, 1] * bh
    pw, ph = np.exp(d[:, 2]) * bw, np.exp(d[:, 3]) * bh
    b = np.stack([cx - 0.5 * pw, cy - 0.5 * ph, cx + 0.5 * pw, cy + 0.5 * ph], axis=1)
    b[:, 0::2] = np.clip(b[:, 0::2], 0, img_w - 1)
    b[:, 1::2] = np.clip(b[:, 1::2], 0, img_h - 1)
    return b


def py_faster_rcnn_anchors(scales, ratios=(0.5, 1, 2), base=16):
    """lib/rpn/generate_anchors.py: per ratio, a base box of the same area rounded to whole
    widths and heights (NumPy's round), then per scale that box scaled, all centred on
    ((base - 1) / 2, (base - 1) / 2); ratio-major."""
    center = 0.5 * (base - 1)
    out = []
    for ratio in ratios:
        ws = np.round(np.sqrt(base * base / ratio))
        hs = np.round(ws * ratio)
        for s in scales:
            w, h = ws * s, hs * s
            out.append([center - 0.5 * (w - 1), center - 0.5 * (h - 1),
                        center + 0.5 * (w - 1), center + 0.5 * (h - 1)])
    return np.array(out)


def py_faster_rcnn_proposals(prob, deltas, info, scales, ratios=(0.5, 1, 2), stride=16,
                             pre=6000, post=300, thresh=0.7):
    """ProposalLayer.forward at TEST for one image, in float64 (lib/fast_rcnn/config.py's
    defaults: 6000 before NMS, 300 after, overlap 0.7): anchors over the grid, deltas
    applied, boxes clipped to the image, boxes under 16 * im_info[2] on a side dropped, the
    pre best (a stable sort), NMS (py_cpu_nms, areas + 1), the post best. Returns rois
    (R, 5, batch index 0 first) and their scores (R,)."""
    boxes, scores, d = grid_boxes(py_faster_rcnn_anchors(scales, ratios), prob, deltas, stride)
    b = decode_clip(boxes, d, info[0, 0], info[0, 1])
    side = 16 * info[0, 2]
    big = (b[:, 2] - b[:, 0] + 1 >= side) & (b[:, 3] - b[:, 1] + 1 >= side)
    b, scores = b[big], scores[big]
    order = np.argsort(-scores, kind="stable")[:pre]
    area = (b[:, 2] - b[:, 0] + 1) * (b[:, 3] - b[:, 1] + 1)
    keep = []
    for i in order:
        if keep:
            k = np.array(keep)
            iw = np.maximum(0, np.minimum(b[i, 2], b[k, 2]) - np.maximum(b[i, 0], b[k, 0]) + 1)
            ih = np.maximum(0, np.minimum(b[i, 3], b[k, 3]) - np.maximum(b[i, 1], b[k, 1]) + 1)
            inter = iw * ih
            if (inter / (area[i] + area[k] - inter) > thresh).any():
                continue
        keep.append(i)
    keep = keep[:post]
    return np.concatenate([np.zeros((len(keep), 1)), b[keep]], axis=1), scores[keep]
