"""ShuffleChannel: interleave the channels of groups (the ShuffleNet fork)."""

from ...layer import Layer
from ...registry import register_layer


@register_layer("ShuffleChannel")
class ShuffleChannelLayer(Layer):
    """ShuffleNet's channel shuffle, as the ShuffleNet fork of Caffe (farmingyard/ShuffleNet)
    defines it: the C channels, seen as ``group`` rows of ``C / group``, are transposed, so
    output channel ``j * group + i`` is input channel ``i * (C / group) + j``.

    Backward: the inverse permutation of the top gradient.

    Bottoms: x ``(N, C, ...)`` with C a multiple of ``group``.
    Tops: y of the same shape.
    Params: ``shuffle_channel_param { group (1) }`` (the fork's field number, 164).
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        self.group = int(self.layer_param.shuffle_channel_param.group)
        if self.group <= 0:
            raise self.error("shuffle_channel_param group must be > 0, got %d" % self.group)

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes < 2:
            raise self.error("input must have at least 2 axes (num, channels, ...), got shape "
                             "%s" % (x.shape,))
        channels = x.shape[1]
        if channels % self.group:
            raise self.error("the %d channels of the input (shape %s) are not a multiple of "
                             "group %d" % (channels, x.shape, self.group))
        if top[0] is x:
            raise self.error("ShuffleChannel cannot run in place (its top must be a new blob)")
        top[0].reshape(x.shape)

    def _permute(self, src, dst, rows):
        """``dst`` = ``src`` with its channels, as ``rows`` x ``C / rows``, transposed."""
        n, c = src.shape[:2]
        rest = src.shape[2:]
        dst.reshape((n, c // rows, rows) + rest)[...] = \
            src.reshape((n, rows, c // rows) + rest).swapaxes(1, 2)

    def forward(self, bottom, top):
        self._permute(bottom[0].read_data(), top[0].write_data(), self.group)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            dx = bottom[0].write_diff()
            self._permute(top[0].read_diff(), dx, dx.shape[1] // self.group)
