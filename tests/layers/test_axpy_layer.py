import re

import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

AXPY = 'type: "Axpy"'


def test_hand_example_forward_and_backward():
    a = np.array([[2, -1]], np.float32).reshape(1, 2, 1, 1)
    x = np.array([[[[1, 2]], [[3, 4]]]], np.float32)  # (1, 2, 1, 2)
    y = np.full((1, 2, 1, 2), 10, np.float32)
    layer = make_layer(AXPY, np.float32)
    bottom, top = random_blobs([a, x, y], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [[[[12, 14]], [[7, 6]]]])
    top[0].diff[...] = [[[[1, 2]], [[3, -1]]]]
    for b in bottom:
        b.diff[...] = 99  # overwritten
    layer.Backward(top, [True, True, True], bottom)
    # da = sum over space of dtop * x; dx = a * dtop; dy = dtop
    np.testing.assert_array_equal(bottom[0].diff.ravel(), [1 * 1 + 2 * 2, 3 * 3 - 1 * 4])
    np.testing.assert_array_equal(bottom[1].diff, [[[[2, 4]], [[-3, 1]]]])
    np.testing.assert_array_equal(bottom[2].diff, top[0].diff)
    # each bottom's gradient on its own (the fork ties x's to a's)
    for b in bottom:
        b.diff[...] = 7
    layer.Backward(top, [False, True, False], bottom)
    assert (bottom[0].diff == 7).all() and (bottom[2].diff == 7).all()
    np.testing.assert_array_equal(bottom[1].diff, [[[[2, 4]], [[-3, 1]]]])


@pytest.mark.parametrize("shapes", [
    [(2, 3, 1, 1), (2, 3, 4, 5), (2, 3, 4, 5)],
    [(2, 3), (2, 3, 4), (2, 3, 4)],
    [(3, 2), (3, 2), (3, 2)],
])
def test_gradient_and_forward(shapes):
    layer, bottom, top = check_layer(AXPY, shapes)
    a, x, y = (b.data for b in bottom)
    expect = a.reshape(x.shape[:2] + (1,) * (x.ndim - 2)) * x + y
    np.testing.assert_allclose(top[0].data, expect, rtol=1e-12)


def test_in_place_of_y():
    rng = np.random.default_rng(0)
    a, x, y0 = rng.standard_normal((2, 3, 1, 1)), rng.standard_normal((2, 3, 2, 2)), \
        rng.standard_normal((2, 3, 2, 2))
    bottom = random_blobs([a, x, y0])
    layer = make_layer(AXPY)
    layer.SetUp(bottom, [bottom[2]])
    layer.Forward(bottom, [bottom[2]])
    np.testing.assert_allclose(bottom[2].data, a * x + y0, rtol=1e-12)
    bottom[2].diff[...] = 1.5
    layer.Backward([bottom[2]], [True, True, True], bottom)
    np.testing.assert_allclose(bottom[0].diff, 1.5 * x.sum(axis=(2, 3), keepdims=True))
    np.testing.assert_allclose(bottom[1].diff, 1.5 * np.broadcast_to(a, x.shape))
    assert (bottom[2].diff == 1.5).all()


@pytest.mark.parametrize("shapes,message", [
    ([(2, 3, 1, 1), (2, 3, 4, 5), (2, 3, 4, 4)],
     "y (bottom 2) must have the shape of x (bottom 1), (2, 3, 4, 5); got (2, 3, 4, 4)"),
    ([(2, 4, 1, 1), (2, 3, 4, 5), (2, 3, 4, 5)],
     "N = 2, C = 3 from x (bottom 1) of shape (2, 3, 4, 5); got shape (2, 4, 1, 1)"),
    ([(2, 3, 2, 1), (2, 3, 4, 5), (2, 3, 4, 5)], "got shape (2, 3, 2, 1)"),
    ([(1, 3), (2, 3, 4), (2, 3, 4)], "got shape (1, 3)"),
    ([(2,), (2,), (2,)], "at least 2 axes"),
])
def test_invalid_usage(shapes, message):
    layer = make_layer(AXPY)
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs(shapes), empty_blobs(1))
    assert "Axpy" in str(info.value)


def test_counts_and_in_place_of_x():
    with pytest.raises(LayerError, match="takes exactly 3 bottom blobs, got 2"):
        make_layer(AXPY).SetUp(random_blobs([(2, 3), (2, 3)]), empty_blobs(1))
    bottom = random_blobs([(2, 3), (2, 3, 2), (2, 3, 2)])
    with pytest.raises(LayerError, match="in place of y"):
        make_layer(AXPY).SetUp(bottom, [bottom[1]])
