"""ContrastiveLoss: pulls similar pairs together and pushes dissimilar pairs beyond a margin."""

from ...backend import get_array_module
from ...layer import LossLayer
from ...registry import register_layer

# Caffe adds this to the distance before dividing by it in the backward pass.
DIST_EPSILON = 1e-4


@register_layer("ContrastiveLoss")
class ContrastiveLossLayer(LossLayer):
    """Contrastive loss of Hadsell, Chopra and LeCun (2006) over pairs of feature vectors.

    Bottoms: a (N, C), b (N, C) (trailing axes of size 1 allowed, e.g. (N, C, 1, 1)); y, the
    similarity of each pair (N values; nonzero after truncation to an integer = similar).
    Gradients go to a and b (both allow force backward), never to y.
    Tops: loss (scalar).
    Params: ``contrastive_loss_param { margin (1) legacy_version (false) }``.

    With d^2 = ||a_n - b_n||^2: loss = sum_n [y_n ? d^2 : max(margin - d, 0)^2] / (2N), or
    with ``legacy_version`` max(margin - d^2, 0) for dissimilar pairs.
    Backward (a; b gets the opposite sign), with alpha = top_diff / N: similar:
    alpha * (a - b); dissimilar, where the hinge is active: -alpha * (margin - d) /
    (d + 1e-4) * (a - b) (Caffe's small epsilon), legacy: -alpha * (a - b); 0 otherwise.
    """

    exact_num_bottom_blobs = 3

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    def setup(self, bottom, top):
        p = self.layer_param.contrastive_loss_param
        self.margin = float(p.margin)
        self.legacy_version = bool(p.legacy_version)

    def _features(self, blob, which):
        if blob.num_axes < 1 or any(d != 1 for d in blob.shape[2:]):
            raise self.error(f"{which} must have shape (N, C) or (N, C, 1, 1) (axes after the "
                             f"second of size 1), got {blob.shape}")
        return blob.count_range(1)

    def reshape(self, bottom, top):
        a, b, y = bottom
        channels = self._features(a, "bottom 0 (a)")
        if self._features(b, "bottom 1 (b)") != channels:
            raise self.error(f"the two feature bottoms must have the same number of channels, "
                             f"got shapes {a.shape} and {b.shape}")
        super().reshape(bottom, top)
        self.num = a.shape[0]
        self.channels = channels
        if y.num_axes < 1 or y.shape[0] != self.num or y.count != self.num:
            raise self.error(f"the similarity bottom (2) must hold one value per pair: shape "
                             f"({self.num},) or ({self.num}, 1, 1, 1), got {y.shape}")

    def forward(self, bottom, top):
        a = bottom[0].read_data().reshape(self.num, self.channels)
        xp = get_array_module(a)
        b = bottom[1].read_data().reshape(self.num, self.channels)
        self.delta = a - b
        self.dist_sq = (self.delta * self.delta).sum(axis=1)
        self.similar = xp.trunc(bottom[2].read_data().reshape(self.num)) != 0
        if self.legacy_version:
            dissimilar = xp.maximum(self.margin - self.dist_sq, 0)
        else:
            dissimilar = xp.maximum(self.margin - xp.sqrt(self.dist_sq), 0)
            dissimilar *= dissimilar
        total = xp.where(self.similar, self.dist_sq, dissimilar).sum()
        top[0].write_data()[...] = total / max(self.num, 1) / 2

    def backward(self, top, propagate_down, bottom):
        if propagate_down[2]:
            raise self.error("cannot backpropagate to the similarity labels (bottom 2); set "
                             "propagate_down: false for it")
        if not (propagate_down[0] or propagate_down[1]):
            return
        delta = getattr(self, "delta", None)
        if delta is None or delta.shape != (self.num, self.channels):
            raise self.error(f"backward needs a forward pass on bottoms of shape "
                             f"{bottom[0].shape} first")
        xp = get_array_module(delta)
        if self.legacy_version:
            active = (self.margin - self.dist_sq) > 0
            coeff = xp.where(active, -1, 0).astype(delta.dtype)
        else:
            dist = xp.sqrt(self.dist_sq)
            mdist = self.margin - dist
            coeff = xp.where(mdist > 0, -mdist / (dist + DIST_EPSILON), 0)
        coeff = xp.where(self.similar, 1, coeff)
        alpha = top[0].read_diff() / max(self.num, 1)
        for i, sign in ((0, 1), (1, -1)):
            if propagate_down[i]:
                dx = bottom[i].write_diff().reshape(self.num, self.channels)
                dx[...] = delta * (coeff * (sign * alpha))[:, None]
