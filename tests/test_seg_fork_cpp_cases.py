"""The segmentation forks' own C++ test cases, with their input and expected values as data:
SegNet's and ENet's test_upsample_layer.cpp and test_dense_image_data_layer.cpp
(alexgkendall/caffe-segnet, TimoSaemann/caffe-enet), PSPNet's test_interp_layer.cpp
(hszhao/PSPNet), and the refusal of the DeepLab v2 layers that PSPNet's fork carries and this
package does not provide (test_bias_channel_layer.cpp, test_domain_transform*_layer.cpp,
test_spatial_product_layer.cpp). References are hand formulas in NumPy, OpenCV, or numerical
gradients."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")


# ---- Upsample (max-unpooling with the Pooling mask) -----------------------------------------
def unpool(params, x, mask):
    layer = make_layer('type: "Upsample" upsample_param { %s }' % params, np.float32)
    bottom, top = random_blobs([x, mask], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def test_upsample_scale_h_and_scale_w_set_the_top_size():
    # SegNet/ENet test_upsample_layer.cpp TestSetup: scale_h 2, scale_w 3 on 2 x 3 x 2 x 2
    _, _, top = unpool("scale_h: 2 scale_w: 3", np.zeros((2, 3, 2, 2)), np.zeros((2, 3, 2, 2)))
    assert top[0].shape == (2, 3, 4, 6)


def test_upsample_forward_square_puts_each_value_at_its_mask_index():
    # SegNet/ENet test_upsample_layer.cpp TestForward (TestForwardSquare): 4 x 3 planes
    x = np.tile(np.array([[1, 2], [9, 4]], np.float32), (4, 3, 1, 1))
    mask = np.tile(np.array([[2, 5], [12, 14]], np.float32), (4, 3, 1, 1))
    layer, bottom, top = unpool("scale: 2", x, mask)
    expected = np.array([[0, 0, 1, 0], [0, 2, 0, 0], [0, 0, 0, 0], [9, 0, 4, 0]], np.float32)
    assert top[0].shape == (4, 3, 4, 4)
    np.testing.assert_array_equal(top[0].data, np.broadcast_to(expected, (4, 3, 4, 4)))
    # backward: each value's gradient is the top gradient at its index
    top[0].diff[...] = np.arange(16, dtype=np.float32).reshape(4, 4)
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.broadcast_to([[2, 5], [12, 14]],
                                                                  (4, 3, 2, 2)))


UNPOOL_NET = """
name: "unpool"
input: "data" input_shape { dim: 2 dim: 3 dim: %d dim: %d }
layer { name: "pool" type: "Pooling" bottom: "data" top: "pool" top: "mask"
        pooling_param { pool: MAX kernel_h: 2 kernel_w: 2 stride: 2 } }
layer { name: "up" type: "Upsample" bottom: "pool" bottom: "mask" top: "up"
        upsample_param { upsample_h: %d upsample_w: %d } }
"""


@pytest.mark.parametrize("shape,pooled", [((4, 4), (2, 2)), ((5, 4), (3, 2))])
def test_upsample_after_max_pooling_restores_the_maxima(tmp_path, shape, pooled):
    # SegNet/ENet test_upsample_layer.cpp TestForwardFromPool (4 x 4) and
    # TestForwardFromPoolOddShape (5 x 4: the pooled map is 3 x 2, the last row window is cut)
    path = tmp_path / "net.prototxt"
    path.write_text(UNPOOL_NET % (shape + shape))
    net = caffe.Net(str(path), caffe.TEST)
    x = np.random.default_rng(1701).standard_normal((2, 3) + shape).astype(np.float32)
    out = net.forward(data=x)["up"]
    assert net.blobs["pool"].shape == (2, 3) + pooled
    assert out.shape == (2, 3) + shape
    # hand reference: each 2 x 2 window (cut at the border) keeps its maximum where it was
    expected = np.zeros_like(x)
    for i in range(0, shape[0], 2):
        for j in range(0, shape[1], 2):
            win = x[:, :, i:i + 2, j:j + 2]
            flat = win.reshape(2, 3, -1)
            k = flat.argmax(axis=2)
            rows, cols = i + k // win.shape[3], j + k % win.shape[3]
            n, c = np.meshgrid(range(2), range(3), indexing="ij")
            expected[n, c, rows, cols] = x[n, c, rows, cols]
    np.testing.assert_array_equal(out, expected)
    assert (out == 0).sum() == (shape[0] * shape[1] - pooled[0] * pooled[1]) * 2 * 3


def block_corner_mask(shape, scale_h, scale_w):
    """The fork's FillBottomMask: each input pixel names the top-left of its block."""
    h, w = shape[2:]
    index = (np.arange(h)[:, None] * scale_h) * (w * scale_w) + np.arange(w)[None, :] * scale_w
    return np.broadcast_to(index, shape).astype(np.float64)


@pytest.mark.parametrize("scale_h,scale_w", [(2, 3), (3, 2)])
def test_upsample_gradient_with_unequal_factors(scale_h, scale_w):
    # SegNet/ENet test_upsample_layer.cpp TestGradient (scale_h, scale_w in 2..3)
    shape = (2, 3, 2, 2)
    x = random_blobs([shape], seed=1701)[0]
    mask = random_blobs([block_corner_mask(shape, scale_h, scale_w)])[0]
    _, _, top = check_layer('type: "Upsample" upsample_param { scale_h: %d scale_w: %d }'
                            % (scale_h, scale_w), [x, mask], check_bottom=[0],
                            reshape_batch=False)
    expected = np.zeros((2, 3, 2 * scale_h, 2 * scale_w))
    expected[:, :, ::scale_h, ::scale_w] = x.data
    np.testing.assert_array_equal(top[0].data, expected)


# ---- Interp (PSPNet, DeepLab v2) ------------------------------------------------------------
def fork_interp(x, out_h, out_w):
    """caffe_cpu_interp2 by hand, one output pixel at a time: the ratios, source positions
    and fractions in float32, the complementary weight 1 - fraction and the sums in x's type."""
    f32, dtype = np.float32, x.dtype.type
    n, c, h, w = x.shape
    if (h, w) == (out_h, out_w):
        return x.copy()
    rh = f32(h - 1) / f32(out_h - 1) if out_h > 1 else f32(0)
    rw = f32(w - 1) / f32(out_w - 1) if out_w > 1 else f32(0)
    y = np.empty((n, c, out_h, out_w), x.dtype)
    for i in range(out_h):
        pos = f32(rh * f32(i))
        h0 = int(pos)
        hp = 1 if h0 < h - 1 else 0
        b1 = dtype(f32(pos - f32(h0)))
        b0 = dtype(1) - b1
        for j in range(out_w):
            pos = f32(rw * f32(j))
            w0 = int(pos)
            wp = 1 if w0 < w - 1 else 0
            a1 = dtype(f32(pos - f32(w0)))
            a0 = dtype(1) - a1
            y[:, :, i, j] = (b0 * (a0 * x[:, :, h0, w0] + a1 * x[:, :, h0, w0 + wp])
                             + b1 * (a0 * x[:, :, h0 + hp, w0] + a1 * x[:, :, h0 + hp, w0 + wp]))
    return y


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("size_in,size_out", [((6, 5), (11, 9)), ((5, 7), (23, 37)),
                                              ((13, 11), (6, 41))])
def test_interp_forward_is_the_forks_arithmetic_bit_for_bit(dtype, size_in, size_out):
    # PSPNet test_interp_layer.cpp TestSetup: a 2 x 3 x 6 x 5 Gaussian bottom, height 11,
    # width 9; and sizes whose fractions carry digits below float32's 1 - fraction
    x = np.random.default_rng(1701).standard_normal((2, 3) + size_in).astype(dtype)
    layer = make_layer('type: "Interp" interp_param { height: %d width: %d }' % size_out, dtype)
    bottom, top = random_blobs([x], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].shape == (2, 3) + size_out
    np.testing.assert_array_equal(top[0].data, fork_interp(x, *size_out))


def test_interp_gradient_11_by_9():
    # PSPNet test_interp_layer.cpp TestGradient: 2 x 3 x 6 x 5 to height 11, width 9
    check_layer('type: "Interp" interp_param { height: 11 width: 9 }', [(2, 3, 6, 5)],
                reshape_batch=False)


def test_interp_height_and_width_win_over_both_factors():
    # the fork's order in InterpLayer::Reshape: a factor alone, then height and width, then
    # shrink and zoom together
    layer = make_layer('type: "Interp" interp_param { shrink_factor: 2 zoom_factor: 3 '
                       'height: 4 width: 7 }', np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(random_blobs([(1, 1, 9, 9)], dtype=np.float32), top)
    assert top[0].shape == (1, 1, 4, 7)
