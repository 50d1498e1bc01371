"""Eltwise: element-wise product, (weighted) sum or maximum of several blobs."""

import numpy as np

from ...backend import get_array_module
from ...layer import Layer
from ...proto import caffe_pb2
from ...registry import register_layer
from ..neuron.inplace_utils import InPlaceInputs

EltwiseOp = caffe_pb2.EltwiseParameter


@register_layer("Eltwise")
class EltwiseLayer(InPlaceInputs, Layer):
    """Combine two or more blobs of the same shape element by element.

    Bottoms: x_1 ... x_K (K >= 2), all of the same shape.
    Tops: y, the same shape (may be x_1: in place): PROD: x_1 * ... * x_K; SUM: sum of
    coeff_i * x_i; MAX: the largest x_i (on ties the later bottom of the first pair, then the
    earlier one, as Caffe).
    Params: ``eltwise_param { operation (SUM), coeff (one per bottom, or none for all 1; not
    allowed with PROD), stable_prod_grad (true) }``. ``stable_prod_grad`` computes the PROD
    gradient as the product of the other bottoms; when false it divides y by x_i.
    """

    min_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.eltwise_param
        coeffs = list(p.coeff)
        if coeffs and len(coeffs) != len(bottom):
            raise self.error("Eltwise Layer takes one coefficient per bottom blob: got %d coeff "
                             "value(s) for %d bottoms" % (len(coeffs), len(bottom)))
        if p.operation == EltwiseOp.PROD and coeffs:
            raise self.error("Eltwise layer only takes coefficients for summation (operation "
                             "SUM), got %d coeff value(s) with operation PROD" % len(coeffs))
        self.op = p.operation
        self.coeffs = coeffs if coeffs else [1.0] * len(bottom)
        self.stable_prod_grad = p.stable_prod_grad
        self.max_idx = None

    def reshape(self, bottom, top):
        for i, b in enumerate(bottom[1:], 1):
            if b.shape != bottom[0].shape:
                raise self.error("all bottoms must have the same shape: bottom %d has shape %s, "
                                 "bottom 0 has shape %s" % (i, b.shape, bottom[0].shape))
        top[0].reshape(bottom[0].shape)

    def forward(self, bottom, top):
        if self.op not in (EltwiseOp.PROD, EltwiseOp.SUM, EltwiseOp.MAX):
            raise self.error("unknown eltwise operation %d" % self.op)
        y = top[0].write_data()
        xs = [self.forward_input(bottom, top, i) for i in range(len(bottom))]
        self.max_idx = combine(self.op, self.coeffs, xs, y, get_array_module(y))

    def backward(self, top, propagate_down, bottom):
        # in place, bottom 0's diff is the top's: read a copy
        dy = self.backward_top_diff(top, bottom)
        for i, b in enumerate(bottom):
            if not propagate_down[i]:
                continue
            if self.op == EltwiseOp.PROD:
                if self.stable_prod_grad:
                    others = [self.backward_input(bottom, top, j) for j in range(len(bottom))
                              if j != i]
                    grad = others[0].copy()
                    for o in others[1:]:
                        grad *= o
                    grad *= dy
                else:
                    grad = top[0].read_data() / self.backward_input(bottom, top, i) * dy
                b.write_diff()[...] = grad
            elif self.op == EltwiseOp.SUM:
                c = self.coeffs[i]
                b.write_diff()[...] = dy if c == 1 else c * dy
            else:
                b.write_diff()[...] = dy * (self.max_idx == i)


def combine(op, coeffs, xs, y, xp):
    """``y`` = the bottoms ``xs`` combined by ``op`` in Caffe's order of operations; returns
    MAX's choices (the bottom each element came from), else None."""
    if op == EltwiseOp.PROD:
        xp.multiply(xs[0], xs[1], out=y)
        for x in xs[2:]:
            y *= x
        return None
    if op == EltwiseOp.SUM:
        if coeffs[0] == 1:
            y[...] = xs[0]
        else:
            xp.multiply(xs[0], coeffs[0], out=y)
        for ci, x in zip(coeffs[1:], xs[1:]):
            if ci == 1:
                y += x
            else:
                y += ci * x
        return None
    # MAX: the first pair goes to bottom 1 unless bottom 0 is strictly larger; later bottoms
    # win only when strictly larger (Caffe's order).
    first = xs[0] > xs[1]
    idx = xp.where(first, 0, 1).astype(np.int32)
    maxval = xp.where(first, xs[0], xs[1])
    for i, x in enumerate(xs[2:], 2):
        better = x > maxval
        idx[better] = i
        maxval = xp.where(better, x, maxval)
    y[...] = maxval
    return idx
