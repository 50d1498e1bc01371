"""Yolo: Darknet's [yolo] detection head (YOLOv3) as a layer (beyond BVLC Caffe)."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer


def sigmoid(xp, x):
    """The logistic function, computed as 0.5 * tanh(0.5 x) + 0.5 (no overflow)."""
    s = xp.tanh(0.5 * x)
    s *= 0.5
    s += 0.5
    return s


def anchor_pairs(layer, values, count, what):
    """``values`` (a flat list w0, h0, w1, h1, ...) as ``count`` pairs, checked."""
    values = [float(v) for v in values]
    if values and len(values) != 2 * count:
        raise layer.error("%s lists %d anchor values; expected %d (a width and a height for "
                          "each of the %d anchors)" % (what, len(values), 2 * count, count))
    return [(values[2 * i], values[2 * i + 1]) for i in range(len(values) // 2)]


@register_layer("Yolo")
class YoloLayer(Layer):
    """The raw outputs of a YOLOv3 head, with Darknet's output activations applied.

    The bottom holds, for each of the ``A`` anchors this head predicts (``len(mask)``, or
    ``num`` when mask is empty), ``5 + classes`` channels: ``tx, ty, tw, th, objectness,
    class scores``; channel ``a * (5 + classes) + e`` is entry ``e`` of anchor ``a`` (Darknet's
    layout). The top has the same layout, with

    - ``x, y = scale_x_y * sigmoid(t) - (scale_x_y - 1) / 2`` (``sigmoid(t)`` when
      scale_x_y is 1, as in pjreddie's Darknet);
    - ``tw, th`` unchanged (Darknet decodes them as ``exp(t) * anchor / input size``);
    - objectness and class scores through the logistic function,

    which is what Darknet's ``forward_yolo_layer`` leaves in its output at inference, so a
    converted model's head reads the same numbers as Darknet's. With ``new_coords: true``
    (AlexeyAB's ``new_coords=1``; the convolution before ends with a logistic activation)
    nothing goes through the logistic function: x and y are ``scale_x_y * t - (scale_x_y -
    1) / 2``, every other entry is the input's (Darknet decodes w and h as ``(2 t)^2 *
    anchor / input size`` then). Decoding into boxes (cell
    offsets, anchors, thresholds, NMS) is left to the caller; the anchors are parameters for
    that purpose.

    Bottoms: x ``(N, A * (5 + classes), H, W)``. Tops: y, same shape; may be computed in place.
    Params: ``yolo_param { classes (20) num (1) mask anchors scale_x_y (1) ignore_thresh (0.5)
    truth_thresh (1) new_coords (false) }`` (a pycaffe-lite schema addition): ``anchors``
    lists ``num`` width, height pairs in input pixels, ``mask`` the indices of this head's
    anchors; the thresholds are Darknet's training settings, carried, not used.
    Backward: the element-wise derivative of the above (``scale_x_y * s * (1 - s)`` for x and
    y, ``s * (1 - s)`` for the logistic entries, 1 for tw and th; with new_coords
    ``scale_x_y`` for x and y, 1 elsewhere).
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.yolo_param
        self.classes = int(p.classes)
        self.num = int(p.num)
        if self.num < 1:
            raise self.error("yolo_param num (the number of anchors) must be at least 1, got %d"
                             % self.num)
        self.mask = list(p.mask) or list(range(self.num))
        bad = [m for m in self.mask if m >= self.num]
        if bad:
            raise self.error("yolo_param mask %s refers to anchor(s) %s, but num is %d (anchors "
                             "0..%d)" % (self.mask, bad, self.num, self.num - 1))
        self.anchors = anchor_pairs(self, p.anchors, self.num, "yolo_param anchors")
        self.scale_x_y = float(p.scale_x_y)
        self.new_coords = bool(p.new_coords)
        self.entries = 5 + self.classes
        self.deriv = None

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes != 4:
            raise self.error("input must have 4 axes (num, channels, height, width); got shape "
                             "%s" % (x.shape,))
        expected = len(self.mask) * self.entries
        if x.shape[1] != expected:
            raise self.error("input has %d channels; expected %d = %d anchors x (5 + %d "
                             "classes) (check the filters of the convolution before the head)"
                             % (x.shape[1], expected, len(self.mask), self.classes))
        top[0].reshape(x.shape)

    def _view(self, arr):
        n, _, h, w = arr.shape
        return arr.reshape(n, len(self.mask), self.entries, h, w)

    def forward(self, bottom, top):
        x = self._view(bottom[0].read_data())
        xp = get_array_module(x)
        if self.new_coords:
            self._forward_new_coords(xp, x, top)
            return
        s = sigmoid(xp, x)
        deriv = s * (1 - s)
        xy = s[:, :, 0:2]
        if self.scale_x_y != 1:
            deriv[:, :, 0:2] *= self.scale_x_y
            xy = xy * self.scale_x_y - 0.5 * (self.scale_x_y - 1)
        deriv[:, :, 2:4] = 1
        self.deriv = deriv
        # Written after everything is read: the top may be the bottom (in place).
        y = self._view(top[0].write_data())
        y[:, :, 2:4] = x[:, :, 2:4]
        y[:, :, 0:2] = xy
        y[:, :, 4:] = s[:, :, 4:]

    def _forward_new_coords(self, xp, x, top):
        deriv = xp.ones_like(x)
        deriv[:, :, 0:2] = self.scale_x_y
        self.deriv = deriv
        xy = x[:, :, 0:2] * self.scale_x_y - 0.5 * (self.scale_x_y - 1)
        y = self._view(top[0].write_data())
        y[:, :, 2:] = x[:, :, 2:]
        y[:, :, 0:2] = xy

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.deriv is None or self.deriv.size != top[0].count:
            raise self.error("backward needs a forward pass on a bottom of shape %s first"
                             % (bottom[0].shape,))
        dy = self._view(top[0].read_diff())
        self._view(bottom[0].write_diff())[...] = dy * self.deriv
