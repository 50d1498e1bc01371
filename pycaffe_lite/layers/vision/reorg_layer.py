"""Reorg: Darknet's space-to-depth reorganisation (YOLOv2's passthrough; the YOLO ports)."""

from ...layer import Layer
from ...registry import register_layer


def darknet_reorg(x, stride, inverse=False):
    """Darknet's ``reorg_cpu`` on an ``(N, C, H, W)`` array, as a new array of the same size.

    Darknet reads the input's memory as ``(N, C / s^2, H * s, W * s)`` and writes element
    ``[n, (a * s + b) * C / s^2 + c, j, i]`` of the ``(N, C, H, W)`` output from
    ``[n, c, j * s + a, i * s + b]``; ``inverse`` undoes it. The caller gives the result its
    shape: ``(N, C * s^2, H / s, W / s)`` forward, ``(N, C / s^2, H * s, W * s)`` inverse.
    """
    n, c, h, w = x.shape
    s = stride
    out_c = c // (s * s)
    if not inverse:
        v = x.reshape(n, out_c, h, s, w, s)  # [n, c2, j, a, i, b]
        return v.transpose(0, 3, 5, 1, 2, 4).reshape(x.shape)
    v = x.reshape(n, s, s, out_c, h, w)  # [n, a, b, c2, j, i]
    return v.transpose(0, 3, 4, 1, 5, 2).reshape(x.shape)


@register_layer("Reorg")
class ReorgLayer(Layer):
    """Darknet's ``[reorg]``, as the YOLO ports of Caffe (MobileNet-YOLO, Intel Caffe) and
    OpenCV run it: every ``stride x stride`` block of the map moves into channels, in
    Darknet's element order (see :func:`darknet_reorg`; not the same order as a plain
    space-to-depth). ``reverse: true`` is the inverse (depth to space).

    Backward: the inverse permutation of the top gradient (the fork's backward reads a
    never-written buffer and gives zeros; here it is the true gradient).

    Bottoms: x ``(N, C, H, W)``: forward, C divisible by ``stride^2`` and H and W by
    ``stride``; reverse, C divisible by ``stride^2``.
    Tops: ``(N, C * s^2, H / s, W / s)``, or ``(N, C / s^2, H * s, W * s)`` with reverse.
    Params: ``reorg_param { stride (required, >= 1) reverse (false) }``.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.reorg_param
        if not p.HasField("stride") or p.stride < 1:
            raise self.error("reorg_param stride is required and must be >= 1")
        self.stride = int(p.stride)
        self.reverse = bool(p.reverse)

    def reshape(self, bottom, top):
        x = bottom[0]
        if top[0] is x:
            raise self.error("Reorg cannot run in place (its top must be a new blob)")
        if x.num_axes != 4:
            raise self.error("input must have 4 axes (num, channels, height, width); got shape "
                             "%s" % (x.shape,))
        n, c, h, w = x.shape
        s = self.stride
        # Darknet's indexing needs C divisible by s^2 in both directions.
        if c % (s * s) or (not self.reverse and (h % s or w % s)):
            raise self.error("input shape %s does not divide by stride %d (channels by %d%s)"
                             % (x.shape, s, s * s,
                                "" if self.reverse else ", height and width by %d" % s))
        if self.reverse:
            top[0].reshape(n, c // (s * s), h * s, w * s)
        else:
            top[0].reshape(n, c * s * s, h // s, w // s)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        top[0].write_data()[...] = darknet_reorg(x, self.stride, self.reverse).reshape(
            top[0].shape)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].read_diff().reshape(bottom[0].shape)
        bottom[0].write_diff()[...] = darknet_reorg(dy, self.stride, not self.reverse)
