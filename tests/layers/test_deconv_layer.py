import itertools
import re

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

FILLERS = 'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" }'


def deconv_text(params, fillers=FILLERS):
    return 'type: "Deconvolution" convolution_param { %s %s }' % (params, fillers)


def naive_deconv(x, w, b, pad, stride, dilation, group):
    """Scatter every input pixel's filter into the output, one pixel and offset at a time."""
    n_img, channels = x.shape[:2]
    spatial = x.shape[2:]
    kernel = w.shape[2:]
    mg = w.shape[1]
    num_output = mg * group
    cg = channels // group
    out_spatial = tuple(s * (n - 1) + d * (k - 1) + 1 - 2 * p
                        for n, k, p, s, d in zip(spatial, kernel, pad, stride, dilation))
    y = np.zeros((n_img, num_output) + out_spatial)
    for pos in itertools.product(*(range(n) for n in spatial)):
        for off in itertools.product(*(range(k) for k in kernel)):
            target = tuple(i * s - p + o * d
                           for i, o, p, s, d in zip(pos, off, pad, stride, dilation))
            if any(t < 0 or t >= n for t, n in zip(target, out_spatial)):
                continue
            for g in range(group):
                for c in range(g * cg, (g + 1) * cg):
                    for m in range(mg):
                        y[(slice(None), g * mg + m) + target] += \
                            x[(slice(None), c) + pos] * w[(c, m) + off]
    if b is not None:
        y += b.reshape((1, -1) + (1,) * len(spatial))
    return y


def run(text, bottoms, dtype=np.float64, num_top=1):
    layer = make_layer(text, dtype)
    bottom = random_blobs(bottoms, dtype=dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


FORWARD_CASES = [
    # params, bottom shape, pad, stride, dilation, group
    ("num_output: 4 kernel_size: 3 stride: 2", (2, 3, 4, 3), (0, 0), (2, 2), (1, 1), 1),
    ("num_output: 4 kernel_size: 3 pad: 1 stride: 2 group: 2", (2, 4, 3, 4),
     (1, 1), (2, 2), (1, 1), 2),
    ("num_output: 6 kernel_h: 2 kernel_w: 3 pad_h: 1 pad_w: 0 stride_h: 1 stride_w: 2 "
     "group: 3", (2, 3, 4, 3), (1, 0), (1, 2), (1, 1), 3),
    ("num_output: 2 kernel_size: 3 dilation: 2 pad: 1 stride: 2", (1, 2, 3, 4),
     (1, 1), (2, 2), (2, 2), 1),
    ("num_output: 3 kernel_size: 2 kernel_size: 3 dilation: 1 dilation: 2 stride: 3 stride: 1",
     (2, 2, 3, 2), (0, 0), (3, 1), (1, 2), 1),
    ("num_output: 5 kernel_size: 1", (3, 4, 3, 4), (0, 0), (1, 1), (1, 1), 1),  # 1x1 path
    ("num_output: 4 kernel_size: 1 group: 2", (1, 4, 3, 3), (0, 0), (1, 1), (1, 1), 2),
    ("num_output: 2 kernel_size: 1 stride: 2", (2, 3, 3, 3), (0, 0), (2, 2), (1, 1), 1),
    ("num_output: 3 kernel_size: 3 pad: 1 stride: 2 force_nd_im2col: true", (2, 2, 3, 4),
     (1, 1), (2, 2), (1, 1), 1),
]


@pytest.mark.parametrize("params,shape,pad,stride,dilation,group", FORWARD_CASES)
def test_forward_matches_naive_scatter(params, shape, pad, stride, dilation, group):
    layer, bottom, top = run(deconv_text(params), [shape])
    w, b = layer.blobs[0].data, layer.blobs[1].data
    # Caffe's reversed weight layout: (input channels, num_output / group, *kernel)
    assert w.shape == (shape[1], layer.num_output // group) + tuple(layer.kernel_shape)
    assert b.shape == (layer.num_output,)
    expected = naive_deconv(bottom[0].data, w, b, pad, stride, dilation, group)
    assert top[0].shape == expected.shape
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-10, atol=1e-10)


def test_output_shape_as_caffe():
    # Caffe's TestSetup: 2x3x6x4, kernel 3, stride 2 -> 13x9 (group does not change it)
    for params, channels in (("num_output: 4", 4), ("num_output: 3 group: 3", 3)):
        layer, _, top = run(deconv_text(params + " kernel_size: 3 stride: 2"),
                            [(2, 3, 6, 4), (2, 3, 6, 4)], num_top=2)
        assert top[0].shape == top[1].shape == (2, channels, 13, 9)
    # dilation enters through the kernel extent: 2*(3-1) + 2*(3-1)+1 - 2*1 = 7
    _, _, top = run(deconv_text("num_output: 1 kernel_size: 3 stride: 2 dilation: 2 pad: 1"),
                    [(1, 1, 3, 3)])
    assert top[0].shape == (1, 1, 7, 7)


def test_simple_deconvolution_overlaps_add_up():
    """Caffe's TestSimpleDeconvolution: all-ones input and weights, bias 0.1, kernel 3,
    stride 2 over 3 input channels: 3.1 everywhere, +3 where two windows overlap along one
    axis and +9 where they overlap along both."""
    text = deconv_text("num_output: 4 kernel_size: 3 stride: 2",
                       'weight_filler { type: "constant" value: 1 } '
                       'bias_filler { type: "constant" value: 0.1 }')
    layer = make_layer(text, np.float32)
    bottom = [Blob((2, 3, 6, 4), np.float32), Blob((2, 3, 6, 4), np.float32)]
    for b in bottom:
        b.data[...] = 1
    top = empty_blobs(2, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    h = np.arange(13)
    w = np.arange(9)
    h_overlap = ((h % 2 == 0) & (h > 0) & (h < 12))[:, None]
    w_overlap = ((w % 2 == 0) & (w > 0) & (w < 8))[None, :]
    expected = 3.1 + np.where(h_overlap & w_overlap, 9, np.where(h_overlap | w_overlap, 3, 0))
    for t in top:
        assert t.data.dtype == np.float32
        np.testing.assert_allclose(t.data, np.broadcast_to(expected, t.shape), atol=1e-5)


@pytest.mark.parametrize("params,shape", [
    ("kernel_size: 3 stride: 2 pad: 1 group: 2", (2, 4, 3, 4)),
    ("kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 3 dilation: 2 pad_h: 1 pad_w: 2",
     (2, 3, 4, 3)),
    ("kernel_size: 1", (2, 3, 3, 3)),
    ("kernel_size: 2 stride: 2 stride: 1 stride: 1 pad: 1", (1, 2, 3, 2, 3)),
])
def test_forward_is_the_adjoint_of_convolution(params, shape):
    """<conv(u), x> == <u, deconv(x)> for a Convolution with the deconvolution's weights."""
    num_output = 4
    deconv, bottom, top = run(deconv_text("num_output: %d bias_term: false %s"
                                          % (num_output, params)), [shape])
    conv = make_layer('type: "Convolution" convolution_param { num_output: %d '
                      'bias_term: false %s }' % (shape[1], params))
    u = random_blobs([top[0].shape], seed=7)
    conv_top = empty_blobs(1)
    conv.SetUp(u, conv_top)
    assert conv.blobs[0].shape == deconv.blobs[0].shape
    conv.blobs[0].data[...] = deconv.blobs[0].data
    conv.Forward(u, conv_top)
    assert conv_top[0].shape == bottom[0].shape
    lhs = float((conv_top[0].data * bottom[0].data).sum())
    rhs = float((u[0].data * top[0].data).sum())
    assert lhs == pytest.approx(rhs, rel=1e-10)
    # and the deconvolution's bottom gradient is the convolution's forward
    top[0].diff[...] = u[0].data
    deconv.Backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, conv_top[0].data, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("factor", [2, 3, 4])
def test_bilinear_upsampling(factor):
    """FCN's fixed upsampling: group = channels, kernel 2f - f%2, stride f, pad ceil((f-1)/2),
    bilinear weights. A constant image stays constant and a ramp stays a ramp (sampled at
    pixel centres) away from the borders."""
    f = factor
    channels, h, w = 3, 5, 6
    text = ('type: "Deconvolution" convolution_param { num_output: %d group: %d '
            'kernel_size: %d stride: %d pad: %d bias_term: false '
            'weight_filler { type: "bilinear" } }'
            % (channels, channels, 2 * f - f % 2, f, -(-(f - 1) // 2)))
    layer = make_layer(text, np.float32)
    x = Blob((2, channels, h, w), np.float32)
    levels = np.array([1.5, -2.0, 0.25], np.float32)
    x.data[...] = levels[None, :, None, None]
    top = empty_blobs(1, np.float32)
    layer.SetUp([x], top)
    assert layer.blobs[0].shape == (channels, 1, 2 * f - f % 2, 2 * f - f % 2)
    layer.Forward([x], top)
    y = top[0].data
    assert y.shape == (2, channels, f * h, f * w) and y.dtype == np.float32
    inner = (slice(None), slice(None), slice(f, f * (h - 1)), slice(f, f * (w - 1)))
    np.testing.assert_allclose(y[inner], np.broadcast_to(levels[None, :, None, None],
                                                          y[inner].shape), rtol=1e-6)
    # a ramp along the rows: output row o sits at input coordinate (o - (f-1)/2) / f
    x.data[...] = np.arange(h, dtype=np.float32)[None, None, :, None]
    layer.Forward([x], top)
    rows = (np.arange(f * h) - (f - 1) / 2.0) / f
    expected = np.broadcast_to(rows[None, None, :, None], top[0].shape)
    np.testing.assert_allclose(top[0].data[inner], expected[inner], atol=1e-5)


def test_float32_chunked_forward_and_backward_match_unchunked():
    text = deconv_text("num_output: 4 kernel_size: 3 pad: 1 stride: 2 group: 2")
    x = np.random.default_rng(5).standard_normal((5, 4, 4, 3)).astype(np.float32)
    results = []
    for workspace in (64 << 20, 1):
        layer = make_layer(text, np.float32)
        layer.workspace_bytes = workspace
        bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
        layer.SetUp(bottom, top)
        layer.blobs[0].data[...] = np.linspace(-1, 1, layer.blobs[0].count).reshape(
            layer.blobs[0].shape)
        layer.blobs[1].data[...] = [0.5, -0.25, 0.0, 1.0]
        layer.Forward(bottom, top)
        top[0].diff[...] = np.cos(np.arange(top[0].count)).reshape(top[0].shape)
        layer.Backward(top, [True], bottom)
        for arr in (top[0].data, bottom[0].diff, layer.blobs[0].diff, layer.blobs[1].diff):
            assert arr.dtype == np.float32
        results.append((layer.plan.chunk, top[0].data.copy(), bottom[0].diff.copy(),
                        layer.blobs[0].diff.copy(), layer.blobs[1].diff.copy()))
    assert [r[0] for r in results] == [5, 1]
    expected = naive_deconv(x.astype(np.float64), layer.blobs[0].data.astype(np.float64),
                            layer.blobs[1].data.astype(np.float64), (1, 1), (2, 2), (1, 1), 2)
    for r in results:
        np.testing.assert_allclose(r[1], expected, rtol=1e-4, atol=1e-5)
        for a, b in zip(r[2:], results[0][2:]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_backward_overwrites_bottom_diff_and_accumulates_param_diffs():
    layer, bottom, top = run(deconv_text("num_output: 2 kernel_size: 3 stride: 2"),
                             [(2, 2, 3, 3)])
    top[0].diff[...] = 1.0
    bottom[0].diff[...] = 123.0
    layer.Backward(top, [True], bottom)
    first = [bottom[0].diff.copy(), layer.blobs[0].diff.copy(), layer.blobs[1].diff.copy()]
    # bias gradient: the top diff summed over the batch and the 7x7 output positions
    np.testing.assert_allclose(first[2], [2 * 49, 2 * 49])
    # with an all-ones top diff each bottom pixel's gradient is the sum of its filters
    np.testing.assert_allclose(first[0], np.broadcast_to(
        layer.blobs[0].data.sum(axis=(1, 2, 3))[None, :, None, None], first[0].shape))
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, first[0])
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * first[1])
    np.testing.assert_allclose(layer.blobs[1].diff, 2 * first[2])
    layer.set_param_propagate_down(0, False)
    layer.blobs[0].diff[...] = 0
    bottom[0].diff[...] = 5.0
    layer.Backward(top, [False], bottom)
    assert not layer.blobs[0].diff.any()
    assert (bottom[0].diff == 5.0).all()
    np.testing.assert_allclose(layer.blobs[1].diff, 3 * first[2])


GRADIENT_CASES = [
    ("num_output: 1 kernel_size: 2 stride: 1", [(2, 3, 3, 2), (2, 3, 3, 2)], 2),
    ("num_output: 4 kernel_size: 3 pad: 1 stride: 2 group: 2", [(2, 4, 2, 3)], 1),
    ("num_output: 2 kernel_h: 2 kernel_w: 3 pad_h: 1 pad_w: 0 stride_h: 1 stride_w: 2 "
     "dilation: 2", [(2, 2, 3, 2)], 1),
    ("num_output: 3 kernel_size: 1 group: 1", [(2, 2, 2, 3)], 1),
    ("num_output: 2 kernel_size: 2 stride: 2 pad: 1 bias_term: false force_nd_im2col: true",
     [(2, 3, 2, 3)], 1),
    ("num_output: 2 kernel_size: 2 stride: 2 pad: 1", [(2, 2, 2, 3, 2)], 1),  # 3-D
]


@pytest.mark.parametrize("params,shapes,num_top", GRADIENT_CASES)
def test_gradient(params, shapes, num_top):
    check_layer(deconv_text(params), shapes, num_top=num_top)


@pytest.mark.parametrize("params,shape,message", [
    ("num_output: 4 kernel_size: 3 group: 2", (1, 3, 3, 3), "input channels (3)"),
    ("num_output: 3 kernel_size: 3 group: 2", (1, 4, 3, 3), "num_output (3)"),
    ("num_output: 0 kernel_size: 3", (1, 2, 3, 3), "num_output must be positive, got 0"),
    ("num_output: 2", (1, 2, 3, 3), "kernel_size must be specified once"),
    ("num_output: 2 kernel_size: 3 stride: 0", (1, 2, 3, 3), "stride dimensions"),
    ("num_output: 2 kernel_size: 2 pad: 2", (1, 2, 1, 3),  # BVLC: Blob::Reshape's CHECK
     "output size would be negative on spatial axis 0: stride 1 * (input 1 - 1) + kernel "
     "extent 2 (kernel 2, dilation 1) - 2 * pad 2 = -2"),
    ("num_output: 2 kernel_size: 3 dilation: 0", (1, 2, 3, 3), "dilation must be positive"),
])
def test_invalid_parameters(params, shape, message):
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        run(deconv_text(params), [shape])
    assert "Deconvolution" in str(info.value)


def test_invalid_shapes_and_blobs():
    layer, bottom, top = run(deconv_text("num_output: 3 kernel_size: 2 group: 1"),
                             [(1, 2, 3, 3)])
    with pytest.raises(LayerError, match="expected 2 channels on axis 1, got shape"):
        layer.Forward([Blob((1, 4, 3, 3))], top)
    with pytest.raises(LayerError, match="all inputs must have the same shape"):
        make_layer(layer.to_proto()).SetUp([Blob((1, 2, 3, 3)), Blob((1, 2, 4, 3))],
                                           empty_blobs(2))
    # weights read from a model must have Deconvolution's (C_in, num_output / group, *k) shape
    proto = layer.to_proto()
    proto.convolution_param.num_output = 4
    with pytest.raises(LayerError, match=re.escape("incorrect weight shape: expected "
                                                   "(2, 4, 2, 2), got (2, 3, 2, 2)")):
        make_layer(proto).SetUp(bottom, empty_blobs(1))


def test_device_path_gives_the_cpu_numbers():
    """In GPU mode (a simulated device here) forward and backward give the CPU numbers."""
    from pycaffe_lite import backend
    from pycaffe_lite.testing.simdevice import cpu_and_simulated_gpu

    def forward_backward():
        backend.set_random_seed(4)
        layer, bottom, top = run(deconv_text("num_output: 4 kernel_size: 3 pad: 1 stride: 2 "
                                             "group: 2"), [(2, 4, 3, 2)])
        top[0].diff[...] = np.cos(np.arange(top[0].count)).reshape(top[0].shape)
        layer.Backward(top, [True], bottom)
        return [top[0].data.copy(), bottom[0].diff.copy()] + [b.diff.copy() for b in layer.blobs]

    cpu, gpu, dev = cpu_and_simulated_gpu(forward_backward)
    assert dev.to_device > 0
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)
