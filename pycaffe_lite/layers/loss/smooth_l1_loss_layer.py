"""SmoothL1Loss: the Fast R-CNN fork's box-regression loss (also in Intel Caffe and, with
one weight bottom, the SSD fork)."""

from ...backend import get_array_module
from ...layer import LossLayer
from ...registry import register_layer


@register_layer("SmoothL1Loss")
class SmoothL1LossLayer(LossLayer):
    """With ``d = inside_weights * (a - b)`` and ``s2 = sigma^2``, each value contributes
    ``0.5 * s2 * d^2`` where ``|d| < 1 / s2``, else ``|d| - 0.5 / s2``, times
    ``outside_weights``; the loss is their sum divided by the batch size N (the first axis).

    Bottoms: a (N, ...), b (same shape), and optionally inside_weights and outside_weights
    (same shape; the SSD fork's form: inside weights alone, outside weights 1).
    Tops: loss (scalar).
    Params: ``smooth_l1_loss_param { sigma (1) }`` (the fork's number 8266712; Intel Caffe's
    148 is mapped on read).
    Backward, as the fork: ``da = +top_diff / N * outside * inside * f'(d)``, ``db = -da``,
    with ``f'(d) = s2 * d`` where ``|d| < 1 / s2``, else ``sign(d)``. (The SSD fork leaves
    the inside weights out of its gradient; here it is the exact one.)
    """

    exact_num_bottom_blobs = -1
    min_num_bottom_blobs = 2
    max_num_bottom_blobs = 4

    def allow_force_backward(self, bottom_index):
        return bottom_index < 2

    def setup(self, bottom, top):
        sigma = float(self.layer_param.smooth_l1_loss_param.sigma)
        self.sigma2 = sigma * sigma
        if self.sigma2 == 0:
            raise self.error("smooth_l1_loss_param sigma must not be 0")

    def reshape(self, bottom, top):
        super().reshape(bottom, top)
        for i in range(1, len(bottom)):
            if bottom[i].shape[1:] != bottom[0].shape[1:] or bottom[i].count != bottom[0].count:
                raise self.error("bottom %d has shape %s, expected the shape of bottom 0 %s"
                                 % (i, bottom[i].shape, bottom[0].shape))
        self.num = max(bottom[0].shape[0] if bottom[0].num_axes else 1, 1)

    def forward(self, bottom, top):
        a = bottom[0].read_data()
        d = a - bottom[1].read_data().reshape(a.shape)
        if len(bottom) >= 3:
            d = d * bottom[2].read_data().reshape(a.shape)
        xp = get_array_module(d)
        absd = xp.abs(d)
        small = absd < 1.0 / self.sigma2
        errors = xp.where(small, 0.5 * self.sigma2 * d * d, absd - 0.5 / self.sigma2)
        if len(bottom) == 4:
            errors = errors * bottom[3].read_data().reshape(a.shape)
        self.grad = xp.where(small, self.sigma2 * d, xp.sign(d))
        top[0].write_data()[...] = errors.sum() / a.dtype.type(self.num)

    def backward(self, top, propagate_down, bottom):
        shape = bottom[0].shape
        g = self.grad
        if len(bottom) >= 3:
            g = g * bottom[2].read_data().reshape(shape)
        if len(bottom) == 4:
            g = g * bottom[3].read_data().reshape(shape)
        top_diff = top[0].read_diff()
        for i, sign in ((0, 1), (1, -1)):
            if propagate_down[i]:
                bottom[i].write_diff()[...] = (g * (top_diff * (sign / self.num))).reshape(
                    bottom[i].shape)
