import math

import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


@pytest.mark.parametrize("base, scale, shift", [
    (-1, 1, 0), (-1, 0.5, 1.0), (2, 1, 0), (10, 2, 0.5), (0.5, -1, 3), (3, 1, 0.25),
])
def test_log_forward_gradient_and_in_place(base, scale, shift):
    text = 'type: "Log" log_param { base: %g scale: %g shift: %g }' % (base, scale, shift)
    x = np.random.default_rng(2).uniform(0.5, 2.0, (2, 3, 4))
    layer, bottom, top = check_layer(text, [x], in_place=True)
    b = math.e if base == -1 else base
    expected = [[[math.log(shift + scale * v, b) for v in row] for row in m] for m in x]
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)


def test_log_in_place_gradient_reads_original_input():
    x = np.array([[0.5, 1.0, 2.0, 4.0]])
    blob = random_blobs([x])[0]
    layer = make_layer('type: "Log" log_param { base: 2 scale: 2 shift: 1 }')
    layer.SetUp([blob], [blob])
    layer.Forward([blob], [blob])
    np.testing.assert_allclose(blob.data, np.log2(1 + 2 * x), rtol=1e-12)
    blob.diff[...] = 3.0
    layer.Backward([blob], [True], [blob])
    np.testing.assert_allclose(blob.diff, 3.0 * 2 / np.log(2) / (1 + 2 * x), rtol=1e-12)


def test_log_float32():
    x = np.array([0.25, 1.0, 8.0], np.float32)
    layer = make_layer('type: "Log"', dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, np.log(x.astype(np.float64)), rtol=1e-6)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, 1 / x.astype(np.float64), rtol=1e-6)


@pytest.mark.parametrize("base, message", [
    (0, r"base must be strictly positive \(or -1 for e\), got 0"),
    (-3, r"base must be strictly positive \(or -1 for e\), got -3"),
    (1, r"base 1 gives log\(base\) = 0; expected a finite, non-zero value"),
])
def test_log_rejects_bad_base(base, message):
    layer = make_layer('type: "Log" log_param { base: %g }' % base)
    with pytest.raises(LayerError, match=r"Log.*" + message):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))
