"""Which layers of an Intel Caffe int8 net compute in int8, by engine, as Intel Caffe decides
(docs/int8.md, "Which layers run in int8: the engines"): only its MKLDNN layers read
quantization_param and pass int8 values on, and its compiler's ReLU and sum fusions check the
engines. Expected values are NumPy hand computations of 1x1 convolutions from the formulas."""

import logging
import os

import numpy as np
import pytest

import pycaffe_lite as caffe

f32 = np.float32
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _qp(scale_in, scale_out, scale_params):
    return ('quantization_param { bw_layer_in: 8 bw_layer_out: 8 bw_params: 8 scale_in: %r '
            'scale_out: %r scale_params: %r }' % (scale_in, scale_out, scale_params))


def _conv(name, bottom, top, qp, engine="", sub="", n=3):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" %s'
            'convolution_param { num_output: %d kernel_size: 1 %s} %s }\n'
            % (name, bottom, top, 'engine: "%s" ' % engine if engine else "", n,
               "engine: %s " % sub if sub else "", qp))


def _net(body, header="", shape=(2, 3, 4, 4)):
    text = ('name: "eng" %s layer { name: "d" type: "Input" top: "d" input_param { shape { %s '
            '} } }\n%s' % (header, " ".join("dim: %d" % d for d in shape), body))
    return caffe.Net(text, caffe.TEST)


def _fill(net, seed, std=0.5):
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        for blob in layer.blobs:
            blob.data[...] = rng.normal(0, std, blob.shape)
    return rng


def _float_conv(net, name, x):
    """A 1x1 convolution in float64 from the float weights (quantization_param unused)."""
    w = np.asarray(net.params[name][0].data, np.float64).reshape(
        net.params[name][0].data.shape[0], -1)
    b = np.asarray(net.params[name][1].data, np.float64)
    return np.einsum("nchw,oc->nohw", np.asarray(x, np.float64), w) + b[None, :, None, None]


def _int8_sums(net, name, xq, scale_in, scale_out, scale_params):
    """An MKL-DNN int8 1x1 convolution's rescaled sums (float32, before ReLU and rounding):
    s8 weights at scale_params, the int32 bias at scale_in * scale_params, the integer sums
    times scale_out / (scale_in * scale_params), every scale product in float32."""
    sp = f32(scale_params)
    w = np.asarray(net.params[name][0].data, f32)
    wq = np.clip(np.rint(w.reshape(w.shape[0], -1) * sp), -128, 127).astype(np.int64)
    bq = np.rint(np.asarray(net.params[name][1].data, f32) * (f32(scale_in) * sp))
    acc = np.einsum("nchw,oc->nohw", xq.astype(np.int64), wq) + \
        bq.astype(np.int64)[None, :, None, None]
    return acc.astype(f32) * (f32(scale_out) / (f32(scale_in) * sp))


def _u8(x, scale):
    return np.clip(np.rint(np.asarray(x, f32) * f32(scale)), 0, 255)


# ---- a quantized convolution: int8 only as an MKLDNN layer ---------------------------------
ENGINES = [  # (net header, layer engine, convolution_param engine, int8?)
    ("", "", "", True),                               # the build's default: MKLDNN
    ('engine: "MKLDNN"', "", "", True),
    ("", "MKLDNN:CPU", "", True),                     # the engine string up to its ':'
    ("", "MKL2017", "", True),                        # Net::Init: MKL2017 -> the net's MKLDNN
    ('engine: "CAFFE"', "", "", False),               # every layer CAFFE
    ("", "CAFFE", "", False),
    ("", "", "CAFFE", False),                         # the layer's own parameters win
    ("", "MKLDNN", "MKL2017", False),
    ('engine: "CAFFE"', "MKLDNN", "", True),
    ('engine: "MKL2017"', "MKLDNN", "", False),       # Net::Init: MKLDNN -> the net's MKL2017
    ('engine: "CUDNN"', "", "", False),
]


@pytest.mark.parametrize("header,engine,sub,int8", ENGINES)
def test_a_quantized_convolution_is_int8_only_as_an_mkldnn_layer(header, engine, sub, int8,
                                                                  caplog):
    body = _conv("conv", "d", "c", _qp(20.0, 7.0, 30.0), engine, sub)
    with caplog.at_level(logging.INFO):
        net = _net(body, header)
    rng = _fill(net, 5)
    x = rng.uniform(0, 3, (2, 3, 4, 4)).astype(f32)
    net.forward(d=x)
    out = net.blobs["c"].data
    if int8:
        assert net.int8_layers == ["conv"]
        y = _int8_sums(net, "conv", _u8(x, 20.0), 20.0, 7.0, 30.0)
        expected = np.clip(np.rint(y), -128, 127) / f32(7)  # s8: no ReLU after it
        np.testing.assert_array_equal(out, expected)
    else:
        assert net.int8_layers == []
        assert "computes in float from its float weights" in caplog.text
        np.testing.assert_allclose(out, _float_conv(net, "conv", x), rtol=1e-5, atol=1e-5)
        # the int8 values are another function of x: this checks that it is not them
        y = _int8_sums(net, "conv", _u8(x, 20.0), 20.0, 7.0, 30.0)
        assert not np.allclose(out, np.clip(np.rint(y), -128, 127) / f32(7), atol=1e-4)


@pytest.mark.parametrize("ip_engine,int8", [("", True), ("inner_product_param_CAFFE", False),
                                            ("CAFFE", False)])
def test_a_quantized_inner_product_is_int8_only_as_an_mkldnn_layer(ip_engine, int8):
    sub = "engine: CAFFE " if ip_engine == "inner_product_param_CAFFE" else ""
    layer_engine = 'engine: "%s" ' % ip_engine if ip_engine == "CAFFE" else ""
    net = _net('layer { name: "fc" type: "InnerProduct" bottom: "d" top: "fc" %s'
               'inner_product_param { num_output: 4 %s} %s }' % (layer_engine, sub,
                                                                 _qp(20.0, 7.0, 30.0)),
               shape=(2, 5))
    rng = _fill(net, 8)
    x = rng.uniform(0, 3, (2, 5)).astype(f32)
    out = net.forward(d=x)["fc"]
    w = np.asarray(net.params["fc"][0].data, f32)
    b = np.asarray(net.params["fc"][1].data, f32)
    if int8:
        assert net.int8_layers == ["fc"]
        sp = f32(30)
        acc = _u8(x, 20).astype(np.int64) @ np.clip(np.rint(w * sp), -128, 127).astype(
            np.int64).T + np.rint(b * (f32(20) * sp)).astype(np.int64)
        y = acc.astype(f32) * (f32(7) / (f32(20) * sp))
        np.testing.assert_array_equal(out, np.clip(np.rint(y), -128, 127) / f32(7))
    else:
        assert net.int8_layers == []
        np.testing.assert_allclose(out, x.astype(np.float64) @ w.T.astype(np.float64) + b,
                                   rtol=1e-5, atol=1e-5)


def test_the_fixtures_mkl2017_convolution_computes_in_float():
    """tests/fixtures/forks/intel_engines_deploy.prototxt: conv1's convolution_param engine
    is MKL2017, an MKLConvolutionLayer, which ignores its quantization_param: float, and its
    ReLU (engine string MKL2017) unfused."""
    path = os.path.join(ROOT, "tests", "fixtures", "forks", "intel_engines_deploy.prototxt")
    net = caffe.Net(path, caffe.TEST)
    assert net.int8_layers == []
    rng = _fill(net, 3, 0.3)
    x = rng.uniform(-0.5, 1.5, (1, 3, 10, 10)).astype(f32)
    net.forward(data=x)
    w = np.asarray(net.params["conv1"][0].data, np.float64)
    b = np.asarray(net.params["conv1"][1].data, np.float64)
    expected = np.zeros((1, 4, 8, 8))
    for i in range(3):
        for j in range(3):
            expected += np.einsum("nchw,oc->nohw", x[:, :, i:i + 8, j:j + 8].astype(np.float64),
                                  w[:, :, i, j])
    expected = np.maximum(expected + b[None, :, None, None], 0)
    np.testing.assert_allclose(net.blobs["conv1"].data, expected, rtol=1e-5, atol=1e-5)


# ---- the boundaries ---------------------------------------------------------------------------
def test_an_int8_convolution_reads_a_float_convolutions_output_at_its_scale_in():
    """conv0 (engine CAFFE) computes in float, quantization_param unused; conv1 (MKLDNN) rounds
    those float values to u8 at its own scale_in, as from any float input."""
    body = (_conv("conv0", "d", "c0", _qp(20.0, 9.0, 30.0), "CAFFE")
            + 'layer { name: "r0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + _conv("conv1", "c0", "c1", _qp(15.0, 6.0, 40.0)))
    net = _net(body)
    assert net.int8_layers == ["conv1"]
    rng = _fill(net, 12)
    x = rng.uniform(0, 3, (2, 3, 4, 4)).astype(f32)
    net.forward(d=x)
    c0 = np.maximum(_float_conv(net, "conv0", x), 0)
    np.testing.assert_allclose(net.blobs["c0"].data, c0, rtol=1e-5, atol=1e-5)
    # the u8 values conv1 reads; c0 float32 as the net holds it (checked above)
    y = _int8_sums(net, "conv1", _u8(net.blobs["c0"].data, 15.0), 15.0, 6.0, 40.0)
    np.testing.assert_array_equal(net.blobs["c1"].data, np.clip(np.rint(y), -128, 127) / f32(6))


@pytest.mark.parametrize("relu", ['engine: "CAFFE" ', "relu_param { engine: CAFFE } ",
                                  'engine: "MKLDNN:DLA" '])
def test_a_relu_the_compiler_does_not_fuse_leaves_the_convolution_s8(relu):
    """The convolution + ReLU rule takes a ReLU only as MKL-DNN (no CAFFE engine, no ":DLA"):
    otherwise the int8 convolution rounds to s8, saturating at 127 / scale_out, and the ReLU
    computes on that in float (fused, u8 would reach 255 / scale_out)."""
    body = (_conv("conv", "d", "c", _qp(20.0, 60.0, 30.0))
            + 'layer { name: "r" type: "ReLU" bottom: "c" top: "r" %s}\n' % relu)
    net = _net(body)
    assert net.int8_layers == ["conv"]
    rng = _fill(net, 6)
    x = rng.uniform(0, 3, (2, 3, 4, 4)).astype(f32)
    net.forward(d=x)
    y = _int8_sums(net, "conv", _u8(x, 20.0), 20.0, 60.0, 30.0)
    expected = np.maximum(np.clip(np.rint(y), -128, 127) / f32(60), f32(0))
    np.testing.assert_array_equal(net.blobs["r"].data, expected)
    fused = np.clip(np.rint(np.maximum(y, 0)), 0, 255) / f32(60)
    assert (fused > expected).any()  # the data reach beyond s8's range


def test_an_average_pooling_of_another_engine_averages_the_float_values():
    """MKL-DNN's int8 average pooling rounds the mean to the input's integers; a CAFFE one
    reads the int8 convolution's output as floats (the integers over scale_out) and keeps the
    fractions."""
    body = (_conv("conv", "d", "c", _qp(20.0, 10.0, 30.0))
            + 'layer { name: "r" type: "ReLU" bottom: "c" top: "c" }\n'
            + 'layer { name: "p" type: "Pooling" bottom: "c" top: "p" engine: "CAFFE" '
              'pooling_param { pool: AVE kernel_size: 2 stride: 2 } }\n')
    net = _net(body)
    rng = _fill(net, 9)
    x = rng.uniform(0, 3, (2, 3, 4, 4)).astype(f32)
    net.forward(d=x)
    q = np.clip(np.rint(np.maximum(_int8_sums(net, "conv", _u8(x, 20.0), 20.0, 10.0, 30.0),
                                   0)), 0, 255)
    mean = (q / 10.0).reshape(2, 3, 2, 2, 2, 2).mean(axis=(3, 5))
    np.testing.assert_allclose(net.blobs["p"].data, mean, rtol=1e-6, atol=0)
    rounded = np.rint(q.reshape(2, 3, 2, 2, 2, 2).mean(axis=(3, 5))) / 10.0
    assert not np.allclose(mean, rounded, rtol=0, atol=1e-6)


@pytest.mark.parametrize("engine", ['engine: "CAFFE" ', "concat_param { engine: CAFFE } "])
def test_a_concat_of_another_engine_keeps_each_inputs_scale(engine):
    """MKL-DNN's Concat of two u8 inputs reorders the one at the larger scale onto the lesser;
    a CAFFE Concat concatenates the float values as they are."""
    body = (_conv("ca", "d", "a", _qp(20.0, 10.0, 30.0))
            + 'layer { name: "ra" type: "ReLU" bottom: "a" top: "a" }\n'
            + _conv("cb", "d", "b", _qp(20.0, 33.0, 30.0))
            + 'layer { name: "rb" type: "ReLU" bottom: "b" top: "b" }\n'
            + 'layer { name: "cat" type: "Concat" bottom: "a" bottom: "b" top: "cat" %s}\n'
            % engine)
    net = _net(body)
    rng = _fill(net, 10)
    x = rng.uniform(0, 3, (2, 3, 4, 4)).astype(f32)
    net.forward(d=x)
    xq = _u8(x, 20.0)
    qa = np.clip(np.rint(np.maximum(_int8_sums(net, "ca", xq, 20.0, 10.0, 30.0), 0)), 0, 255)
    qb = np.clip(np.rint(np.maximum(_int8_sums(net, "cb", xq, 20.0, 33.0, 30.0), 0)), 0, 255)
    expected = np.concatenate([qa / f32(10), qb / f32(33)], axis=1)
    np.testing.assert_array_equal(net.blobs["cat"].data, expected.astype(f32))
    reordered = np.clip(np.rint(qb.astype(f32) * (f32(10) / f32(33))), 0, 255) / f32(10)
    assert not np.array_equal(reordered, (qb / f32(33)).astype(f32))


def test_a_sum_whose_other_branch_passed_a_float_layer_runs_the_convolution_in_float():
    """conv1 + Eltwise + ReLU fuse (an MKLDNN net); the other branch comes through a CAFFE max
    pooling, whose output is float, so Intel's engine runs the fused convolution in float:
    max(conv1(c0) + p, 0) from the float weights."""
    body = (_conv("conv0", "d", "c0", _qp(20.0, 30.0, 40.0))
            + 'layer { name: "r0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + 'layer { name: "p" type: "Pooling" bottom: "c0" top: "p" engine: "CAFFE" '
              'pooling_param { pool: MAX kernel_size: 1 } }\n'
            + _conv("conv1", "c0", "c1", _qp(30.0, 150.0, 90.0))
            + 'layer { name: "sum" type: "Eltwise" bottom: "p" bottom: "c1" top: "s" }\n'
            + 'layer { name: "rs" type: "ReLU" bottom: "s" top: "s" }\n')
    net = _net(body)
    assert net.int8_layers == ["conv0"]
    rng = _fill(net, 11)
    x = rng.uniform(0, 2.5, (2, 3, 4, 4)).astype(f32)
    net.forward(d=x)
    q0 = np.clip(np.rint(np.maximum(_int8_sums(net, "conv0", _u8(x, 20.0), 20.0, 30.0, 40.0),
                                    0)), 0, 255)
    c0 = (q0 / f32(30)).astype(f32)
    np.testing.assert_array_equal(net.blobs["c0"].data, c0)
    expected = np.maximum(_float_conv(net, "conv1", c0) + c0, 0)
    np.testing.assert_allclose(net.blobs["s"].data, expected, rtol=1e-5, atol=1e-5)
