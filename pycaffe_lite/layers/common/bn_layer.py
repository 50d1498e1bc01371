"""BN: SegNet's and ENet's batch normalization with its own scale and shift, or PSPNet's
(:mod:`.pspnet_bn_layer`), by the fields its ``bn_param`` sets."""

from ...backend import get_array_module
from ...errors import LayerError
from ...fillers import fill
from ...layer import Layer
from ...proto import caffe_pb2
from ...proto.fork_layer_fields import PSPNET_BN, bn_kind
from ...registry import register_layer
from .pspnet_bn_layer import PSPNetBNLayer, channel_view, reshape_per_channel

BNMode = caffe_pb2.BNParameter
# The forks' epsilon, added to the variance.
EPS = 1e-9


@register_layer("BN")
class BNLayer(Layer):
    """Batch normalization as SegNet (alexgkendall/caffe-segnet) and ENet define it: one layer
    holding a per-channel scale and shift.

    ``bn_mode: LEARN`` (the default): ``y = scale * (x - mean) / sqrt(var + 1e-9) + shift``,
    with the mean and the (biased) variance of each channel over the batch and the spatial
    axes, computed as ``E[x^2] - E[x]^2`` as the forks do, in every phase (a TEST net in LEARN
    mode uses its batch's statistics). ``bn_mode: INFERENCE``: ``y = scale * x + shift`` (the
    forks' inference nets fold the statistics into scale and shift beforehand).

    Backward: the gradients of the above. LEARN: ``dx = (g - mean(g) - x_hat * mean(g *
    x_hat)) / sqrt(var + eps)`` with ``g = scale * dy``; INFERENCE: ``dx = scale * dy``;
    ``dscale = sum(dy * x_hat)`` (``x`` in INFERENCE) and ``dshift = sum(dy)``, accumulated.

    Bottoms: x ``(N, C, ...)`` (at least 2 axes).
    Tops: y, x's shape; in LEARN mode optionally the batch mean and variance ``(1, C, 1, 1)``.
    Params: ``bn_param { bn_mode (LEARN | INFERENCE) scale_filler shift_filler }`` (fillers
    default to constant 0, as in the forks).
    Blobs: scale and shift, each ``(1, C, 1, 1)``.

    PSPNet (hszhao/PSPNet) has a BN layer of its own under the same type and parameter
    message: a ``bn_param`` that sets one of its fields (``slope_filler``, ``bias_filler``,
    ``momentum``, ``eps``, ``frozen``, ``engine``) builds a
    :class:`~.pspnet_bn_layer.PSPNetBNLayer`; one that sets fields of both kinds is an error.
    """

    exact_num_bottom_blobs = 1
    min_num_top_blobs = 1
    max_num_top_blobs = 3

    def __new__(cls, layer_param=None, *args, **kwargs):
        if cls is BNLayer and layer_param is not None:
            try:
                kind = bn_kind(layer_param.bn_param)
            except ValueError as exc:
                raise LayerError(str(exc), layer_param.name, layer_param.type) from None
            if kind == PSPNET_BN:
                return PSPNetBNLayer(layer_param, *args, **kwargs)
        return super().__new__(cls)

    def setup(self, bottom, top):
        p = self.layer_param.bn_param
        self.learn = p.bn_mode == BNMode.LEARN
        if len(top) > 1 and not self.learn:
            raise self.error("only bn_mode LEARN outputs the batch mean and variance; "
                             "INFERENCE takes exactly 1 top, got %d" % len(top))
        if bottom[0].num_axes < 2:
            raise self.error("input must have at least 2 axes (num, channels, ...); got shape "
                             "%s" % (bottom[0].shape,))
        channels = bottom[0].shape[1]
        if len(self.blobs) > 0:
            if len(self.blobs) != 2 or any(b.count != channels for b in self.blobs):
                hint = ("; 4 blobs are PSPNet's BN (slope, bias, running mean and variance), "
                        "whose bn_param sets slope_filler, bias_filler, momentum, eps or "
                        "frozen" if len(self.blobs) == 4 else "")
                raise self.error("expected 2 parameter blobs (scale, shift) of %d values each, "
                                 "got %s%s" % (channels, [b.shape for b in self.blobs], hint))
            return
        fill(self.blobs.add_blob(1, channels, 1, 1), p.scale_filler)
        fill(self.blobs.add_blob(1, channels, 1, 1), p.shift_filler)

    def reshape(self, bottom, top):
        reshape_per_channel(self, bottom, top)
        for t in top[1:]:
            t.reshape(1, bottom[0].shape[1], 1, 1)

    _view = staticmethod(channel_view)

    def forward(self, bottom, top):
        x = self._view(bottom[0].read_data())
        xp = get_array_module(x)
        scale = self.blobs[0].read_data().reshape(1, -1, 1)
        shift = self.blobs[1].read_data().reshape(1, -1, 1)
        if not self.learn:
            self.cache = x.copy() if top[0] is bottom[0] else None
            self._view(top[0].write_data())[...] = x * scale + shift
            return
        mean = x.mean(axis=(0, 2))
        var = (x * x).mean(axis=(0, 2)) - mean * mean
        std = xp.sqrt(var + x.dtype.type(EPS))
        x_hat = (x - mean.reshape(1, -1, 1)) / std.reshape(1, -1, 1)
        self.cache = (x_hat, std)
        self._view(top[0].write_data())[...] = x_hat * scale + shift
        if len(top) > 1:
            top[1].write_data()[...] = mean.reshape(top[1].shape)
        if len(top) > 2:
            top[2].write_data()[...] = var.reshape(top[2].shape)

    def backward(self, top, propagate_down, bottom):
        dy = self._view(top[0].read_diff())
        scale = self.blobs[0].read_data().reshape(1, -1, 1)
        if self.learn:
            if not isinstance(self.cache, tuple):
                raise self.error("backward needs a forward pass first")
            x_hat, std = self.cache
        else:
            x_hat = self.cache if self.cache is not None else self._view(bottom[0].read_data())
        if self.param_propagate_down[0]:
            self.blobs[0].write_diff()[...] += (dy * x_hat).sum(axis=(0, 2)).reshape(1, -1, 1, 1)
        if self.param_propagate_down[1]:
            self.blobs[1].write_diff()[...] += dy.sum(axis=(0, 2)).reshape(1, -1, 1, 1)
        if not propagate_down[0]:
            return
        g = dy * scale
        if self.learn:
            g = (g - g.mean(axis=(0, 2), keepdims=True)
                 - x_hat * (g * x_hat).mean(axis=(0, 2), keepdims=True)) / std.reshape(1, -1, 1)
        self._view(bottom[0].write_diff())[...] = g
