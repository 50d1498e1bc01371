import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_reduce(x, op, axis, coeff):
    lead = x.shape[:axis]
    out = np.zeros(lead)
    for i in np.ndindex(*lead):
        total, n = 0.0, 0
        for v in x[i].ravel():
            total += {"SUM": v, "MEAN": v, "ASUM": abs(v), "SUMSQ": v * v}[op]
            n += 1
        out[i] = coeff * (total / n if op == "MEAN" else total)
    return out


@pytest.mark.parametrize("op", ["SUM", "ASUM", "SUMSQ", "MEAN"])
@pytest.mark.parametrize("axis,coeff", [(0, 1.0), (1, 2.5), (-1, -0.5)])
def test_reduction_forward_and_gradient(op, axis, coeff):
    text = ('type: "Reduction" reduction_param { operation: %s axis: %d coeff: %g }'
            % (op, axis, coeff))
    layer, bottom, top = check_layer(text, [(2, 3, 4)], kink=0.0,
                                     kink_range=0.02 if op == "ASUM" else -1.0)
    canonical = axis % 3
    assert top[0].shape == (2, 3, 4)[:canonical]
    # coeff is a float field: compare with its float32 value
    np.testing.assert_allclose(top[0].data,
                               naive_reduce(bottom[0].data, op, canonical, np.float32(coeff)),
                               rtol=1e-10)


def test_reduction_defaults_sum_everything_and_backward_by_hand():
    layer = make_layer('type: "Reduction"')
    x = np.array([[1.0, -2.0], [3.0, 0.0]])
    bottom, top = random_blobs([x]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].shape == () and float(top[0].data) == 2.0
    top[0].diff[...] = 3.0
    bottom[0].diff[...] = 7.0
    layer.Backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.full((2, 2), 3.0))
    asum = make_layer('type: "Reduction" reduction_param { operation: ASUM axis: 1 }')
    top = empty_blobs(1)
    asum.SetUp(bottom, top)
    asum.Forward(bottom, top)
    np.testing.assert_array_equal(top[0].data, [3.0, 3.0])
    top[0].diff[...] = [1.0, 2.0]
    asum.Backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [[1.0, -1.0], [2.0, 0.0]])  # sign(0) = 0


def test_reduction_float32():
    layer = make_layer('type: "Reduction" reduction_param { operation: MEAN axis: 1 }',
                       dtype=np.float32)
    bottom, top = random_blobs([(3, 4)], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, bottom[0].data.mean(1), rtol=1e-6)


def test_reduction_bad_axis():
    with pytest.raises(LayerError, match=r"reduction_param.axis 3 is out of range for a bottom "
                                         r"of shape \(2, 3, 4\)"):
        make_layer('type: "Reduction" reduction_param { axis: 3 }').SetUp(
            random_blobs([(2, 3, 4)]), empty_blobs(1))
