"""SoftmaxWithLoss: softmax followed by the multinomial logistic loss of the true class."""

import numpy as np

from ...backend import get_array_module
from ...layer import LossLayer
from ...ops.softmax_loss import FLT_MIN, loss_backward, loss_sum
from ...registry import register_layer
from ..common.softmax_layer import softmax_axis, softmax_forward
from .loss_utils import LossParameter, check_labels, get_normalizer, normalization_mode


@register_layer("SoftmaxWithLoss")
class SoftmaxWithLossLayer(LossLayer):
    """Cross-entropy of softmax probabilities against integer class labels.

    Bottoms: scores (N, ..., C, ...) with the classes along ``softmax_param.axis``; labels with
    one value per prediction (count = outer * inner, e.g. N*H*W for axis 1 of (N, C, H, W)),
    integers in [0, C) or the ignore label. Only the scores receive gradients.
    Tops: loss (scalar); optionally the probabilities (shape of the scores; its diff is not
    back-propagated, as in Caffe).
    Params: ``softmax_param { axis (1) }``; ``loss_param { ignore_label (none),
    normalization (VALID), normalize (legacy: true = VALID, false = BATCH_SIZE, used only
    when normalization is not set), weight_by_label_freqs (false) class_weighting (one per
    class) }``: SegNet's class weighting multiplies each position's loss and gradient by
    ``class_weighting[label]`` (the normalizer is unchanged).

    loss = -sum over non-ignored positions of log(max(p[label], FLT_MIN)) / normalizer, where
    the normalizer is FULL: outer*inner, VALID: number of non-ignored labels, BATCH_SIZE: outer,
    NONE: 1, floored at 1. d(scores) = (p - onehot(label)) * top_diff / normalizer, zero at
    ignored positions.
    """

    exact_num_top_blobs = -1
    min_num_top_blobs = 1
    max_num_top_blobs = 2

    def setup(self, bottom, top):
        loss_param = self.layer_param.loss_param
        self.ignore_label = loss_param.ignore_label if loss_param.HasField("ignore_label") \
            else None
        self.normalization = normalization_mode(loss_param)
        # Validate the mode now rather than at the first forward.
        get_normalizer(self.normalization, 1, 1, layer=self)
        self.class_weights = None
        if loss_param.weight_by_label_freqs:
            self.class_weights = np.asarray(loss_param.class_weighting, np.float64)
        self.prob = None

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        scores, labels = bottom
        axis = softmax_axis(self, scores, self.layer_param.softmax_param.axis)
        channels = scores.shape[axis]
        if channels < 1:
            raise self.error(f"softmax axis {axis} of the scores (shape {scores.shape}) is "
                             "empty; expected at least one class")
        self.outer_num = scores.count_range(0, axis)
        self.inner_num = scores.count_range(axis + 1)
        self.channels = channels
        if labels.count != self.outer_num * self.inner_num:
            raise self.error(
                f"number of labels must match number of predictions: scores of shape "
                f"{scores.shape} with softmax axis {axis} need {self.outer_num * self.inner_num} "
                f"labels (outer {self.outer_num} x inner {self.inner_num}), got {labels.count} "
                f"(labels shape {labels.shape})")
        self.view_shape = (self.outer_num, channels, self.inner_num)
        if self.class_weights is not None and len(self.class_weights) != channels:
            raise self.error(f"loss_param class_weighting lists {len(self.class_weights)} "
                             f"values; weight_by_label_freqs needs one per class ({channels})")
        if len(top) >= 2:
            top[1].reshape(scores.shape)

    def _labels(self, bottom):
        labels = bottom[1].read_data().reshape(self.outer_num, self.inner_num)
        return check_labels(self, labels, self.channels, self.ignore_label)

    def forward(self, bottom, top):
        scores = bottom[0].read_data()
        xp = get_array_module(scores)
        prob = self.prob
        if prob is None or prob.shape != self.view_shape or get_array_module(prob) is not xp:
            prob = self.prob = xp.empty(self.view_shape, dtype=scores.dtype)
        softmax_forward(scores.reshape(self.view_shape), prob)
        index, valid = self._labels(bottom)
        self.index, self.valid = index, valid
        self.normalizer = self._normalizer(xp, valid, prob.dtype)
        self.weight = None
        if self.class_weights is not None:
            self.weight = xp.asarray(self.class_weights.astype(prob.dtype))[index]
        top[0].write_data()[...] = loss_sum(prob, index, valid, self.weight) / self.normalizer
        if len(top) >= 2:
            top[1].write_data()[...] = prob.reshape(bottom[0].shape)

    def numeric_diagnosis(self):
        """A warning when the last forward clipped the probability of a true class at FLT_MIN:
        each such prediction adds -log(FLT_MIN) = 87.3365 to the summed loss (the loss "stuck
        at 87.3365" of diverged Caffe runs). None when nothing was clipped."""
        prob, index, valid = self.prob, getattr(self, "index", None), getattr(self, "valid", None)
        if prob is None or index is None or prob.shape != self.view_shape or \
                index.shape != (self.outer_num, self.inner_num):
            return None
        xp = get_array_module(prob)
        picked = xp.take_along_axis(prob, index[:, None, :], axis=1)[:, 0, :]
        clipped = int(((picked < prob.dtype.type(FLT_MIN)) & valid).sum())
        if not clipped:
            return None
        return ("%d of %d predictions gave their true class a probability below FLT_MIN, "
                "clipped so that each adds -log(FLT_MIN) = %.4f to the loss (a loss stuck at "
                "87.3365 means all of them): the scores have diverged to huge values"
                % (clipped, int(valid.sum()), -np.log(np.float32(FLT_MIN))))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("cannot backpropagate to the labels (bottom 1); set "
                             "propagate_down: false for it")
        if not propagate_down[0]:
            return
        if self.prob is None or self.prob.shape != self.view_shape:
            raise self.error(f"backward needs a forward pass on scores of shape "
                             f"{bottom[0].shape} first")
        prob, index, valid = self.prob, self.index, self.valid
        dx = bottom[0].write_diff().reshape(self.view_shape)
        loss_backward(prob, index, valid, top[0].read_diff() / self.normalizer, dx,
                      self.weight)

    def _normalizer(self, xp, valid, dtype):
        """The loss divisor as a scalar of ``dtype``. The VALID count is computed where the
        labels are (a 0-d array on the device: no host round trip). Without an ignore label
        every label counts."""
        if self.ignore_label is not None and self.normalization == LossParameter.VALID:
            self.valid_count = valid.sum()
            return xp.maximum(self.valid_count, 1).astype(dtype)
        self.valid_count = self.outer_num * self.inner_num
        return dtype.type(get_normalizer(self.normalization, self.outer_num, self.inner_num,
                                         self.valid_count, layer=self))
