import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

X_SHAPE = (2, 3, 4, 2)
FILLERS = 'filler { type: "uniform" min: -2 max: 2 } '
BIAS_FILLER = 'bias_filler { type: "uniform" min: -1 max: 1 } '


def naive_scale(x, s, axis, b=None):
    """y[idx] = x[idx] * s[idx[axis:axis + s.ndim]] (+ b[...]), element by element."""
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape):
        sub = idx[axis:axis + s.ndim]
        out[idx] = x[idx] * s[sub] + (b[sub] if b is not None else 0.0)
    return out


@pytest.mark.parametrize("params,axis,scale_shape,reshape_batch", [
    ("", 1, (3,), True),
    ("axis: 1 num_axes: 2", 1, (3, 4), True),
    ("axis: 2 num_axes: -1", 2, (4, 2), True),
    ("axis: -1", 3, (2,), True),
    ("num_axes: 0", 1, (), True),
    ("axis: 0 num_axes: 2", 0, (2, 3), False),
])
@pytest.mark.parametrize("bias", [False, True])
def test_scale_learned_forward_and_gradient(params, axis, scale_shape, reshape_batch, bias):
    text = 'type: "Scale" scale_param { %s %s %s %s }' % (
        params, FILLERS, "bias_term: true " + BIAS_FILLER if bias else "", "")
    layer, bottom, top = check_layer(text, [X_SHAPE], reshape_batch=reshape_batch)
    assert [b.shape for b in layer.blobs] == [scale_shape] + ([scale_shape] if bias else [])
    s = layer.blobs[0].data
    b = layer.blobs[1].data if bias else None
    np.testing.assert_allclose(top[0].data, naive_scale(bottom[0].data, s, axis, b),
                               rtol=1e-12)


@pytest.mark.parametrize("params", ["", "axis: 2 num_axes: 2", "num_axes: 0"])
def test_scale_learned_in_place(params):
    # deterministic fillers, so that the harness's fresh in-place layer has the same blobs
    text = ('type: "Scale" scale_param { %s bias_term: true filler { type: "constant" '
            'value: -1.5 } bias_filler { type: "constant" value: 0.25 } }' % params)
    layer, bottom, top = check_layer(text, [X_SHAPE], in_place=True)
    np.testing.assert_allclose(top[0].data, -1.5 * bottom[0].data + 0.25, rtol=1e-12)


@pytest.mark.parametrize("params,axis,scale_shape", [
    ("", 1, (3,)),
    ("axis: 1", 1, (3, 4)),
    ("axis: -2", 2, (4, 2)),
    ("axis: 2", 0, ()),          # a scalar scale ignores the axis
])
@pytest.mark.parametrize("bias", [False, True])
def test_scale_bottom_forward_and_gradient(params, axis, scale_shape, bias):
    text = 'type: "Scale" scale_param { %s %s }' % (
        params, "bias_term: true " + BIAS_FILLER if bias else "")
    layer, bottom, top = check_layer(text, [X_SHAPE, scale_shape])
    assert [b.shape for b in layer.blobs] == ([scale_shape] if bias else [])
    b = layer.blobs[0].data if bias else None
    np.testing.assert_allclose(top[0].data,
                               naive_scale(bottom[0].data, bottom[1].data, axis, b),
                               rtol=1e-12)


def test_scale_default_fillers_give_identity():
    layer = make_layer('type: "Scale" scale_param { bias_term: true }')
    bottom, top = random_blobs([(2, 3)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    np.testing.assert_array_equal(layer.blobs[0].data, np.ones(3))
    np.testing.assert_array_equal(layer.blobs[1].data, np.zeros(3))
    layer.Forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, bottom[0].data)


def test_scale_in_place_with_scale_bottom_and_accumulation():
    rng = np.random.default_rng(2)
    x0 = rng.normal(size=(2, 3, 2))
    s0 = rng.normal(size=(3,))
    dy = rng.normal(size=(2, 3, 2))
    # out of place reference
    ref = make_layer('type: "Scale"')
    xb, sb, yb = Blob(x0.shape, np.float64), Blob((3,), np.float64), Blob((), np.float64)
    xb.data[...], sb.data[...] = x0, s0
    ref.SetUp([xb, sb], [yb])
    ref.Forward([xb, sb], [yb])
    yb.diff[...] = dy
    ref.Backward([yb], [True, True], [xb, sb])
    # in place
    layer = make_layer('type: "Scale"')
    x, s = Blob(x0.shape, np.float64), Blob((3,), np.float64)
    x.data[...], s.data[...] = x0, s0
    layer.SetUp([x, s], [x])
    layer.Forward([x, s], [x])
    np.testing.assert_allclose(x.data, yb.data, rtol=1e-12)
    np.testing.assert_allclose(x.data, x0 * s0[:, None], rtol=1e-12)
    x.diff[...] = dy
    s.diff[...] = 123.0  # a bottom's diff is overwritten
    layer.Backward([x], [True, True], [x, s])
    np.testing.assert_allclose(x.diff, xb.diff, rtol=1e-12)
    np.testing.assert_allclose(s.diff, sb.diff, rtol=1e-12)
    np.testing.assert_allclose(s.diff, (dy * x0).sum(axis=(0, 2)), rtol=1e-12)

    # learned scale and bias: param diffs accumulate
    layer = make_layer('type: "Scale" scale_param { bias_term: true %s }' % FILLERS)
    bottom, top = [Blob(x0.shape, np.float64)], empty_blobs(1)
    bottom[0].data[...] = x0
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    ds, db = layer.blobs[0].diff.copy(), layer.blobs[1].diff.copy()
    np.testing.assert_allclose(ds, (dy * x0).sum(axis=(0, 2)), rtol=1e-12)
    np.testing.assert_allclose(db, dy.sum(axis=(0, 2)), rtol=1e-12)
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * ds, rtol=1e-12)
    np.testing.assert_allclose(layer.blobs[1].diff, 2 * db, rtol=1e-12)


def test_scale_float32():
    layer = make_layer('type: "Scale" scale_param { bias_term: true %s }' % FILLERS,
                       dtype=np.float32)
    bottom, top = random_blobs([(2, 3, 2)], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    for arr in (top[0].data, bottom[0].diff, layer.blobs[0].diff, layer.blobs[1].diff):
        assert arr.dtype == np.float32


@pytest.mark.parametrize("params,shapes,message", [
    ("", [(2, 3), (4,)], r"scale of shape \(4,\) does not match bottom\[0\] of shape \(2, 3\) "
                         r"from axis 1 \(expected shape \(3,\)\)"),
    ("", [(2, 3), (3, 2)], r"scale of shape \(3, 2\) does not match"),
    ("num_axes: -2", [(2, 3)], r"num_axes must be non-negative, or -1.*got -2"),
    ("num_axes: 3", [(2, 3)], r"scale blob's shape extends past bottom\[0\]'s shape \(2, 3\)"),
    ("axis: 2", [(2, 3)], r"axis 2 out of range for a bottom of shape \(2, 3\)"),
    ("", [(2, 3), (3,), (3,)], r"at most 2 bottom"),
])
def test_scale_errors(params, shapes, message):
    layer = make_layer('type: "Scale" scale_param { %s }' % params)
    with pytest.raises(LayerError, match=message):
        layer.SetUp(random_blobs(shapes), empty_blobs(1))
