"""MVN: mean-variance normalisation of each item (or each item's channel)."""

from ...errors import ShapeError
from ...layer import Layer
from ...registry import register_layer


@register_layer("MVN")
class MVNLayer(Layer):
    """Subtract the mean and (optionally) divide by the standard deviation.

    The statistics are taken over each (n, c) plane (H x W values), or over each item n
    (C x H x W values) with ``across_channels``: ``y = (x - mean) / (std + eps)`` where
    ``std = sqrt(mean((x - mean)^2))`` (eps is added to the standard deviation, not to the
    variance), or ``y = x - mean`` without ``normalize_variance``.

    Bottoms: x, at most 4 axes, read as (N, C, H, W) with missing trailing axes 1.
    Tops: y of shape (N, C, H, W): always 4 axes, as Caffe reshapes it; may be in place.
    Params: ``mvn_param { normalize_variance (true), across_channels (false), eps (1e-9) }``.
    Backward (as Caffe): ``dx = (dy - mean(dy) - y * mean(y * dy)) / (std + eps)``, or
    ``dx = dy - mean(dy)`` without ``normalize_variance``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.mvn_param
        self.normalize_variance = p.normalize_variance
        self.across_channels = p.across_channels
        self.eps = float(p.eps)

    def reshape(self, bottom, top):
        x = bottom[0]
        try:
            shape = (x.num, x.channels, x.height, x.width)
        except ShapeError:
            raise self.error("the bottom must have at most 4 axes (N, C, H, W), got shape %s"
                             % (x.shape,)) from None
        top[0].reshape(shape)
        rows = shape[0] if self.across_channels else shape[0] * shape[1]
        self.view = (rows, x.count // rows if rows else 0)

    def forward(self, bottom, top):
        x = bottom[0].read_data().reshape(self.view)
        y = top[0].write_data().reshape(self.view)
        if y.size == 0:
            return
        dim = self.view[1]
        mean = x.sum(axis=1, keepdims=True) / dim
        y[...] = x - mean
        if self.normalize_variance:
            var = (y * y).sum(axis=1, keepdims=True) / dim
            std = var ** 0.5
            std += self.eps
            y /= std
            self.std = std  # kept for backward (the bottom may be overwritten in place)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].read_diff().reshape(self.view)
        if dy.size == 0:
            return
        dim = self.view[1]
        g = dy - dy.sum(axis=1, keepdims=True) / dim
        if self.normalize_variance:
            y = top[0].read_data().reshape(self.view)
            g -= y * ((y * dy).sum(axis=1, keepdims=True) / dim)
            g /= self.std
        bottom[0].write_diff().reshape(self.view)[...] = g
