"""Interp: bilinear resizing with the corners aligned (the DeepLab / PSPNet fork)."""

import numpy as np

from ... import backend
from ...backend import get_array_module
from ...layer import Layer
from ...registry import register_layer


def axis_taps(size_in, size_out, offset):
    """The fork's interpolation taps along one axis: for each output position ``o``, the two
    input positions ``i0``, ``i1`` and weights ``w0``, ``w1`` with
    ``y[o] = w0 * x[i0] + w1 * x[i1]``.

    ``size_in`` is the (cropped) input extent that starts at ``offset`` in the blob. The source
    position is ``o * (size_in - 1) / (size_out - 1)`` (corners aligned; 0 for a single
    output), worked in float32 as the fork does, then split into its integer part ``i0`` and
    fraction ``w1``; ``i1 = i0 + 1`` except at the last input position. Equal sizes copy.
    """
    out = np.arange(size_out)
    if size_in == size_out:
        index = out + offset
        return index, index, np.ones(size_out, np.float32), np.zeros(size_out, np.float32)
    ratio = np.float32(size_in - 1) / np.float32(size_out - 1) if size_out > 1 \
        else np.float32(0)
    position = ratio * out.astype(np.float32)
    i0 = position.astype(np.int64)  # truncation, as the fork's int conversion
    w1 = (position - i0.astype(np.float32)).astype(np.float32)
    # 1 - w1 in the blob's type, as the fork's Dtype(1.) - lambda: exact in float64 here,
    # and rounded once when cast to float32
    w0 = 1.0 - w1.astype(np.float64)
    step = (i0 < size_in - 1).astype(np.int64)
    return i0 + offset, i0 + step + offset, w0, w1


def _matrix(i0, i1, w0, w1, size_in, dtype):
    """The (size_out, size_in) matrix of the taps (for the backward, its transpose)."""
    m = np.zeros((len(i0), size_in), dtype)
    rows = np.arange(len(i0))
    np.add.at(m, (rows, i0), w0.astype(dtype))
    np.add.at(m, (rows, i1), w1.astype(dtype))
    return m


@register_layer("Interp")
class InterpLayer(Layer):
    """Bilinear resizing of the spatial axes with the corners aligned, as the DeepLab (v2) and
    PSPNet forks of Caffe define it (their ``interp_layer`` and ``caffe_cpu_interp2``).

    The input is first cropped by ``-pad_beg`` at the start and ``-pad_end`` at the end of
    both spatial axes (only padding <= 0 exists in the fork). Output size, from the first of
    these that applies (as the fork): ``shrink_factor`` alone: ``(in - 1) / shrink + 1``
    (integer division); ``zoom_factor`` alone: ``in + (in - 1) * (zoom - 1)``; ``height`` and
    ``width``; both factors: shrink, then zoom. Output position ``o`` samples the cropped input
    at ``o * (in - 1) / (out - 1)`` (0 for a single output), bilinearly, with the fork's
    float32 arithmetic; equal sizes copy.

    Backward: the adjoint (each input element gets the weighted top gradients it fed).

    Bottoms: x ``(N, C, H, W)``.
    Tops: ``(N, C, H_out, W_out)``.
    Params: ``interp_param { zoom_factor (1) shrink_factor (1) height (0) width (0)
    pad_beg (0) pad_end (0) }`` (a fork field: see :mod:`pycaffe_lite.proto.fork_fields` for its
    number).
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.interp_param
        self.pad_beg, self.pad_end = int(p.pad_beg), int(p.pad_end)
        if self.pad_beg > 0 or self.pad_end > 0:
            raise self.error("interp_param supports only padding <= 0 (cropping), got "
                             "pad_beg %d, pad_end %d" % (self.pad_beg, self.pad_end))
        self._taps = None

    def _output_size(self, h_in, w_in):
        p = self.layer_param.interp_param
        shrink, zoom = p.HasField("shrink_factor"), p.HasField("zoom_factor")
        if shrink and p.shrink_factor < 1:
            raise self.error("interp_param shrink_factor must be >= 1, got %d" % p.shrink_factor)
        if zoom and p.zoom_factor < 1:
            raise self.error("interp_param zoom_factor must be >= 1, got %d" % p.zoom_factor)
        if shrink and not zoom:
            return (h_in - 1) // p.shrink_factor + 1, (w_in - 1) // p.shrink_factor + 1
        if zoom and not shrink:
            return (h_in + (h_in - 1) * (p.zoom_factor - 1),
                    w_in + (w_in - 1) * (p.zoom_factor - 1))
        if p.HasField("height") and p.HasField("width"):
            return int(p.height), int(p.width)
        if shrink and zoom:
            h = (h_in - 1) // p.shrink_factor + 1
            w = (w_in - 1) // p.shrink_factor + 1
            return h + (h - 1) * (p.zoom_factor - 1), w + (w - 1) * (p.zoom_factor - 1)
        raise self.error("interp_param must give zoom_factor, shrink_factor, or both height and "
                         "width")

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes != 4:
            raise self.error("input must have 4 axes (num, channels, height, width), got "
                             "shape %s" % (x.shape,))
        if top[0] is x:
            raise self.error("Interp cannot run in place (its top must be a new blob)")
        n, c, h, w = x.shape
        h_in, w_in = h + self.pad_beg + self.pad_end, w + self.pad_beg + self.pad_end
        if h_in <= 0 or w_in <= 0:
            raise self.error("the cropped input is empty: %d x %d after pad_beg %d and pad_end "
                             "%d on a %d x %d input" % (h_in, w_in, self.pad_beg, self.pad_end,
                                                        h, w))
        h_out, w_out = self._output_size(h_in, w_in)
        if h_out <= 0 or w_out <= 0:
            raise self.error("output size must be positive, got %d x %d" % (h_out, w_out))
        xp = backend.xp()
        key = (h, w, h_out, w_out, x.dtype, xp)
        if self._taps is None or self._taps[0] != key:
            # the taps depend on the shapes alone: made here, on the host, when a shape
            # changes, and kept in the current mode's arrays (a forward uploads nothing)
            offset = -self.pad_beg
            (r0, r1, rw0, rw1), (c0, c1, cw0, cw1) = (axis_taps(h_in, h_out, offset),
                                                      axis_taps(w_in, w_out, offset))
            dtype = x.dtype
            self._taps = (key,) + tuple(xp.asarray(a) for a in (
                r0, r1, rw0.astype(dtype)[:, None], rw1.astype(dtype)[:, None], c0, c1,
                cw0.astype(dtype), cw1.astype(dtype), _matrix(r0, r1, rw0, rw1, h, dtype),
                _matrix(c0, c1, cw0, cw1, w, dtype)))
        top[0].reshape(n, c, h_out, w_out)

    def forward(self, bottom, top):
        x = bottom[0].read_data()
        r0, r1, rw0, rw1, c0, c1, cw0, cw1 = self._taps[1:9]
        # the fork's order of operations: h0 * (w0 * a + w1 * b) + h1 * (w0 * c + w1 * d)
        across = x[..., c0] * cw0 + x[..., c1] * cw1
        y = top[0].write_data()
        y[...] = rw0 * across[..., r0, :] + rw1 * across[..., r1, :]

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        dy = top[0].read_diff()
        xp = get_array_module(dy)
        rows, cols = self._taps[9:]
        bottom[0].write_diff()[...] = xp.matmul(xp.matmul(rows.T, dy), cols)
