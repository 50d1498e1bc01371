"""Normalize: the SSD fork's L2 normalisation with a learned scale (weiliu89/caffe)."""

from ...backend import get_array_module
from ...fillers import fill
from ...proto import caffe_pb2
from ...registry import register_layer
from ...layer import Layer
from ..neuron.inplace_utils import InPlaceInputs


@register_layer("Normalize")
class NormalizeLayer(InPlaceInputs, Layer):
    """Each sample divided by its L2 norm, then multiplied by a learned scale.

    With ``across_spatial`` (the default) the norm is taken over the whole sample
    (``sqrt(sum x^2 + eps)`` over channels and positions); otherwise over the channels at
    each position (``sqrt(sum_c x^2 + eps)``). The scale is one value (``channel_shared``,
    the default) or one per channel. SSD puts it on VGG's conv4_3 (scale filled with 20).

    Bottoms: x ``(N, C, ...)`` (at least 2 axes). Tops: y, same shape (may be x: in place).
    Params: ``norm_param { across_spatial (true) scale_filler (constant 1)
    channel_shared (true) eps (1e-10) }`` (the SSD fork's NormalizeParameter); one blob, the
    scale: shape ``()`` when channel_shared, else ``(C,)``.
    Backward: with ``g = s * dy``, ``dx = (g - x * sum(x * g) / norm^2) / norm`` over the
    normalised group; ``ds = sum(dy * x / norm)`` (per channel, or in total when shared).
    This is the exact gradient; the fork multiplies by the scale after the sum, which
    differs once the per-channel scales are no longer equal.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        x = bottom[0]
        if x.num_axes < 2:
            raise self.error("input must have at least 2 axes (num, channels, ...); got shape "
                             "%s" % (x.shape,))
        p = self.layer_param.norm_param
        self.across_spatial = bool(p.across_spatial)
        self.channel_shared = bool(p.channel_shared)
        self.eps = float(p.eps)
        channels = x.shape[1]
        if not self.blobs:
            scale = self.blobs.add_blob() if self.channel_shared else \
                self.blobs.add_blob(channels)
            filler = p.scale_filler if p.HasField("scale_filler") else \
                caffe_pb2.FillerParameter(type="constant", value=1.0)
            fill(scale, filler)
        want = 1 if self.channel_shared else channels
        if self.blobs[0].count != want:
            raise self.error("the scale blob has %d values; expected %d (%s)" % (
                self.blobs[0].count, want,
                "channel_shared" if self.channel_shared else "one per channel"))
        self.cache = None

    def reshape(self, bottom, top):
        if bottom[0].num_axes < 2:
            raise self.error("input must have at least 2 axes; got shape %s"
                             % (bottom[0].shape,))
        top[0].reshape(bottom[0].shape)

    def _scale(self, xp, x):
        s = self.blobs[0].read_data().reshape(-1)
        if self.channel_shared:
            return s.reshape(())
        return s.reshape((1, -1) + (1,) * (x.ndim - 2))

    def _norm(self, xp, x):
        if self.across_spatial:
            axes = tuple(range(1, x.ndim))
        else:
            axes = (1,)
        return xp.sqrt((x * x).sum(axis=axes, keepdims=True) + x.dtype.type(self.eps)), axes

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top)
        xp = get_array_module(x)
        norm, _ = self._norm(xp, x)
        unit = x / norm
        self.cache = (norm, unit)
        top[0].write_data()[...] = unit * self._scale(xp, x)

    def backward(self, top, propagate_down, bottom):
        x = self.backward_input(bottom, top)
        xp = get_array_module(x)
        dy = self.backward_top_diff(top, bottom)
        norm, axes = self._norm(xp, x)
        unit = x / norm
        if self.param_propagate_down[0]:
            g = dy * unit
            ds = g.sum() if self.channel_shared else \
                g.sum(axis=(0,) + tuple(range(2, x.ndim)))
            diff = self.blobs[0].write_diff()
            diff[...] += ds.reshape(diff.shape)
        if propagate_down[0]:
            g = dy * self._scale(xp, x)
            dot = (x * g).sum(axis=axes, keepdims=True)
            bottom[0].write_diff()[...] = (g - x * dot / (norm * norm)) / norm
