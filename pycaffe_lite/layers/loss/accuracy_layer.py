"""Accuracy: the fraction of predictions whose true class is among the top k scores."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer
from ..common.softmax_layer import softmax_axis
from .loss_utils import check_labels


@register_layer("Accuracy")
class AccuracyLayer(Layer):
    """Top-k classification accuracy (no gradient).

    Bottoms: scores (N, ..., C, ...) with the classes along ``accuracy_param.axis``; labels
    with one value per prediction (count = outer * inner), integers in [0, C) or the ignore
    label. Tops: accuracy (scalar); optionally the per-class accuracy, shape (C,) (0 for a
    class with no labels).
    Params: ``accuracy_param { top_k (1) axis (1) ignore_label (none) }``.

    As in Caffe, a prediction is correct when fewer than ``top_k`` other classes score at least
    as high as the true class (a tie counts against it). Ignored labels count neither way; with
    no counted label the accuracy is 0.
    """

    exact_num_bottom_blobs = 2
    min_num_top_blobs = 1
    max_num_top_blobs = 2

    def setup(self, bottom, top):
        param = self.layer_param.accuracy_param
        self.top_k = int(param.top_k)
        if self.top_k < 1:
            raise self.error(f"top_k must be at least 1, got {self.top_k}")
        self.ignore_label = param.ignore_label if param.HasField("ignore_label") else None

    def reshape(self, bottom, top):
        scores, labels = bottom
        axis = softmax_axis(self, scores, self.layer_param.accuracy_param.axis)
        self.outer_num = scores.count_range(0, axis)
        self.inner_num = scores.count_range(axis + 1)
        self.channels = scores.shape[axis]
        if labels.count != self.outer_num * self.inner_num:
            raise self.error(
                f"number of labels must match number of predictions: scores of shape "
                f"{scores.shape} with label axis {axis} need {self.outer_num * self.inner_num} "
                f"labels (outer {self.outer_num} x inner {self.inner_num}), got {labels.count} "
                f"(labels shape {labels.shape})")
        if self.top_k > self.channels:
            raise self.error(f"top_k must be less than or equal to the number of classes: got "
                             f"top_k {self.top_k} for {self.channels} classes (axis {axis} of "
                             f"shape {scores.shape})")
        self.view_shape = (self.outer_num, self.channels, self.inner_num)
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape((self.channels,))

    def forward(self, bottom, top):
        scores = bottom[0].read_data().reshape(self.view_shape)
        xp = get_array_module(scores)
        dtype = scores.dtype.type
        labels = bottom[1].read_data().reshape(self.outer_num, self.inner_num)
        index, valid = check_labels(self, labels, self.channels, self.ignore_label)
        true_score = xp.take_along_axis(scores, index[:, None, :], axis=1)
        # The true class itself is among those scoring >= its score, hence the -1.
        better = (scores >= true_score).sum(axis=1) - 1
        correct = valid & (better < self.top_k)
        # counted where the labels are (no host read: a CUDA graph can hold it); 0 without any
        count = valid.sum().astype(scores.dtype)
        hits = correct.sum().astype(scores.dtype)
        top[0].write_data()[...] = xp.where(count == 0, dtype(0), hits / xp.maximum(count, 1))
        if len(top) > 1:
            # each class's counts as sums over a (outer, channels, inner) membership mask: no
            # data-dependent shape (a boolean index or bincount's size reads the device)
            member = index[:, None, :] == xp.arange(self.channels)[None, :, None]
            nums = (member & valid[:, None, :]).sum(axis=(0, 2)).astype(scores.dtype)
            per_class = (member & correct[:, None, :]).sum(axis=(0, 2)).astype(scores.dtype)
            out = top[1].write_data()
            out[...] = per_class / xp.maximum(nums, 1)

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Accuracy has no backward pass; set propagate_down: false for its "
                             f"bottoms (got propagate_down {list(propagate_down)})")
