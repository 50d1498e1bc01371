import numpy as np
import pytest

from pycaffe_lite.testing import check_layer


@pytest.mark.parametrize("slope", [0.0, 0.01, 0.3])
def test_relu_forward_and_gradient(slope):
    text = 'type: "ReLU" relu_param { negative_slope: %g }' % slope
    layer, bottom, top = check_layer(text, [(2, 3, 4, 5)], kink=0.0, kink_range=0.02,
                                     in_place=True)
    x = bottom[0].data
    np.testing.assert_allclose(top[0].data, np.where(x > 0, x, np.float32(slope) * x), rtol=1e-12)
