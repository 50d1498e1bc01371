import re

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.ops import conv as conv_ops
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_signal = pytest.importorskip("scipy.signal", reason="SciPy (the reference) is a test dependency")
correlate = _signal.correlate

FILLERS = 'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" }'


def conv_text(params):
    return 'type: "Convolution" convolution_param { %s %s }' % (params, FILLERS)


def reference_conv(x, w, b, pad, stride, dilation, group):
    """Direct N-D cross-correlation with scipy, independent of im2col."""
    n_img, channels = x.shape[:2]
    m_out = w.shape[0]
    xpad = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    extent = tuple(d * (k - 1) + 1 for k, d in zip(w.shape[2:], dilation))
    wd = np.zeros(w.shape[:2] + extent)
    wd[(slice(None), slice(None)) + tuple(slice(None, None, d) for d in dilation)] = w
    cg, mg = channels // group, m_out // group
    strided = tuple(slice(None, None, s) for s in stride)
    out = []
    for n in range(n_img):
        maps = []
        for m in range(m_out):
            g = m // mg
            acc = sum(correlate(xpad[n, g * cg + c], wd[m, c], mode="valid")
                      for c in range(cg))
            maps.append(acc[strided] + (b[m] if b is not None else 0))
        out.append(maps)
    return np.array(out)


def run(text, x, dtype=np.float64):
    layer = make_layer(text, dtype)
    bottom = random_blobs([x], dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


FORWARD_CASES = [
    # params, bottom shape, pad, stride, dilation, group
    ("num_output: 4 kernel_size: 3", (2, 3, 6, 5), (0, 0), (1, 1), (1, 1), 1),
    ("num_output: 4 kernel_size: 3 pad: 1 stride: 2 group: 2", (2, 4, 7, 6),
     (1, 1), (2, 2), (1, 1), 2),
    ("num_output: 6 kernel_h: 2 kernel_w: 3 pad_h: 1 pad_w: 0 stride_h: 1 stride_w: 2 "
     "group: 3", (2, 3, 5, 7), (1, 0), (1, 2), (1, 1), 3),
    ("num_output: 2 kernel_size: 3 dilation: 2 pad: 2", (1, 2, 7, 8), (2, 2), (1, 1), (2, 2), 1),
    ("num_output: 3 kernel_size: 2 kernel_size: 3 dilation: 1 dilation: 2 stride: 2 stride: 1",
     (2, 2, 6, 7), (0, 0), (2, 1), (1, 2), 1),
    ("num_output: 5 kernel_size: 1", (3, 4, 3, 4), (0, 0), (1, 1), (1, 1), 1),  # 1x1 path
    ("num_output: 4 kernel_size: 1 group: 2", (1, 4, 3, 3), (0, 0), (1, 1), (1, 1), 2),
    ("num_output: 2 kernel_size: 1 stride: 2", (2, 3, 5, 5), (0, 0), (2, 2), (1, 1), 1),
    ("num_output: 3 kernel_size: 3 pad: 1 force_nd_im2col: true", (2, 2, 4, 5),
     (1, 1), (1, 1), (1, 1), 1),
    ("num_output: 2 kernel_size: 5", (2, 2, 5, 5), (0, 0), (1, 1), (1, 1), 1),  # 1x1 output
]


@pytest.mark.parametrize("params,shape,pad,stride,dilation,group", FORWARD_CASES)
def test_forward_matches_scipy_correlate(params, shape, pad, stride, dilation, group):
    layer, bottom, top = run(conv_text(params), shape)
    w, b = layer.blobs[0].data, layer.blobs[1].data
    assert w.shape == (layer.num_output, shape[1] // group) + tuple(layer.kernel_shape)
    assert b.shape == (layer.num_output,)
    expected = reference_conv(bottom[0].data, w, b, pad, stride, dilation, group)
    assert top[0].shape == expected.shape
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-10, atol=1e-10)


def test_forward_3d_and_no_bias():
    text = conv_text("num_output: 3 kernel_size: 2 kernel_size: 3 kernel_size: 2 pad: 1 "
                     "stride: 2 stride: 1 stride: 1 group: 1 bias_term: false")
    layer, bottom, top = run(text, (2, 2, 4, 5, 3))
    assert len(layer.blobs) == 1 and layer.blobs[0].shape == (3, 2, 2, 3, 2)
    expected = reference_conv(bottom[0].data, layer.blobs[0].data, None, (1, 1, 1), (2, 1, 1),
                              (1, 1, 1), 1)
    assert top[0].shape == (2, 3, 3, 5, 4) == expected.shape
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-10, atol=1e-10)


def test_forward_axis_2_flattens_leading_axes_into_the_batch():
    layer, bottom, top = run(conv_text("num_output: 2 kernel_size: 3 pad: 1 axis: 2"),
                             (2, 3, 4, 5, 5))
    assert top[0].shape == (2, 3, 2, 5, 5)
    x = bottom[0].data.reshape(6, 4, 5, 5)
    expected = reference_conv(x, layer.blobs[0].data, layer.blobs[1].data, (1, 1), (1, 1),
                              (1, 1), 1)
    np.testing.assert_allclose(top[0].data.reshape(6, 2, 5, 5), expected, rtol=1e-10)


def test_float32_chunked_forward_and_backward_match_unchunked():
    text = conv_text("num_output: 4 kernel_size: 3 pad: 1 stride: 2 group: 2")
    x = np.random.default_rng(5).standard_normal((5, 4, 9, 8)).astype(np.float32)
    results = []
    for workspace in (64 << 20, 1, 2 * 4 * 9 * 20 * 4):  # one chunk, 1 image, 2 images
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
        assert top[0].data.dtype == np.float32 and bottom[0].diff.dtype == np.float32
        results.append((layer.plan.chunk, top[0].data.copy(), bottom[0].diff.copy(),
                        layer.blobs[0].diff.copy(), layer.blobs[1].diff.copy()))
    assert [r[0] for r in results] == [5, 1, 2]
    expected = reference_conv(x.astype(np.float64), layer.blobs[0].data.astype(np.float64),
                              layer.blobs[1].data.astype(np.float64), (1, 1), (2, 2), (1, 1), 2)
    for r in results:
        np.testing.assert_allclose(r[1], expected, rtol=1e-4, atol=1e-5)
        for a, b in zip(r[2:], results[0][2:]):
            np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)


def test_backward_overwrites_bottom_diff_and_accumulates_param_diffs():
    layer, bottom, top = run(conv_text("num_output: 2 kernel_size: 3 pad: 1"), (2, 2, 4, 4))
    top[0].diff[...] = 1.0
    bottom[0].diff[...] = 123.0
    layer.Backward(top, [True], bottom)
    first = [bottom[0].diff.copy(), layer.blobs[0].diff.copy(), layer.blobs[1].diff.copy()]
    # bias gradient: sum of the top diff over batch and positions
    np.testing.assert_allclose(first[2], [2 * 16, 2 * 16])
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, first[0])
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * first[1])
    np.testing.assert_allclose(layer.blobs[1].diff, 2 * first[2])
    # param_propagate_down false: that param's diff is left alone
    layer.set_param_propagate_down(0, False)
    layer.blobs[0].diff[...] = 0
    layer.Backward(top, [False], bottom)
    assert not layer.blobs[0].diff.any()
    np.testing.assert_allclose(layer.blobs[1].diff, 3 * first[2])


def test_two_bottoms_share_weights_and_sum_weight_gradients():
    text = conv_text("num_output: 2 kernel_size: 2")
    layer = make_layer(text)
    bottom = random_blobs([(1, 2, 3, 3), (1, 2, 3, 3)], seed=3)
    top = empty_blobs(2)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    for i in range(2):
        expected = reference_conv(bottom[i].data, layer.blobs[0].data, layer.blobs[1].data,
                                  (0, 0), (1, 1), (1, 1), 1)
        np.testing.assert_allclose(top[i].data, expected, rtol=1e-10)
    check_layer(text, bottom, num_top=2)


GRADIENT_CASES = [
    ("num_output: 4 kernel_size: 3 pad: 1 stride: 2 group: 2", (2, 4, 5, 4)),
    ("num_output: 2 kernel_h: 2 kernel_w: 3 pad_h: 1 pad_w: 0 stride_h: 1 stride_w: 2 "
     "dilation: 2", (2, 2, 5, 6)),
    ("num_output: 3 kernel_size: 1 group: 1", (2, 2, 3, 3)),
    ("num_output: 2 kernel_size: 1 group: 2", (1, 4, 2, 3)),  # 1x1, one image per chunk
    ("num_output: 2 kernel_size: 2 stride: 2 pad: 1 bias_term: false", (2, 3, 3, 3)),
    ("num_output: 2 kernel_size: 2 pad: 1 stride: 2 force_nd_im2col: true group: 2",
     (2, 2, 3, 4)),
    ("num_output: 2 kernel_size: 2 stride: 1 stride: 2 stride: 1 pad: 1", (2, 2, 3, 4, 2)),
]


@pytest.mark.parametrize("params,shape", GRADIENT_CASES)
def test_gradient(params, shape):
    check_layer(conv_text(params), [shape])


@pytest.mark.parametrize("params,shape,message", [
    ("num_output: 4 kernel_size: 3 group: 2", (1, 3, 5, 5), "input channels (3)"),
    ("num_output: 3 kernel_size: 3 group: 2", (1, 4, 5, 5), "num_output (3)"),
    ("num_output: 0 kernel_size: 3", (1, 2, 5, 5), "num_output must be positive, got 0"),
    ("num_output: 2 kernel_size: 3 kernel_h: 3 kernel_w: 3", (1, 2, 5, 5), "not both"),
    ("num_output: 2 kernel_h: 2 kernel_w: 2", (1, 2, 5, 5, 5), "only be used for 2D"),
    ("num_output: 2 kernel_size: 2 kernel_size: 2 kernel_size: 2", (1, 2, 5, 5),
     "specified 3 times; 2 spatial dims"),
    ("num_output: 2", (1, 2, 5, 5), "kernel_size must be specified once"),
    ("num_output: 2 kernel_h: 3", (1, 2, 5, 5), "nonzero"),
    ("num_output: 2 kernel_size: 6", (1, 2, 5, 5), "kernel extent 6"),
    ("num_output: 2 kernel_size: 3 dilation: 3", (1, 2, 6, 6), "kernel extent 7"),
    ("num_output: 2 kernel_size: 3 stride: 0", (1, 2, 5, 5), "stride dimensions"),
    # like Caffe, stride_w alone leaves stride_h at its (zero) default
    ("num_output: 2 kernel_size: 3 stride_w: 2", (1, 2, 5, 5), "got stride (0, 2)"),
    ("num_output: 2 kernel_size: 3 pad: 1 pad_h: 1", (1, 2, 5, 5), "not both"),
    ("num_output: 2 kernel_size: 3 axis: 4", (1, 2, 5, 5), "axis 4"),
])
def test_invalid_parameters(params, shape, message):
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        run(conv_text(params), shape)
    assert "convolution" in str(info.value)


def test_invalid_shapes_and_blobs():
    layer, bottom, top = run(conv_text("num_output: 2 kernel_size: 3"), (1, 2, 5, 5))
    with pytest.raises(LayerError, match="expected 2 channels on axis 1, got shape"):
        layer.Forward([Blob((1, 3, 5, 5))], top)
    with pytest.raises(LayerError, match="num_axes may not change"):
        layer.Forward([Blob((1, 2, 5, 5, 5))], top)
    with pytest.raises(LayerError, match="all inputs must have the same shape"):
        layer.SetUp([Blob((1, 2, 5, 5)), Blob((1, 2, 6, 5))], empty_blobs(2))
    # parameter blobs read from a model must have the layer's shapes
    proto = layer.to_proto()
    proto.convolution_param.num_output = 3
    other = make_layer(proto)
    with pytest.raises(LayerError, match=r"incorrect weight shape: expected \(3, 2, 3, 3\), "
                                         r"got \(2, 2, 3, 3\)"):
        other.SetUp(bottom, empty_blobs(1))
    proto = layer.to_proto()
    proto.convolution_param.bias_term = False
    with pytest.raises(LayerError, match="incorrect number of weight blobs: expected 1"):
        make_layer(proto).SetUp(bottom, empty_blobs(1))


def test_fillers_and_loaded_weights():
    text = ('type: "Convolution" convolution_param { num_output: 3 kernel_size: 2 group: 1 '
            'weight_filler { type: "constant" value: 0.25 } bias_filler { type: "constant" '
            'value: -1 } }')
    layer, bottom, top = run(text, (1, 2, 3, 3))
    assert (layer.blobs[0].data == 0.25).all() and (layer.blobs[1].data == -1).all()
    np.testing.assert_allclose(top[0].data[0, 0], 0.25 * np.array(
        [[bottom[0].data[0, :, i:i + 2, j:j + 2].sum() for j in range(2)] for i in range(2)]) - 1)
    # a layer built from a saved proto keeps (does not refill) its weights
    proto = layer.to_proto()
    proto.convolution_param.weight_filler.value = 9
    twin = make_layer(proto)
    twin.SetUp(bottom, empty_blobs(1))
    assert (twin.blobs[0].data == 0.25).all()


@pytest.mark.parametrize("params,shape", [
    ("num_output: 4 kernel_size: 3 pad: 1 stride: 2 group: 2", (3, 4, 5, 6)),
    ("num_output: 3 kernel_size: 1", (3, 2, 3, 3)),
])
def test_conv_ops_a_deconvolution_composes(params, shape):
    """The convolution ops a Deconvolution composes, on whole batches in chunks of one
    image: forward, the input gradient alone (backward without x) and the weight gradient
    alone (forward_and_weight without y) agree with a Convolution's own forward and
    backward, and forward_and_weight (Deconvolution's fused backward) with the separate
    calls."""
    layer, bottom, top = run(conv_text(params + " bias_term: false"), shape)
    layer.workspace_bytes = 1  # one image per chunk
    layer.reshape(bottom, top)
    plan = layer.plan
    assert plan.chunk == 1
    x, w = bottom[0].data, layer.blobs[0].data
    y = np.empty(top[0].shape)
    conv_ops.forward(x, w, y, plan)
    np.testing.assert_allclose(y, top[0].data, rtol=1e-12)
    dy = np.random.default_rng(0).standard_normal(top[0].shape)
    top[0].diff[...] = dy
    layer.blobs[0].diff[...] = 0
    layer.Backward(top, [True], bottom)
    dx = np.full(x.shape, np.nan)
    conv_ops.backward(None, dy, w, plan, dx=dx)
    np.testing.assert_allclose(dx, bottom[0].diff, rtol=1e-12)
    dw = np.ones(w.shape)
    conv_ops.forward_and_weight(x, None, plan, dy=dy, dw=dw)  # accumulates
    np.testing.assert_allclose(dw, 1 + layer.blobs[0].diff, rtol=1e-12)
    y2, dw2 = np.empty(y.shape), np.zeros(w.shape)
    conv_ops.forward_and_weight(x, w, plan, y=y2, dy=dy, dw=dw2)
    np.testing.assert_allclose(y2, y, rtol=1e-12)
    np.testing.assert_allclose(dw2, layer.blobs[0].diff, rtol=1e-12)
