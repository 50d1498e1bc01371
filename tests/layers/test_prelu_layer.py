import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, layer_param, make_layer, random_blobs


def _naive_prelu(x, slopes, shared):
    y = np.empty_like(x)
    for n in range(x.shape[0]):
        for c in range(x.shape[1]):
            a = slopes.reshape(-1)[0 if shared else c]
            for i, v in np.ndenumerate(x[n, c]):
                y[(n, c) + i] = v if v > 0 else a * v
    return y


def test_prelu_default_filler_and_blob_shapes():
    layer = make_layer('type: "PReLU"')
    layer.SetUp(random_blobs([(2, 3, 4)]), empty_blobs(1))
    assert layer.blobs[0].shape == (3,)
    np.testing.assert_array_equal(layer.blobs[0].data, np.full(3, 0.25))
    shared = make_layer('type: "PReLU" prelu_param { channel_shared: true }')
    shared.SetUp(random_blobs([(2, 3, 4)]), empty_blobs(1))
    assert shared.blobs[0].shape == () and shared.blobs[0].count == 1  # Caffe's vector<int>(0)
    assert float(shared.blobs[0].data) == 0.25


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("shape", [(2, 3, 2, 2), (3, 4), (2, 3, 2, 1, 2)])
def test_prelu_forward_and_gradient(shared, shape):
    text = ('type: "PReLU" prelu_param { channel_shared: %s filler { type: "uniform" '
            'min: -0.5 max: 0.8 } }' % ("true" if shared else "false"))
    layer, bottom, top = check_layer(text, [shape], kink=0.0, kink_range=0.02)
    slopes = layer.blobs[0].data
    assert len(np.unique(slopes)) == (1 if shared else shape[1])
    np.testing.assert_allclose(top[0].data, _naive_prelu(bottom[0].data, slopes, shared),
                               rtol=1e-12)


@pytest.mark.parametrize("shared", ["false", "true"])
def test_prelu_in_place_matches_out_of_place(shared):
    text = ('type: "PReLU" prelu_param { channel_shared: %s filler { value: 0.3 } }' % shared)
    check_layer(text, [(2, 3, 2)], kink=0.0, kink_range=0.02, in_place=True)


@pytest.mark.parametrize("shared", ["false", "true"])
def test_prelu_in_place_slope_gradient_and_accumulation(shared):
    text = 'type: "PReLU" prelu_param { channel_shared: %s filler { value: 0.3 } }' % shared
    x = np.random.default_rng(5).uniform(-1, 1, (2, 3, 4))
    dy = np.random.default_rng(6).uniform(-1, 1, (2, 3, 4))
    axes = None if shared == "true" else (0, 2)
    expected_slope = (dy * np.where(x <= 0, x, 0)).sum(axis=axes)
    expected_dx = dy * np.where(x > 0, 1, np.float32(0.3))  # the filler value is a float
    for in_place in (False, True):
        layer = make_layer(text)
        bottom = random_blobs([x])
        top = bottom if in_place else empty_blobs(1)
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        top[0].diff[...] = dy
        layer.Backward(top, [True], bottom)
        np.testing.assert_allclose(layer.blobs[0].diff, expected_slope, rtol=1e-12)
        np.testing.assert_allclose(bottom[0].diff, expected_dx, rtol=1e-12)
        # parameter gradients accumulate over backward passes
        bottom[0].data[...] = x  # in place, the first pass overwrote x
        layer.Forward(bottom, top)
        top[0].diff[...] = dy
        layer.Backward(top, [True], bottom)
        np.testing.assert_allclose(layer.blobs[0].diff, 2 * expected_slope, rtol=1e-12)


def test_prelu_param_propagate_down_false_leaves_slope_diff():
    layer = make_layer('type: "PReLU"')
    bottom, top = random_blobs([(2, 3)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.set_param_propagate_down(0, False)
    layer.Forward(bottom, top)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    np.testing.assert_array_equal(layer.blobs[0].diff, np.zeros(3))


def test_prelu_float32():
    x = np.array([[-2.0, 3.0], [1.0, -4.0]], np.float32)
    layer = make_layer('type: "PReLU"', dtype=np.float32)
    bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data, [[-0.5, 3.0], [1.0, -1.0]])
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.dtype == np.float32 and layer.blobs[0].diff.dtype == np.float32
    np.testing.assert_array_equal(layer.blobs[0].diff, [-2.0, -4.0])


def test_prelu_rejects_one_axis_bottom():
    layer = make_layer('type: "PReLU"')
    with pytest.raises(LayerError, match=r"PReLU.*at least 2 axes \(N, C, \.\.\.\), got shape "
                                         r"\(4,\)"):
        layer.SetUp(random_blobs([(4,)]), empty_blobs(1))


def test_prelu_rejects_slope_blob_of_wrong_size():
    param = layer_param('type: "PReLU"')
    param.blobs.add().shape.dim.extend([4])
    param.blobs[0].data.extend([0.1] * 4)
    layer = make_layer(param)
    with pytest.raises(LayerError, match=r"slope blob has 4 values .*expected 3 "
                                         r"\(channel_shared: false, 3 channels\)"):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))


def test_prelu_rejects_channel_change_on_reshape():
    layer = make_layer('type: "PReLU"')
    layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))
    with pytest.raises(LayerError, match=r"bottom has 5 channels .* set up with 3"):
        layer.Forward(random_blobs([(2, 5)]), empty_blobs(1))
