"""Intel Caffe's int8 nets with BatchNorm and Scale after their convolutions: its net compiler
(RemoveBNScale, src/caffe/util/remove_batch_norm.cpp) folds them into the convolution in a
TEST net before the int8 engine quantizes the weights, and the ReLU and Eltwise sum fusions
then see the convolution followed by what reads the Scale's top. The expected values are
computed here in NumPy from docs/int8.md's formulas: the fold in float32 in Intel's order,
the weights and bias quantized, exact integer sums, the rescale, the fused ReLU or sum, one
rounding to the nearest (ties to even), saturated."""

import logging
import os

import numpy as np
import pytest

import pycaffe_lite as caffe

f32 = np.float32
FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "real",
                       "intel_resnet50_int8_res2a.prototxt")


# ---- the hand computation ------------------------------------------------------------------
def _fold(w, b, mean, var, factor, eps, gamma=None, beta=None):
    """Intel Caffe's AdjustConvLayer in float32: sf = 1 / factor (1 where factor is 0),
    a = gamma / sqrt(var * sf + eps), b' = b * a + (beta - mean * sf * a), w' = w * a."""
    n = w.shape[0]
    gamma = np.ones(n, f32) if gamma is None else np.asarray(gamma, f32)
    beta = np.zeros(n, f32) if beta is None else np.asarray(beta, f32)
    b = np.zeros(n, f32) if b is None else np.asarray(b, f32)
    sf = f32(1) if f32(factor) == 0 else f32(1) / f32(factor)
    a = gamma / np.sqrt(np.asarray(var, f32) * sf + f32(eps))
    assert a.dtype == f32
    bias = b * a + (beta - (np.asarray(mean, f32) * sf) * a)
    return (np.asarray(w, f32) * a.reshape(-1, 1, 1, 1)).astype(f32), bias.astype(f32)


def _iconv(xq, wq, stride=1, pad=0):
    """Integer convolution (int64) of ``xq`` (N, C, H, W) with ``wq`` (O, C, k, k)."""
    k = wq.shape[2]
    x = np.pad(xq.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho = (x.shape[2] - k) // stride + 1
    wo = (x.shape[3] - k) // stride + 1
    out = np.zeros((xq.shape[0], wq.shape[0], ho, wo), np.int64)
    for i in range(k):
        for j in range(k):
            patch = x[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
            out += np.einsum("nchw,oc->nohw", patch, wq[:, :, i, j].astype(np.int64))
    return out


def _int8_conv(xq, w, b, s_in, s_out, sp, stride=1, pad=0):
    """The rescaled sums (float32, before any ReLU or rounding) of an int8 convolution of
    the integers ``xq`` with float weights ``w`` and bias ``b`` quantized at ``sp``."""
    sp = np.broadcast_to(np.asarray(sp, f32), (w.shape[0],))
    wq = np.clip(np.rint(w * sp.reshape(-1, 1, 1, 1)), -128, 127)
    den = f32(s_in) * sp
    bq = np.rint(b * den)
    acc = _iconv(xq, wq.astype(np.int64), stride, pad) + bq.astype(np.int64)[None, :, None,
                                                                              None]
    return acc.astype(f32) * (f32(s_out) / den)[None, :, None, None]


def _round(y, lo, hi):
    return np.clip(np.rint(y), lo, hi)


def _fused_sum(y, other_q, s_out, s_other, lo, hi):
    """The fused sum: y + (s_out / s_b) b_q in one multiply-add (an add at factor 1), the
    ReLU, one rounding saturated to the other branch's type."""
    factor = f32(f32(s_out) / f32(s_other))
    if factor == 1:
        s = y + other_q.astype(f32)
    else:
        s = (y.astype(np.float64) + other_q.astype(np.float64) * np.float64(factor)).astype(f32)
    return _round(np.maximum(s, f32(0)), lo, hi)


# ---- a hand-built residual block -----------------------------------------------------------
def _qp(s_in, s_out, sp, signed=False):
    return ("quantization_param { bw_layer_in: 8 bw_layer_out: 8 bw_params: 8 scale_in: %r "
            "scale_out: %r %s%s }" % (s_in, s_out, " ".join("scale_params: %r" % v for v in sp),
                                      " is_negative_input: true" if signed else ""))


def _conv_bn_scale(name, bottom, top, qp, bias=False, bn_extra="", scale="bias_term: true"):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" '
            'convolution_param { num_output: 4 kernel_size: 1 bias_term: %s } %s }\n'
            'layer { name: "bn_%s" type: "BatchNorm" bottom: "%s" top: "%s" '
            'batch_norm_param { eps: 0.001 %s } }\n'
            'layer { name: "sc_%s" type: "Scale" bottom: "%s" top: "%s" scale_param { %s } }\n'
            % (name, bottom, top, "true" if bias else "false", qp, name, top, top, bn_extra,
               name, top, top, scale))


SP0, SP1 = (100.0, 80.0, 120.0, 90.0), (60.0, 75.0, 50.0, 110.0)


def _block(header="", phase=caffe.TEST, bn_extra="", int8=None):
    """d -> conv0 -> bn -> scale -> ReLU (u8 at 30) -> conv1 (with bias) -> bn -> scale ->
    Eltwise(c0, c1) -> ReLU."""
    body = (_conv_bn_scale("conv0", "d", "c0", _qp(40.0, 30.0, SP0), bn_extra=bn_extra)
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + _conv_bn_scale("conv1", "c0", "c1", _qp(30.0, 150.0, SP1), bias=True,
                             bn_extra=bn_extra)
            + 'layer { name: "sum" type: "Eltwise" bottom: "c0" bottom: "c1" top: "s" }\n'
            + 'layer { name: "relus" type: "ReLU" bottom: "s" top: "s" }\n')
    text = ('name: "bnblock" %s layer { name: "d" type: "Input" top: "d" input_param { shape '
            '{ dim: 2 dim: 4 dim: 3 dim: 3 } } }\n%s' % (header, body))
    net = caffe.Net(text, phase, int8=int8)
    rng = np.random.default_rng(5)
    for name in ("conv0", "conv1"):
        net.params[name][0].data[...] = rng.normal(0, 0.5, (4, 4, 1, 1))
        if name == "conv1":
            net.params[name][1].data[...] = rng.normal(0, 0.3, 4)
        factor = 4.0  # the stored statistics are sums over the moving average's weight
        bn = net.params["bn_" + name]
        bn[0].data[...] = rng.normal(0, 0.5, 4) * factor
        bn[1].data[...] = rng.uniform(0.3, 2.0, 4) * factor
        bn[2].data[...] = factor
        sc = net.params["sc_" + name]
        sc[0].data[...] = rng.uniform(0.5, 1.5, 4)
        sc[1].data[...] = rng.normal(0, 0.4, 4)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    return net, x


def _params(net, name):
    bn, sc = net.params["bn_" + name], net.params["sc_" + name]
    b = net.params[name][1].data if len(net.params[name]) > 1 else None
    return _fold(net.params[name][0].data, b, bn[0].data, bn[1].data, bn[2].data[0], 0.001,
                 sc[0].data, sc[1].data)


def test_residual_block_folds_batchnorm_and_scale_before_quantizing(caplog):
    with caplog.at_level(logging.INFO):
        net, x = _block()
    assert net.int8_layers == ["conv0", "conv1"]
    assert "folded into the convolution before them, as Intel Caffe's net compiler folds " \
           "them: conv0+bn_conv0+sc_conv0, conv1+bn_conv1+sc_conv1" in caplog.text
    assert "Eltwise 'sum' and ReLU 'relus' fused into int8 convolution 'conv1'" in caplog.text
    xq = _round(x * f32(40), 0, 255)
    w0, b0 = _params(net, "conv0")
    q0 = _round(np.maximum(_int8_conv(xq, w0, b0, 40.0, 30.0, SP0), f32(0)), 0, 255)
    w1, b1 = _params(net, "conv1")
    y1 = _int8_conv(q0, w1, b1, 30.0, 150.0, SP1)
    q = _fused_sum(y1, q0, 150.0, 30.0, 0, 255)   # onto the u8 branch at conv1's scale_out
    np.testing.assert_array_equal(net.blobs["s"].data, q / f32(150))
    np.testing.assert_array_equal(net.blobs["c0"].data, q0 / f32(30))
    assert 0 < (q == 0).sum() < q.size and (q0 > 0).any()


def test_the_folded_block_is_the_same_in_gpu_mode():
    """On the (simulated) device too, the folded BatchNorm and Scale stay out of the
    BatchNorm -> Scale -> ReLU chains that run as one kernel: the block gives the CPU's
    values."""
    from pycaffe_lite import backend
    from pycaffe_lite.testing.simdevice import simulated_device
    net, _ = _block()
    cpu = net.blobs["s"].data.copy()
    with simulated_device():
        backend.set_mode_gpu()
        dev, _ = _block()
        np.testing.assert_array_equal(np.asarray(dev.blobs["s"].data), cpu)


def test_use_global_stats_false_keeps_the_batchnorm_and_its_convolution():
    """A BatchNorm with use_global_stats: false in the TEST net is kept (kept_bn_layers): the
    convolution quantizes its own weights, its first reader is no ReLU (s8 output), and the
    BatchNorm normalises with the batch's statistics in float."""
    net, x = _block(bn_extra="use_global_stats: false")
    xq = _round(x * f32(40), 0, 255)
    w0 = net.params["conv0"][0].data
    q0 = _round(_int8_conv(xq, w0, np.zeros(4, f32), 40.0, 30.0, SP0), -128, 127)
    c0 = q0 / f32(30)
    mean = c0.mean(axis=(0, 2, 3), keepdims=True)
    var = c0.var(axis=(0, 2, 3), keepdims=True)
    sc = net.params["sc_conv0"]
    expected = np.maximum((c0 - mean) / np.sqrt(var + 0.001) * sc[0].data.reshape(1, -1, 1, 1)
                          + sc[1].data.reshape(1, -1, 1, 1), 0)
    np.testing.assert_allclose(net.blobs["c0"].data, expected, rtol=1e-5, atol=1e-5)


def test_a_net_with_int8_off_is_not_folded():
    """With int8 off the layers compute in float, as the net has them: the BatchNorm with its
    stored statistics."""
    net, x = _block(int8=False)
    assert net.int8_layers == []
    h = x
    for name in ("conv0", "conv1"):
        w = net.params[name][0].data.reshape(4, 4).astype(np.float64)
        y = np.einsum("nchw,oc->nohw", h.astype(np.float64), w)
        if name == "conv1":
            y = y + net.params[name][1].data.reshape(1, -1, 1, 1)
        bn, sc = net.params["bn_" + name], net.params["sc_" + name]
        f = 1.0 / bn[2].data[0]
        y = (y - (bn[0].data * f).reshape(1, -1, 1, 1)) / np.sqrt(
            (bn[1].data * f).reshape(1, -1, 1, 1) + 0.001)
        y = y * sc[0].data.reshape(1, -1, 1, 1) + sc[1].data.reshape(1, -1, 1, 1)
        h = np.maximum(y, 0) if name == "conv0" else np.maximum(y + h, 0)
    np.testing.assert_allclose(net.blobs["s"].data, h, rtol=1e-5, atol=1e-5)


def test_train_phase_keeps_the_batchnorm_on_batch_statistics():
    net, x = _block(phase=caffe.TRAIN)
    w = net.params["conv0"][0].data.reshape(4, 4).astype(np.float64)
    y = np.einsum("nchw,oc->nohw", x.astype(np.float64), w)
    y = (y - y.mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(
        y.var(axis=(0, 2, 3), keepdims=True) + 0.001)
    sc = net.params["sc_conv0"]
    y = np.maximum(y * sc[0].data.reshape(1, -1, 1, 1) + sc[1].data.reshape(1, -1, 1, 1), 0)
    np.testing.assert_allclose(net.blobs["c0"].data, y, rtol=1e-4, atol=1e-5)


def test_batchnorm_alone_is_folded_with_a_scale_of_one_and_its_zero_factor_read_as_one():
    """conv -> BatchNorm -> ReLU: the BatchNorm folds alone (gamma 1, beta 0), the ReLU is
    then the convolution's first reader and fuses (u8 output). A scale factor blob of 0 is
    read as 1 by the fold (Caffe's BatchNorm would multiply the statistics by 0)."""
    text = ('name: "bnonly" layer { name: "d" type: "Input" top: "d" input_param { shape '
            '{ dim: 1 dim: 3 dim: 4 dim: 4 } } }\n'
            'layer { name: "conv" type: "Convolution" bottom: "d" top: "c" convolution_param '
            '{ num_output: 3 kernel_size: 3 pad: 1 } %s }\n'
            'layer { name: "bn" type: "BatchNorm" bottom: "c" top: "b" }\n'
            'layer { name: "relu" type: "ReLU" bottom: "b" top: "r" }\n'
            % _qp(20.0, 25.0, (40.0, 60.0, 50.0), signed=True))
    net = caffe.Net(text, caffe.TEST)
    rng = np.random.default_rng(9)
    net.params["conv"][0].data[...] = rng.normal(0, 0.2, (3, 3, 3, 3))
    net.params["conv"][1].data[...] = rng.normal(0, 0.5, 3)
    net.params["bn"][0].data[...] = rng.normal(0, 1.0, 3)
    net.params["bn"][1].data[...] = rng.uniform(0.5, 3.0, 3)
    net.params["bn"][2].data[...] = 0
    x = rng.normal(0, 2.0, (1, 3, 4, 4)).astype(f32)
    net.forward(d=x)
    xq = _round(x * f32(20), -128, 127)
    w, b = _fold(net.params["conv"][0].data, net.params["conv"][1].data,
                 net.params["bn"][0].data, net.params["bn"][1].data, 0.0, 1e-5)
    q = _round(np.maximum(_int8_conv(xq, w, b, 20.0, 25.0, (40.0, 60.0, 50.0), pad=1),
                          f32(0)), 0, 255)
    np.testing.assert_array_equal(net.blobs["r"].data, q / f32(25))
    np.testing.assert_array_equal(net.blobs["b"].data, q / f32(25))
    assert (q > 0).any() and (q == 0).any()


def test_an_in_place_batchnorm_not_next_to_its_convolution_is_not_folded():
    """The compiler seeks the BatchNorm's reader from the layer two after the convolution: an
    in-place BatchNorm there reads its own top first, and nothing is folded. The convolution
    then rounds to s8 (its first reader is no ReLU) and BatchNorm, Scale and ReLU compute in
    float with the stored statistics."""
    text = ('name: "apart" layer { name: "d" type: "Input" top: "d" input_param { shape '
            '{ dim: 2 dim: 4 dim: 3 dim: 3 } } }\n'
            'layer { name: "conv0" type: "Convolution" bottom: "d" top: "c0" '
            'convolution_param { num_output: 4 kernel_size: 1 bias_term: false } %s }\n'
            'layer { name: "side" type: "Pooling" bottom: "d" top: "side" '
            'pooling_param { pool: MAX kernel_size: 1 } }\n'
            'layer { name: "bn_conv0" type: "BatchNorm" bottom: "c0" top: "c0" '
            'batch_norm_param { eps: 0.001 } }\n'
            'layer { name: "sc_conv0" type: "Scale" bottom: "c0" top: "c0" '
            'scale_param { bias_term: true } }\n'
            'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            % _qp(40.0, 30.0, SP0))
    net = caffe.Net(text, caffe.TEST)
    rng = np.random.default_rng(2)
    net.params["conv0"][0].data[...] = rng.normal(0, 0.5, (4, 4, 1, 1))
    bn, sc = net.params["bn_conv0"], net.params["sc_conv0"]
    bn[0].data[...] = rng.normal(0, 0.5, 4)
    bn[1].data[...] = rng.uniform(0.3, 2.0, 4)
    bn[2].data[...] = 1.0
    sc[0].data[...] = rng.uniform(0.5, 1.5, 4)
    sc[1].data[...] = rng.normal(0, 0.4, 4)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = _round(x * f32(40), 0, 255)
    q0 = _round(_int8_conv(xq, net.params["conv0"][0].data, np.zeros(4, f32), 40.0, 30.0, SP0),
                -128, 127)
    ch = (1, -1, 1, 1)
    y = (q0 / f32(30) - bn[0].data.reshape(ch)) / np.sqrt(bn[1].data.reshape(ch) + 0.001)
    y = np.maximum(y * sc[0].data.reshape(ch) + sc[1].data.reshape(ch), 0)
    np.testing.assert_allclose(net.blobs["c0"].data, y, rtol=1e-5, atol=1e-5)
    assert (q0 < 0).any()


def test_a_scale_without_bias_is_refused_naming_it():
    text = ('name: "nobias" layer { name: "d" type: "Input" top: "d" input_param { shape '
            '{ dim: 1 dim: 4 dim: 2 dim: 2 } } }\n'
            + _conv_bn_scale("conv", "d", "c", _qp(40.0, 30.0, (100.0,)),
                             scale="bias_term: false"))
    with pytest.raises(caffe.CaffeError, match="sc_conv.*bias"):
        net = caffe.Net(text, caffe.TEST)
        net.forward(d=np.ones((1, 4, 2, 2), f32))


# ---- Intel's own int8 ResNet-50 layout -----------------------------------------------------
def _layer(net, name):
    return net.layers[list(net._layer_names).index(name)].layer_param


def test_intel_resnet50_int8_res2a_runs_folded(caplog):
    """conv1 .. res2a_relu of Intel's int8 ResNet-50 with its own calibration: every
    convolution folds its BatchNorm and Scale, the ReLUs fuse, and res2a_branch2c fuses the
    sum onto the s8 shortcut res2a_branch1 (computed before the other branch)."""
    with caplog.at_level(logging.INFO):
        net = caffe.Net(FIXTURE, caffe.TEST)
    assert "Eltwise 'res2a' and ReLU 'res2a_relu' fused into int8 convolution " \
           "'res2a_branch2c'" in caplog.text
    rng = np.random.default_rng(1)
    convs = ["conv1", "res2a_branch1", "res2a_branch2a", "res2a_branch2b", "res2a_branch2c"]
    bns = {"conv1": ("bn_conv1", "scale_conv1")}
    for c in convs[1:]:
        bns[c] = ("bn" + c[3:], "scale" + c[3:])
    folded = {}
    for c in convs:
        q = _layer(net, c).quantization_param
        sp = np.asarray(q.scale_params, f32)
        bn, sc = net.params[bns[c][0]], net.params[bns[c][1]]
        n = sp.size
        factor = 999.98
        bn[0].data[...] = rng.normal(0, 0.3, n) * factor
        bn[1].data[...] = rng.uniform(0.2, 2.0, n) * factor
        bn[2].data[...] = factor
        sc[0].data[...] = rng.uniform(0.5, 1.5, n)
        sc[1].data[...] = rng.normal(0, 0.5, n)
        shape = net.params[c][0].data.shape
        a = _fold(np.ones((n, 1, 1, 1), f32), None, bn[0].data, bn[1].data, factor, 1e-5,
                  sc[0].data, sc[1].data)[0].reshape(-1)
        # weights the calibration's scale_params fit after the fold (|w' * sp| up to ~40)
        net.params[c][0].data[...] = rng.uniform(-40, 40, shape) / (sp * a).reshape(-1, 1, 1, 1)
        if len(net.params[c]) > 1:
            net.params[c][1].data[...] = rng.normal(0, 0.2, n)
        b = net.params[c][1].data if len(net.params[c]) > 1 else None
        folded[c] = _fold(net.params[c][0].data, b, bn[0].data, bn[1].data, factor, 1e-5,
                          sc[0].data, sc[1].data) + (q.scale_in[0], q.scale_out[0], sp)
    x = rng.normal(0, 60, (2, 3, 16, 16)).astype(f32)
    net.forward(data=x)

    w, b, s_in, s_out, sp = folded["conv1"]
    xq = _round(x * f32(s_in), -128, 127)                       # is_negative_input
    q1 = _round(np.maximum(_int8_conv(xq, w, b, s_in, s_out, sp, 2, 3), f32(0)), 0, 255)
    pad = np.pad(q1, ((0, 0), (0, 0), (0, 1), (0, 1)))           # ceil: 8 -> 4 windows
    pool = np.stack([np.stack([pad[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3].max(axis=(2, 3))
                               for j in range(4)], -1) for i in range(4)], -2)
    np.testing.assert_array_equal(net.blobs["pool1"].data, pool / f32(s_out))
    w, b, s_in, s_out_1, sp = folded["res2a_branch1"]
    short = _round(_int8_conv(pool, w, b, s_in, s_out_1, sp), -128, 127)   # s8, no ReLU
    w, b, s_in, s_out, sp = folded["res2a_branch2a"]
    a2 = _round(np.maximum(_int8_conv(pool, w, b, s_in, s_out, sp), f32(0)), 0, 255)
    w, b, s_in, s_out, sp = folded["res2a_branch2b"]
    b2 = _round(np.maximum(_int8_conv(a2, w, b, s_in, s_out, sp, 1, 1), f32(0)), 0, 255)
    w, b, s_in, s_out, sp = folded["res2a_branch2c"]
    y = _int8_conv(b2, w, b, s_in, s_out, sp)
    out = _fused_sum(y, short, s_out, s_out_1, -128, 127)   # written into the s8 shortcut
    np.testing.assert_array_equal(net.blobs["res2a"].data, out / f32(s_out))
    assert (out == 127).any() and (out == 0).any() and ((out > 0) & (out < 127)).any()


# ---- the calibrator --------------------------------------------------------------------------
def test_quantized_prototxt_takes_the_scales_of_the_folded_net(tmp_path):
    """Intel Caffe's calibrator samples the compiled (folded) TEST net: scale_params from the
    folded weights, scale_out from the Scale's output, here through the ReLU it then fuses
    (u8: 255 / t)."""
    pytest.importorskip("onnx")
    pytest.importorskip("onnxruntime")
    from pycaffe_lite.quantization import intel
    from pycaffe_lite.quantization.run import qdq_model

    text = ('name: "cal" layer { name: "d" type: "Input" top: "d" input_param { shape '
            '{ dim: 2 dim: 4 dim: 5 dim: 5 } } }\n'
            + _conv_bn_scale("conv0", "d", "c0", "")
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + _conv_bn_scale("conv1", "c0", "c1", "", bias=True))
    path, weights = tmp_path / "net.prototxt", tmp_path / "w.caffemodel"
    path.write_text(text)
    net = caffe.Net(str(path), caffe.TEST)
    rng = np.random.default_rng(3)
    for layer in net.layers:
        for blob in layer.blobs:
            blob.data[...] = rng.normal(0, 0.5, blob.shape)
    for name in ("bn_conv0", "bn_conv1"):
        net.params[name][1].data[...] = rng.uniform(0.05, 0.5, 4)  # alpha far from 1
        net.params[name][2].data[...] = 1.0
    net.save(str(weights))
    net = caffe.Net(str(path), str(weights), caffe.TEST, fold=False)
    batches = [{"d": rng.normal(0, 1, (2, 4, 5, 5)).astype(f32)} for _ in range(3)]
    q = qdq_model(net, batches, method="minmax")
    written = {p["name"]: p for p in intel.write_quantized_prototxt(
        str(path), net, q["tops"], q["stats"], q["thresholds"], set(), True,
        str(tmp_path / "quantized.prototxt"))}
    relu_max = 0.0
    for feed in batches:
        net.forward(**feed)
        relu_max = max(relu_max, float(np.abs(net.blobs["c0"].data).max()))
    w0, _ = _params(net, "conv0")
    w1, _ = _params(net, "conv1")
    p0, p1 = written["conv0"], written["conv1"]
    np.testing.assert_allclose(p0["scale_params"],
                               127 / np.abs(w0).reshape(4, -1).max(axis=1), rtol=1e-6)
    np.testing.assert_allclose(p1["scale_params"],
                               127 / np.abs(w1).reshape(4, -1).max(axis=1), rtol=1e-6)
    assert p0["fused_relu"] and p0["bw_layer_out"] == 8
    assert p0["scale_out"] == pytest.approx(255 / relu_max, rel=1e-6)
    assert p1["scale_in"] == pytest.approx(255 / relu_max, rel=1e-6)
    assert p1["bw_layer_out"] == 32  # the net's last convolution writes float
    # the written net runs folded here: conv0's output on the u8 grid of its scale_out
    int8 = caffe.Net(str(tmp_path / "quantized.prototxt"), str(weights), caffe.TEST)
    assert int8.int8_layers == ["conv0", "conv1"]
    int8.forward(**batches[0])
    q0 = int8.blobs["c0"].data * f32(p0["scale_out"])
    np.testing.assert_allclose(q0, np.rint(q0), atol=1e-3)
    assert q0.min() >= 0 and q0.max() <= 255.001
