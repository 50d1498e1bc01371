import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

X_SHAPE = (2, 3, 4, 2)
FILLER = 'filler { type: "uniform" min: -2 max: 2 }'


def naive_bias(x, b, axis):
    """y[idx] = x[idx] + b[idx[axis:axis + b.ndim]], element by element."""
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape):
        out[idx] = x[idx] + b[idx[axis:axis + b.ndim]]
    return out


@pytest.mark.parametrize("params,axis,bias_shape,reshape_batch", [
    ("", 1, (3,), True),
    ("axis: 1 num_axes: 2", 1, (3, 4), True),
    ("axis: 2 num_axes: -1", 2, (4, 2), True),
    ("axis: -1", 3, (2,), True),
    ("num_axes: 0", 1, (), True),
    ("axis: 0 num_axes: 1", 0, (2,), False),
])
def test_bias_learned_forward_and_gradient(params, axis, bias_shape, reshape_batch):
    text = 'type: "Bias" bias_param { %s %s }' % (params, FILLER)
    layer, bottom, top = check_layer(text, [X_SHAPE], reshape_batch=reshape_batch)
    assert [b.shape for b in layer.blobs] == [bias_shape]
    np.testing.assert_allclose(top[0].data,
                               naive_bias(bottom[0].data, layer.blobs[0].data, axis),
                               rtol=1e-12)


@pytest.mark.parametrize("params,axis,bias_shape", [
    ("", 1, (3,)),
    ("axis: 1", 1, (3, 4)),
    ("axis: -2", 2, (4, 2)),
    ("axis: 3", 0, ()),
])
def test_bias_bottom_forward_and_gradient(params, axis, bias_shape):
    text = 'type: "Bias" bias_param { %s }' % params
    layer, bottom, top = check_layer(text, [X_SHAPE, bias_shape])
    assert len(layer.blobs) == 0
    np.testing.assert_allclose(top[0].data,
                               naive_bias(bottom[0].data, bottom[1].data, axis), rtol=1e-12)


def test_bias_in_place_and_accumulation():
    text = 'type: "Bias" bias_param { filler { type: "constant" value: 0.75 } }'
    check_layer(text, [X_SHAPE], in_place=True)
    layer = make_layer(text)
    rng = np.random.default_rng(4)
    x0, dy = rng.normal(size=(2, 3, 2)), rng.normal(size=(2, 3, 2))
    x = Blob(x0.shape, np.float64)
    x.data[...] = x0
    layer.SetUp([x], [x])
    layer.Forward([x], [x])
    np.testing.assert_allclose(x.data, x0 + 0.75, rtol=1e-12)
    x.diff[...] = dy
    layer.Backward([x], [True], [x])
    np.testing.assert_allclose(x.diff, dy, rtol=1e-12)
    np.testing.assert_allclose(layer.blobs[0].diff, dy.sum(axis=(0, 2)), rtol=1e-12)
    layer.Backward([x], [True], [x])
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * dy.sum(axis=(0, 2)), rtol=1e-12)


def test_bias_bottom_diff_is_overwritten_and_default_filler_is_zero():
    layer = make_layer('type: "Bias"')
    bottom, top = random_blobs([(2, 3), (3,)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = 1.0
    bottom[1].diff[...] = 50.0
    layer.Backward(top, [True, True], bottom)
    np.testing.assert_array_equal(bottom[1].diff, [2.0, 2.0, 2.0])
    learned = make_layer('type: "Bias"')
    learned.SetUp(random_blobs([(2, 3)]), empty_blobs(1))
    np.testing.assert_array_equal(learned.blobs[0].data, np.zeros(3))


def test_bias_float32():
    layer = make_layer('type: "Bias" bias_param { %s }' % FILLER, dtype=np.float32)
    bottom, top = random_blobs([(2, 3, 2)], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    for arr in (top[0].data, bottom[0].diff, layer.blobs[0].diff):
        assert arr.dtype == np.float32


@pytest.mark.parametrize("params,shapes,message", [
    ("", [(2, 3), (2,)], r"bias of shape \(2,\) does not match bottom\[0\] of shape \(2, 3\) "
                         r"from axis 1 \(expected shape \(3,\)\)"),
    ("num_axes: -3", [(2, 3)], r"num_axes must be non-negative, or -1.*got -3"),
    ("num_axes: 2", [(2, 3)], r"bias blob's shape extends past bottom\[0\]'s shape \(2, 3\)"),
    ("axis: -3", [(2, 3)], r"axis -3 out of range for a bottom of shape \(2, 3\)"),
])
def test_bias_errors(params, shapes, message):
    layer = make_layer('type: "Bias" bias_param { %s }' % params)
    with pytest.raises(LayerError, match=message):
        layer.SetUp(random_blobs(shapes), empty_blobs(1))
