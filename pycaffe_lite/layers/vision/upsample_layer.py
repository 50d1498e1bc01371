"""Upsample: nearest-neighbour upsampling by an integer factor (beyond BVLC Caffe)."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer


@register_layer("Upsample")
class UpsampleLayer(Layer):
    """Repeat every pixel ``scale`` times along height and width, as the community Caffe
    forks' Upsample layer and Darknet's ``[upsample]`` (YOLOv3) do.

    ``y[n, c, i, j] = x[n, c, i // s, j // s]``. Backward: each input pixel's gradient is the
    sum of its ``s x s`` block of the top gradient (the bottom diff is overwritten).

    Bottoms: x ``(N, C, H, W)`` (exactly 4 axes).
    Tops: y ``(N, C, H * scale, W * scale)``.
    Params: ``upsample_param { scale (2) }`` (a pycaffe-lite schema addition; ``scale >= 1``,
    1 copies the input).
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        self.scale = int(self.layer_param.upsample_param.scale)
        if self.scale < 1:
            raise self.error("upsample_param scale must be a positive integer, got %d"
                             % self.scale)

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes != 4:
            raise self.error("input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got shape %s" % (x.shape,))
        if top[0] is x:
            raise self.error("Upsample cannot run in place (its top must be a new blob)")
        n, c, h, w = x.shape
        top[0].reshape(n, c, h * self.scale, w * self.scale)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        xp = get_array_module(x)
        n, c, h, w = x.shape
        s = self.scale
        y = top[0].write_data().reshape(n, c, h, s, w, s)
        y[...] = xp.broadcast_to(x[:, :, :, None, :, None], y.shape)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].write_diff()
        n, c, h, w = dx.shape
        s = self.scale
        dy = top[0].read_diff().reshape(n, c, h, s, w, s)
        dy.sum(axis=(3, 5), out=dx)
