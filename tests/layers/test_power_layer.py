import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def _text(power, scale, shift):
    return 'type: "Power" power_param { power: %g scale: %g shift: %g }' % (power, scale, shift)


@pytest.mark.parametrize("power, scale, shift", [
    (1, 1, 0),  # identity
    (1, -2, 0.5),  # power 1: dx = scale * dy
    (2, 1, 0),  # power 2 special case
    (2, 0.5, 1.5),
    (3, -0.7, 0.2),
    (0.5, 0.5, 2),  # fractional power on a positive base
    (-1.5, 0.8, 2),
    (3, 1.3, 0),  # shift 0 (Caffe's power * y / x case)
    (0, 2, 1),  # power 0: y = 1, dx = 0
    (2, 0, 3),  # scale 0: y = shift^power, dx = 0
])
def test_power_forward_gradient_and_in_place(power, scale, shift):
    layer, bottom, top = check_layer(_text(power, scale, shift), [(2, 3, 4)], in_place=True)
    x = bottom[0].data
    power, scale, shift = (float(np.float32(v)) for v in (power, scale, shift))
    expected = [[[(shift + scale * v) ** power for v in row] for row in m] for m in x]
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)


@pytest.mark.parametrize("power, scale, shift", [(0, 2, 1), (2, 0, 3), (1.5, 0, 4)])
def test_power_constant_cases_have_zero_gradient(power, scale, shift):
    layer = make_layer(_text(power, scale, shift))
    bottom = random_blobs([(3, 2)])
    top = empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    np.testing.assert_allclose(top[0].data, np.full((3, 2), 1.0 if power == 0 else
                                                    shift ** power), rtol=1e-12)
    top[0].diff[...] = np.nan  # Caffe sets dx to 0 without reading dy
    layer.Backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.zeros((3, 2)))


def test_power_constant_follows_c_pow():
    layer = make_layer(_text(0.5, 0, -4))
    bottom, top = random_blobs([(2,)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert np.isnan(top[0].data).all()  # pow(-4, 0.5) is NaN in C, not a complex number


def test_power_gradient_at_zero_base_is_the_limit():
    # Caffe computes power * scale * y / (shift + scale * x), 0/0 = NaN at a zero base.
    layer = make_layer(_text(3, 2, 0))
    bottom = random_blobs([np.array([0.0, 1.0, -0.5])])
    top = empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, 3 * 2 * (2 * np.array([0.0, 1.0, -0.5])) ** 2,
                               rtol=1e-12)


def test_power_in_place_uses_original_input():
    x = np.array([[0.5, 1.0, 2.0]])
    blob = random_blobs([x])[0]
    layer = make_layer(_text(3, 2, 1))
    layer.SetUp([blob], [blob])
    layer.Forward([blob], [blob])
    np.testing.assert_allclose(blob.data, (1 + 2 * x) ** 3, rtol=1e-12)
    blob.diff[...] = 1
    layer.Backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.diff, 3 * 2 * (1 + 2 * x) ** 2, rtol=1e-12)


def test_power_float32():
    x = np.array([0.5, 1.0, 3.0], np.float32)
    layer = make_layer(_text(2.5, 2, 1), dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    x64 = x.astype(np.float64)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, (1 + 2 * x64) ** 2.5, rtol=1e-6)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, 2.5 * 2 * (1 + 2 * x64) ** 1.5, rtol=1e-6)


def test_power_rejects_two_bottoms():
    layer = make_layer(_text(2, 1, 0))
    with pytest.raises(LayerError, match="Power.*exactly 1 bottom blob, got 2"):
        layer.SetUp(random_blobs([(2, 3), (2, 3)]), empty_blobs(1))
