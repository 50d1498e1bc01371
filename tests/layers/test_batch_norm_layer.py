import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

MAF = float(np.float32(0.999))
EPS = float(np.float32(1e-5))


def naive_stats(x):
    """Per-channel mean and biased variance by explicit loops; x is (N, C, ...)."""
    n, c = x.shape[:2]
    means, variances, m = [], [], 0
    for ch in range(c):
        vals = [v for i in range(n) for v in np.ravel(x[i, ch])]
        m = len(vals)
        mu = sum(vals) / m
        means.append(mu)
        variances.append(sum((v - mu) ** 2 for v in vals) / m)
    return np.array(means), np.array(variances), m


def naive_normalise(x, mean, var, eps=EPS):
    out = np.empty_like(x)
    for idx in np.ndindex(*x.shape):
        ch = idx[1] if x.ndim > 1 else 0
        out[idx] = (x[idx] - mean[ch]) / np.sqrt(var[ch] + eps)
    return out


GLOBAL_BLOBS = ('blobs { shape { dim: 3 } data: 1.0 data: -2.0 data: 4.0 } '
                'blobs { shape { dim: 3 } data: 2.0 data: 0.5 data: 8.0 } '
                'blobs { shape { dim: 1 } data: 2.0 }')


@pytest.mark.parametrize("shape", [(3, 3, 2, 2), (4, 3), (2, 3, 4)])
def test_batch_norm_train_forward_and_gradient(shape):
    layer, bottom, top = check_layer('type: "BatchNorm"', [shape], in_place=True)
    x = bottom[0].data
    mean, var, _ = naive_stats(x)
    np.testing.assert_allclose(top[0].data, naive_normalise(x, mean, var), rtol=1e-9,
                               atol=1e-12)


def test_batch_norm_running_statistics_after_two_passes():
    rng = np.random.default_rng(5)
    x1 = rng.normal(1.0, 2.0, (2, 3, 2, 2))
    x2 = rng.normal(-1.0, 0.5, (2, 3, 2, 2))
    layer = make_layer('type: "BatchNorm"')
    bottom, top = random_blobs([x1]), empty_blobs(1)
    layer.SetUp(bottom, top)
    for b in layer.blobs:
        assert not b.data.any()
    assert [b.shape for b in layer.blobs] == [(3,), (3,), (1,)]
    layer.Forward(bottom, top)
    bottom[0].data[...] = x2
    layer.Forward(bottom, top)
    m1, v1, m = naive_stats(x1)
    m2, v2, _ = naive_stats(x2)
    assert m == 8
    corr = m / (m - 1.0)
    np.testing.assert_allclose(layer.blobs[2].data, [MAF * 1.0 + 1.0], rtol=1e-12)
    np.testing.assert_allclose(layer.blobs[0].data, MAF * m1 + m2, rtol=1e-10)
    np.testing.assert_allclose(layer.blobs[1].data, MAF * (corr * v1) + corr * v2, rtol=1e-10)
    # the output of the second pass uses the batch statistics only
    np.testing.assert_allclose(top[0].data, naive_normalise(x2, m2, v2), rtol=1e-9)


@pytest.mark.parametrize("phase,params", [
    (caffe_pb2.TEST, ""),
    (caffe_pb2.TRAIN, "batch_norm_param { use_global_stats: true }"),
])
def test_batch_norm_global_forward_and_gradient(phase, params):
    text = 'type: "BatchNorm" %s %s' % (params, GLOBAL_BLOBS)
    layer, bottom, top = check_layer(text, [(2, 3, 2)], phase=phase, check_params=False,
                                     in_place=True)
    mean = np.array([0.5, -1.0, 2.0])   # blob 0 / blob 2
    var = np.array([1.0, 0.25, 4.0])    # blob 1 / blob 2
    np.testing.assert_allclose(top[0].data, naive_normalise(bottom[0].data, mean, var),
                               rtol=1e-9)
    # global stats: the stored blobs do not move
    np.testing.assert_array_equal(layer.blobs[2].data, [2.0])
    top[0].diff[...] = 1.0
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff,
                               np.broadcast_to((1 / np.sqrt(var + EPS))[:, None], (2, 3, 2)),
                               rtol=1e-9)


def test_batch_norm_global_with_zero_scale_factor_uses_zero_statistics():
    layer = make_layer('type: "BatchNorm" batch_norm_param { use_global_stats: true }')
    bottom, top = random_blobs([(2, 3)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.blobs[0].data[...] = 5.0
    layer.Forward(bottom, top)
    np.testing.assert_allclose(top[0].data, bottom[0].data / np.sqrt(EPS), rtol=1e-9)


def test_batch_norm_statistics_are_never_learned():
    layer = make_layer('type: "BatchNorm" param { lr_mult: 0 }')
    layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))
    assert [p.lr_mult for p in layer.layer_param.param] == [0.0, 0.0, 0.0]
    assert layer.param_propagate_down == [False, False, False]
    assert [p.lr_mult for p in layer.to_proto().param] == [0.0, 0.0, 0.0]


def test_batch_norm_float32():
    layer = make_layer('type: "BatchNorm"', dtype=np.float32)
    bottom, top = random_blobs([(4, 3, 2)], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = top[0].data
    layer.Backward(top, [True], bottom)
    assert top[0].data.dtype == np.float32 and bottom[0].diff.dtype == np.float32
    assert all(b.data.dtype == np.float32 for b in layer.blobs)
    mean, var, _ = naive_stats(bottom[0].data.astype(np.float64))
    np.testing.assert_allclose(top[0].data, naive_normalise(bottom[0].data, mean, var),
                               rtol=1e-4, atol=1e-5)


def test_batch_norm_errors():
    with pytest.raises(LayerError, match="Cannot configure batch normalization statistics as "
                                         "layer parameters: param 1 has lr_mult 1"):
        make_layer('type: "BatchNorm" param { lr_mult: 0 } param { lr_mult: 1 }').SetUp(
            random_blobs([(2, 3)]), empty_blobs(1))
    layer = make_layer('type: "BatchNorm"')
    bottom, top = random_blobs([(2, 3, 2)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    bottom[0].reshape(2, 4, 2)
    with pytest.raises(LayerError, match=r"shape \(2, 4, 2\) does not have the 3 channels"):
        layer.Forward(bottom, top)
