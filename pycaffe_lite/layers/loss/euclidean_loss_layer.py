"""EuclideanLoss: half the mean (over the batch) squared distance between two inputs."""

from ...layer import LossLayer
from ...registry import register_layer


@register_layer("EuclideanLoss")
class EuclideanLossLayer(LossLayer):
    """loss = sum((a - b)^2) / N / 2, with N the size of the first axis.

    Bottoms: a (N, ...), b (N, ...) with the same number of elements per item (shapes may
    differ beyond that). Tops: loss (scalar).
    Params: none.
    Both bottoms receive gradients (and allow force backward): da = +(a - b) * top_diff / N,
    db = -(a - b) * top_diff / N.
    """

    def allow_force_backward(self, bottom_index):
        return True

    def reshape(self, bottom, top):
        a, b = bottom
        if a.num_axes < 1 or b.num_axes < 1:
            raise self.error("both bottoms need at least one axis (the batch), got shapes "
                             f"{a.shape} and {b.shape}")
        super().reshape(bottom, top)
        if a.count_range(1) != b.count_range(1):
            raise self.error(f"inputs must have the same dimension: {a.count_range(1)} values "
                             f"per item in bottom 0 (shape {a.shape}) but {b.count_range(1)} in "
                             f"bottom 1 (shape {b.shape})")
        # An empty batch gives a zero loss rather than a division by zero.
        self.num = max(a.shape[0], 1)

    def forward(self, bottom, top):
        a = bottom[0].read_data()
        b = bottom[1].read_data().reshape(a.shape)
        self.delta = a - b
        flat = self.delta.reshape(-1)
        dot = flat.dot(flat)
        top[0].write_data()[...] = dot / a.dtype.type(self.num) / a.dtype.type(2)

    def backward(self, top, propagate_down, bottom):
        top_diff = top[0].read_diff()
        for i, sign in ((0, 1), (1, -1)):
            if not propagate_down[i]:
                continue
            dx = bottom[i].write_diff()
            alpha = top_diff * (sign / self.num)
            dx[...] = (self.delta * alpha).reshape(dx.shape)
