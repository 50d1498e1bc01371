import itertools
import re

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_im2col(x, kernel, pad, stride, dilation):
    """Caffe's column buffer of each image, filled one (channel, offset, position) at a time,
    shaped as the layer's top: (N, C * K, *out_spatial)."""
    n_img, channels = x.shape[:2]
    spatial = x.shape[2:]
    out_spatial = tuple((n + 2 * p - (d * (k - 1) + 1)) // s + 1
                        for n, k, p, s, d in zip(spatial, kernel, pad, stride, dilation))
    offsets = list(itertools.product(*(range(k) for k in kernel)))
    top = np.zeros((n_img, channels * len(offsets)) + out_spatial)
    for n in range(n_img):
        for c in range(channels):
            for ki, off in enumerate(offsets):
                for pos in itertools.product(*(range(o) for o in out_spatial)):
                    src = tuple(q * s - p + o * d
                                for q, o, p, s, d in zip(pos, off, pad, stride, dilation))
                    if all(0 <= i < m for i, m in zip(src, spatial)):
                        top[(n, c * len(offsets) + ki) + pos] = x[(n, c) + src]
    return top


def im2col_text(params):
    return 'type: "Im2col" convolution_param { %s }' % params


CASES = [
    # params, bottom shape, kernel, pad, stride, dilation
    ("kernel_size: 3 stride: 2", (2, 3, 6, 5), (3, 3), (0, 0), (2, 2), (1, 1)),
    ("kernel_h: 5 kernel_w: 3 stride: 2", (2, 2, 6, 5), (5, 3), (0, 0), (2, 2), (1, 1)),
    ("kernel_size: 3 stride: 2 dilation: 3", (1, 2, 10, 9), (3, 3), (0, 0), (2, 2), (3, 3)),
    ("kernel_size: 2 pad: 1 stride_h: 1 stride_w: 2", (2, 2, 3, 4), (2, 2), (1, 1), (1, 2),
     (1, 1)),
    ("kernel_size: 3 pad_h: 2 pad_w: 0 force_nd_im2col: true", (2, 2, 3, 4), (3, 3), (2, 0),
     (1, 1), (1, 1)),
    ("kernel_size: 2 kernel_size: 1 kernel_size: 2 pad: 1 stride: 2", (2, 2, 3, 2, 3),
     (2, 1, 2), (1, 1, 1), (2, 2, 2), (1, 1, 1)),                   # 3-D
    ("kernel_size: 1", (3, 4, 2, 3), (1, 1), (0, 0), (1, 1), (1, 1)),
]


@pytest.mark.parametrize("params,shape,kernel,pad,stride,dilation", CASES)
def test_forward_matches_naive_loop(params, shape, kernel, pad, stride, dilation):
    layer = make_layer(im2col_text(params), np.float32)
    bottom, top = random_blobs([shape], dtype=np.float32), empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    expected = naive_im2col(bottom[0].data.astype(np.float64), kernel, pad, stride, dilation)
    assert top[0].shape == expected.shape and top[0].data.dtype == np.float32
    np.testing.assert_array_equal(top[0].data, expected.astype(np.float32))


def test_caffe_setup_shape_and_top_left_block():
    # Caffe's TestSetup: 2x3x10x11, kernel 3, stride 2, dilation 3 -> 2x27x2x3
    layer = make_layer(im2col_text("kernel_size: 3 stride: 2 dilation: 3"))
    top = empty_blobs(1)
    layer.SetUp(random_blobs([(2, 3, 10, 11)]), top)
    assert top[0].shape == (2, 27, 2, 3)
    # Caffe's TestRect: channel c of the first output position is x[c // 15, (c // 3) % 5,
    # c % 3] for a 5x3 kernel
    layer = make_layer(im2col_text("kernel_h: 5 kernel_w: 3 stride: 2"))
    bottom, top = random_blobs([(2, 3, 6, 5)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    for c in range(45):
        assert top[0].data[1, c, 0, 0] == bottom[0].data[1, c // 15, (c // 3) % 5, c % 3]


def test_convolution_is_a_matrix_product_of_the_columns():
    """The per-image top is Caffe's column buffer: W (M, C*K) times it is a convolution."""
    conv = make_layer('type: "Convolution" convolution_param { num_output: 3 kernel_size: 3 '
                      'pad: 1 stride: 2 bias_term: false weight_filler { type: "gaussian" } }')
    bottom = random_blobs([(2, 2, 5, 4)])
    conv_top = empty_blobs(1)
    conv.SetUp(bottom, conv_top)
    conv.Forward(bottom, conv_top)
    layer, top = make_layer(im2col_text("kernel_size: 3 pad: 1 stride: 2")), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    w = conv.blobs[0].data.reshape(3, -1)
    cols = top[0].data.reshape(2, 18, -1)
    np.testing.assert_allclose(np.matmul(w, cols).reshape(conv_top[0].shape),
                               conv_top[0].data, rtol=1e-10, atol=1e-12)


def test_axis_2_flattens_leading_axes_into_the_batch():
    layer = make_layer(im2col_text("kernel_size: 2 axis: 2"))
    bottom, top = random_blobs([(2, 3, 2, 4, 3)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].shape == (2, 3, 8, 3, 2)
    expected = naive_im2col(bottom[0].data.reshape(6, 2, 4, 3), (2, 2), (0, 0), (1, 1), (1, 1))
    np.testing.assert_array_equal(top[0].data.reshape(6, 8, 3, 2), expected)


def test_backward_sums_over_patches_and_overwrites():
    layer = make_layer(im2col_text("kernel_size: 2"))
    bottom, top = random_blobs([(1, 1, 3, 3)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    top[0].diff[...] = 1
    bottom[0].diff[...] = 99
    layer.Backward(top, [True], bottom)
    # how many 2x2 windows cover each pixel of a 3x3 image
    np.testing.assert_array_equal(bottom[0].diff[0, 0], [[1, 2, 1], [2, 4, 2], [1, 2, 1]])
    bottom[0].diff[...] = 5
    layer.Backward(top, [False], bottom)
    assert (bottom[0].diff == 5).all()


@pytest.mark.parametrize("params,shape", [
    ("kernel_size: 3 stride: 2", (2, 3, 6, 5)),
    ("kernel_h: 5 kernel_w: 3 stride: 2", (2, 2, 6, 5)),
    ("kernel_size: 3 stride: 2 dilation: 3 force_nd_im2col: true", (2, 2, 8, 7)),
    ("kernel_size: 2 pad: 1 stride: 2 dilation: 2", (2, 2, 4, 3)),
    ("kernel_size: 2 pad: 1 stride: 2", (2, 2, 3, 2, 3)),
])
def test_gradient(params, shape):
    check_layer(im2col_text(params), [shape])


@pytest.mark.parametrize("params,shape,message", [
    ("", (1, 2, 5, 5), "kernel_size must be specified once, or once per spatial dimension "
                       "(kernel_size specified 0 times; 2 spatial dims)"),
    ("kernel_size: 2 kernel_size: 2 kernel_size: 2", (1, 2, 5, 5),
     "kernel_size specified 3 times; 2 spatial dims"),
    ("kernel_h: 2 kernel_w: 2", (1, 2, 5, 5, 5), "kernel_h & kernel_w can only be used for 2D"),
    ("kernel_size: 2 kernel_h: 2 kernel_w: 2", (1, 2, 5, 5), "not both"),
    ("kernel_h: 3", (1, 2, 5, 5), "filter dimensions must be nonzero, got kernel (3, 0)"),
    ("kernel_size: 3 stride: 0", (1, 2, 5, 5), "stride dimensions must be nonzero"),
    ("kernel_size: 3 stride_w: 2", (1, 2, 5, 5), "got stride (0, 2)"),
    ("kernel_size: 3 pad: 1 pad_h: 1", (1, 2, 5, 5), "either pad or pad_h/pad_w"),
    ("kernel_size: 3 dilation: 0", (1, 2, 5, 5), "dilation must be positive"),
    ("kernel_size: 6", (1, 2, 5, 5), "kernel extent 6 (kernel 6, dilation 1) is larger than "
                                     "the padded input 5"),
    ("kernel_size: 3 dilation: 3", (1, 2, 6, 9), "kernel extent 7"),
    ("kernel_size: 2 axis: 3", (1, 2, 5, 5), "at least one spatial axis"),
    ("kernel_size: 2 axis: 4", (1, 2, 5, 5), "axis 4 is out of range"),
])
def test_invalid_parameters(params, shape, message):
    layer = make_layer(im2col_text(params))
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs([shape]), empty_blobs(1))
    assert "Im2col" in str(info.value)


def test_invalid_reshape():
    layer = make_layer(im2col_text("kernel_size: 2"))
    top = empty_blobs(1)
    layer.SetUp(random_blobs([(1, 2, 3, 3)]), top)
    with pytest.raises(LayerError, match="num_axes may not change"):
        layer.Forward([Blob((1, 2, 3, 3, 3))], top)
    x = Blob((1, 2, 3, 3))
    with pytest.raises(LayerError, match="cannot run in place"):
        make_layer(im2col_text("kernel_size: 2")).SetUp([x], [x])


def test_device_path_gives_the_cpu_numbers():
    """In GPU mode (a simulated device here) forward and backward give the CPU numbers."""
    from pycaffe_lite.testing.simdevice import cpu_and_simulated_gpu

    def forward_backward():
        layer = make_layer(im2col_text("kernel_size: 3 pad: 1 stride: 2"))
        bottom, top = random_blobs([(2, 2, 5, 4)]), empty_blobs(1)
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        top[0].diff[...] = np.cos(np.arange(top[0].count)).reshape(top[0].shape)
        layer.Backward(top, [True], bottom)
        return top[0].data.copy(), bottom[0].diff.copy()

    cpu, gpu, dev = cpu_and_simulated_gpu(forward_backward)
    assert dev.to_device > 0
    for a, b in zip(cpu, gpu):
        np.testing.assert_array_equal(b, a)
