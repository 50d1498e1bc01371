"""DetectionEvaluate: the SSD fork's per-detection true/false positive rows
(weiliu89/caffe)."""

import numpy as np

from ...layer import Layer
from ...proto import caffe_pb2
from ...registry import register_layer
from .bbox_util import jaccard, sort_descending
from .detection_output_files import read_name_sizes

Resize = caffe_pb2.ResizeParameter


def _pixel_boxes(boxes, height, width):
    """The fork's OutputBBox without a resize policy (or WARP): clip to [0, 1], scale."""
    b = np.clip(boxes, 0, 1) * np.array([width, height, width, height], dtype=np.float64)
    return b


def _pixel_jaccard(a, b):
    """Overlap of pixel boxes ``a`` (M, 4) with ``b`` (N, 4), both extents counted with +1
    (the fork's JaccardOverlap with normalized = false)."""
    a = a[:, None, :]
    b = b[None, :, :]
    iw = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]) + 1
    ih = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]) + 1

    def size(x):
        w, h = x[..., 2] - x[..., 0], x[..., 3] - x[..., 1]
        return np.where((w < 0) | (h < 0), 0, (w + 1) * (h + 1))

    inter = iw * ih
    ok = (iw > 0) & (ih > 0) & (np.minimum(a[..., 2], b[..., 2]) >= np.maximum(
        a[..., 0], b[..., 0])) & (np.minimum(a[..., 3], b[..., 3]) >= np.maximum(
            a[..., 1], b[..., 1]))
    out = np.zeros(inter.shape)
    np.divide(inter, size(a) + size(b) - inter, out=out, where=ok)
    return out


def _normalized_jaccard(a, b):
    return jaccard(a.astype(np.float32), b.astype(np.float32)).astype(np.float64)


@register_layer("DetectionEvaluate")
class DetectionEvaluateLayer(Layer):
    """Marks each detection true or false positive against the ground truth.

    For each image and class the detections, best first, are matched to the ground-truth
    box of that class they overlap most; a detection is a true positive when that overlap is
    at least ``overlap_threshold`` and the box was not taken by a better detection, a false
    positive otherwise; one matched to a difficult box is neither unless
    ``evaluate_difficult_gt``. With ``name_size_file`` (lines ``name height width`` in the
    order of the test images) boxes are compared in the pixels of each original image.

    Bottoms: detections ``(1, 1, K, 7)`` (DetectionOutput's rows), ground truth
    ``(1, 1, G, 8)`` (AnnotatedData's label rows).
    Tops: ``(1, 1, C' + D, 5)``: first one row ``[-1, label, num_positives, -1, -1]`` per
    class but the background (C' of them), then one row ``[image, label, score, tp, fp]``
    per detection (images ascending, classes ascending, scores descending). The solver turns
    these into mean average precision when ``eval_type: "detection"``.
    Params: ``detection_evaluate_param`` (the SSD fork's DetectionEvaluateParameter).
    """

    host_only = True  # matching and AP in NumPy
    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.detection_evaluate_param
        if not p.HasField("num_classes"):
            raise self.error("detection_evaluate_param needs num_classes")
        self.num_classes = int(p.num_classes)
        self.background_label_id = int(p.background_label_id)
        self.overlap_threshold = float(p.overlap_threshold)
        if not self.overlap_threshold > 0:
            raise self.error("overlap_threshold must be positive, got %g"
                             % self.overlap_threshold)
        self.evaluate_difficult_gt = bool(p.evaluate_difficult_gt)
        self.sizes = []
        if p.HasField("name_size_file"):  # the file DetectionOutput's result files read
            self.sizes = [(h, w) for _, h, w in read_name_sizes(self, p.name_size_file)]
        if p.HasField("resize_param") and p.resize_param.resize_mode != Resize.WARP:
            raise self.error("only resize_mode WARP is supported for evaluation")
        self.count = 0

    def reshape(self, bottom, top):
        det, gt = bottom
        if det.num_axes != 4 or det.shape[:2] != (1, 1) or det.shape[3] != 7:
            raise self.error("detections must have shape (1, 1, K, 7); got %s" % (det.shape,))
        if gt.num_axes != 4 or gt.shape[:2] != (1, 1) or gt.shape[3] != 8:
            raise self.error("ground truth must have shape (1, 1, G, 8); got %s" % (gt.shape,))
        rows = det.cpu_data().reshape(-1, 7)
        valid = int(np.count_nonzero(rows[:, 1] != -1))
        num_pos_classes = self.num_classes - (0 if self.background_label_id == -1 else 1)
        top[0].reshape(1, 1, num_pos_classes + valid, 5)

    def evaluate(self, det, gt):
        """The output rows ``(R, 5)`` for host arrays of detection and ground-truth rows."""
        det = np.asarray(det, dtype=np.float64).reshape(-1, 7)
        gt = np.asarray(gt, dtype=np.float64).reshape(-1, 8)
        bg = self.background_label_id
        # ground truth: stop at the first padding row (image -1), as the fork
        pad = np.flatnonzero(gt[:, 0].astype(np.int64) == -1)
        gt = gt[:pad[0]] if pad.size else gt
        gt_img, gt_label = gt[:, 0].astype(np.int64), gt[:, 1].astype(np.int64)
        if (gt_label == bg).any():
            raise self.error("the ground truth holds the background label %d" % bg)
        det = det[det[:, 0].astype(np.int64) != -1]
        det = det[det[:, 1].astype(np.int64) != -1]
        det_img, det_label = det[:, 0].astype(np.int64), det[:, 1].astype(np.int64)
        if (det_label == bg).any():
            raise self.error("the detections hold the background label %d" % bg)
        difficult = gt[:, 7] != 0
        rows = []
        for c in range(self.num_classes):
            if c == bg:
                continue
            sel = gt_label == c
            n = int(sel.sum() if self.evaluate_difficult_gt else (sel & ~difficult).sum())
            rows.append([-1, c, n, -1, -1])
        out = [np.asarray(rows, dtype=np.float64).reshape(-1, 5)]
        for img in np.unique(det_img):
            size = None
            if self.sizes:
                if self.count >= len(self.sizes):
                    raise self.error("name_size_file lists %d images; more were evaluated"
                                     % len(self.sizes))
                size = self.sizes[self.count]
            for c in np.unique(det_label[det_img == img]):
                d = det[(det_img == img) & (det_label == c)]
                d = d[sort_descending(d[:, 2].astype(np.float32))]
                block = np.zeros((len(d), 5))
                block[:, 0], block[:, 1], block[:, 2] = img, c, d[:, 2]
                g_sel = (gt_img == img) & (gt_label == c)
                if not g_sel.any():
                    block[:, 4] = 1
                    out.append(block)
                    continue
                g_boxes, g_diff = gt[g_sel, 3:7], difficult[g_sel]
                if size is None:
                    ious = _normalized_jaccard(d[:, 3:7], g_boxes)
                else:
                    ious = _pixel_jaccard(_pixel_boxes(d[:, 3:7], *size),
                                          _pixel_boxes(g_boxes, *size))
                visited = np.zeros(len(g_boxes), dtype=bool)
                best = np.argmax(ious, axis=1)
                best_iou = ious[np.arange(len(d)), best]
                for k in range(len(d)):    # sequential by nature: a box is taken once
                    if best_iou[k] >= self.overlap_threshold:
                        if self.evaluate_difficult_gt or not g_diff[best[k]]:
                            if not visited[best[k]]:
                                block[k, 3] = 1
                                visited[best[k]] = True
                            else:
                                block[k, 4] = 1
                    else:
                        block[k, 4] = 1
                out.append(block)
            if self.sizes:
                self.count = (self.count + 1) % len(self.sizes)
        return np.concatenate(out)

    def forward(self, bottom, top):
        rows = self.evaluate(bottom[0].cpu_data(), bottom[1].cpu_data())
        top[0].reshape(1, 1, rows.shape[0], 5)
        top[0].data[...] = rows.reshape(top[0].shape)
