"""EvalDetection: Intel Caffe's scoring of YOLO v2 region outputs against the ground truth
(for the mAP its solvers report while training)."""

import numpy as np

from ...layer import Layer
from ...proto import caffe_pb2
from ...registry import register_layer
from .nms import AT_LEAST, center_overlaps, greedy

_SCORE = caffe_pb2.EvalDetectionParameter


def center_iou(a, b):
    """IoU of two (cx, cy, w, h) boxes; 0 when they do not overlap."""
    ow = min(a[0] + a[2] / 2, b[0] + b[2] / 2) - max(a[0] - a[2] / 2, b[0] - b[2] / 2)
    oh = min(a[1] + a[3] / 2, b[1] + b[3] / 2) - max(a[1] - a[3] / 2, b[1] - b[3] / 2)
    if ow < 0 or oh < 0:
        return 0.0
    inter = ow * oh
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


@register_layer("EvalDetection")
class EvalDetectionLayer(Layer):
    """Decodes a YOLO v2 head and matches its boxes to the ground truth, as Intel Caffe does.

    Bottoms: x ``(N, num_object * (num_class + 5), side, side)``, anchor ``n``'s entries
    ``t_x, t_y, t_w, t_h, t_o`` and the class scores at channels ``n * (num_class + 5) + e``;
    labels ``(1, 1, B, 8)`` rows ``[image, label, instance, xmin, ymin, xmax, ymax,
    difficult]`` (the AnnotatedData layer's; image -1 skips a row; label 1 is class 0).
    Further bottoms are carried and not read, as in the fork, whose layer declares no bottom
    count (Intel Caffe's YOLO v2 test files give it the image as a third).
    Tops: ``(N, num_class + side * side * num_object * 4)``: per image, the number of
    ground-truth boxes of each class, then one row ``[label, score, tp, fp]`` per kept
    prediction (classes ascending, then scores descending), zeros after them.
    Params: ``eval_detection_param { side (7) num_class (20) num_object (2) threshold (0.5)
    score_type (MULTIPLY) nms (-1) biases }`` (Intel Caffe's fields).

    Each cell ``(row j, column i)`` and anchor ``n`` gives ``x = (i + sigmoid(t_x)) / side``,
    ``y = (j + sigmoid(t_y)) / side``, ``w = exp(t_w) * biases[2n] / side``, ``h = exp(t_h) *
    biases[2n + 1] / side``, its label the most probable class of the softmax (the first on
    ties) and its score ``sigmoid(t_o)`` (OBJ), that probability (PROB) or their product. With
    ``nms >= 0`` the boxes, best first, are kept greedily unless they overlap a kept box by
    ``nms`` or more (over all classes), and those scoring under 0.005 are dropped; with a
    negative ``nms`` nothing is kept (the fork's behaviour). A kept box of a class with ground
    truth is a true positive when its best IoU with that class's boxes is at least
    ``threshold`` and that box is not yet taken, a false positive when it is taken, and
    neither (0, 0) below the threshold; boxes of a class without ground truth are false
    positives. No backward. (The fork reads five anchors per cell whatever num_object is;
    here num_object is used, the same for its YOLO v2 files, which have five.)
    """

    host_only = True  # decoding, NMS and matching in NumPy
    min_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.eval_detection_param
        self.side = int(p.side)
        self.num_class = int(p.num_class)
        self.num_object = int(p.num_object)
        self.threshold = float(p.threshold)
        self.nms = float(p.nms)
        self.score_type = int(p.score_type)
        self.biases = [float(b) for b in p.biases]
        for name in ("side", "num_class", "num_object"):
            if getattr(self, name) < 1:
                raise self.error("eval_detection_param %s must be at least 1, got %d"
                                 % (name, getattr(self, name)))
        if len(self.biases) < 2 * self.num_object:
            raise self.error("eval_detection_param needs %d biases (a width and a height per "
                             "anchor, num_object %d), got %d"
                             % (2 * self.num_object, self.num_object, len(self.biases)))

    def reshape(self, bottom, top):
        x = bottom[0]
        entries = self.side * self.side * self.num_object * (self.num_class + 5)
        if x.num_axes != 4 or x.count_range(1) != entries or x.shape[2] * x.shape[3] != \
                self.side * self.side:
            raise self.error("bottom 0 of shape %s does not hold side %d x %d cells of %d "
                             "anchors x (num_class %d + 5) values"
                             % (x.shape, self.side, self.side, self.num_object, self.num_class))
        if bottom[1].count % 8:
            raise self.error("labels (bottom 1, shape %s) must be rows of 8 values"
                             % (bottom[1].shape,))
        top[0].reshape(x.shape[0], self.num_class + self.side * self.side * self.num_object * 4)

    def _predictions(self, x):
        """The kept boxes of one image: {label: [(score, box)]}, best first per label."""
        s, entries = self.side, self.num_class + 5
        cells = x.reshape(self.num_object, entries, s * s).transpose(2, 0, 1).astype(np.float64)
        col = np.tile(np.arange(s), s)[:, None]
        row = np.repeat(np.arange(s), s)[:, None]
        anchors = np.asarray(self.biases[:2 * self.num_object], np.float64).reshape(-1, 2)
        sig = 1 / (1 + np.exp(-cells[:, :, :5]))
        bx = (col + sig[:, :, 0]) / s
        by = (row + sig[:, :, 1]) / s
        bw = np.exp(cells[:, :, 2]) * anchors[:, 0] / s
        bh = np.exp(cells[:, :, 3]) * anchors[:, 1] / s
        scores = cells[:, :, 5:]
        prob = np.exp(scores - scores.max(axis=2, keepdims=True))
        prob /= prob.sum(axis=2, keepdims=True)
        label = prob.argmax(axis=2)
        best = prob.max(axis=2)
        obj = sig[:, :, 4]
        score = {_SCORE.OBJ: obj, _SCORE.PROB: best}.get(self.score_type, obj * best)
        if self.nms < 0:
            return {}
        boxes = np.stack([bx, by, bw, bh], axis=-1).reshape(-1, 4)
        score, label = score.reshape(-1), label.reshape(-1)
        order = np.argsort(-score, kind="stable")
        kept = order[greedy(boxes[order], self.nms, center_overlaps, AT_LEAST)]
        out = {}
        for k in kept:
            if score[k] >= 0.005:
                out.setdefault(int(label[k]), []).append((float(score[k]), boxes[k]))
        return out

    def forward(self, bottom, top):
        x = bottom[0].data
        rows = bottom[1].data.reshape(-1, 8).astype(np.float64)
        truth = {}
        for r in rows:
            if r[0] == -1:
                continue
            box = ((r[3] + r[5]) / 2, (r[4] + r[6]) / 2, r[5] - r[3], r[6] - r[4])
            truth.setdefault(int(r[0]), {}).setdefault(int(r[1]) - 1, []).append(box)
        out = np.zeros(top[0].shape, np.float64)
        for i in range(x.shape[0]):
            gts = truth.get(i, {})
            for label, boxes in gts.items():
                if 0 <= label < self.num_class:
                    out[i, label] += len(boxes)
            at = self.num_class
            for label, preds in sorted(self._predictions(x[i]).items()):
                gt = gts.get(label)
                taken = [False] * len(gt or ())
                for score, box in preds:
                    tp = fp = 0
                    if gt is None:
                        fp = 1
                    else:
                        ious = [center_iou(box, g) for g in gt]
                        j = int(np.argmax(ious))
                        if ious[j] >= self.threshold:
                            tp, fp = (0, 1) if taken[j] else (1, 0)
                            taken[j] = True
                    out[i, at:at + 4] = (label, score, tp, fp)
                    at += 4
        top[0].data[...] = out

    def backward(self, top, propagate_down, bottom):
        pass
