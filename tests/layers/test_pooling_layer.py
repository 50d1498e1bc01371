import math

import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.ops.pooling import pooled_size
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import (GradientChecker, check_layer, empty_blobs, make_layer,
                                  random_blobs)

FLT_MAX = float(np.finfo(np.float32).max)


# ---- a naive transcription of Caffe's CPU loops -------------------------------------------
def naive_pooled(size, k, p, s, ceil_mode):
    span = (size + 2 * p - k) / s
    out = (math.ceil(span) if ceil_mode else math.floor(span)) + 1
    if p > 0 and (out - 1) * s >= size + p:
        out -= 1
    return out


def naive_pool(x, method, kernel, pad, stride, ceil_mode=True):
    n_img, ch, h, w = x.shape
    (kh, kw), (p_h, p_w), (s_h, s_w) = kernel, pad, stride
    ph_n = naive_pooled(h, kh, p_h, s_h, ceil_mode)
    pw_n = naive_pooled(w, kw, p_w, s_w, ceil_mode)
    top = np.zeros((n_img, ch, ph_n, pw_n))
    mask = np.full(top.shape, -1.0)
    for n in range(n_img):
        for c in range(ch):
            for ph in range(ph_n):
                for pw in range(pw_n):
                    hs, ws = ph * s_h - p_h, pw * s_w - p_w
                    if method == "MAX":
                        he, we = min(hs + kh, h), min(ws + kw, w)
                        hs, ws = max(hs, 0), max(ws, 0)
                        best = -FLT_MAX
                        for hh in range(hs, he):
                            for ww in range(ws, we):
                                if x[n, c, hh, ww] > best:
                                    best = x[n, c, hh, ww]
                                    mask[n, c, ph, pw] = hh * w + ww
                        top[n, c, ph, pw] = best
                    else:
                        he, we = min(hs + kh, h + p_h), min(ws + kw, w + p_w)
                        pool_size = (he - hs) * (we - ws)
                        hs, ws = max(hs, 0), max(ws, 0)
                        he, we = min(he, h), min(we, w)
                        total = 0.0
                        for hh in range(hs, he):
                            for ww in range(ws, we):
                                total += x[n, c, hh, ww]
                        top[n, c, ph, pw] = total / pool_size
    return top, mask


def pool_text(params):
    return 'type: "Pooling" pooling_param { %s }' % params


def forward(params, x, num_top=1, phase=caffe_pb2.TRAIN, dtype=np.float64):
    layer = make_layer(pool_text(params), dtype, phase)
    bottom = random_blobs([x], dtype=dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def distinct(shape, seed=0):
    """Values 0.03 apart (more than two gradient-check steps), so max pooling never ties."""
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n).reshape(shape) - n / 2) * 0.03


# ---- output size ---------------------------------------------------------------------------
@pytest.mark.parametrize("size,k,p,s", [(6, 3, 0, 2), (6, 3, 1, 2), (5, 3, 1, 3), (7, 2, 1, 2),
                                        (4, 4, 0, 3), (9, 3, 2, 4), (1, 1, 0, 1), (13, 3, 0, 2)])
def test_pooled_size_rule(size, k, p, s):
    for ceil_mode in (True, False):
        assert pooled_size(size, k, p, s, ceil_mode) == naive_pooled(size, k, p, s, ceil_mode)


def test_pooled_size_known_values():
    assert pooled_size(6, 3, 0, 2, True) == 3 and pooled_size(6, 3, 0, 2, False) == 2
    # ceil gives 3, but the third window would start in the padding: clipped to 2
    assert pooled_size(5, 3, 1, 3, True) == 2
    assert pooled_size(55, 3, 0, 2, True) == 27


# ---- forward against the naive loops -------------------------------------------------------
SHAPE_CASES = [
    # params, (kernel, pad, stride), input shape; CEIL and FLOOR differ for most of them
    ("kernel_size: 3 stride: 2", ((3, 3), (0, 0), (2, 2)), (2, 2, 6, 7)),
    ("kernel_size: 3 stride: 2 pad: 1", ((3, 3), (1, 1), (2, 2)), (1, 3, 6, 5)),
    ("kernel_size: 3 stride: 3 pad: 1", ((3, 3), (1, 1), (3, 3)), (1, 2, 5, 7)),
    ("kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 pad_h: 1 pad_w: 1",
     ((3, 2), (1, 1), (2, 1)), (2, 1, 6, 4)),
    ("kernel_size: 2 stride: 2", ((2, 2), (0, 0), (2, 2)), (1, 2, 5, 5)),
    ("kernel_size: 4 stride: 3 pad: 2", ((4, 4), (2, 2), (3, 3)), (1, 2, 8, 9)),
    ("kernel_size: 2", ((2, 2), (0, 0), (1, 1)), (1, 1, 3, 4)),
]


@pytest.mark.parametrize("method", ["MAX", "AVE"])
@pytest.mark.parametrize("round_mode", ["CEIL", "FLOOR"])
@pytest.mark.parametrize("params,geometry,shape", SHAPE_CASES)
def test_forward_matches_naive_caffe_loop(method, round_mode, params, geometry, shape):
    x = distinct(shape)
    num_top = 2 if method == "MAX" else 1
    layer, bottom, top = forward("pool: %s round_mode: %s %s" % (method, round_mode, params),
                                 x, num_top)
    expected, mask = naive_pool(x, method, *geometry, ceil_mode=round_mode == "CEIL")
    assert top[0].shape == expected.shape
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12, atol=1e-15)
    if method == "MAX":
        np.testing.assert_array_equal(top[1].data, mask)


def test_ceil_and_floor_give_different_shapes():
    x = distinct((1, 1, 6, 6))
    _, _, ceil_top = forward("pool: AVE kernel_size: 3 stride: 2", x)
    _, _, floor_top = forward("pool: AVE kernel_size: 3 stride: 2 round_mode: FLOOR", x)
    assert ceil_top[0].shape == (1, 1, 3, 3) and floor_top[0].shape == (1, 1, 2, 2)


def test_ave_divides_by_the_window_clipped_to_the_padded_input():
    x = np.ones((1, 1, 3, 3))
    _, _, top = forward("pool: AVE kernel_size: 3 stride: 2 pad: 1", x)
    # corner windows hold 4 ones but count the padding: 4/9; no clipping at size 3 + 2*1
    np.testing.assert_allclose(top[0].data[0, 0], [[4 / 9, 4 / 9], [4 / 9, 4 / 9]])
    _, _, top = forward("pool: AVE kernel_size: 2 stride: 2", np.ones((1, 1, 3, 3)))
    # the last window hangs off the unpadded input: divided by 1 * 2, 2 * 1, 1 * 1
    np.testing.assert_allclose(top[0].data[0, 0], [[1, 1], [1, 1]])


def test_max_mask_and_ties_pick_the_first_maximum():
    x = np.array([[[[1, 3, 3, 0], [2, 3, 1, 5], [0, 0, 4, 4]]]], float)
    _, _, top = forward("pool: MAX kernel_size: 2 stride: 2", x, num_top=2)
    np.testing.assert_array_equal(top[0].data[0, 0], [[3, 5], [0, 4]])
    np.testing.assert_array_equal(top[1].data[0, 0], [[1, 7], [8, 10]])


def test_global_pooling():
    x = distinct((2, 3, 4, 5))
    _, _, top = forward("pool: AVE global_pooling: true", x)
    assert top[0].shape == (2, 3, 1, 1)
    np.testing.assert_allclose(top[0].data[..., 0, 0], x.mean(axis=(2, 3)), rtol=1e-12)
    layer, _, top = forward("pool: MAX global_pooling: true", x, num_top=2)
    np.testing.assert_allclose(top[0].data[..., 0, 0], x.max(axis=(2, 3)))
    np.testing.assert_array_equal(top[1].data[..., 0, 0], x.reshape(2, 3, -1).argmax(axis=2))
    # the kernel follows the input size on reshape
    small = Blob((1, 3, 2, 2), np.float64)
    small.data[...] = x[:1, :, :2, :2]
    layer.Forward([small], top)
    np.testing.assert_allclose(top[0].data[..., 0, 0], x[:1, :, :2, :2].max(axis=(2, 3)))


def test_float32_end_to_end():
    x = distinct((2, 2, 5, 5)).astype(np.float32)
    for method in ("MAX", "AVE"):
        _, _, top = forward("pool: %s kernel_size: 3 stride: 2 pad: 1" % method, x,
                            dtype=np.float32)
        assert top[0].data.dtype == np.float32
        expected, _ = naive_pool(x.astype(np.float64), method, (3, 3), (1, 1), (2, 2))
        np.testing.assert_allclose(top[0].data, expected, rtol=1e-6, atol=1e-7)


# ---- STOCHASTIC ----------------------------------------------------------------------------
def naive_stochastic_train(x, k, s, uniform):
    n_img, ch, h, w = x.shape
    ph_n, pw_n = uniform.shape[2:]
    top = np.zeros(uniform.shape)
    picked = np.zeros(uniform.shape, int)
    for n in range(n_img):
        for c in range(ch):
            for ph in range(ph_n):
                for pw in range(pw_n):
                    cells = [(hh, ww) for hh in range(ph * s, min(ph * s + k, h))
                             for ww in range(pw * s, min(pw * s + k, w))]
                    total = sum(x[n, c, hh, ww] for hh, ww in cells)
                    thres = uniform[n, c, ph, pw] * total
                    run = 0.0
                    for hh, ww in cells:
                        run += x[n, c, hh, ww]
                        if run >= thres:
                            top[n, c, ph, pw] = x[n, c, hh, ww]
                            picked[n, c, ph, pw] = hh * w + ww
                            break
    return top, picked


def test_stochastic_train_samples_like_caffe():
    x = np.random.default_rng(7).uniform(0.1, 1.0, (2, 2, 5, 6))
    backend.set_random_seed(11)
    layer, bottom, top = forward("pool: STOCHASTIC kernel_size: 3 stride: 2", x)
    uniform = np.random.default_rng(11).random(top[0].shape)
    expected, picked = naive_stochastic_train(x, 3, 2, uniform)
    np.testing.assert_array_equal(top[0].data, expected)
    # backward routes each top gradient to the sampled element
    top[0].diff[...] = np.arange(1, top[0].count + 1).reshape(top[0].shape)
    layer.Backward(top, [True], bottom)
    grad = np.zeros(x.shape)
    for n in range(2):
        for c in range(2):
            np.add.at(grad[n, c].reshape(-1), picked[n, c].ravel(), top[0].diff[n, c].ravel())
    np.testing.assert_allclose(bottom[0].diff, grad)


def test_stochastic_train_frequencies_follow_the_values():
    x = np.tile(np.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 1, 2, 2), (4000, 1, 1, 1))
    backend.set_random_seed(3)
    _, _, top = forward("pool: STOCHASTIC kernel_size: 2", x)
    freq = np.array([(top[0].data == v).mean() for v in (1, 2, 3, 4)])
    np.testing.assert_allclose(freq, [0.1, 0.2, 0.3, 0.4], atol=0.03)


def test_stochastic_test_phase_is_the_weighted_average():
    x = np.random.default_rng(8).uniform(0.0, 1.0, (1, 2, 5, 5))
    x[0, 1, :3, :3] = 0  # an all-zero window gives 0
    _, _, top = forward("pool: STOCHASTIC kernel_size: 3 stride: 2", x, phase=caffe_pb2.TEST)
    for ph in range(2):
        for pw in range(2):
            win = x[0, 0, 2 * ph:2 * ph + 3, 2 * pw:2 * pw + 3]
            assert top[0].data[0, 0, ph, pw] == pytest.approx((win ** 2).sum() / win.sum())
    assert top[0].data[0, 1, 0, 0] == 0


# ---- gradients -----------------------------------------------------------------------------
@pytest.mark.parametrize("params,shape,num_top", [
    ("pool: MAX kernel_size: 3 stride: 2 pad: 1", (2, 2, 5, 6), 1),
    ("pool: MAX kernel_size: 2 stride: 1", (2, 2, 4, 3), 2),
    ("pool: MAX kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 round_mode: FLOOR",
     (1, 2, 6, 4), 1),
    ("pool: MAX global_pooling: true", (2, 3, 3, 4), 1),
    ("pool: AVE kernel_size: 3 stride: 2 pad: 1", (2, 2, 5, 6), 1),
    ("pool: AVE kernel_size: 3 stride: 3 pad: 1", (1, 2, 5, 7), 1),
    ("pool: AVE kernel_h: 2 kernel_w: 3 stride: 2 round_mode: FLOOR", (2, 1, 5, 6), 1),
    ("pool: AVE global_pooling: true", (2, 2, 3, 4), 1),
])
def test_gradient(params, shape, num_top):
    x = distinct(shape, seed=1)
    check_layer(pool_text(params), [x], num_top=num_top, check_bottom=[0])


def test_gradient_stochastic():
    x = np.random.default_rng(2).uniform(0.1, 1.0, (2, 2, 5, 5))
    text = pool_text("pool: STOCHASTIC kernel_size: 3 stride: 2")
    # TRAIN draws random numbers in forward, so check_layer's proto round trip (two forwards
    # with different draws) does not apply; the checker re-seeds before every forward.
    bottom = random_blobs([x])
    GradientChecker(1e-4, 1e-3).check_gradient(make_layer(text), bottom, empty_blobs(1))
    check_layer(text, [x], stepsize=1e-4, phase=caffe_pb2.TEST)


# ---- invalid usage -------------------------------------------------------------------------
@pytest.mark.parametrize("params,shape,num_top,message", [
    ("pool: MAX kernel_size: 3 pad: 3", (1, 1, 5, 5), 1, "pad must be smaller than the kernel"),
    ("pool: STOCHASTIC kernel_size: 3 pad: 1", (1, 1, 5, 5), 1,
     "padding is implemented only for AVE and MAX"),
    ("pool: MAX global_pooling: true kernel_size: 2", (1, 1, 5, 5), 1,
     "filter size cannot be specified"),
    ("pool: AVE global_pooling: true stride: 2", (1, 1, 5, 5), 1, "only pad = 0 and stride = 1"),
    ("pool: AVE kernel_size: 2", (1, 1, 5, 5), 2, "only MAX pooling can output a mask"),
    ("pool: MAX kernel_size: 2", (1, 1, 5, 5), 3, "at most 2 top"),
    ("pool: MAX kernel_size: 2 kernel_h: 2 kernel_w: 2", (1, 1, 5, 5), 1, "not both"),
    ("pool: MAX kernel_h: 2", (1, 1, 5, 5), 1, "both kernel_h and kernel_w"),
    ("pool: MAX", (1, 1, 5, 5), 1, "a kernel size is required"),
    ("pool: MAX kernel_size: 2 pad_h: 1", (1, 1, 5, 5), 1, "pad is pad OR pad_h and pad_w"),
    ("pool: MAX kernel_size: 2 stride: 2 stride_h: 1 stride_w: 1", (1, 1, 5, 5), 1,
     "stride is stride OR"),
    ("pool: MAX kernel_size: 2", (2, 5, 5), 1, "input must have 4 axes"),
    ("pool: MAX kernel_size: 7", (1, 1, 5, 5), 1, "kernel (7, 7) is larger than the padded"),
])
def test_invalid_usage(params, shape, num_top, message):
    with pytest.raises(LayerError, match=message.replace("(", r"\(").replace(")", r"\)")) as info:
        forward(params, shape, num_top)
    assert "pooling" in str(info.value)


def _max_pool_pair(x, kernel, stride=None, pad=0):
    """(output, bottom diff) of MAX pooling through the host values-only path (one top) and
    through the path recording choices (a mask top forces it), same input and top diff."""
    from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs

    text = 'type: "Pooling" pooling_param { pool: MAX kernel_size: %d stride: %d pad: %d }' % (
        kernel, stride or kernel, pad)
    results = []
    for ntop in (1, 2):
        layer = make_layer(text, dtype=np.float32)
        bottom = random_blobs([x], dtype=np.float32)
        top = empty_blobs(ntop, np.float32)
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        out = top[0].data.copy()
        top[0].data[...] = -7  # an in-place consumer overwriting the output must not matter
        top[0].diff[...] = np.arange(top[0].count, dtype=np.float32).reshape(top[0].shape) + 1
        layer.Backward(top, [True], bottom)
        results.append((out, bottom[0].diff.copy()))
    return results


def test_tiled_max_path_equals_general_path_with_ties_nan_and_inf():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 3, (2, 3, 6, 8)).astype(np.float32)  # many ties
    x[0, 0, 0, 0] = np.nan                                    # NaN is skipped, as in Caffe
    x[0, 1, 0:2, 0:2] = np.nan                                # an all-NaN window
    x[1, 2, 2:4, 2:4] = -np.inf                               # an all -inf window
    x[1, 0, 4:6, 6:8] = -np.finfo(np.float32).max             # exactly -FLT_MAX
    (tiled_y, tiled_dx), (gen_y, gen_dx) = _max_pool_pair(x, 2)
    np.testing.assert_array_equal(tiled_y, gen_y)
    np.testing.assert_array_equal(tiled_dx, gen_dx)
    assert tiled_y[0, 1, 0, 0] == -np.finfo(np.float32).max and tiled_dx[0, 1, :2, :2].sum() == 0


def test_tiled_max_path_equals_general_path_without_ties():
    x = np.random.default_rng(4).standard_normal((3, 4, 8, 6)).astype(np.float32)
    (tiled_y, tiled_dx), (gen_y, gen_dx) = _max_pool_pair(x, 2)
    np.testing.assert_array_equal(tiled_y, gen_y)
    np.testing.assert_array_equal(tiled_dx, gen_dx)


@pytest.mark.parametrize("kernel,stride,pad,shape", [
    (3, 2, 1, (2, 3, 9, 8)), (3, 1, 1, (1, 2, 6, 7)), (3, 2, 0, (2, 2, 8, 8)),
    (2, 1, 0, (1, 2, 5, 5)), (3, 3, 1, (1, 2, 7, 10))])
def test_values_max_path_equals_recorded_path_overlapping(kernel, stride, pad, shape):
    rng = np.random.default_rng(kernel * 10 + stride + pad)
    x = rng.integers(0, 3, shape).astype(np.float32)         # ties across overlapping windows
    x[0, 0, 1, 1] = np.nan
    x[-1, -1, :3, :3] = -np.inf
    (vy, vdx), (ry, rdx) = _max_pool_pair(x, kernel, stride, pad)
    np.testing.assert_array_equal(vy, ry)
    np.testing.assert_array_equal(vdx, rdx)
    y = rng.standard_normal(shape).astype(np.float32)
    (vy, vdx), (ry, rdx) = _max_pool_pair(y, kernel, stride, pad)
    np.testing.assert_array_equal(vy, ry)
    np.testing.assert_array_equal(vdx, rdx)
