"""HingeLoss: the one-vs-all hinge loss of class scores, L1 or squared (L2)."""

from ...backend import get_array_module
from ...layer import LossLayer
from ...proto import caffe_pb2
from ...registry import register_layer
from .loss_utils import check_labels

Norm = caffe_pb2.HingeLossParameter


@register_layer("HingeLoss")
class HingeLossLayer(LossLayer):
    """One-vs-all hinge loss for K-class classification.

    Bottoms: scores (N, ...), the K = count / N values of an item being its class scores;
    labels, N integers in [0, K) (one per item: count N). Only the scores receive gradients.
    Tops: loss (scalar).
    Params: ``hinge_loss_param { norm (L1; or L2) }``.

    With d_nk = 1 for k = label_n and -1 otherwise, m_nk = max(0, 1 - d_nk * x_nk):
    L1: loss = sum(m) / N; L2: loss = sum(m^2) / N. Backward: g = -d * m;
    L1: dx = sign(g) * top_diff / N (0 where m = 0); L2: dx = 2 * g * top_diff / N.
    """

    def setup(self, bottom, top):
        norm = self.layer_param.hinge_loss_param.norm
        if norm not in (Norm.L1, Norm.L2):
            raise self.error(f"unknown hinge_loss_param.norm {norm}; expected L1 or L2")
        self.norm = norm

    def reshape(self, bottom, top):
        scores, labels = bottom
        if scores.num_axes < 1:
            raise self.error(f"the scores need at least one axis (the batch), got shape "
                             f"{scores.shape}")
        super().reshape(bottom, top)
        self.num = scores.shape[0]
        self.dim = scores.count_range(1)
        if labels.count != self.num:
            raise self.error(f"expected one label per item: {self.num} labels for scores of "
                             f"shape {scores.shape}, got {labels.count} (labels shape "
                             f"{labels.shape})")

    def forward(self, bottom, top):
        x = bottom[0].read_data().reshape(self.num, self.dim)
        xp = get_array_module(x)
        labels = bottom[1].read_data().reshape(self.num)
        index, _ = check_labels(self, labels, self.dim)
        onehot = xp.arange(self.dim)[None, :] == index[:, None]
        # g = -d * m: the margin violation, negated for the true class.
        margin = xp.where(onehot, -x, x)
        margin += 1
        xp.maximum(margin, 0, out=margin)
        if self.norm == Norm.L1:
            total = margin.sum()
        else:
            total = (margin * margin).sum()
        self.signed = xp.where(onehot, -margin, margin)
        top[0].write_data()[...] = total / max(self.num, 1)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("cannot backpropagate to the labels (bottom 1); set "
                             "propagate_down: false for it")
        if not propagate_down[0]:
            return
        g = getattr(self, "signed", None)
        if g is None or g.shape != (self.num, self.dim):
            raise self.error(f"backward needs a forward pass on scores of shape "
                             f"{bottom[0].shape} first")
        xp = get_array_module(g)
        dx = bottom[0].write_diff().reshape(self.num, self.dim)
        scale = top[0].read_diff() / max(self.num, 1)
        if self.norm == Norm.L1:
            dx[...] = xp.sign(g) * scale
        else:
            dx[...] = g * (2 * scale)
