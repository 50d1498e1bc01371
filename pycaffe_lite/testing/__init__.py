"""Helpers for testing layers: the gradient checker and a generic layer harness.

Usable for custom layers too::

    from pycaffe_lite.testing import check_layer
    check_layer('type: "MyLayer" my_param { ... }', [(2, 3, 4, 5)])
"""

import numpy as np

from ..proto import protoio
from ..blob import Blob
from ..layers import create_layer
from ..proto import caffe_pb2
from .gradient_check import GradientChecker, GradientCheckError

__all__ = ["GradientChecker", "GradientCheckError", "layer_param", "make_layer",
           "random_blobs", "empty_blobs", "check_layer"]


def layer_param(text_or_param, phase=caffe_pb2.TRAIN):
    """A LayerParameter from prototxt text (or a copy of a LayerParameter)."""
    if isinstance(text_or_param, caffe_pb2.LayerParameter):
        param = caffe_pb2.LayerParameter()
        param.CopyFrom(text_or_param)
    else:
        param = protoio.parse_text(text_or_param, caffe_pb2.LayerParameter())
    if not param.name:
        param.name = param.type.lower() or "layer"
    if not param.HasField("phase"):
        param.phase = phase
    return param


def make_layer(text_or_param, dtype=np.float64, phase=caffe_pb2.TRAIN):
    return create_layer(layer_param(text_or_param, phase), dtype=dtype)


def random_blobs(shapes_or_arrays, seed=0, dtype=np.float64, low=-1.0, high=1.0):
    """Blobs holding the given arrays, or uniform random values of the given shapes."""
    rng = np.random.default_rng(seed)
    blobs = []
    for s in shapes_or_arrays:
        if isinstance(s, np.ndarray):
            b = Blob(s.shape, dtype)
            b.data[...] = s
        else:
            b = Blob(tuple(s), dtype)
            b.data[...] = rng.uniform(low, high, tuple(s))
        blobs.append(b)
    return blobs


def empty_blobs(n, dtype=np.float64):
    return [Blob((), dtype) for _ in range(n)]


def check_layer(text, bottoms, num_top=1, *, phase=caffe_pb2.TRAIN, dtype=np.float64,
                check_bottom=None, check_params=True, stepsize=1e-2, threshold=1e-3,
                kink=0.0, kink_range=-1.0, exhaustive=False, in_place=False, reshape_batch=True,
                seed=0):
    """Run the generic checks on one layer and return ``(layer, bottom, top)``.

    1. set up and run forward;
    2. proto round trip: a layer made from ``layer.to_proto()`` gives the same outputs;
    3. reshape: a bottom with a different batch size (axis 0) runs and gives tops of that size;
    4. the numerical gradient check of every bottom (or ``check_bottom``) and param;
    5. with ``in_place``, top 0 written into bottom 0 gives the same output and gradient.
    """
    bottom = bottoms if bottoms and isinstance(bottoms[0], Blob) else \
        random_blobs(bottoms, seed=seed, dtype=dtype)
    top = empty_blobs(num_top, dtype)
    layer = make_layer(text, dtype, phase)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    outputs = [t.data.copy() for t in top]

    twin = make_layer(layer.to_proto(), dtype, phase)
    twin_top = empty_blobs(num_top, dtype)
    twin.SetUp(bottom, twin_top)
    if not layer.draws_random:  # else the twin draws other random numbers
        twin.Forward(bottom, twin_top)
        for a, b in zip(outputs, twin_top):
            np.testing.assert_allclose(b.data, a, rtol=1e-12, atol=1e-12,
                                       err_msg="proto round trip changed the output")

    if reshape_batch and bottom and bottom[0].num_axes > 0 and bottom[0].shape[0] > 1:
        small = []
        for b in bottom:
            s = Blob((1,) + b.shape[1:] if b.num_axes and b.shape[0] == bottom[0].shape[0]
                     else b.shape, dtype)
            s.data[...] = b.data[:1] if s.shape != b.shape else b.data
            small.append(s)
        small_top = empty_blobs(num_top, dtype)
        layer2 = make_layer(layer.to_proto(), dtype, phase)
        layer2.SetUp(small, small_top)
        layer2.Forward(small, small_top)
        layer2.Forward(bottom, small_top)  # reshape back up on the same layer
        for a, b in zip(outputs, small_top):
            assert b.data.shape == a.shape, "reshape to a larger batch gave %s, expected %s" \
                % (b.data.shape, a.shape)

    checker = GradientChecker(stepsize, threshold, kink=kink, kink_range=kink_range)
    grad_layer = make_layer(layer.to_proto(), dtype, phase)
    if exhaustive:
        checker.check_gradient_exhaustive(grad_layer, bottom, top, check_bottom, check_params)
    else:
        checker.check_gradient(grad_layer, bottom, top, check_bottom, check_params)

    if in_place:
        _check_in_place(text, bottom, dtype, phase, outputs[0], checker)
    return layer, bottom, top


def _check_in_place(text, bottom, dtype, phase, expected, checker):
    x = Blob(bottom[0].shape, dtype)
    x.data[...] = bottom[0].data
    ip = make_layer(text, dtype, phase)
    ip.SetUp([x], [x])
    ip.Forward([x], [x])
    np.testing.assert_allclose(x.data, expected, rtol=1e-12, atol=1e-12,
                               err_msg="in-place forward differs from out-of-place")
    # gradient in place: d(½Σy²)/dx with y written over x
    ref = make_layer(text, dtype, phase)
    xb, yb = Blob(bottom[0].shape, dtype), Blob(bottom[0].shape, dtype)
    xb.data[...] = bottom[0].data
    ref.SetUp([xb], [yb])
    ref.Forward([xb], [yb])
    yb.diff[...] = yb.data
    ref.Backward([yb], [True], [xb])
    x.data[...] = bottom[0].data
    ip.Forward([x], [x])
    x.diff[...] = x.data
    ip.Backward([x], [True], [x])
    np.testing.assert_allclose(x.diff, xb.diff, rtol=1e-10, atol=1e-12,
                               err_msg="in-place backward differs from out-of-place")
