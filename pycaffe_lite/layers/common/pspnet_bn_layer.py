"""BN as PSPNet (hszhao/PSPNet) defines it: batch normalization with a slope, a bias and
running statistics, in one layer. Built by ``type: "BN"`` when the ``bn_param`` sets one of
PSPNet's fields (see :mod:`.bn_layer`)."""

from ...backend import get_array_module
from ...fillers import fill
from ...layer import Layer
from ...proto import caffe_pb2

SLOPE, BIAS, MEAN, VARIANCE = range(4)


def reshape_per_channel(layer, bottom, top):
    """The BN layers' reshape: top 0 as bottom 0, whose axis 1 must have as many channels as
    the layer's first blob has values; the cached forward values are dropped."""
    x = bottom[0]
    if x.num_axes < 2 or x.shape[1] != layer.blobs[0].count:
        raise layer.error("input has shape %s; expected (N, %d, ...)"
                          % (x.shape, layer.blobs[0].count))
    if top[0] is not x:
        top[0].reshape(x.shape)
    layer.cache = None


def channel_view(arr):
    """``arr`` (N, C, ...) as (N, C, the rest flattened)."""
    return arr.reshape(arr.shape[0], arr.shape[1], -1)


class PSPNetBNLayer(Layer):
    """PSPNet's BN layer.

    ``y = slope * (x - mean) / sqrt(var + eps) + bias`` per channel (axis 1), with

    - TRAIN, not frozen: the batch's mean and biased variance over the batch and spatial
      axes; each forward then updates the running statistics,
      ``stat = (1 - momentum) * batch_stat + momentum * stat`` (no variance correction);
    - TEST, or ``frozen: true`` in any phase: the running mean and variance (blobs 2 and 3).

    Backward. Batch statistics: ``dx = (g - mean(g) - x_hat * mean(g * x_hat)) / sqrt(var +
    eps)`` with ``g = slope * dy``; running statistics: ``dx = g / sqrt(var + eps)``.
    ``dslope = sum(dy * x_hat)``, ``dbias = sum(dy)``, accumulated. As in the fork, a frozen
    layer learns nothing: the slope and bias get ``lr_mult: 0`` and ``decay_mult: 0`` whatever
    the prototxt says; the running statistics always do. (The fork's backward of an unfrozen
    layer in a TEST net applies the batch formula to the running statistics' ``x_hat``; here
    it is the gradient of the forward that ran.)

    Bottoms: x ``(N, C, ...)`` (at least 2 axes). Tops: y, x's shape (in place in PSPNet's
    nets). Params: ``bn_param { slope_filler bias_filler momentum (0.9) eps (1e-5) frozen
    (false) engine }`` (engine is read; every engine computes the same here).
    Blobs, each ``(1, C, 1, 1)``: slope, bias, running mean (starts at 0), running variance
    (starts at 1 when frozen, else 0), as the fork stores them.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.bn_param
        self.frozen = p.frozen
        self.momentum = p.momentum
        self.eps = p.eps
        if bottom[0].num_axes < 2:
            raise self.error("input must have at least 2 axes (num, channels, ...); got shape "
                             "%s" % (bottom[0].shape,))
        channels = bottom[0].shape[1]
        if len(self.blobs) > 0:
            if len(self.blobs) != 4 or any(b.count != channels for b in self.blobs):
                raise self.error("expected 4 parameter blobs (slope, bias, running mean, "
                                 "running variance) of %d values each, got %s"
                                 % (channels, [b.shape for b in self.blobs]))
            for b in self.blobs:
                if b.shape != (1, channels, 1, 1):
                    b.reshape(1, channels, 1, 1)
        else:
            fill(self.blobs.add_blob(1, channels, 1, 1), p.slope_filler)
            fill(self.blobs.add_blob(1, channels, 1, 1), p.bias_filler)
            self.blobs.add_blob(1, channels, 1, 1).write_data()[...] = 0
            self.blobs.add_blob(1, channels, 1, 1).write_data()[...] = 1 if self.frozen else 0
        # The running statistics are never learned, nor anything of a frozen layer: their
        # ParamSpecs get lr_mult 0 and decay_mult 0 (added where the prototxt has none).
        while len(self.layer_param.param) < 4:
            self.layer_param.param.add()
        fixed = (SLOPE, BIAS, MEAN, VARIANCE) if self.frozen else (MEAN, VARIANCE)
        for i in fixed:
            self.layer_param.param[i].lr_mult = 0.0
            self.layer_param.param[i].decay_mult = 0.0
            self.set_param_propagate_down(i, False)

    def reshape(self, bottom, top):
        reshape_per_channel(self, bottom, top)

    _view = staticmethod(channel_view)

    def _channel(self, index):
        return self.blobs[index].read_data().reshape(1, -1, 1)

    @property
    def uses_running_stats(self):
        return self.frozen or self.phase == caffe_pb2.TEST

    def forward(self, bottom, top):
        x = self._view(bottom[0].read_data())
        xp = get_array_module(x)
        eps = x.dtype.type(self.eps)
        if self.uses_running_stats:
            mean = self._channel(MEAN)
            var = self._channel(VARIANCE)
        else:
            mean = x.mean(axis=(0, 2), keepdims=True)
            centred = x - mean
            var = (centred * centred).mean(axis=(0, 2), keepdims=True)
            m = x.dtype.type(self.momentum)
            for index, batch in ((MEAN, mean), (VARIANCE, var)):
                running = self.blobs[index].write_data()
                running[...] = (1 - m) * batch.reshape(running.shape) + m * running
        inv_std = 1 / xp.sqrt(var + eps)
        x_hat = (x - mean) * inv_std
        # what the backward needs: x_hat for the batch formula and the slope's gradient
        keep = not self.frozen or any(self.param_propagate_down[:2])
        self.cache = (x_hat if keep else None, inv_std, self.uses_running_stats)
        self._view(top[0].write_data())[...] = x_hat * self._channel(SLOPE) + \
            self._channel(BIAS)

    def backward(self, top, propagate_down, bottom):
        if self.cache is None:
            raise self.error("backward needs a forward pass first")
        x_hat, inv_std, running = self.cache
        dy = self._view(top[0].read_diff())
        wants = [self.param_propagate_down[i] if i < len(self.param_propagate_down) else True
                 for i in (SLOPE, BIAS)]
        if wants[0]:
            if x_hat is None:
                raise self.error("the slope's gradient needs a forward run with its "
                                 "param_propagate_down set")
            self.blobs[SLOPE].write_diff()[...] += \
                (dy * x_hat).sum(axis=(0, 2)).reshape(1, -1, 1, 1)
        if wants[1]:
            self.blobs[BIAS].write_diff()[...] += dy.sum(axis=(0, 2)).reshape(1, -1, 1, 1)
        if not propagate_down[0]:
            return
        g = dy * self._channel(SLOPE)
        if not running:
            g = g - g.mean(axis=(0, 2), keepdims=True) \
                - x_hat * (g * x_hat).mean(axis=(0, 2), keepdims=True)
        self._view(bottom[0].write_diff())[...] = g * inv_std
