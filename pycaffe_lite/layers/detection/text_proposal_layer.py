"""CTPN's text proposal layer (``layers.text_proposal_layer.ProposalLayer``), built in.

CTPN's deploy net ends with it as a Python layer::

    layer { name: "proposal" type: "Python"
            bottom: "rpn_cls_prob_reshape" bottom: "rpn_bbox_pred" bottom: "im_info"
            top: "rois" top: "scores"
            python_param { module: "layers.text_proposal_layer" layer: "ProposalLayer"
                           param_str: "'feat_stride': 16" } }

When no such module can be imported, the Python layer uses this class.
"""

import numpy as np

from ...backend import get_array_module, to_host
from ...layer import Layer
from ..common.python_param_str import feat_stride_params

# CTPN's ten anchor heights; every anchor is 16 pixels wide.
HEIGHTS = (11, 16, 23, 33, 48, 68, 97, 139, 198, 283)


def text_anchors(base_size=16, width=16):
    """CTPN's reference anchors ``(10, 4)``: ``x1, y1, x2, y2`` around the centre of the
    ``base_size`` square, stored as integers (truncated toward zero) as CTPN stores them."""
    centre = (base_size - 1) / 2.0
    out = [[centre - width / 2, centre - h / 2, centre + width / 2, centre + h / 2]
           for h in HEIGHTS]
    return np.trunc(np.asarray(out)).astype(np.int64)


class TextProposalLayer(Layer):
    """Fine-scale text proposals, as CTPN (tianzhi0549/CTPN) computes them.

    Anchors: 16 pixels wide, the ten heights of :data:`HEIGHTS`, at every cell shifted by
    ``feat_stride``. Each anchor keeps its columns; its vertical centre and height are moved
    by the deltas ``(dy, dh)``: ``h = exp(dh) * anchor_h``, ``top = dy * anchor_h +
    anchor_centre - h / 2``; the boxes are clipped to the image. No NMS (CTPN's detector
    does that after the net).

    Bottoms: scores ``(1, 20, H, W)`` (text scores in the last 10 channels), deltas
    ``(1, 20, H, W)``, im_info ``(1, 3)``.
    Tops: boxes ``(K, 4)`` (``x1, y1, x2, y2``), scores ``(K, 1)``, ``K = 10 H W``.
    Params: ``python_param { param_str: "'feat_stride': 16" }``.
    """

    def setup(self, bottom, top):
        params = feat_stride_params(self)
        self.feat_stride = float(params["feat_stride"])
        self.anchors = text_anchors()
        if len(bottom) != 3 or len(top) != 2:
            raise self.error("the text proposal layer takes 3 bottoms (scores, deltas, "
                             "im_info) and 2 tops (boxes, scores), got %d and %d"
                             % (len(bottom), len(top)))

    def reshape(self, bottom, top):
        a = len(self.anchors)
        scores, deltas = bottom[0], bottom[1]
        if scores.num_axes != 4 or scores.shape[0] != 1 or scores.shape[1] != 2 * a:
            raise self.error("scores (bottom 0) must be (1, %d, H, W), got %s"
                             % (2 * a, scores.shape))
        if deltas.shape != (1, 2 * a) + scores.shape[2:]:
            raise self.error("deltas (bottom 1) must be (1, %d, %d, %d), got %s"
                             % ((2 * a,) + scores.shape[2:] + (deltas.shape,)))
        k = a * scores.shape[2] * scores.shape[3]
        top[0].reshape(k, 4)
        top[1].reshape(k, 1)

    def forward(self, bottom, top):
        a = len(self.anchors)
        scores = to_host(bottom[0].read_data())[:, a:]
        deltas = to_host(bottom[1].read_data()).astype(np.float64)
        info = to_host(bottom[2].read_data()).reshape(-1).astype(np.float64)
        h, w = scores.shape[2:]
        sx, sy = np.meshgrid(np.arange(w) * self.feat_stride, np.arange(h) * self.feat_stride)
        shifts = np.stack([sx.ravel(), sy.ravel(), sx.ravel(), sy.ravel()], axis=1)
        anchors = (self.anchors[None] + shifts[:, None]).reshape(-1, 4)
        deltas = deltas.transpose(0, 2, 3, 1).reshape(-1, 2)
        centre = (anchors[:, 1] + anchors[:, 3]) / 2.0
        anchor_h = anchors[:, 3] - anchors[:, 1] + 1.0
        height = np.exp(deltas[:, 1]) * anchor_h
        y1 = deltas[:, 0] * anchor_h + centre - height / 2
        boxes = np.stack([anchors[:, 0], y1, anchors[:, 2], y1 + height], axis=1)
        boxes[:, 0::2] = np.clip(boxes[:, 0::2], 0, info[1] - 1)
        boxes[:, 1::2] = np.clip(boxes[:, 1::2], 0, info[0] - 1)
        for t, values in ((top[0], boxes), (top[1], scores.transpose(0, 2, 3, 1).reshape(-1, 1))):
            y = t.write_data()
            y[...] = get_array_module(y).asarray(values.astype(np.float32))

    def backward(self, top, propagate_down, bottom):
        pass  # CTPN's layer propagates no gradient
