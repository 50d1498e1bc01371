import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


@pytest.mark.parametrize("base, scale, shift", [
    (-1, 1, 0), (-1, 0.5, 1.2), (2, 1, 0), (3, 0.5, -1), (0.5, -2, 0.3), (-1, 1, -0.7),
])
def test_exp_forward_gradient_and_in_place(base, scale, shift):
    text = 'type: "Exp" exp_param { base: %g scale: %g shift: %g }' % (base, scale, shift)
    layer, bottom, top = check_layer(text, [(2, 3, 4)], in_place=True)
    # the parameters are float fields: compare with their float32 values
    base, scale, shift = (float(np.float32(v)) for v in (base, scale, shift))
    b = np.e if base == -1 else base
    expected = b ** (shift + scale * bottom[0].data)
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)


def test_exp_float32_backward():
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    layer = make_layer('type: "Exp" exp_param { base: 2 scale: 3 shift: 1 }', dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    y = 2.0 ** (1 + 3 * x.astype(np.float64))
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, y, rtol=1e-6)
    top[0].diff[...] = 0.5
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, 0.5 * y * 3 * np.log(2.0), rtol=1e-6)


@pytest.mark.parametrize("base", [0, -2, -0.5])
def test_exp_rejects_non_positive_base(base):
    layer = make_layer('type: "Exp" exp_param { base: %g }' % base)
    with pytest.raises(LayerError, match=r"Exp.*base must be strictly positive \(or -1 for "
                                         r"e\), got %g" % base):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))


def test_exp_rejects_infinite_base():
    layer = make_layer('type: "Exp" exp_param { base: inf }')
    with pytest.raises(LayerError, match=r"base inf gives log\(base\) = inf"):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))
