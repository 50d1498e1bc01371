"""Reduction: sum, sum of absolute values, sum of squares or mean over the trailing axes."""

from ...backend import get_array_module
from ...errors import ShapeError
from ...layer import Layer
from ...proto import caffe_pb2
from ...registry import register_layer

_Op = caffe_pb2.ReductionParameter


@register_layer("Reduction")
class ReductionLayer(Layer):
    """Reduce every axis from ``axis`` on to one value, scaled by ``coeff``.

    Bottoms: x, at least one axis. Tops: y of shape ``x.shape[:axis]`` (a scalar for axis 0).
    Params: ``reduction_param { operation (SUM | ASUM | SUMSQ | MEAN; SUM), axis (0; negative
    counts from the end), coeff (1) }``: ``y = coeff * op(x[i, ...])`` where SUM is Σx, ASUM
    Σ|x|, SUMSQ Σx² and MEAN Σx / D (D the number of reduced values).
    Backward: coeff·dy, coeff·sign(x)·dy (sign(0) = 0), 2·coeff·x·dy, coeff·dy / D.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    _OPS = (_Op.SUM, _Op.ASUM, _Op.SUMSQ, _Op.MEAN)

    def setup(self, bottom, top):
        self.op = self.layer_param.reduction_param.operation
        if self.op not in self._OPS:
            raise self.error("unknown reduction_param.operation %d; expected SUM, ASUM, SUMSQ "
                             "or MEAN" % self.op)

    def reshape(self, bottom, top):
        p = self.layer_param.reduction_param
        x = bottom[0]
        try:
            axis = x.canonical_axis_index(p.axis)
        except ShapeError:
            n = x.num_axes
            raise self.error("reduction_param.axis %d is out of range for a bottom of shape %s "
                             "(expected an axis in [%d, %d))" % (p.axis, x.shape, -n, n)) from None
        top[0].reshape(x.shape[:axis])
        self.num = x.count_range(0, axis)
        self.dim = x.count_range(axis)
        self.coeff = float(p.coeff)
        if self.op == _Op.MEAN:
            if self.dim == 0:
                raise self.error("MEAN reduction over axes %d.. of shape %s, which hold no "
                                 "values" % (axis, x.shape))
            self.coeff /= self.dim

    def forward(self, bottom, top):
        x = bottom[0].read_data().reshape(self.num, self.dim)
        y = top[0].write_data().reshape(self.num)
        xp = get_array_module(x)
        if self.op == _Op.ASUM:
            xp.abs(x).sum(axis=1, out=y)
        elif self.op == _Op.SUMSQ:
            (x * x).sum(axis=1, out=y)
        else:  # SUM, MEAN
            x.sum(axis=1, out=y)
        if self.coeff != 1.0:
            y *= self.coeff

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        scaled = top[0].read_diff().reshape(self.num, 1) * self.coeff
        dx = bottom[0].write_diff().reshape(self.num, self.dim)
        if self.op == _Op.ASUM:
            xp = get_array_module(dx)
            x = bottom[0].read_data().reshape(self.num, self.dim)
            xp.multiply(xp.sign(x), scaled, out=dx)
        elif self.op == _Op.SUMSQ:
            x = bottom[0].read_data().reshape(self.num, self.dim)
            dx[...] = x * (2 * scaled)
        else:  # SUM, MEAN
            dx[...] = scaled
