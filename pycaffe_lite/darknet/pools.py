"""Darknet's window pools as Caffe layers: ``[maxpool]`` (a mixin of the converter).

AlexeyAB's ``make_maxpool_layer``: the windows of ``size`` cells start at ``j * stride -
padding / 2`` and skip what lies outside the input; MAX takes their maximum.
"""

from ..ops.pooling import pooled_size
from ..proto import caffe_pb2
from .sections import _Out

PP = caffe_pb2.PoolingParameter


class PoolingSections:
    """``[maxpool]``."""

    def maxpool(self, sec, prev, i):
        name = "maxpool%d" % i
        prev = self.image_input(sec, prev, name)
        for key in ("maxpool_depth", "antialiasing", "maxpool_zero_nonmax"):
            self.refuse(sec, key)
        self.refuse(sec, "out_channels", 1)
        return self._window_pool(sec, prev, name, PP.MAX)

    def _window_pool(self, sec, prev, name, pool):
        stride = sec.get_int("stride", 1)
        sx = sec.get_int("stride_x", stride)
        sy = sec.get_int("stride_y", stride)
        size = sec.get_int("size", stride)
        padding = sec.get_int("padding", size - 1)
        if size < 1 or sx < 1 or sy < 1 or padding < 0:
            raise sec.error("size and stride must be positive and padding non-negative (got "
                            "size=%d stride=%dx%d padding=%d)" % (size, sx, sy, padding))
        plan = []
        for axis, n, s in (("height", prev.h, sy), ("width", prev.w, sx)):
            out = (n + padding - size) // s + 1
            if out < 1:
                raise sec.error("a %d window with padding %d does not fit the input %s %d"
                                % (size, padding, axis, n))
            plan.append(_pool_axis(sec, axis, n, size, s, padding, out))
        (ph, th, ch, oh), (pw, tw, cw, ow) = plan
        lp = self.layer(name, "Pooling", [prev.blob], [name])
        pp = lp.pooling_param
        pp.pool = pool
        pp.kernel_size = size
        if sx == sy:
            pp.stride = sx
        else:
            pp.stride_h, pp.stride_w = sy, sx
        if ph == pw:
            if ph:
                pp.pad = ph
        else:
            pp.pad_h, pp.pad_w = ph, pw
        blob = name
        if (th, tw, ch, cw) != (0, 0, oh, ow):
            # Caffe's pooled map is larger than Darknet's (its windows start at the same
            # places); cut Darknet's out of it.
            lp.top[0] = name + "_full"
            blob = self._cut(prev, name, (th, ch, oh), (tw, cw, ow))
            self._rename_top(blob, name)  # the kept part is the layer's output blob
        return _Out(name, prev.c, oh, ow)

    def _cut(self, prev, name, rows, cols):
        """The part ``first .. first + out`` of the blob ``NAME_full`` along height and width
        (a Crop to the input where that is the size, else Slices); returns the kept blob."""
        (th, ch, oh), (tw, cw, ow) = rows, cols
        full = name + "_full"
        if (oh, ow) == (prev.h, prev.w):
            crop = self.layer(name + "_crop", "Crop", [full, prev.blob], [name + "_cropped"])
            crop.crop_param.axis = 2
            crop.crop_param.offset.extend([th, tw] if th != tw else [th])
            return name + "_cropped"
        blob = full
        for axis, t, c, o in ((2, th, ch, oh), (3, tw, cw, ow)):
            if (t, c) == (0, o):
                continue
            points = [p for p in (t, t + o) if 0 < p < c]
            keep = 1 if t > 0 else 0
            tops = ["%s_%s%d" % (name, "hw"[axis - 2], k) for k in range(len(points) + 1)]
            sl = self.layer("%s_slice_%s" % (name, "hw"[axis - 2]), "Slice", [blob], tops)
            sl.slice_param.axis = axis
            sl.slice_param.slice_point.extend(points)
            self.layer(sl.name + "_silence", "Silence", [t_ for k, t_ in enumerate(tops)
                                                         if k != keep], [])
            blob = tops[keep]
        return blob

    HANDLERS = {"maxpool": maxpool}


def _pool_axis(sec, axis, n, size, stride, padding, out):
    """Caffe's pad for one axis of a Darknet window pool, and the part of Caffe's output that is
    Darknet's: ``(pad, first, caffe_out, out)``.

    Darknet's window ``j`` starts at ``j * stride - padding // 2`` and the map has ``out =
    (n + padding - size) // stride + 1`` windows; both skip what lies outside the input, as
    Caffe's pooling does. Caffe's window ``j`` starts at ``j * stride - pad``, so with
    ``pad = padding // 2 + first * stride`` its window ``j + first`` is Darknet's window ``j``;
    the smallest ``first`` whose Caffe map holds all of Darknet's windows is chosen (Caffe
    needs ``pad < size``).
    """
    start = padding // 2
    first = 0
    while True:
        pad = start + first * stride
        if pad >= size:
            break
        caffe_out = pooled_size(n, size, pad, stride, True)
        if caffe_out >= first + out:
            return pad, first, caffe_out, out
        first += 1
    raise sec.error("size=%d stride=%d padding=%d over an input %s of %d: Darknet's pooling "
                    "windows cannot be reproduced with Caffe's Pooling (it needs a pad "
                    "smaller than the window)" % (size, stride, padding, axis, n), "padding")
