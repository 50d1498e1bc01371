"""Split: hand one blob to several consumers; gradients from all of them are summed."""

from ...layer import Layer
from ...registry import register_layer


@register_layer("Split")
class SplitLayer(Layer):
    """Copies of one blob for several layers (inserted by the net where a blob feeds many).

    Bottoms: x, any shape.
    Tops: one or more blobs of x's shape that share x's data (no copy); each keeps its own
    diff, and the bottom's diff is the sum of the tops' diffs.
    Params: none. In-place computation is not allowed.
    """

    exact_num_bottom_blobs = 1
    min_num_top_blobs = 1

    def reshape(self, bottom, top):
        for i, t in enumerate(top):
            if t is bottom[0]:
                raise self.error("Split layer does not allow in-place computation (top %d is "
                                 "the bottom)" % i)
            t.reshape(bottom[0].shape)
            t.share_data(bottom[0])

    def forward(self, bottom, top):
        # The tops already share the bottom's data (see reshape, which Forward runs first);
        # sharing again covers a bottom whose storage was replaced in between.
        for t in top:
            t.share_data(bottom[0])

    def inference_forward(self, bottom, top):
        """Forward in a net that runs no backward here (see :mod:`pycaffe_lite.net_fold`):
        nothing to do while every top still shares the bottom's data and shape."""
        if all(t.shares_data_with(bottom[0]) for t in top):
            return 0.0
        return self.Forward(bottom, top)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dx = bottom[0].write_diff()
        dx[...] = top[0].read_diff()
        for t in top[1:]:
            dx += t.read_diff()
