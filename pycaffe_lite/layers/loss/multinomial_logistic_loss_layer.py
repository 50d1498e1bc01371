"""MultinomialLogisticLoss: -log of the probability given to the true class."""

from ...backend import get_array_module
from ...layer import LossLayer
from ...registry import register_layer
from .loss_utils import check_labels

# Caffe's kLOG_THRESHOLD: probabilities are clamped at this value before log().
LOG_THRESHOLD = 1e-20


@register_layer("MultinomialLogisticLoss")
class MultinomialLogisticLossLayer(LossLayer):
    """Multinomial logistic loss on probabilities (e.g. the output of a Softmax layer).

    Bottoms: probabilities (N, ...), the K = count / N values of an item being its class
    probabilities; labels, N integers in [0, K) (count N: shape (N,) or (N, 1, 1, 1)). Only
    the probabilities receive gradients.
    Tops: loss (scalar).
    Params: none.

    loss = -sum_n log(max(p[n, label_n], 1e-20)) / N.
    Backward: dp[n, label_n] = -top_diff / N / max(p[n, label_n], 1e-20), 0 elsewhere.
    """

    def reshape(self, bottom, top):
        probs, labels = bottom
        if probs.num_axes < 1:
            raise self.error(f"the probabilities need at least one axis (the batch), got "
                             f"shape {probs.shape}")
        super().reshape(bottom, top)
        self.num = probs.shape[0]
        self.dim = probs.count_range(1)
        if labels.count != self.num:
            raise self.error(f"expected one label per item (labels of shape (N,) or (N, 1, 1, "
                             f"1)): {self.num} labels for probabilities of shape "
                             f"{probs.shape}, got labels of shape {labels.shape}")

    def _picked(self, bottom):
        p = bottom[0].read_data().reshape(self.num, self.dim)
        xp = get_array_module(p)
        labels = bottom[1].read_data().reshape(self.num)
        index, _ = check_labels(self, labels, self.dim)
        picked = xp.take_along_axis(p, index[:, None], axis=1)
        return index, xp.maximum(picked, LOG_THRESHOLD)

    def forward(self, bottom, top):
        _, picked = self._picked(bottom)
        xp = get_array_module(picked)
        top[0].write_data()[...] = -xp.log(picked).sum() / max(self.num, 1)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("cannot backpropagate to the labels (bottom 1); set "
                             "propagate_down: false for it")
        if not propagate_down[0]:
            return
        index, picked = self._picked(bottom)
        xp = get_array_module(picked)
        dx = bottom[0].write_diff().reshape(self.num, self.dim)
        dx[...] = 0
        scale = -top[0].read_diff() / max(self.num, 1)
        dx[xp.arange(self.num), index] = scale / picked[:, 0]
