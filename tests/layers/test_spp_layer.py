import math
import re

import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

FLT_MAX = float(np.finfo(np.float32).max)


def spp_text(height, pool="MAX"):
    return 'type: "SPP" spp_param { pyramid_height: %d pool: %s }' % (height, pool)


def level_params(level, size):
    """Caffe's GetPoolingParam along one axis: kernel (= stride) and pad."""
    bins = 2 ** level
    kernel = math.ceil(size / bins)
    return kernel, (kernel * bins - size + 1) // 2


def naive_level(x, level, pool):
    """One pyramid level by Caffe's pooling loops (ceil-mode pooled size, window clipping)."""
    n_img, ch, h, w = x.shape
    (kh, p_h), (kw, p_w) = level_params(level, h), level_params(level, w)

    def pooled(size, k, p):
        out = math.ceil((size + 2 * p - k) / k) + 1
        return out - 1 if p and (out - 1) * k >= size + p else out

    mh, mw = pooled(h, kh, p_h), pooled(w, kw, p_w)
    assert (mh, mw) == (2 ** level, 2 ** level)
    out = np.zeros((n_img, ch, mh, mw))
    for n in range(n_img):
        for c in range(ch):
            for i in range(mh):
                for j in range(mw):
                    hs, ws = i * kh - p_h, j * kw - p_w
                    if pool == "MAX":
                        win = x[n, c, max(hs, 0):min(hs + kh, h), max(ws, 0):min(ws + kw, w)]
                        out[n, c, i, j] = win.max()
                    elif pool == "AVE":
                        he, we = min(hs + kh, h + p_h), min(ws + kw, w + p_w)
                        win = x[n, c, max(hs, 0):min(he, h), max(ws, 0):min(we, w)]
                        out[n, c, i, j] = win.sum() / ((he - hs) * (we - ws))
                    else:  # STOCHASTIC, TEST phase
                        win = x[n, c, hs:hs + kh, ws:ws + kw]
                        out[n, c, i, j] = (win ** 2).sum() / win.sum()
    return out


def naive_spp(x, height, pool):
    levels = [naive_level(x, level, pool) for level in range(height)]
    if height == 1:
        return levels[0]
    return np.concatenate([lv.reshape(x.shape[0], -1) for lv in levels], axis=1)


def distinct_values(shape, seed=0):
    """Values at least 0.05 apart, so a 1e-2 step never changes which one is the maximum."""
    rng = np.random.default_rng(seed)
    count = int(np.prod(shape))
    return (rng.permutation(count) * 0.05 - count * 0.025).reshape(shape)


def run(text, x, dtype=np.float64, phase=caffe_pb2.TRAIN):
    layer = make_layer(text, dtype, phase)
    bottom = random_blobs([np.asarray(x)], dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def test_caffe_setup_shapes():
    # Caffe's TestSetup / TestEqualOutputDims(2): N x (C * (4^h - 1) / 3), whatever H and W
    for shape, height, channels in (((2, 3, 9, 8), 3, 63), ((4, 3, 1024, 765), 5, 1023),
                                    ((10, 3, 7, 7), 3, 63)):
        top = empty_blobs(1, np.float32)
        make_layer(spp_text(height), np.float32).SetUp([Blob(shape, np.float32)], top)
        assert top[0].shape == (shape[0], channels)


def test_hand_example():
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    _, _, top = run(spp_text(2, "MAX"), x, np.float32)
    assert top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data, [[15, 5, 7, 13, 15]])
    _, _, top = run(spp_text(2, "AVE"), x, np.float32)
    np.testing.assert_allclose(top[0].data, [[7.5, 2.5, 4.5, 10.5, 12.5]])


@pytest.mark.parametrize("pool", ["MAX", "AVE"])
@pytest.mark.parametrize("height,shape", [
    (1, (2, 3, 5, 4)),     # one global pooling: Caffe's top stays (N, C, 1, 1)
    (2, (2, 3, 5, 7)),     # odd sizes: level 1 pads 1 on both axes
    (3, (2, 2, 6, 9)),     # level 2: kernel 2x3, pad 1x2
    (3, (1, 2, 8, 8)),     # no padding anywhere
    (3, (1, 1, 13, 11)),   # level 2: kernel 4x3, pad 2x1
])
def test_forward_matches_naive_levels(pool, height, shape):
    x = np.random.default_rng(1).standard_normal(shape)
    _, _, top = run(spp_text(height, pool), x)
    expected = naive_spp(x, height, pool)
    per_image = shape[1] * sum(4 ** level for level in range(height))
    assert top[0].shape == ((shape[0], shape[1], 1, 1) if height == 1
                            else (shape[0], per_image))
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("pool", ["MAX", "AVE"])
def test_levels_equal_pooling_layers_flattened_and_concatenated(pool):
    """Caffe builds SPP from Pooling, Flatten and Concat layers: compare with real Poolings,
    including backward (the levels' bottom gradients add up)."""
    x = distinct_values((2, 2, 7, 6), seed=4)
    layer, bottom, top = run(spp_text(3, pool), x)
    dy = np.random.default_rng(2).standard_normal(top[0].shape)
    top[0].diff[...] = dy
    bottom[0].diff[...] = 42
    layer.Backward(top, [True], bottom)
    outputs, grad, start = [], np.zeros(x.shape), 0
    for level in range(3):
        (kh, ph), (kw, pw) = level_params(level, 7), level_params(level, 6)
        pool_layer = make_layer('type: "Pooling" pooling_param { pool: %s kernel_h: %d '
                                'kernel_w: %d stride_h: %d stride_w: %d pad_h: %d pad_w: %d }'
                                % (pool, kh, kw, kh, kw, ph, pw))
        b, t = random_blobs([x]), empty_blobs(1)
        pool_layer.SetUp(b, t)
        pool_layer.Forward(b, t)
        outputs.append(t[0].data.reshape(2, -1).copy())
        size = outputs[-1].shape[1]
        t[0].diff[...] = dy[:, start:start + size].reshape(t[0].shape)
        start += size
        pool_layer.Backward(t, [True], b)
        grad += b[0].diff
    np.testing.assert_allclose(top[0].data, np.concatenate(outputs, axis=1), rtol=1e-12)
    np.testing.assert_allclose(bottom[0].diff, grad, rtol=1e-12, atol=1e-12)


def test_max_skips_nan_and_keeps_the_first_maximum():
    x = np.zeros((1, 1, 4, 4), np.float32)
    x[0, 0, 0, 0] = np.nan
    x[0, 0, 1, 1] = 3.0
    x[0, 0, 2, 2] = 3.0
    layer, bottom, top = run(spp_text(2), x, np.float32)
    np.testing.assert_array_equal(top[0].data, [[3, 3, 0, 0, 3]])
    top[0].diff[...] = [[1, 2, 4, 8, 16]]
    layer.Backward(top, [True], bottom)
    expected = np.zeros((4, 4), np.float32)
    expected[1, 1] = 1 + 2  # global maximum (first in row-major order) and its quadrant's
    expected[0, 2] = 4      # all-zero quadrant: its first element
    expected[2, 0] = 8
    expected[2, 2] = 16
    np.testing.assert_array_equal(bottom[0].diff[0, 0], expected)


@pytest.mark.parametrize("pool,height,shape", [
    ("MAX", 3, (2, 2, 6, 7)),
    ("AVE", 3, (2, 2, 6, 7)),
    ("MAX", 1, (2, 2, 3, 4)),
    ("AVE", 2, (1, 2, 5, 7)),
])
def test_gradient(pool, height, shape):
    bottom = random_blobs([distinct_values(shape, seed=3)])
    check_layer(spp_text(height, pool), bottom)


def test_stochastic_test_phase_and_gradient():
    x = np.random.default_rng(0).uniform(0.1, 1.0, (2, 2, 8, 4))
    _, _, top = run(spp_text(3, "STOCHASTIC"), x, phase=caffe_pb2.TEST)
    np.testing.assert_allclose(top[0].data, naive_spp(x, 3, "STOCHASTIC"), rtol=1e-12)
    check_layer(spp_text(2, "STOCHASTIC"), random_blobs([x[:, :, :4]]), phase=caffe_pb2.TEST)


def test_stochastic_train_samples_window_elements_and_routes_to_them():
    backend.set_random_seed(3)
    x = np.random.default_rng(0).uniform(0.1, 1.0, (2, 3, 4, 4))
    layer, bottom, top = run(spp_text(2, "STOCHASTIC"), x)
    y = top[0].data
    for n in range(2):
        for c in range(3):
            assert y[n, c] in x[n, c]
            for q, (i, j) in enumerate([(0, 0), (0, 2), (2, 0), (2, 2)]):
                assert y[n, 3 + 4 * c + q] in x[n, c, i:i + 2, j:j + 2]
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.sum() == pytest.approx(top[0].count)
    picked = bottom[0].diff > 0
    np.testing.assert_array_equal(np.sort(x[picked]), np.sort(np.unique(y)))


def test_reshape_to_another_size():
    layer = make_layer(spp_text(3, "AVE"))
    bottom, top = random_blobs([(1, 2, 8, 8)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    assert top[0].shape == (1, 42)
    x = Blob((3, 2, 7, 10), np.float64)
    x.data[...] = np.random.default_rng(5).standard_normal(x.shape)
    layer.Forward([x], top)
    assert top[0].shape == (3, 42)
    np.testing.assert_allclose(top[0].data, naive_spp(x.data, 3, "AVE"), rtol=1e-12)


@pytest.mark.parametrize("text,shape,phase,message", [
    ('type: "SPP"', (1, 1, 4, 4), caffe_pb2.TRAIN, "pyramid_height must be at least 1, got 0"),
    (spp_text(2), (2, 4, 4), caffe_pb2.TRAIN, "input must have 4 axes"),
    (spp_text(2), (1, 1, 0, 4), caffe_pb2.TRAIN, "input dimensions cannot be zero"),
    (spp_text(3), (1, 1, 5, 8), caffe_pb2.TRAIN,
     "pyramid level 2 of a 5x8 input needs kernel (2, 2) and pad (2, 0), but the pad must be "
     "smaller than the kernel"),
    (spp_text(2, "STOCHASTIC"), (1, 1, 5, 4), caffe_pb2.TEST,
     "pyramid level 1 of a 5x4 input needs pad (1, 0), and padding is implemented only for "
     "AVE and MAX"),
])
def test_invalid_usage(text, shape, phase, message):
    layer = make_layer(text, phase=phase)
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs([shape]), empty_blobs(1))
    assert "SPP" in str(info.value)


def test_backward_before_forward():
    layer = make_layer(spp_text(2))
    bottom, top = random_blobs([(1, 1, 4, 4)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    with pytest.raises(LayerError, match="backward needs a forward pass first"):
        layer.Backward(top, [True], bottom)


@pytest.mark.parametrize("pool", ["MAX", "AVE"])
def test_device_path_gives_the_cpu_numbers(pool):
    """In GPU mode (a simulated device here) forward and backward give the CPU numbers."""
    from pycaffe_lite.testing.simdevice import cpu_and_simulated_gpu

    def forward_backward():
        layer, bottom, top = run(spp_text(3, pool), distinct_values((2, 2, 7, 6), seed=8))
        top[0].diff[...] = np.cos(np.arange(top[0].count)).reshape(top[0].shape)
        layer.Backward(top, [True], bottom)
        return top[0].data.copy(), bottom[0].diff.copy()

    cpu, gpu, dev = cpu_and_simulated_gpu(forward_backward)
    assert dev.to_device > 0
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
