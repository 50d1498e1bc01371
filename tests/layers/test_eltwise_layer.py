import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

SHAPE = (2, 3, 2)


def arrays(n, seed=0, low=-1.0, high=1.0):
    rng = np.random.default_rng(seed)
    return [rng.uniform(low, high, SHAPE) for _ in range(n)]


def naive(op, xs, coeffs=None):
    out = np.empty(SHAPE)
    for idx in np.ndindex(*SHAPE):
        vals = [x[idx] for x in xs]
        if op == "PROD":
            acc = 1.0
            for v in vals:
                acc *= v
        elif op == "SUM":
            acc = sum(c * v for c, v in zip(coeffs or [1.0] * len(vals), vals))
        else:
            acc = max(vals)
        out[idx] = acc
    return out


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("stable", ["true", "false"])
def test_eltwise_prod(n, stable):
    xs = arrays(n, low=0.5, high=1.5) if stable == "false" else arrays(n)
    text = 'type: "Eltwise" eltwise_param { operation: PROD stable_prod_grad: %s }' % stable
    layer, bottom, top = check_layer(text, xs)
    np.testing.assert_allclose(top[0].data, naive("PROD", xs), rtol=1e-12)


@pytest.mark.parametrize("coeffs", [None, [1.0, -0.5, 2.0]])
def test_eltwise_sum(coeffs):
    xs = arrays(3)
    params = "operation: SUM " + " ".join("coeff: %g" % c for c in coeffs or [])
    layer, bottom, top = check_layer('type: "Eltwise" eltwise_param { %s }' % params, xs)
    np.testing.assert_allclose(top[0].data, naive("SUM", xs, coeffs), rtol=1e-12)


def test_eltwise_default_operation_is_sum():
    xs = arrays(2)
    layer, bottom, top = check_layer('type: "Eltwise"', xs)
    np.testing.assert_allclose(top[0].data, xs[0] + xs[1], rtol=1e-12)


@pytest.mark.parametrize("n", [2, 3])
def test_eltwise_max(n):
    xs = arrays(n, seed=3)
    layer, bottom, top = check_layer('type: "Eltwise" eltwise_param { operation: MAX }', xs,
                                     stepsize=1e-4)
    np.testing.assert_array_equal(top[0].data, naive("MAX", xs))
    # gradient goes to the arg-max bottom only
    top[0].diff[...] = 1.0
    layer.Backward(top, [True] * n, bottom)
    winner = np.argmax(np.stack(xs), axis=0)
    for i, b in enumerate(bottom):
        np.testing.assert_array_equal(b.diff, (winner == i).astype(float))


def test_eltwise_max_ties_follow_caffe():
    a = np.array([[1.0, 2.0, 3.0]])
    b = np.array([[1.0, 1.0, 3.0]])
    c = np.array([[1.0, 2.0, 0.0]])
    layer = make_layer('type: "Eltwise" eltwise_param { operation: MAX }')
    bottom, top = random_blobs([a, b, c]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = 1.0
    layer.Backward(top, [True, True, True], bottom)
    # element 0: a == b -> bottom 1 (first pair), c equal -> stays; element 1: a > b -> 0,
    # c equal -> stays 0; element 2: a == b -> 1
    np.testing.assert_array_equal(bottom[0].diff, [[0, 1, 0]])
    np.testing.assert_array_equal(bottom[1].diff, [[1, 0, 1]])
    np.testing.assert_array_equal(bottom[2].diff, [[0, 0, 0]])


def test_eltwise_float32_stays_float32():
    layer = make_layer('type: "Eltwise" eltwise_param { coeff: 0.5 coeff: 2 }', dtype=np.float32)
    bottom = random_blobs([SHAPE, SHAPE], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, 0.5 * bottom[0].data + 2 * bottom[1].data,
                               rtol=1e-6)


@pytest.mark.parametrize("params,shapes,message", [
    ("coeff: 1 coeff: 2", [SHAPE] * 3, r"one coefficient per bottom blob: got 2 coeff"),
    ("operation: PROD coeff: 1 coeff: 2", [SHAPE] * 2, r"only takes coefficients for summation"),
    ("", [SHAPE, (2, 3, 3)], r"bottom 1 has shape \(2, 3, 3\), bottom 0 has shape \(2, 3, 2\)"),
    ("", [SHAPE], r"at least 2 bottom"),
])
def test_eltwise_errors(params, shapes, message):
    layer = make_layer('type: "Eltwise" eltwise_param { %s }' % params)
    with pytest.raises(LayerError, match=message):
        layer.SetUp(random_blobs(shapes), empty_blobs(1))


@pytest.mark.parametrize("params", ["operation: SUM coeff: 2 coeff: -0.5 coeff: 3",
                                    "operation: PROD", "operation: PROD stable_prod_grad: false",
                                    "operation: MAX"])
def test_eltwise_in_place_on_the_first_bottom(params):
    """top: the first bottom (as in `bottom: "a" bottom: "b" top: "a"`): the backward writes
    bottom 0's diff, which is the top's, and PROD reads bottom 0's data, which the forward
    overwrote; the gradients are those of the hand-written function."""
    xs = arrays(3, seed=5, low=0.5, high=2.0)
    xs[1][0, 0, 0] = -xs[1][0, 0, 0]
    blobs = random_blobs(xs)
    layer = make_layer('type: "Eltwise" eltwise_param { %s }' % params)
    layer.SetUp(blobs, [blobs[0]])
    layer.Forward(blobs, [blobs[0]])
    op = params.split()[1]
    coeffs = [2.0, -0.5, 3.0] if op == "SUM" else None
    np.testing.assert_allclose(blobs[0].data, naive(op, xs, coeffs), rtol=1e-12)
    dy = np.random.default_rng(6).normal(size=SHAPE)
    blobs[0].diff[...] = dy
    layer.Backward([blobs[0]], [True] * 3, blobs)
    if op == "SUM":
        expected = [c * dy for c in coeffs]
    elif op == "PROD":
        expected = [dy * xs[1] * xs[2], dy * xs[0] * xs[2], dy * xs[0] * xs[1]]
    else:
        winner = np.argmax(np.stack(xs), axis=0)  # no ties in these values
        expected = [dy * (winner == i) for i in range(3)]
    for i, b in enumerate(blobs):
        np.testing.assert_allclose(b.diff, expected[i], rtol=1e-12, err_msg="bottom %d" % i)
