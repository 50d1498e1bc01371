"""PReLU: the parametric rectified linear unit, with a learned slope per channel."""

from ...backend import get_array_module
from ...fillers import fill
from ...proto import caffe_pb2
from ...registry import register_layer
from .inplace_utils import BottomKeepingNeuronLayer


@register_layer("PReLU")
class PReLULayer(BottomKeepingNeuronLayer):
    """y = max(x, 0) + a_c * min(x, 0), with a learned negative slope a_c per channel.

    Bottoms: x of shape (N, C, ...), at least 2 axes; the channels are axis 1.
    Tops: y, same shape; may be computed in place (a copy of x is kept for the backward pass,
    as Caffe does).
    Params: ``prelu_param { filler (constant 0.25) channel_shared (false) }``.
    Blobs: the slopes, shape (C,); with ``channel_shared`` one slope of shape () (a 0-axis blob
    with one element, as Caffe's ``vector<int>(0)`` shape). Given blobs (a saved net) must
    hold C values (1 when shared).

    Backward: d(slope_c) += sum over the batch and positions of dy * x * (x <= 0);
    dx = dy * ((x > 0) + a_c * (x <= 0)).
    """

    def setup(self, bottom, top):
        x = bottom[0]
        if x.num_axes < 2:
            raise self.error(f"the bottom must have at least 2 axes (N, C, ...), got shape "
                             f"{x.shape}")
        p = self.layer_param.prelu_param
        self.channel_shared = bool(p.channel_shared)
        channels = x.shape[1]
        expected = 1 if self.channel_shared else channels
        if len(self.blobs) > 0:
            if len(self.blobs) != 1:
                raise self.error(f"expected 1 parameter blob (the slopes), got {len(self.blobs)}")
            if self.blobs[0].count != expected:
                raise self.error(
                    f"negative slope size is inconsistent with prototxt config: the slope blob "
                    f"has {self.blobs[0].count} values (shape {self.blobs[0].shape}), expected "
                    f"{expected} (channel_shared: {str(self.channel_shared).lower()}, "
                    f"{channels} channels)")
        else:
            slopes = self.blobs.add_blob(*(() if self.channel_shared else (channels,)))
            if p.HasField("filler"):
                filler = p.filler
            else:
                filler = caffe_pb2.FillerParameter(type="constant", value=0.25)
            fill(slopes, filler)
        self.channels = channels

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes < 2:
            raise self.error(f"the bottom must have at least 2 axes (N, C, ...), got shape "
                             f"{x.shape}")
        if not self.channel_shared and x.shape[1] != self.channels:
            raise self.error(f"the bottom has {x.shape[1]} channels (shape {x.shape}), but the "
                             f"layer was set up with {self.channels}")
        self.view_shape = (x.shape[0], x.shape[1], x.count_range(2))
        top[0].reshape(x.shape)

    def _slopes(self):
        """The slopes shaped to broadcast over the (N, C, inner) view."""
        a = self.blobs[0].read_data()
        return a.reshape(1, -1, 1)

    def forward(self, bottom, top):
        x = self.forward_input(bottom, top).reshape(self.view_shape)
        xp = get_array_module(x)
        y = top[0].write_data().reshape(self.view_shape)
        y[...] = xp.maximum(x, 0) + self._slopes() * xp.minimum(x, 0)

    def backward(self, top, propagate_down, bottom):
        x = self.backward_input(bottom, top).reshape(self.view_shape)
        xp = get_array_module(x)
        dy = top[0].read_diff().reshape(self.view_shape)
        # In place, dy and dx share storage: the slope gradient is taken before dx is written.
        if self.param_propagate_down[0]:
            contrib = dy * xp.minimum(x, 0)
            da = self.blobs[0].write_diff()
            if self.channel_shared:
                da += contrib.sum()
            else:
                da += contrib.sum(axis=(0, 2))
        if propagate_down[0]:
            dx = bottom[0].write_diff().reshape(self.view_shape)
            dx[...] = dy * xp.where(x > 0, 1, self._slopes())
