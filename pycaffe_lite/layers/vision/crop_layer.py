"""Crop: cut a window the size of a reference blob out of the data (Caffe's CropLayer)."""

import logging

from ...errors import ShapeError
from ...layer import Layer
from ...registry import register_layer

log = logging.getLogger("pycaffe_lite")


@register_layer("Crop")
class CropLayer(Layer):
    """Crop the axes from ``axis`` on to the reference's sizes, starting at ``offset``.

    ``y = x[:, ..., o_a : o_a + r_a, ..., o_last : o_last + r_last]`` where ``r`` is the
    reference's shape; axes before ``axis`` are kept whole. Typical use (FCN): cropping an
    upsampled score map back to the input image's height and width.

    Bottoms: x (the data, any shape) and ref (whose sizes on the cropped axes are the target;
    it must have at least as many axes as x; its values are not read).
    Tops: y, x's shape with the cropped axes replaced by ref's.
    Params: ``crop_param { axis (2)  offset }``: ``axis`` may be negative (counted from the
    end); ``offset`` given zero times (all offsets 0), once (the same offset on every cropped
    axis) or once per cropped axis. Every crop must fit: ``offset + ref size <= x size``.
    Backward: the top gradient lands in the window, zeros elsewhere (x's diff is
    overwritten); ref gets a zero gradient, its values not influencing y (Caffe leaves it
    untouched, and never forces backpropagation into it).
    """

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def allow_force_backward(self, bottom_index):
        return bottom_index == 0

    def setup(self, bottom, top):
        if not self.layer_param.HasField("crop_param"):
            # caffe-future's Crop (FCN's first nets, HED) had no parameters and chose its
            # offsets from the net's geometry; the same file here crops at offset 0.
            log.warning("layer '%s' (Crop) has no crop_param: it crops at offset 0 from axis 2 "
                        "on, as BVLC Caffe does; a net written for caffe-future's or HED's "
                        "Crop, which chose the offsets from the layers between its bottoms, "
                        "needs them written out (crop_param { axis: 2 offset: ... }; see "
                        "docs/fork-layers.md)", self.name)

    def _start_axis(self, x):
        p = self.layer_param.crop_param
        try:
            return x.canonical_axis_index(p.axis)
        except ShapeError:
            raise self.error("crop axis %d is out of range for a bottom of shape %s (%d axes)"
                             % (p.axis, x.shape, x.num_axes)) from None

    def reshape(self, bottom, top):
        x, ref = bottom
        p = self.layer_param.crop_param
        start = self._start_axis(x)
        if top[0] is x or top[0] is ref:
            raise self.error("Crop cannot run in place (its top must be a new blob)")
        if len(p.offset) > 1 and start + len(p.offset) != x.num_axes:
            raise self.error("number of offset values specified must be equal to the number "
                             "of dimensions following axis: got %d offsets for axes %d..%d of "
                             "a bottom of shape %s (expected %d)"
                             % (len(p.offset), start, x.num_axes - 1, x.shape,
                                x.num_axes - start))
        if ref.num_axes < x.num_axes:
            raise self.error("the reference (bottom 1) must have at least as many axes as the "
                             "data (bottom 0): got shapes %s and %s" % (ref.shape, x.shape))
        offsets, shape = [], []
        for i, size in enumerate(x.shape):
            if i < start:
                offsets.append(0)
                shape.append(size)
                continue
            offset = 0 if not len(p.offset) else \
                int(p.offset[0] if len(p.offset) == 1 else p.offset[i - start])
            want = ref.shape[i]
            if offset + want > size:
                raise self.error("the crop for axis %d is out of bounds: offset %d + size %d "
                                 "(bottom 1 shape %s) exceeds the input size %d (bottom 0 "
                                 "shape %s)" % (i, offset, want, ref.shape, size, x.shape))
            offsets.append(offset)
            shape.append(want)
        self.offsets = tuple(offsets)
        self.window = tuple(slice(o, o + n) for o, n in zip(offsets, shape))
        top[0].reshape(shape)

    def forward(self, bottom, top):
        top[0].write_data()[...] = bottom[0].read_data()[self.window]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            dx = bottom[0].write_diff()
            dx[...] = 0
            dx[self.window] = top[0].read_diff()
        if propagate_down[1]:
            bottom[1].write_diff()[...] = 0
