import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
softmax = _special.softmax


@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1, -3])
def test_softmax_forward_and_gradient(axis):
    text = 'type: "Softmax"'
    if axis is not None:
        text += " softmax_param { axis: %d }" % axis
    layer, bottom, top = check_layer(text, [(2, 3, 4)], in_place=True)
    expected = softmax(bottom[0].data, axis=1 if axis is None else axis)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12, atol=1e-15)


def test_softmax_hand_computed_row():
    x = np.array([[0.0, np.log(2.0), np.log(5.0)]])
    _, _, top = check_layer('type: "Softmax"', [x], reshape_batch=False)
    np.testing.assert_allclose(top[0].data, [[0.125, 0.25, 0.625]], rtol=1e-12)


def test_softmax_gradient_4d_spatial():
    check_layer('type: "Softmax"', [(2, 4, 2, 3)], in_place=True)


def test_softmax_float32_large_scores_are_stable():
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, 0.0, -5.0]], np.float32)
    layer = make_layer('type: "Softmax"', dtype=np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    assert np.all(np.isfinite(top[0].data))
    np.testing.assert_allclose(top[0].data, softmax(x.astype(np.float64), axis=1), rtol=1e-6,
                               atol=1e-30)
    # backward: dx = (dy - sum(dy * y)) * y, checked against the Jacobian
    dy = np.array([[1.0, -2.0, 0.5], [0.25, 3.0, -1.0]], np.float32)
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    y = softmax(x.astype(np.float64), axis=1)
    expected = np.stack([(np.diag(yi) - np.outer(yi, yi)) @ di for yi, di in zip(y, dy)])
    np.testing.assert_allclose(bottom[0].diff, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [3, -4])
def test_softmax_rejects_axis_out_of_range(axis):
    layer = make_layer('type: "Softmax" softmax_param { axis: %d }' % axis)
    with pytest.raises(LayerError, match=r"softmax axis %d is out of range .*\(2, 3, 4\).*"
                                         r"expected an axis in \[-3, 3\)" % axis):
        layer.SetUp(random_blobs([(2, 3, 4)]), empty_blobs(1))


def test_softmax_rejects_empty_axis():
    layer = make_layer('type: "Softmax"')
    with pytest.raises(LayerError, match="softmax axis 1 of bottom shape \\(2, 0\\) is empty"):
        layer.SetUp([Blob((2, 0), np.float64)], empty_blobs(1))
