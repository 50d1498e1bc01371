"""Concat: join blobs along one axis."""

from ...layer import Layer
from ...registry import register_layer
from .common_utils import check_axis_or_legacy, legacy_axis


@register_layer("Concat")
class ConcatLayer(Layer):
    """Concatenate the bottoms along ``axis``.

    Bottoms: x_1 ... x_K (K >= 1), with equal numbers of axes and equal shapes except on the
    concatenation axis.
    Tops: y, of the bottoms' shape with the concatenation axis the sum of theirs. With one
    bottom, y shares its data and diff.
    Params: ``concat_param { axis (1) }``, or the legacy ``concat_dim`` (non-negative; not
    both).
    """

    min_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        check_axis_or_legacy(self, self.layer_param.concat_param, "concat_dim")

    def reshape(self, bottom, top):
        axis = legacy_axis(self, bottom[0], self.layer_param.concat_param, "concat_dim")
        self.axis = axis
        shape = list(bottom[0].shape)
        for i, b in enumerate(bottom[1:], 1):
            if b.num_axes != bottom[0].num_axes:
                raise self.error("All inputs must have the same #axes: bottom %d has shape %s, "
                                 "bottom 0 has shape %s" % (i, b.shape, bottom[0].shape))
            for j in range(len(shape)):
                if j != axis and b.shape[j] != shape[j]:
                    raise self.error(
                        "All inputs must have the same shape, except at concat_axis (%d): "
                        "bottom %d has shape %s, bottom 0 has shape %s"
                        % (axis, i, b.shape, bottom[0].shape))
            shape[axis] += b.shape[axis]
        top[0].reshape(shape)
        if len(bottom) == 1:
            top[0].share_data(bottom[0])
            top[0].share_diff(bottom[0])

    def _slices(self, bottom):
        lead = (slice(None),) * self.axis
        offset = 0
        for b in bottom:
            size = b.shape[self.axis]
            yield lead + (slice(offset, offset + size),)
            offset += size

    def forward(self, bottom, top):
        if len(bottom) == 1:
            return
        y = top[0].write_data()
        for b, index in zip(bottom, self._slices(bottom)):
            y[index] = b.read_data()

    def backward(self, top, propagate_down, bottom):
        if len(bottom) == 1:
            return
        dy = top[0].read_diff()
        for i, (b, index) in enumerate(zip(bottom, self._slices(bottom))):
            if propagate_down[i]:
                b.write_diff()[...] = dy[index]
