"""Flatten: merge the axes ``axis`` to ``end_axis`` into one, without copying."""

from ...errors import ShapeError
from ...registry import register_layer
from .common_utils import ViewLayer


@register_layer("Flatten")
class FlattenLayer(ViewLayer):
    """Collapse a range of axes into one; the top is a view of the bottom.

    Bottoms: x, any shape.
    Tops: y with axes ``axis`` .. ``end_axis`` (inclusive) of x replaced by their product
    (``end_axis`` one before ``axis``: an axis of 1 inserted at ``axis``, as Caffe's count
    of an empty range); y shares x's data and diff (writing either is seen by the other).
    Params: ``flatten_param { axis (1), end_axis (-1) }``; negative values count from the end.
    In-place computation is not allowed.
    """

    def reshape(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Flatten layer does not allow in-place computation")
        x = bottom[0]
        p = self.layer_param.flatten_param
        try:
            start = x.canonical_axis_index(p.axis)
            end = x.canonical_axis_index(p.end_axis)
        except ShapeError:
            raise self.error("axis %d / end_axis %d out of range for a bottom of shape %s"
                             % (p.axis, p.end_axis, x.shape)) from None
        if end < start - 1:  # one before: Caffe's count(axis, axis) = 1, an axis inserted
            raise self.error("end_axis %d (axis %d) comes before axis %d (axis %d) for a bottom "
                             "of shape %s" % (p.end_axis, end, p.axis, start, x.shape))
        shape = x.shape[:start] + (x.count_range(start, end + 1),) + x.shape[end + 1:]
        self.share_as_view(top[0], x, shape)
