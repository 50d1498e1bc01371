"""YoloDetectionOutput (YOLOv2) and Yolov3DetectionOutput: MobileNet-YOLO's decoding layers."""

import numpy as np

from ...backend import get_array_module, to_host
from ...layer import Layer
from ...registry import register_layer
from .bbox_util import sort_descending
from .nms import AT_LEAST, greedy, jaccard
from .yolo_layer import anchor_pairs, sigmoid


def suppress(boxes, scores, threshold):
    """The YOLO ports' NMS: indices of the kept boxes, best first (ties in index order);
    a kept box removes every later box whose overlap with it is at least ``threshold``,
    whatever the classes. ``boxes``: ``(K, 4)`` corners. Memory linear in ``K``."""
    order = sort_descending(scores)
    return order[greedy(boxes[order], threshold, jaccard, AT_LEAST)]


def detections_top(top, per_image, num):
    """Write the detections ``(image, label, score, xmin, ymin, xmax, ymax)`` rows into the
    top ``(1, 1, K, 7)``; with none at all, one row per image of -1 after its index, as the
    fork writes."""
    rows = [r for r in per_image if len(r)]
    if rows:
        out = np.concatenate(rows, axis=0)
    else:
        out = np.full((num, 7), -1.0)
        out[:, 0] = np.arange(num)
    top[0].reshape(1, 1, out.shape[0], 7)
    y = top[0].write_data()
    y[...] = get_array_module(y).asarray(out.reshape(y.shape))


def corners(cx, cy, w, h):
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=-1)


def nms_rows(image, labels, scores, boxes, threshold):
    """The kept detections of one image as ``(K, 7)`` rows, best first."""
    if scores.size == 0:
        return np.zeros((0, 7))
    keep = suppress(boxes, scores, threshold)
    rows = np.empty((keep.size, 7))
    rows[:, 0] = image
    rows[:, 1] = labels[keep] + 1
    rows[:, 2] = scores[keep]
    rows[:, 3:] = boxes[keep]
    return rows


class _DetectionOutput(Layer):
    min_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        for i, b in enumerate(bottom):
            if b.num_axes != 4:
                raise self.error("bottom %d must have 4 axes (num, channels, height, width); "
                                 "got shape %s" % (i, b.shape))
            if b.shape[1] != self.anchors_per_head * self.entries:
                raise self.error("bottom %d has %d channels; expected %d = %d anchors x (5 + "
                                 "%d classes)" % (i, b.shape[1], self.anchors_per_head *
                                                  self.entries, self.anchors_per_head,
                                                  self.classes))
            if b.shape[0] != bottom[0].shape[0]:
                raise self.error("the bottoms hold different batch sizes: %s"
                                 % [x.shape[0] for x in bottom])
        top[0].reshape(1, 1, 1, 7)

    def _grid(self, blob):
        """The head's raw values as ``(N, A, entries, H, W)`` float64 on the host, and the
        column and row index of every cell."""
        x = to_host(blob.read_data()).astype(np.float64)
        n, _, h, w = x.shape
        x = x.reshape(n, self.anchors_per_head, self.entries, h, w)
        col = np.arange(w)[None, None, :]
        row = np.arange(h)[None, :, None]
        return x, col, row

    def backward(self, top, propagate_down, bottom):
        pass  # detections carry no gradient (the fork's backward does nothing)


@register_layer("YoloDetectionOutput")
class YoloDetectionOutputLayer(_DetectionOutput):
    """YOLOv2's decoding and NMS as MobileNet-YOLO (eric612/MobileNet-YOLO) defines it.

    Each bottom holds ``num_box`` anchors of ``5 + num_classes`` channels (Darknet's layout,
    see the Region layer) on a square ``S x S`` grid. For anchor ``a`` at column ``i``, row
    ``j``: ``x = (i + sigmoid(tx)) / S``, ``y = (j + sigmoid(ty)) / S``, ``w = exp(tw) *
    biases[2a] / S``, ``h = exp(th) * biases[2a + 1] / S``; the class is the best of a softmax
    over the class scores and its score ``sigmoid(to) * p``; boxes scoring at least
    ``confidence_threshold`` go, best first, through NMS across all classes (a box is dropped
    when it overlaps a kept one by ``nms_threshold`` or more).

    Tops: ``(1, 1, K, 7)``, rows ``image, label + 1, score, xmin, ymin, xmax, ymax`` in
    coordinates relative to the image (not clipped); with no detection at all, one row per
    image of -1 after its index. (The fork numbers every row image 0 and suppresses across the
    batch; here each image has its own rows and NMS, which is the same for one image.)
    Bottoms: one or two heads ``(N, num_box * (5 + num_classes), S, S)``.
    Params: ``yolo_detection_output_param { num_classes (20) num_box (5) coords (4)
    confidence_threshold (0.01) nms_threshold (0.45) biases side label_map_file }`` (side and
    label_map_file are not used: the grid comes from the bottom).
    """

    max_num_bottom_blobs = 2

    def setup(self, bottom, top):
        p = self.layer_param.yolo_detection_output_param
        self.classes = int(p.num_classes)
        self.anchors_per_head = int(p.num_box)
        if p.coords != 4:
            raise self.error("yolo_detection_output_param coords must be 4, got %d" % p.coords)
        self.entries = 5 + self.classes
        self.anchors = anchor_pairs(self, p.biases, self.anchors_per_head,
                                    "yolo_detection_output_param biases")
        if not self.anchors:
            raise self.error("yolo_detection_output_param biases (the anchors) are required")
        self.threshold = float(np.float32(p.confidence_threshold))
        self.nms_threshold = float(np.float32(p.nms_threshold))

    def forward(self, bottom, top):
        anchors = np.asarray(self.anchors)
        found = [[] for _ in range(bottom[0].shape[0])]
        for blob in bottom:
            x, col, row = self._grid(blob)
            side = x.shape[4]
            if x.shape[3] != side:
                raise self.error("the grid must be square (the fork reads the side from the "
                                 "width), got %d x %d" % (x.shape[3], side))
            cx = (col + sigmoid(np, x[:, :, 0])) / side
            cy = (row + sigmoid(np, x[:, :, 1])) / side
            w = np.exp(x[:, :, 2]) * anchors[:, 0, None, None] / side
            h = np.exp(x[:, :, 3]) * anchors[:, 1, None, None] / side
            z = x[:, :, 5:]
            prob = np.exp(z - z.max(axis=2, keepdims=True))
            prob /= prob.sum(axis=2, keepdims=True)
            label = prob.argmax(axis=2)
            score = sigmoid(np, x[:, :, 4]) * prob.max(axis=2)
            boxes = corners(cx, cy, w, h)
            for n in range(x.shape[0]):
                # cells row-major, anchors within a cell: the fork's order
                keep = (score[n] >= self.threshold).transpose(1, 2, 0)
                found[n].append((label[n].transpose(1, 2, 0)[keep],
                                 score[n].transpose(1, 2, 0)[keep],
                                 boxes[n].transpose(1, 2, 0, 3)[keep]))
        rows = []
        for n, parts in enumerate(found):
            labels, scores, boxes = (np.concatenate(v) for v in zip(*parts))
            rows.append(nms_rows(n, labels, scores, boxes, self.nms_threshold))
        detections_top(top, rows, bottom[0].shape[0])


@register_layer("Yolov3DetectionOutput")
class Yolov3DetectionOutputLayer(_DetectionOutput):
    """YOLOv3's decoding and NMS over several heads, as MobileNet-YOLO defines it.

    Bottom ``t`` is a head of ``num_box`` anchors (``5 + num_classes`` channels each, Darknet's
    layout) on an ``H x W`` grid; its anchors are ``mask[t * G .. t * G + num_box - 1]`` with
    ``G = len(mask) / mask_group_num``, and its input size is ``W * anchors_scale[t]`` by
    ``H * anchors_scale[t]``. For anchor ``m`` at column ``i``, row ``j``: ``x = (i +
    sigmoid(tx)) / W``, ``y = (j + sigmoid(ty)) / H``, ``w = exp(tw) * biases[2m] / (W *
    anchors_scale[t])``, ``h = exp(th) * biases[2m + 1] / (H * anchors_scale[t])``; every class
    whose ``sigmoid(to) * sigmoid(tc)`` exceeds ``confidence_threshold`` gives a detection;
    all go, best first, through NMS across classes and heads (dropped at an overlap of
    ``nms_threshold`` or more).

    Tops: as YoloDetectionOutput's (``(1, 1, K, 7)``; each image its own rows and NMS).
    Bottoms: ``mask_group_num`` heads ``(N, num_box * (5 + num_classes), H_t, W_t)``.
    Params: ``yolov3_detection_output_param { num_classes (20) num_box (3)
    confidence_threshold (0.01) nms_threshold (0.45) biases anchors_scale mask_group_num (2)
    mask gaussian_box (false: Gaussian YOLOv3 heads are refused) }``.
    """

    def setup(self, bottom, top):
        p = self.layer_param.yolov3_detection_output_param
        if p.gaussian_box:
            raise self.error("yolov3_detection_output_param gaussian_box (Gaussian YOLOv3 "
                             "heads) is not supported")
        self.classes = int(p.num_classes)
        self.anchors_per_head = int(p.num_box)
        self.entries = 5 + self.classes
        groups = int(p.mask_group_num)
        if len(bottom) != groups:
            raise self.error("mask_group_num is %d but the layer has %d bottoms (one per head)"
                             % (groups, len(bottom)))
        biases = [float(v) for v in p.biases]
        if len(biases) % 2 or not biases:
            raise self.error("yolov3_detection_output_param biases must list anchor width, "
                             "height pairs; got %d values" % len(biases))
        self.anchors = np.asarray(biases).reshape(-1, 2)
        mask = list(p.mask) or list(range(len(self.anchors)))
        per_group = len(mask) // groups
        self.masks = [mask[t * per_group:t * per_group + self.anchors_per_head]
                      for t in range(groups)]
        if any(len(m) != self.anchors_per_head for m in self.masks):
            raise self.error("mask %s does not give each of the %d heads %d anchors (num_box)"
                             % (mask, groups, self.anchors_per_head))
        bad = [m for m in mask if m >= len(self.anchors)]
        if bad:
            raise self.error("mask refers to anchor(s) %s, but biases list %d anchors"
                             % (bad, len(self.anchors)))
        self.scales = [int(s) for s in p.anchors_scale]
        if len(self.scales) < groups:
            raise self.error("anchors_scale lists %d values; expected one per head (%d)"
                             % (len(self.scales), groups))
        self.threshold = float(np.float32(p.confidence_threshold))
        self.nms_threshold = float(np.float32(p.nms_threshold))

    def forward(self, bottom, top):
        found = [[] for _ in range(bottom[0].shape[0])]
        for t, blob in enumerate(bottom):
            x, col, row = self._grid(blob)
            h_cells, w_cells = x.shape[3:]
            anchors = self.anchors[self.masks[t]]
            cx = (col + sigmoid(np, x[:, :, 0])) / w_cells
            cy = (row + sigmoid(np, x[:, :, 1])) / h_cells
            w = np.exp(x[:, :, 2]) * anchors[:, 0, None, None] / (w_cells * self.scales[t])
            h = np.exp(x[:, :, 3]) * anchors[:, 1, None, None] / (h_cells * self.scales[t])
            boxes = corners(cx, cy, w, h)  # (N, A, H, W, 4)
            scores = sigmoid(np, x[:, :, 5:]) * sigmoid(np, x[:, :, 4:5])  # (N, A, C, H, W)
            for n in range(x.shape[0]):
                # the fork's order: cells row-major, then anchors, then classes
                s = scores[n].transpose(2, 3, 0, 1)  # (H, W, A, C)
                keep = s > self.threshold
                cell_boxes = np.broadcast_to(boxes[n].transpose(1, 2, 0, 3)[:, :, :, None, :],
                                             s.shape + (4,))
                labels = np.broadcast_to(np.arange(self.classes), s.shape)
                found[n].append((labels[keep], s[keep], cell_boxes[keep]))
        rows = []
        for n, parts in enumerate(found):
            labels, scores, boxes = (np.concatenate(v) for v in zip(*parts))
            rows.append(nms_rows(n, labels, scores, boxes, self.nms_threshold))
        detections_top(top, rows, bottom[0].shape[0])
