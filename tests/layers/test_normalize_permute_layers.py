import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def normalize_reference(x, scale, across_spatial, eps=1e-10):
    """The fork's formula, sample by sample."""
    out = np.empty_like(x)
    for n in range(x.shape[0]):
        if across_spatial:
            norm = np.sqrt((x[n] ** 2).sum() + eps)
        else:
            norm = np.sqrt((x[n] ** 2).sum(axis=0, keepdims=True) + eps)
        out[n] = x[n] / norm
    s = np.asarray(scale).reshape((-1,) + (1,) * (x.ndim - 2))
    return out * s


@pytest.mark.parametrize("across_spatial", [True, False])
@pytest.mark.parametrize("channel_shared", [True, False])
def test_normalize_forward_and_gradient(across_spatial, channel_shared):
    text = ('type: "Normalize" norm_param { across_spatial: %s channel_shared: %s '
            'scale_filler { type: "uniform" min: 0.5 max: 3 } }'
            % (str(across_spatial).lower(), str(channel_shared).lower()))
    x = np.random.default_rng(4).uniform(-2, 2, (2, 3, 4, 3))
    layer, bottom, top = check_layer(text, [x])
    scale = layer.blobs[0].data
    assert scale.shape == (() if channel_shared else (3,))
    np.testing.assert_allclose(top[0].data, normalize_reference(x, scale, across_spatial),
                               rtol=1e-12)


def test_normalize_default_scale_is_one_and_ssd_scale_twenty():
    x = np.random.default_rng(1).normal(size=(1, 4, 2, 2))
    layer = make_layer('type: "Normalize" norm_param { across_spatial: false channel_shared: '
                       'false scale_filler { type: "constant" value: 20 } }')
    bottom, top = random_blobs([x]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    np.testing.assert_allclose(np.sqrt((top[0].data ** 2).sum(axis=1)), 20, rtol=1e-9)
    layer = make_layer('type: "Normalize"')
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert float(layer.blobs[0].data) == 1.0
    np.testing.assert_allclose((top[0].data ** 2).sum(), 1, rtol=1e-9)


def test_normalize_errors():
    layer = make_layer('name: "n" type: "Normalize"')
    with pytest.raises(LayerError, match=r"layer 'n' \(type Normalize\): input must have at "
                       r"least 2 axes"):
        layer.SetUp(random_blobs([(5,)]), empty_blobs(1))


@pytest.mark.parametrize("order,expected", [
    ([0, 2, 3, 1], (0, 2, 3, 1)), ([1], (1, 0, 2, 3)), ([], (0, 1, 2, 3)),
    ([3, 0], (3, 0, 1, 2))])
def test_permute_forward_and_gradient(order, expected):
    text = 'type: "Permute" permute_param { %s }' % " ".join("order: %d" % o for o in order)
    x = np.random.default_rng(2).normal(size=(2, 3, 4, 5))
    layer, bottom, top = check_layer(text, [x], reshape_batch=expected[0] == 0)
    np.testing.assert_array_equal(top[0].data, np.transpose(x, expected))


@pytest.mark.parametrize("order,pattern", [
    ("order: 4", r"permute_param order 4 is not an axis of the 4-axis input"),
    ("order: 1 order: 1", r"permute_param order \[1, 1\] repeats an axis")])
def test_permute_errors(order, pattern):
    layer = make_layer('name: "p" type: "Permute" permute_param { %s }' % order)
    with pytest.raises(LayerError, match=r"layer 'p' \(type Permute\): " + pattern):
        layer.SetUp(random_blobs([(1, 2, 3, 4)]), empty_blobs(1))
