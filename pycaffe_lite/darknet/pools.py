"""Darknet's window pools as Caffe layers: ``[maxpool]`` (also with ``maxpool_depth``, a
maximum across channels) and AlexeyAB's ``[local_avgpool]`` (a mixin of the converter).

Both are AlexeyAB's ``make_maxpool_layer``: the windows of ``size`` cells start at ``j * stride
- padding / 2`` and skip what lies outside the input; MAX takes their maximum, local_avgpool
the sum of the cells inside the input divided by how many there are (``forward_local_avgpool_
layer``).
"""

import numpy as np

from ..ops.pooling import pooled_size
from ..proto import caffe_pb2
from .sections import _Out

PP = caffe_pb2.PoolingParameter
EP = caffe_pb2.EltwiseParameter


class PoolingSections:
    """``[maxpool]`` and ``[local_avgpool]``."""

    def maxpool(self, sec, prev, i):
        name = "maxpool%d" % i
        prev = self.image_input(sec, prev, name)
        for key in ("antialiasing", "maxpool_zero_nonmax"):
            self.refuse(sec, key)
        if sec.get_int("maxpool_depth", 0):
            return self._maxpool_depth(sec, prev, name)
        sec.get_int("out_channels", 1)  # (read by parse_maxpool; used with maxpool_depth only)
        return self._window_pool(sec, prev, name, PP.MAX)

    def local_avgpool(self, sec, prev, i):
        name = "local_avgpool%d" % i
        prev = self.image_input(sec, prev, name)
        return self._window_pool(sec, prev, name, PP.AVE)

    def _maxpool_depth(self, sec, prev, name):
        """forward_maxpool_layer with maxpool_depth: output channel ``g`` (of ``out_channels``)
        is the maximum over input channels ``g, g + out_channels, g + 2 out_channels, ...`` at
        each position (size, stride and padding are read, not used): the channels in blocks of
        ``out_channels`` (Slice), their Eltwise MAX, the last, shorter block's with the first
        channels only."""
        for key in ("stride", "stride_x", "stride_y", "size", "padding"):
            sec.get_int(key, 1)  # (read by parse_maxpool, not used with maxpool_depth)
        oc = sec.get_int("out_channels", 1)
        c = prev.c
        if oc < 1:
            raise sec.error("out_channels=%d with maxpool_depth: Darknet's output would have no "
                            "channels" % oc, "out_channels")
        if oc > c:
            raise sec.error("out_channels=%d with maxpool_depth is more than the input's %d "
                            "channels (Darknet gives -FLT_MAX in the channels no input channel "
                            "falls in)" % (oc, c), "out_channels")
        full, rest = divmod(c, oc)
        if full == 1 and not rest:
            return prev  # (one block: the input itself)
        points = [oc * k for k in range(1, full + (1 if rest else 0))]
        tops = ["%s_block%d" % (name, k) for k in range(len(points) + 1)]
        sl = self.layer(name + "_blocks", "Slice", [prev.blob], tops)
        sl.slice_param.axis = 1
        sl.slice_param.slice_point.extend(points)
        blocks, last = tops[:full], tops[full:]
        if not rest:
            lp = self.layer(name, "Eltwise", blocks, [name])
            lp.eltwise_param.operation = EP.MAX
            return _Out(name, oc, prev.h, prev.w)
        top = blocks[0]
        if full > 1:
            top = name + "_full"
            lp = self.layer(top, "Eltwise", blocks, [top])
            lp.eltwise_param.operation = EP.MAX
        # the first ``rest`` channels also take the last block's maximum
        head, tail = name + "_head", name + "_tail"
        sp = self.layer(name + "_split", "Slice", [top], [head, tail])
        sp.slice_param.axis = 1
        sp.slice_param.slice_point.append(rest)
        lp = self.layer(name + "_head_max", "Eltwise", [head, last[0]], [name + "_head_max"])
        lp.eltwise_param.operation = EP.MAX
        cat = self.layer(name, "Concat", [name + "_head_max", tail], [name])
        cat.concat_param.axis = 1
        return _Out(name, oc, prev.h, prev.w)

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
        factors = [None, None]
        if pool == PP.AVE:  # Darknet divides by the cells inside the input
            factors = [_avg_factors(prev.h, size, sy, ph, th, oh),
                       _avg_factors(prev.w, size, sx, pw, tw, ow)]
        blob = name
        if (th, tw, ch, cw) != (0, 0, oh, ow) or any(f is not None for f in factors):
            lp.top[0] = blob = name + "_full"
        if (th, tw, ch, cw) != (0, 0, oh, ow):
            # Caffe's pooled map is larger than Darknet's (its windows start at the same
            # places); cut Darknet's out of it.
            blob = self._cut(prev, name, (th, ch, oh), (tw, cw, ow))
        for axis, f in ((2, factors[0]), (3, factors[1])):
            if f is not None:
                blob = self._rescale(blob, name, axis, f)
        if blob != name:
            self._rename_top(blob, name)  # the last part is the layer's output blob
        return _Out(name, prev.c, oh, ow)

    def _rescale(self, blob, name, axis, factors):
        """``blob`` with its rows (``axis`` 2) or columns (3) multiplied by ``factors`` (one
        each): the runs of equal factors sliced apart, those not 1 scaled by a Power, joined
        again. Returns the new blob."""
        runs = []  # [first, end, factor]
        for k, f in enumerate(factors):
            if runs and runs[-1][2] == f:
                runs[-1][1] = k + 1
            else:
                runs.append([k, k + 1, f])
        tag = "%s_%s" % (name, "hw"[axis - 2])
        tops = ["%s_part%d" % (tag, k) for k in range(len(runs))]
        sl = self.layer(tag + "_parts", "Slice", [blob], tops)
        sl.slice_param.axis = axis
        sl.slice_param.slice_point.extend(r[0] for r in runs[1:])
        parts = []
        for top, (_, _, f) in zip(tops, runs):
            if f != 1.0:
                lp = self.layer(top + "_scaled", "Power", [top], [top + "_scaled"])
                lp.power_param.scale = f
                top = top + "_scaled"
            parts.append(top)
        cat = self.layer(tag + "_counted", "Concat", parts, [tag + "_counted"])
        cat.concat_param.axis = axis
        return tag + "_counted"

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

    HANDLERS = {"maxpool": maxpool, "local_avgpool": local_avgpool}


def _avg_factors(n, size, stride, pad, first, out):
    """Per Darknet window along one axis: Caffe's AVE divisor (the window clipped to the padded
    input, ``min(start + size, n + pad) - start``) over Darknet's (the cells inside the
    input), so that Caffe's average times it is Darknet's; None where all are 1."""
    starts = (np.arange(out) + first) * stride - pad
    caffe = np.minimum(starts + size, n + pad) - starts
    darknet = np.minimum(starts + size, n) - np.maximum(starts, 0)
    factors = [float(np.float32(a / b)) for a, b in zip(caffe, darknet)]
    return None if all(f == 1.0 for f in factors) else factors


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
