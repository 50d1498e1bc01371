import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_mvn(x, normalize_variance, across_channels, eps=np.float32(1e-9)):
    x4 = x.reshape(x.shape + (1,) * (4 - x.ndim))
    out = np.zeros(x4.shape)
    n, c = x4.shape[:2]
    groups = [(i, slice(None)) for i in range(n)] if across_channels else \
        [(i, j) for i in range(n) for j in range(c)]
    for g in groups:
        vals = x4[g]
        mean = sum(vals.ravel()) / vals.size
        centred = vals - mean
        if normalize_variance:
            std = np.sqrt(sum(v * v for v in centred.ravel()) / vals.size)
            centred = centred / (std + float(eps))
        out[g] = centred
    return out


@pytest.mark.parametrize("params,nv,ac", [
    ("", True, False),
    ("normalize_variance: false", False, False),
    ("across_channels: true", True, True),
    ("across_channels: true normalize_variance: false", False, True),
])
def test_mvn_forward_and_gradient(params, nv, ac):
    text = 'type: "MVN" mvn_param { %s }' % params
    layer, bottom, top = check_layer(text, [(2, 3, 2, 2)], exhaustive=True, in_place=True)
    np.testing.assert_allclose(top[0].data, naive_mvn(bottom[0].data, nv, ac), rtol=1e-10,
                               atol=1e-12)


def test_mvn_eps_is_added_to_the_std():
    layer = make_layer('type: "MVN" mvn_param { eps: 0.5 }')
    x = np.array([[[[1.0, 3.0]]]])  # mean 2, std 1
    bottom, top = random_blobs([x]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    np.testing.assert_allclose(top[0].data.ravel(), [-1 / 1.5, 1 / 1.5], rtol=1e-12)


def test_mvn_two_axis_bottom_gives_four_axis_top_float32():
    layer = make_layer('type: "MVN" mvn_param { across_channels: true }', dtype=np.float32)
    bottom, top = random_blobs([(3, 5)], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].shape == (3, 5, 1, 1) and top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, naive_mvn(bottom[0].data, True, True), rtol=1e-5,
                               atol=1e-6)
    top[0].diff[...] = 1.0
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, 0.0, atol=1e-6)  # a constant shift vanishes


def test_mvn_rejects_more_than_four_axes():
    with pytest.raises(LayerError, match=r"at most 4 axes \(N, C, H, W\), got shape "
                                         r"\(1, 2, 1, 2, 2\)"):
        make_layer('type: "MVN"').SetUp(random_blobs([(1, 2, 1, 2, 2)]), empty_blobs(1))
