import re

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

signal = pytest.importorskip("scipy.signal", reason="SciPy (the reference) is a test dependency")

FILLERS = 'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "uniform" }'


def dw_text(type_, params):
    return 'type: "%s" convolution_param { %s %s }' % (type_, params, FILLERS)


def scipy_depthwise(x, w, b, stride=1, pad=0, dilation=1):
    """Each output channel m correlates input channel m // (M / C) with its own filter."""
    n, c = x.shape[:2]
    m = w.shape[0]
    k = w.shape[2]
    kd = np.zeros((m, (k - 1) * dilation + 1, (k - 1) * dilation + 1))
    kd[:, ::dilation, ::dilation] = w[:, 0]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = []
    for i in range(n):
        chans = [signal.correlate2d(xp[i, j // (m // c)], kd[j], mode="valid")[::stride, ::stride]
                 + (b[j] if b is not None else 0) for j in range(m)]
        out.append(chans)
    return np.array(out)


def run(text, x, dtype=np.float64):
    layer = make_layer(text, dtype)
    bottom, top = random_blobs([x], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


@pytest.mark.parametrize("type_,params,out_channels", [
    ("ConvolutionDepthwise", "kernel_size: 3 pad: 1", 4),
    ("ConvolutionDepthwise", "num_output: 4 group: 4 kernel_size: 3 stride: 2", 4),
    ("ConvolutionDepthwise", "kernel_size: 3 pad: 2 dilation: 2 bias_term: false", 4),
    ("DepthwiseConvolution", "num_output: 4 group: 4 kernel_size: 3 pad: 1", 4),
    ("DepthwiseConvolution", "num_output: 8 kernel_size: 3 stride: 2 pad: 1", 8),
])
def test_forward_matches_scipy_per_channel(type_, params, out_channels):
    x = np.random.default_rng(0).standard_normal((2, 4, 7, 6))
    layer, _, top = run(dw_text(type_, params), x)
    assert layer.group == 4
    w = layer.blobs[0].data
    assert w.shape == (out_channels, 1, 3, 3)
    b = layer.blobs[1].data if len(layer.blobs) > 1 else None
    p = layer.layer_param.convolution_param
    expect = scipy_depthwise(x, w, b, stride=p.stride[0] if p.stride else 1,
                             pad=p.pad[0] if p.pad else 0,
                             dilation=p.dilation[0] if p.dilation else 1)
    np.testing.assert_allclose(top[0].data, expect, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("type_,params", [
    ("ConvolutionDepthwise", "kernel_size: 3 pad: 1 stride: 2"),
    ("DepthwiseConvolution", "num_output: 6 kernel_size: 2"),
])
def test_gradient(type_, params):
    check_layer(dw_text(type_, params), [(2, 3, 5, 4)])


def test_the_prototxt_keeps_its_own_words():
    # group and num_output are derived for the layer; the saved definition is the user's
    layer, _, _ = run(dw_text("ConvolutionDepthwise", "kernel_size: 3"), np.zeros((1, 5, 4, 4)))
    assert layer.num_output == 5 and layer.group == 5
    saved = layer.to_proto().convolution_param
    assert not saved.HasField("group") and not saved.HasField("num_output")


@pytest.mark.parametrize("type_", ["ConvolutionDepthwise", "DepthwiseConvolution"])
def test_fork_weights_load_unchanged(tmp_path, type_):
    """A .caffemodel as the forks write it: weights (C, 1, k, k), bias (C,), by layer name."""
    rng = np.random.default_rng(5)
    w = rng.standard_normal((3, 1, 3, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    model = caffe_pb2.NetParameter()
    layer = model.layer.add(name="dw", type=type_)
    for arr in (w, b):
        blob = layer.blobs.add()
        blob.shape.dim.extend(arr.shape)
        blob.data.extend(arr.ravel().tolist())
    (tmp_path / "fork.caffemodel").write_bytes(model.SerializeToString())
    proto = tmp_path / "deploy.prototxt"
    proto.write_text('input: "data" input_shape { dim: 1 dim: 3 dim: 6 dim: 5 }\n'
                     'layer { name: "dw" type: "%s" bottom: "data" top: "dw" '
                     'convolution_param { num_output: 3 kernel_size: 3 pad: 1 } }' % type_)
    net = caffe.Net(str(proto), str(tmp_path / "fork.caffemodel"), caffe.TEST)
    np.testing.assert_array_equal(net.params["dw"][0].data, w)
    x = rng.standard_normal((1, 3, 6, 5)).astype(np.float32)
    out = net.forward(data=x)["dw"]
    np.testing.assert_allclose(out, scipy_depthwise(x, w, b, pad=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("type_,params,message", [
    ("ConvolutionDepthwise", "kernel_size: 3 group: 2",
     "group must be the number of input channels (4) or unset, got group 2"),
    ("ConvolutionDepthwise", "kernel_size: 3 num_output: 8",
     "num_output must be 4 (the input's channels) or unset, got 8"),
    ("DepthwiseConvolution", "kernel_size: 3 num_output: 6",
     "needs num_output, a positive multiple of the input's 4 channels; got 6"),
    ("DepthwiseConvolution", "kernel_size: 3",
     "needs num_output, a positive multiple of the input's 4 channels; got none"),
    ("DepthwiseConvolution", "kernel_size: 3 num_output: 4 axis: 5", "axis 5 is out of range"),
])
def test_invalid_usage(type_, params, message):
    layer = make_layer(dw_text(type_, params))
    with pytest.raises(LayerError, match=re.escape(message)) as info:
        layer.SetUp(random_blobs([(1, 4, 5, 5)]), empty_blobs(1))
    assert type_ in str(info.value)
