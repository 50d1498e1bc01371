"""SegAccuracy: pixel accuracy, mean class accuracy and mean IoU of a segmentation
(DeepLab v2)."""

import numpy as np

from ...layer import Layer
from ...registry import register_layer


@register_layer("SegAccuracy")
class SegAccuracyLayer(Layer):
    """The scoring layer of DeepLab v2's train files: each pixel's predicted class is the
    channel of the highest score (of equal scores, the last channel, as the fork's sort of
    (score, channel) pairs picks); pixels whose label is in ``ignore_label`` are left out; the
    others fill a confusion matrix of (label, prediction) counts.

    Bottoms: scores ``(N, C, H, W)``; labels ``(N, 1, H, W)`` (integers in [0, C) or an
    ignored label; another value is an error).
    Top: ``(1, 1, 1, 3)``: pixel accuracy (the diagonal over all counted pixels), mean class
    accuracy (over the classes that occur among the labels) and mean IoU (over all C classes;
    a class neither labelled nor predicted counts 1); with no pixel counted: 0, 0 and 1.
    Params: ``seg_accuracy_param { ignore_label (repeated), reset (true: the matrix starts
    empty at each forward; false: it accumulates), metric (read; all three are given) }``.
    """

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1
    host_only = True

    def setup(self, bottom, top):
        p = self.layer_param.seg_accuracy_param
        self.ignore = sorted(set(int(v) for v in p.ignore_label))
        self.reset = bool(p.reset)
        self.classes = bottom[0].shape[1] if len(bottom[0].shape) > 1 else 0
        self.matrix = np.zeros((self.classes, self.classes), np.int64)

    def reshape(self, bottom, top):
        scores, labels = bottom
        if len(scores.shape) != 4 or len(labels.shape) != 4:
            raise self.error("scores and labels must be N x C x H x W and N x 1 x H x W, got %s "
                             "and %s" % (scores.shape, labels.shape))
        if scores.shape[1] != self.classes:
            raise self.error("the scores have %d channels, %d at setup"
                             % (scores.shape[1], self.classes))
        if labels.shape[1] != 1 or scores.shape[0] != labels.shape[0] or \
                scores.shape[2:] != labels.shape[2:]:
            raise self.error("labels must be N x 1 x H x W for scores %s, got %s"
                             % (scores.shape, labels.shape))
        top[0].reshape((1, 1, 1, 3))

    def forward(self, bottom, top):
        scores = np.asarray(bottom[0].cpu_data())
        labels = np.asarray(bottom[1].cpu_data())[:, 0].astype(np.int64)  # truncates, as C's
        c = self.classes
        pred = c - 1 - np.argmax(scores[:, ::-1], axis=1)
        keep = ~np.isin(labels, self.ignore)
        bad = keep & ((labels < 0) | (labels >= c))
        if bad.any():
            n, h, w = (int(v[0]) for v in np.nonzero(bad))
            raise self.error("unexpected label %d at image %d, row %d, column %d: labels are 0 "
                             "to %d or one of ignore_label %s"
                             % (labels[n, h, w], n, h, w, c - 1, self.ignore))
        if self.reset:
            self.matrix[...] = 0
        np.add.at(self.matrix, (labels[keep], pred[keep]), 1)
        m = self.matrix.astype(np.float64)
        total, diag = m.sum(), np.trace(m)
        rows, cols, inter = m.sum(axis=1), m.sum(axis=0), np.diag(m)
        accuracy = diag / total if total else 0.0
        seen = rows > 0
        recall = float(np.mean(inter[seen] / rows[seen])) if seen.any() else 0.0
        union = rows + cols - inter
        jaccard = np.where(inter == union, 1.0, inter / np.where(union == 0, 1, union))
        top[0].data[...] = np.array([accuracy, recall, jaccard.mean() if c else 0.0]
                                          ).reshape(1, 1, 1, 3)

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("SegAccuracy has no backward pass; set propagate_down: false for "
                             "its bottoms")
