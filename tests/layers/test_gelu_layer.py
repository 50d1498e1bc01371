import math

import numpy as np
import pytest

from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_erfc = np.vectorize(math.erfc)


def exact_cdf(x):
    """Phi(x) in float64 from math.erfc (an independent erfc, exact in both tails, where
    0.5 * (1 + erf(x / sqrt(2))) loses its digits to cancellation)."""
    return 0.5 * _erfc(-np.asarray(x, np.float64) / math.sqrt(2))


def test_gelu_forward_gradient_and_in_place():
    x = np.random.default_rng(5).uniform(-4, 4, (2, 3, 5))
    layer, bottom, top = check_layer('type: "GELU"', [x], in_place=True)
    np.testing.assert_allclose(top[0].data, x * exact_cdf(x), rtol=2e-7, atol=1e-300)


@pytest.mark.parametrize("scale", [1.0, 6.0])
def test_gelu_float32_values_and_gradient(scale):
    x = (np.random.default_rng(1).normal(size=(4, 50)) * scale).astype(np.float32)
    layer = make_layer('type: "GELU"', dtype=np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    dy = np.random.default_rng(2).normal(size=x.shape).astype(np.float32)
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    x64 = x.astype(np.float64)
    pdf = np.exp(-0.5 * x64 * x64) / math.sqrt(2 * math.pi)
    # relative to each value, the tails included (Phi(-6) ~ 1e-9): the fit's 1.2e-7 plus
    # float32's one rounding (2^-24 ~ 6e-8)
    np.testing.assert_allclose(top[0].data, x64 * exact_cdf(x64), rtol=2e-7, atol=1e-30)
    # the derivative crosses zero near x = -0.75 (Phi(x) = -x pdf(x)): an absolute floor there;
    # dy's product is one more rounding
    np.testing.assert_allclose(bottom[0].diff, dy * (exact_cdf(x64) + x64 * pdf), rtol=3e-7,
                               atol=1e-7 * np.abs(dy).max())


def test_gelu_float32_near_zero_and_in_the_far_tail():
    """Where the fit's polynomial nearly cancels (|x| small) and where Phi underflows towards
    float32's least normals (x near -10): each value within the fit's error and one rounding of
    the float64 formula."""
    x = np.concatenate([np.geomspace(1e-6, 0.5, 400), -np.geomspace(1e-6, 0.5, 400),
                        np.linspace(-10, -5, 200)]).astype(np.float32)
    layer = make_layer('type: "GELU"', dtype=np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(top[0].data, x64 * exact_cdf(x64), rtol=2e-7, atol=0)
