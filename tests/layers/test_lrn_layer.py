import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def lrn_text(size, alpha, beta, k, region):
    return ('type: "LRN" lrn_param { local_size: %d alpha: %g beta: %g k: %g norm_region: %s }'
            % (size, alpha, beta, k, region))


def naive_lrn(x, size, alpha, beta, k, region):
    """Element by element, as Caffe's layer test computes its reference."""
    n_img, ch, h, w = x.shape
    pre = (size - 1) // 2
    y = np.zeros_like(x)
    for n in range(n_img):
        for c in range(ch):
            for hh in range(h):
                for ww in range(w):
                    if region == "ACROSS_CHANNELS":
                        lo, hi = max(0, c - pre), min(ch, c + pre + 1)
                        scale = k + alpha / size * (x[n, lo:hi, hh, ww] ** 2).sum()
                    else:
                        h0, h1 = max(0, hh - pre), min(h, hh - pre + size)
                        w0, w1 = max(0, ww - pre), min(w, ww - pre + size)
                        window = x[n, c, h0:h1, w0:w1]
                        scale = 1 + alpha / (size * size) * (window ** 2).sum()
                    y[n, c, hh, ww] = x[n, c, hh, ww] * scale ** -beta
    return y


def forward(text, x, dtype=np.float64):
    layer = make_layer(text, dtype)
    bottom = random_blobs([x], dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


@pytest.mark.parametrize("region", ["ACROSS_CHANNELS", "WITHIN_CHANNEL"])
@pytest.mark.parametrize("size,alpha,beta,k", [(5, 1.0, 0.75, 1.0), (3, 2.5, 0.5, 2.0),
                                               (1, 0.25, 1.25, 0.5), (7, 4.0, 0.75, 1.0)])
def test_forward_matches_naive_loop(region, size, alpha, beta, k):
    x = np.random.default_rng(size).uniform(-2, 2, (2, 6, 4, 5))
    _, _, top = forward(lrn_text(size, alpha, beta, k, region), x)
    assert top[0].shape == x.shape
    np.testing.assert_allclose(top[0].data, naive_lrn(x, size, alpha, beta, k, region),
                               rtol=1e-12)


def test_within_channel_ignores_k_and_defaults_are_caffes():
    x = np.random.default_rng(1).uniform(-1, 1, (1, 2, 3, 3))
    _, _, a = forward(lrn_text(3, 1.0, 0.75, 1.0, "WITHIN_CHANNEL"), x)
    _, _, b = forward(lrn_text(3, 1.0, 0.75, 7.0, "WITHIN_CHANNEL"), x)
    np.testing.assert_array_equal(a[0].data, b[0].data)
    x = np.random.default_rng(2).uniform(-1, 1, (1, 7, 2, 2))
    _, _, d = forward('type: "LRN"', x)  # local_size 5, alpha 1, beta 0.75, k 1, ACROSS
    np.testing.assert_allclose(d[0].data, naive_lrn(x, 5, 1.0, 0.75, 1.0, "ACROSS_CHANNELS"),
                               rtol=1e-12)


def test_float32_end_to_end():
    x = np.random.default_rng(3).uniform(-2, 2, (2, 5, 3, 4)).astype(np.float32)
    for region in ("ACROSS_CHANNELS", "WITHIN_CHANNEL"):
        layer, bottom, top = forward(lrn_text(3, 1.5, 0.75, 1.0, region), x, np.float32)
        assert top[0].data.dtype == np.float32
        np.testing.assert_allclose(top[0].data, naive_lrn(x.astype(np.float64), 3, 1.5, 0.75,
                                                          1.0, region), rtol=1e-5)
        top[0].diff[...] = 1
        layer.Backward(top, [True], bottom)
        assert bottom[0].diff.dtype == np.float32 and np.isfinite(bottom[0].diff).all()


@pytest.mark.parametrize("region", ["ACROSS_CHANNELS", "WITHIN_CHANNEL"])
@pytest.mark.parametrize("size,alpha,beta,k", [(3, 1.0, 0.75, 1.0), (5, 2.0, 0.6, 1.5)])
def test_gradient(region, size, alpha, beta, k):
    check_layer(lrn_text(size, alpha, beta, k, region), [(2, 6, 3, 4)])


@pytest.mark.parametrize("text,shape,message", [
    (lrn_text(4, 1, 0.75, 1, "ACROSS_CHANNELS"), (1, 5, 3, 3),
     "only supports odd values for local_size, got 4"),
    (lrn_text(0, 1, 0.75, 1, "WITHIN_CHANNEL"), (1, 5, 3, 3), "got 0"),
    (lrn_text(3, 1, 0.75, 1, "ACROSS_CHANNELS"), (5, 3, 3), "must have 4 axes"),
])
def test_invalid_usage(text, shape, message):
    with pytest.raises(LayerError, match=message) as info:
        forward(text, shape)
    assert "lrn" in str(info.value)
