"""Scale: multiply by a (learned or given) scale blob broadcast along the other axes, with an
optional learned bias."""

from ...backend import get_array_module
from ...fillers import fill
from ...layer import Layer
from ...ops.gpu import channels as gpu_channels
from ...ops.gpu import on_gpu
from ...ops.gpu._util import kernel_dtype
from ...proto import caffe_pb2
from ...registry import register_layer
from .common_utils import broadcast_dims, broadcast_param_shape


@register_layer("Scale")
class ScaleLayer(Layer):
    """y = x * s (+ b), where s covers the axes ``axis`` .. ``axis + s.num_axes - 1`` of x and
    is broadcast along the axes before and after; b, when ``bias_term``, has s's shape.

    Bottoms: x, any shape; optionally s (the scale, instead of a learned blob) whose shape
    matches x's from ``axis`` on (a scalar s, with no axes, scales everything).
    Tops: y, x's shape; may be computed in place (x is then kept for the gradient of s).
    Params: ``scale_param { axis (1), num_axes (1; -1 = all remaining axes; only used for the
    learned blob), filler (constant 1 when absent), bias_term (false), bias_filler (constant
    0) }``; negative ``axis`` counts from the end.
    Blobs, in Caffe's order: the scale (one bottom only), of shape
    ``x.shape[axis:axis + num_axes]``; then the bias when ``bias_term``, of the scale's shape
    (with two bottoms: ``x.shape[axis:axis + s.num_axes]``).
    """

    min_num_bottom_blobs = 1
    max_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.scale_param
        x = bottom[0]
        if len(bottom) == 1 and not self.blobs:
            shape = broadcast_param_shape(self, x, p.axis, p.num_axes, "scale")
            scale = self.blobs.add_blob(*shape)
            filler = p.filler
            if not p.HasField("filler"):
                filler = caffe_pb2.FillerParameter(type="constant", value=1.0)
            fill(scale, filler)
        self.bias_index = None
        if p.bias_term:
            # As Caffe: the bias is created unless the blobs given with the layer include it.
            if len(self.blobs) + len(bottom) < 3:
                num_axes = bottom[1].num_axes if len(bottom) > 1 else p.num_axes
                shape = broadcast_param_shape(self, x, p.axis, num_axes, "bias")
                fill(self.blobs.add_blob(*shape), p.bias_filler)
            self.bias_index = len(self.blobs) - 1
        expected = (1 if len(bottom) == 1 else 0) + (1 if p.bias_term else 0)
        if len(self.blobs) != expected:
            raise self.error("expected %d parameter blob(s) (%d bottom(s), bias_term: %s), "
                             "got %d" % (expected, len(bottom), p.bias_term, len(self.blobs)))
        self._temp, self._temp_own = None, False

    # A callable (blob -> array or None) set by the net: the values of this layer's bottom as
    # the layer before keeps them already (BatchNorm's normalised top), saving the copy an
    # in-place Scale keeps for its backward.
    input_source = None

    def _dims(self, x, param, what):
        """(outer, dim, inner) of x around the axes that ``param`` (a blob) covers."""
        return broadcast_dims(self, x, self.layer_param.scale_param.axis, param, what)

    def _scale(self, bottom):
        return bottom[1] if len(bottom) > 1 else self.blobs[0]

    def reshape(self, bottom, top):
        x = bottom[0]
        self.dims = self._dims(x, self._scale(bottom), "scale")
        if self.bias_index is not None:
            self.bias_dims = self._dims(x, self.blobs[self.bias_index], "bias")
        if top[0] is not x:
            top[0].reshape(x.shape)

    def forward(self, bottom, top):
        outer, dim, inner = self.dims
        x_blob = bottom[0]
        x = x_blob.read_data()
        xp = get_array_module(x)
        if top[0] is x_blob:
            # In place: keep x for the gradient of the scale (where the layer before keeps the
            # same values, that array; else a copy in an array of our own).
            kept = None if self.input_source is None else self.input_source(x_blob)
            if kept is not None and get_array_module(kept) is xp:
                self._temp, self._temp_own = kept.reshape(x.shape), False
            else:
                if not self._temp_own or self._temp.shape != x.shape or \
                        get_array_module(self._temp) is not xp:
                    self._temp, self._temp_own = xp.empty_like(x), True
                self._temp[...] = x
        s = self._scale(bottom).read_data()
        if self._on_gpu(x, s):
            b = None if self.bias_index is None else self.blobs[self.bias_index].read_data()
            gpu_channels.scale_apply(x.reshape(outer, dim, inner), s, b,
                                     top[0].write_data().reshape(outer, dim, inner))
            return
        s = s.reshape(1, dim, 1)
        y = top[0].write_data().reshape(outer, dim, inner)
        xp.multiply(x.reshape(outer, dim, inner), s, out=y)
        if self.bias_index is not None:
            bo, bd, bi = self.bias_dims
            b = self.blobs[self.bias_index].read_data().reshape(1, bd, 1)
            y = y.reshape(bo, bd, bi)
            y += b

    def _on_gpu(self, x, s):
        """The GPU kernels (ops/gpu/channels.py) take the arrays: CuPy, one element type, the
        bias (if any) over the scale's axes, the scale contiguous."""
        return on_gpu(x, s) and kernel_dtype(x, s) is not None and x.size > 0 and \
            s.flags.c_contiguous and \
            (self.bias_index is None or self.bias_dims == self.dims)

    def _backward_gpu(self, top, propagate_down, bottom):
        outer, dim, inner = self.dims
        dy = top[0].read_diff().reshape(outer, dim, inner)
        scale_blob = self._scale(bottom)
        as_param = len(bottom) == 1
        need_db = self.bias_index is not None and self.param_propagate_down[self.bias_index]
        need_ds = (as_param and self.param_propagate_down[0]) or \
            (not as_param and propagate_down[1])
        if need_ds:
            x = self._temp if top[0] is bottom[0] else bottom[0].read_data()
            ds = scale_blob.write_diff().reshape(dim)
            if not as_param:
                ds[...] = 0
            db = self.blobs[self.bias_index].write_diff().reshape(dim) if need_db else \
                get_array_module(dy).empty(dim, dtype=dy.dtype)
            gpu_channels.channel_sums(dy, 2, db, ds, b=x.reshape(outer, dim, inner),
                                      accumulate=True)
        elif need_db:
            gpu_channels.channel_sums(dy, 0, self.blobs[self.bias_index].write_diff(),
                                      accumulate=True)
        if propagate_down[0]:
            gpu_channels.scale_apply(dy, scale_blob.read_data(), None,
                                     bottom[0].write_diff().reshape(outer, dim, inner))

    def backward(self, top, propagate_down, bottom):
        outer, dim, inner = self.dims
        dy = top[0].read_diff()
        if self._on_gpu(dy, self._scale(bottom).read_data()):
            return self._backward_gpu(top, propagate_down, bottom)
        if self.bias_index is not None and self.param_propagate_down[self.bias_index]:
            bo, bd, bi = self.bias_dims
            db = self.blobs[self.bias_index].write_diff().reshape(bd)
            db += dy.reshape(bo, bd, bi).sum(axis=(0, 2))
        scale_blob = self._scale(bottom)
        as_param = len(bottom) == 1
        if (as_param and self.param_propagate_down[0]) or \
                (not as_param and propagate_down[1]):
            x = self._temp if top[0] is bottom[0] else bottom[0].read_data()
            grad = (dy * x).reshape(outer, dim, inner).sum(axis=(0, 2))
            ds = scale_blob.write_diff().reshape(dim)
            if as_param:
                ds += grad
            else:
                ds[...] = grad
        if propagate_down[0]:
            s = scale_blob.read_data().reshape(1, dim, 1)
            dx = bottom[0].write_diff().reshape(outer, dim, inner)
            get_array_module(dx).multiply(dy.reshape(outer, dim, inner), s, out=dx)
