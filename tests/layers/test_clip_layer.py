import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def test_clip_forward_gradient_and_in_place_symmetric():
    text = 'type: "Clip" clip_param { min: -0.5 max: 0.5 }'
    layer, bottom, top = check_layer(text, [(2, 3, 4)], kink=0.5, kink_range=0.02,
                                     in_place=True)
    x = bottom[0].data
    expected = [[[min(max(v, -0.5), 0.5) for v in row] for row in m] for m in x]
    np.testing.assert_array_equal(top[0].data, expected)
    assert (np.abs(x) > 0.5).any() and (np.abs(x) < 0.5).any()


def test_clip_gradient_asymmetric_range():
    # values kept away from the kinks at -0.3 and 0.6
    x = np.array([-0.9, -0.7, -0.5, -0.2, 0.0, 0.3, 0.5, 0.7, 0.8, 1.0, -0.1, 0.1]).reshape(2, 6)
    text = 'type: "Clip" clip_param { min: -0.3 max: 0.6 }'
    layer, bottom, top = check_layer(text, [x], in_place=True)
    # clip_param bounds are float fields: their float32 values
    np.testing.assert_array_equal(top[0].data, np.clip(x, np.float32(-0.3), np.float32(0.6)))


@pytest.mark.parametrize("in_place", [False, True])
def test_clip_gradient_passes_at_both_bounds_float32(in_place):
    x = np.array([-2.0, -1.0, 0.0, 1.0, 2.0], np.float32)
    layer = make_layer('type: "Clip" clip_param { min: -1 max: 1 }', dtype=np.float32)
    bottom = random_blobs([x], dtype=np.float32)
    top = bottom if in_place else empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data, [-1.0, -1.0, 0.0, 1.0, 1.0])
    top[0].diff[...] = 3.0
    layer.Backward(top, [True], bottom)
    # Caffe: dy * (min <= x <= max), inclusive at both ends
    np.testing.assert_array_equal(bottom[0].diff, [0.0, 3.0, 3.0, 3.0, 0.0])


def test_clip_rejects_min_above_max():
    layer = make_layer('type: "Clip" clip_param { min: 2 max: 1 }')
    with pytest.raises(LayerError, match=r"Clip.*clip_param.min \(2\) must not be greater "
                                         r"than clip_param.max \(1\)"):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))


@pytest.mark.parametrize("params, missing", [("", "min and max"), ("clip_param { max: 6 }", "min"),
                                             ("clip_param { min: -1 }", "max")])
def test_clip_requires_both_bounds(params, missing):
    """BVLC's ClipParameter marks min and max required; without them the layer clamped every
    value to 0 (the unset fields' value)."""
    layer = make_layer('type: "Clip" ' + params)
    with pytest.raises(LayerError, match=r"clip_param needs both min and max \(Caffe requires "
                                         r"them\), %s not given" % missing):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))
