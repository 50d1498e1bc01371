"""Region: Darknet's [region] detection head (YOLOv2) as a layer (beyond BVLC Caffe)."""

from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer
from .yolo_layer import anchor_pairs, sigmoid


@register_layer("Region")
class RegionLayer(Layer):
    """The raw outputs of a YOLOv2 head, with Darknet's output activations applied.

    The bottom holds, for each of the ``num`` anchors, ``coords + 1 + classes`` channels:
    the box coordinates, the objectness and the class scores; channel ``a * (coords + 1 +
    classes) + e`` is entry ``e`` of anchor ``a`` (Darknet's layout). The top has the same
    layout, with what Darknet's ``forward_region_layer`` computes at inference:

    - entries 0 and 1 (x, y) through the logistic function, the other coordinates unchanged;
    - the objectness (entry ``coords``) through the logistic function, unless ``background``;
    - with ``softmax``: a softmax over the class scores of each anchor and cell (over the
      objectness entry and the classes when ``background``); without it, the logistic
      function on each class score.

    Bottoms: x ``(N, num * (coords + 1 + classes), H, W)``. Tops: y, same shape; may be
    computed in place.
    Params: ``region_param { classes (20) coords (4) num (1) anchors softmax (false)
    background (false) }`` (a pycaffe-lite schema addition); ``anchors`` lists ``num`` width,
    height pairs in grid cells, for decoding.
    Backward: the derivatives of the above (``s * (1 - s)`` for the logistic entries, the
    softmax Jacobian ``y * (dy - sum(dy * y))`` over each softmax group, 1 elsewhere).
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.region_param
        self.classes = int(p.classes)
        self.coords = int(p.coords)
        self.num = int(p.num)
        if self.num < 1:
            raise self.error("region_param num (anchors per cell) must be at least 1, got %d"
                             % self.num)
        if self.coords < 2:
            raise self.error("region_param coords must be at least 2 (x and y), got %d"
                             % self.coords)
        self.softmax = bool(p.softmax)
        self.background = bool(p.background)
        self.anchors = anchor_pairs(self, p.anchors, self.num, "region_param anchors")
        self.entries = self.coords + 1 + self.classes
        # Entries through the logistic function, and the softmax group's first entry.
        logistic = [0, 1]
        if not self.background:
            logistic.append(self.coords)
        first_class = self.coords + 1
        if self.softmax:
            self.softmax_start = self.coords if self.background else self.coords + 1
        else:
            self.softmax_start = None
            logistic.extend(range(first_class, self.entries))
        self.logistic = logistic
        self.cache = None

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes != 4:
            raise self.error("input must have 4 axes (num, channels, height, width); got shape "
                             "%s" % (x.shape,))
        expected = self.num * self.entries
        if x.shape[1] != expected:
            raise self.error("input has %d channels; expected %d = %d anchors x (%d coords + 1 "
                             "+ %d classes) (check the filters of the convolution before the "
                             "head)" % (x.shape[1], expected, self.num, self.coords,
                                        self.classes))
        top[0].reshape(x.shape)

    def _view(self, arr):
        n, _, h, w = arr.shape
        return arr.reshape(n, self.num, self.entries, h, w)

    def forward(self, bottom, top):
        x = self._view(bottom[0].read_data())
        xp = get_array_module(x)
        s = sigmoid(xp, x[:, :, self.logistic])
        soft = None
        if self.softmax_start is not None:
            z = x[:, :, self.softmax_start:]
            soft = xp.exp(z - z.max(axis=2, keepdims=True))
            soft /= soft.sum(axis=2, keepdims=True)
        self.cache = (s, soft)
        y = self._view(top[0].write_data())
        if top[0] is not bottom[0]:
            y[...] = x
        y[:, :, self.logistic] = s
        if soft is not None:
            y[:, :, self.softmax_start:] = soft

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        if self.cache is None or self.cache[0].shape[0] != bottom[0].shape[0] or \
                self.cache[0].shape[3:] != bottom[0].shape[2:]:
            raise self.error("backward needs a forward pass on a bottom of shape %s first"
                             % (bottom[0].shape,))
        s, soft = self.cache
        dy = self._view(top[0].read_diff())
        dx = dy.copy()
        dx[:, :, self.logistic] = dy[:, :, self.logistic] * s * (1 - s)
        if soft is not None:
            g = dy[:, :, self.softmax_start:]
            dx[:, :, self.softmax_start:] = soft * (g - (g * soft).sum(axis=2, keepdims=True))
        self._view(bottom[0].write_diff())[...] = dx
