"""BatchNorm: normalise each channel to zero mean and unit variance."""

from ...layer import Layer
from ...proto import caffe_pb2
from ...registry import register_layer


@register_layer("BatchNorm")
class BatchNormLayer(Layer):
    """Per-channel normalisation y = (x - mean) / sqrt(var + eps), without scale or shift
    (follow it with a Scale layer with ``bias_term: true`` for those).

    Bottoms: x of shape (N,) , (N, C) or (N, C, ...); statistics are per channel (axis 1),
    over the batch and all spatial positions (m = N * spatial values per channel).
    Tops: y, x's shape; may be computed in place.
    Params: ``batch_norm_param { use_global_stats (phase == TEST), moving_average_fraction
    (0.999), eps (1e-5) }``. In training mode the batch statistics are used (biased variance)
    and the running sums are updated; with global stats the stored ones are used.
    Blobs (never learned: the layer forces ``lr_mult: 0`` for all three, as Caffe does): the
    running mean sum (C,), the running variance sum (C,) and the running weight sum (1,), all
    initialised to 0. Each forward in training does ``s = s * f + 1``, ``mean_sum = mean_sum
    * f + batch_mean``, ``var_sum = var_sum * f + batch_var * m / (m - 1)``; the statistics
    used in global mode are ``mean_sum / s`` and ``var_sum / s`` (0 when s is 0).
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.batch_norm_param
        x = bottom[0]
        self.moving_average_fraction = p.moving_average_fraction
        self.use_global_stats = self.phase == caffe_pb2.TEST
        if p.HasField("use_global_stats"):
            self.use_global_stats = p.use_global_stats
        if x.num_axes == 0:
            raise self.error("needs a bottom with at least one axis, got shape %s" % (x.shape,))
        self.channels = 1 if x.num_axes == 1 else x.shape[1]
        self.eps = p.eps
        if len(self.blobs) > 0:
            expected = [(self.channels,), (self.channels,), (1,)]
            if len(self.blobs) != 3:
                raise self.error("expected 3 parameter blobs (mean, variance, scale factor), "
                                 "got %d" % len(self.blobs))
            for i, (blob, shape) in enumerate(zip(self.blobs, expected)):
                if blob.count != shape[0]:
                    raise self.error("parameter blob %d has shape %s, expected %s"
                                     % (i, blob.shape, shape))
                if blob.shape != shape:
                    blob.reshape(shape)
        else:
            for shape in ((self.channels,), (self.channels,), (1,)):
                self.blobs.add_blob(*shape).write_data()[...] = 0
        # The statistics are not parameters to learn: give each blob lr_mult 0 (adding the
        # ParamSpec where the prototxt has none) and never compute their gradients.
        for i in range(len(self.blobs)):
            if len(self.layer_param.param) == i:
                self.layer_param.param.add().lr_mult = 0.0
            elif self.layer_param.param[i].lr_mult != 0:
                raise self.error("Cannot configure batch normalization statistics as layer "
                                 "parameters: param %d has lr_mult %g, expected 0"
                                 % (i, self.layer_param.param[i].lr_mult))
            self.set_param_propagate_down(i, False)

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes == 0 or (x.num_axes > 1 and x.shape[1] != self.channels):
            raise self.error("bottom of shape %s does not have the %d channels (axis 1) the "
                             "layer was set up with" % (x.shape, self.channels))
        if x.num_axes == 1 and self.channels != 1:
            raise self.error("a 1-axis bottom (shape %s) has 1 channel, the layer was set up "
                             "with %d" % (x.shape, self.channels))
        top[0].reshape(x.shape)
        self.num = x.shape[0]
        self.spatial = x.count // (self.num * self.channels) if self.num * self.channels else 0

    def _view(self, arr):
        return arr.reshape(self.num, self.channels, self.spatial)

    def forward(self, bottom, top):
        x = self._view(bottom[0].read_data())
        if self.use_global_stats:
            s = self.blobs[2].read_data()[0]
            factor = 0 if s == 0 else 1 / s
            mean = self.blobs[0].read_data() * factor
            var = self.blobs[1].read_data() * factor
        else:
            mean = x.mean(axis=(0, 2))
            centred = x - mean[:, None]
            var = (centred * centred).mean(axis=(0, 2))
            f = self.moving_average_fraction
            m = self.num * self.spatial
            correction = m / (m - 1) if m > 1 else 1
            scale = self.blobs[2].write_data()
            scale *= f
            scale += 1
            mean_sum = self.blobs[0].write_data()
            mean_sum *= f
            mean_sum += mean
            var_sum = self.blobs[1].write_data()
            var_sum *= f
            var_sum += correction * var
        std = (var + self.eps) ** 0.5
        x_norm = (x - mean[:, None]) / std[:, None]
        self._view(top[0].write_data())[...] = x_norm
        # Kept for backward: a later in-place layer may overwrite the top.
        self.x_norm = x_norm
        self.std = std

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = self._view(top[0].read_diff())
        std = self.std[:, None]
        if self.use_global_stats:
            dx = dy / std
        else:
            y = self.x_norm
            mean_dy = dy.mean(axis=(0, 2))[:, None]
            mean_dy_y = (dy * y).mean(axis=(0, 2))[:, None]
            dx = (dy - mean_dy - mean_dy_y * y) / std
        self._view(bottom[0].write_diff())[...] = dx
