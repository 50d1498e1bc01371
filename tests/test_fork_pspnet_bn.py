"""PSPNet's BN layer (hszhao/PSPNet: bn_param with slope_filler, bias_filler, momentum, eps,
frozen; blobs slope, bias, running mean, running variance), beside SegNet's BN of the same
type: the schema, the fork's binary numbers, the layer's forward, backward and running
averages, and a PSPNet net excerpt.

The references are the fork's src/caffe/layers/bn_layer.cpp written out by hand in NumPy."""

import struct

import numpy as np
import pytest
from helpers.wire_bytes import fork_layer, length_delimited, string, tag, varint

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError, LayerError, ProtoError, ShapeError
from pycaffe_lite.layers.common.bn_layer import BNLayer
from pycaffe_lite.layers.common.pspnet_bn_layer import PSPNetBNLayer
from pycaffe_lite.proto import caffe_pb2, fork_fields, protoio
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs
from pycaffe_lite.testing.gradient_check import GradientChecker

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST
# PSP's eps: 0.01 as the float field holds it
EPS = float(np.float32(0.01))

PSP = ('type: "BN" bn_param { slope_filler { type: "uniform" min: 0.5 max: 1.5 } '
       'bias_filler { type: "uniform" min: -1 max: 1 } momentum: 0.7 eps: 0.01 %s}')
CONST = ('type: "BN" bn_param { slope_filler { type: "constant" value: 1.5 } '
         'bias_filler { type: "constant" value: -0.25 } %s}')


def stats_shape(a):
    return np.asarray(a).reshape(1, -1, 1, 1)


def set_blobs(layer, slope, bias, mean, var):
    for blob, values in zip(layer.blobs, (slope, bias, mean, var)):
        blob.data[...] = stats_shape(values)


def fork_forward(x, slope, bias, mean, var, eps):
    """y = slope * (x - mean) / sqrt(var + eps) + bias, per channel (axis 1)."""
    return stats_shape(slope) * (x - stats_shape(mean)) / np.sqrt(stats_shape(var) + eps) \
        + stats_shape(bias)


# ---- the schema and which layer a bn_param builds ----------------------------------------

def test_pspnet_fields_parse_by_name_with_the_forks_defaults():
    lp = protoio.parse_text('name: "b" type: "BN" bn_param { slope_filler { type: "constant" '
                            'value: 1 } frozen: true }', caffe_pb2.LayerParameter())
    p = lp.bn_param
    assert p.slope_filler.value == 1 and p.frozen
    # the fork's defaults (its caffe.proto): momentum 0.9, eps 1e-5, engine DEFAULT
    assert p.momentum == pytest.approx(0.9) and p.eps == pytest.approx(1e-5)
    assert p.engine == caffe_pb2.BNParameter.DEFAULT
    # SegNet's fields are untouched (its numbers 1-3)
    fields = caffe_pb2.BNParameter.DESCRIPTOR.fields_by_name
    assert [fields[n].number for n in ("scale_filler", "shift_filler", "bn_mode")] == [1, 2, 3]


def test_the_fields_set_choose_the_layer():
    assert type(make_layer(PSP % "")) is PSPNetBNLayer
    assert type(make_layer('type: "BN" bn_param { frozen: false }')) is PSPNetBNLayer
    assert type(make_layer('type: "BN" bn_param { bn_mode: INFERENCE }')) is BNLayer
    assert type(make_layer('type: "BN"')) is BNLayer  # nothing set: SegNet's, as before


def test_mixing_the_two_kinds_is_an_error_naming_layer_and_file(tmp_path):
    text = ('name: "n"\nlayer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 '
            'dim: 2 } } }\nlayer { name: "mixed_bn" type: "BN" bottom: "x" top: "y"\n'
            '  bn_param { scale_filler { type: "constant" value: 1 } frozen: true } }\n')
    path = tmp_path / "mixed.prototxt"
    path.write_text(text)
    with pytest.raises(ProtoError) as err:
        caffe.Net(str(path), caffe.TEST)
    message = str(err.value)
    assert str(path) in message and "'mixed_bn'" in message
    assert "scale_filler" in message and "frozen" in message
    with pytest.raises(LayerError, match="mixed_bn.*scale_filler.*frozen"):
        make_layer('name: "mixed_bn" type: "BN" bn_param { scale_filler { type: "constant" } '
                   'frozen: true }')


# ---- forward --------------------------------------------------------------------------------

def test_train_forward_uses_the_batch_statistics_and_updates_the_running_ones():
    layer = make_layer(PSP % "", phase=TRAIN)
    bottom, top = random_blobs([(3, 2, 4, 5)], seed=3), empty_blobs(1)
    layer.SetUp(bottom, top)
    slope, bias = layer.blobs[0].data.ravel().copy(), layer.blobs[1].data.ravel().copy()
    mean0, var0 = np.array([0.5, -1.0]), np.array([2.0, 0.25])
    set_blobs(layer, slope, bias, mean0, var0)
    x = bottom[0].data.copy()
    layer.Forward(bottom, top)

    batch_mean = x.mean(axis=(0, 2, 3))
    batch_var = ((x - stats_shape(batch_mean)) ** 2).mean(axis=(0, 2, 3))  # biased
    np.testing.assert_allclose(top[0].data, fork_forward(x, slope, bias, batch_mean, batch_var,
                                                         EPS), rtol=1e-12, atol=1e-12)
    # stat = (1 - momentum) * batch + momentum * stat, momentum 0.7 (a float field), no
    # variance correction
    m = float(np.float32(0.7))
    mean1 = (1 - m) * batch_mean + m * mean0
    var1 = (1 - m) * batch_var + m * var0
    np.testing.assert_allclose(layer.blobs[2].data.ravel(), mean1, rtol=1e-12)
    np.testing.assert_allclose(layer.blobs[3].data.ravel(), var1, rtol=1e-12)

    # a second batch moves them again from there
    x2 = x[::-1] * 2 + 1
    bottom[0].data[...] = x2
    layer.Forward(bottom, top)
    m2, v2 = x2.mean(axis=(0, 2, 3)), x2.var(axis=(0, 2, 3))
    np.testing.assert_allclose(layer.blobs[2].data.ravel(), (1 - m) * m2 + m * mean1,
                               rtol=1e-12)
    np.testing.assert_allclose(layer.blobs[3].data.ravel(), (1 - m) * v2 + m * var1,
                               rtol=1e-12)


@pytest.mark.parametrize("phase, frozen", [(TEST, ""), (TEST, "frozen: true "),
                                           (TRAIN, "frozen: true ")])
def test_test_phase_and_frozen_use_the_running_statistics(phase, frozen):
    layer = make_layer(PSP % frozen, phase=phase)
    bottom, top = random_blobs([(2, 3, 3, 4)], seed=5), empty_blobs(1)
    layer.SetUp(bottom, top)
    slope, bias = np.array([1.5, -0.5, 2.0]), np.array([0.1, 0.2, -0.3])
    mean, var = np.array([0.25, -0.5, 1.0]), np.array([0.5, 2.0, 0.04])
    set_blobs(layer, slope, bias, mean, var)
    x = bottom[0].data.copy()
    layer.Forward(bottom, top)
    np.testing.assert_allclose(top[0].data, fork_forward(x, slope, bias, mean, var, EPS),
                               rtol=1e-12, atol=1e-12)
    # nothing moves the running statistics
    np.testing.assert_array_equal(layer.blobs[2].data.ravel(), mean)
    np.testing.assert_array_equal(layer.blobs[3].data.ravel(), var)


def test_initial_blobs_follow_the_fork():
    """Four 1 x C x 1 x 1 blobs: slope and bias from their fillers, running mean 0, running
    variance 1 when frozen (else 0)."""
    for frozen, var in (("frozen: true ", 1.0), ("", 0.0)):
        layer = make_layer(CONST % frozen)
        layer.SetUp(random_blobs([(2, 3, 2, 2)]), empty_blobs(1))
        assert [b.shape for b in layer.blobs] == [(1, 3, 1, 1)] * 4
        assert [float(b.data[0, 1, 0, 0]) for b in layer.blobs] == [1.5, -0.25, 0.0, var]


def test_learning_rates_as_the_fork_sets_them():
    """The statistics never learn; a frozen layer's slope and bias neither (lr_mult and
    decay_mult 0 whatever the prototxt says); otherwise the prototxt's settings hold."""
    net_text = ('name: "n"\nlayer { name: "in" type: "Input" top: "x" '
                'input_param { shape { dim: 2 dim: 2 dim: 3 dim: 3 } } }\n'
                'layer { name: "bn" type: "BN" bottom: "x" top: "x" %s '
                'bn_param { slope_filler { type: "constant" value: 1 } %s } }\n'
                'layer { name: "loss" type: "EuclideanLoss" bottom: "x" bottom: "x" '
                'top: "l" }\n')
    params = "param { lr_mult: 10 decay_mult: 0 } " * 2 + "param { lr_mult: 0 decay_mult: 1 }"
    net = caffe.Net(protoio.parse_text(net_text % (params, "momentum: 0.95"),
                                       caffe_pb2.NetParameter()), caffe.TRAIN)
    assert net.params_lr == [10, 10, 0, 0]
    assert [s.decay_mult for s in net.layer_dict["bn"].layer_param.param] == [0, 0, 0, 0]
    frozen = caffe.Net(protoio.parse_text(net_text % (params, "frozen: true"),
                                          caffe_pb2.NetParameter()), caffe.TRAIN)
    assert frozen.params_lr == [0, 0, 0, 0]
    assert frozen.layer_dict["bn"].param_propagate_down[:4] == [False] * 4


# ---- backward -------------------------------------------------------------------------------

def test_train_backward_against_numerical_gradients():
    # input and all four blobs (the statistics get no gradient: the batch's are used)
    check_layer(PSP % "", [(3, 2, 4, 5)], phase=TRAIN)
    check_layer(CONST % "momentum: 0.5 ", [(2, 3, 3, 2)], phase=TRAIN, in_place=True)


@pytest.mark.parametrize("phase, frozen", [(TEST, ""), (TRAIN, "frozen: true ")])
def test_running_statistics_backward_against_numerical_gradients(phase, frozen):
    """With the running statistics the layer is affine per channel: dx = slope * dy /
    sqrt(var + eps). The input's gradient against numerical differences; the slope's and
    bias's (an unfrozen TEST layer computes them) against sum(dy * x_hat) and sum(dy)."""
    layer = make_layer(PSP % frozen, phase=phase)
    bottom, top = random_blobs([(2, 3, 3, 2)], seed=7), empty_blobs(1)
    layer.SetUp(bottom, top)
    mean, var = np.array([0.2, -0.1, 0.4]), np.array([0.8, 1.5, 0.3])
    set_blobs(layer, layer.blobs[0].data.ravel().copy(), layer.blobs[1].data.ravel().copy(),
              mean, var)
    GradientChecker(1e-2, 1e-3).check_gradient(layer, bottom, top, check_params=False)

    layer.Forward(bottom, top)
    dy = np.random.default_rng(1).standard_normal(top[0].shape)
    top[0].diff[...] = dy
    for b in layer.blobs:
        b.diff[...] = 0
    layer.Backward(top, [True], bottom)
    slope = layer.blobs[0].data
    np.testing.assert_allclose(bottom[0].diff, dy * slope / np.sqrt(stats_shape(var) + EPS),
                               rtol=1e-12)
    if frozen:
        assert not layer.blobs[0].diff.any() and not layer.blobs[1].diff.any()
    else:
        x_hat = (bottom[0].data - stats_shape(mean)) / np.sqrt(stats_shape(var) + EPS)
        np.testing.assert_allclose(layer.blobs[0].diff.ravel(),
                                   (dy * x_hat).sum(axis=(0, 2, 3)), rtol=1e-12)
        np.testing.assert_allclose(layer.blobs[1].diff.ravel(), dy.sum(axis=(0, 2, 3)),
                                   rtol=1e-12)


# ---- a PSPNet excerpt -----------------------------------------------------------------------

def bn_block(name, bottom, num_output, kernel, stride=1, pad=0):
    """conv (no bias) + BN (frozen, in place) + ReLU, as pspnet50_ADE20K_473.prototxt
    writes them."""
    return ('layer {\n  name: "%s"\n  type: "Convolution"\n  bottom: "%s"\n  top: "%s"\n'
            '  param {\n    lr_mult: 1\n    decay_mult: 1\n  }\n'
            '  convolution_param {\n    num_output: %d\n    pad: %d\n    kernel_size: %d\n'
            '    stride: %d\n    weight_filler {\n      type: "msra"\n    }\n'
            '    bias_term: false\n  }\n}\n' % (name, bottom, name, num_output, pad, kernel, stride)
            + 'layer {\n  name: "%s/bn"\n  type: "BN"\n  bottom: "%s"\n  top: "%s"\n' % (
                name, name, name)
            + '  param {\n    lr_mult: 1\n    decay_mult: 0\n  }\n' * 2
            + '  param {\n    lr_mult: 0\n    decay_mult: 0\n  }\n' * 2
            + '  bn_param {\n    slope_filler {\n      type: "constant"\n      value: 1\n    }\n'
              '    bias_filler {\n      type: "constant"\n      value: 0\n    }\n'
              '    frozen: true\n    momentum: 0.95\n  }\n}\n'
            + 'layer {\n  name: "%s/relu"\n  type: "ReLU"\n  bottom: "%s"\n  top: "%s"\n}\n'
            % (name, name, name))


def pyramid_level(level, bottom, kernel, size):
    return ('layer {\n  name: "%s_pool%d"\n  type: "Pooling"\n  bottom: "%s"\n'
            '  top: "%s_pool%d"\n  pooling_param {\n    pool: AVE\n    kernel_size: %d\n'
            '    stride: %d\n  }\n}\n' % (bottom, level, bottom, bottom, level, kernel, kernel)
            + bn_block("%s_pool%d_conv" % (bottom, level), "%s_pool%d" % (bottom, level), 2, 1)
            + 'layer {\n  name: "%s_pool%d_interp"\n  type: "Interp"\n'
              '  bottom: "%s_pool%d_conv"\n  top: "%s_pool%d_interp"\n'
              '  interp_param {\n    height: %d\n    width: %d\n  }\n}\n'
            % (bottom, level, bottom, level, bottom, level, size, size))


PSPNET_EXCERPT = (
    '#\ninput: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 17\ninput_dim: 17\n\n'
    + bn_block("conv1_1_3x3_s2", "data", 4, 3, stride=2, pad=1)
    + pyramid_level(1, "conv1_1_3x3_s2", 9, 9)
    + pyramid_level(3, "conv1_1_3x3_s2", 3, 9)
    + 'layer {\n  name: "conv5_3_concat"\n  type: "Concat"\n  bottom: "conv1_1_3x3_s2"\n'
      '  bottom: "conv1_1_3x3_s2_pool3_interp"\n  bottom: "conv1_1_3x3_s2_pool1_interp"\n'
      '  top: "conv5_3_concat"\n}\n'
    + 'layer {\n  name: "conv6"\n  type: "Convolution"\n  bottom: "conv5_3_concat"\n'
      '  top: "conv6"\n  convolution_param {\n    num_output: 3\n    kernel_size: 1\n'
      '    stride: 1\n    weight_filler {\n      type: "msra"\n    }\n  }\n}\n'
    + 'layer {\n  name: "conv6_interp"\n  type: "Interp"\n  bottom: "conv6"\n'
      '  top: "conv6_interp"\n  interp_param {\n    zoom_factor: 2\n  }\n}\n')


def np_conv(x, w, stride=1, pad=0, bias=None):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    k = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))[:, :, ::stride,
                                                                            ::stride]
    y = np.einsum("nchwij,ocij->nohw", win, w)
    return y if bias is None else y + bias.reshape(1, -1, 1, 1)


def np_ave_pool(x, k):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // k, k, w // k, k).mean(axis=(3, 5))


def interp_matrix(n_in, n_out):
    """Bilinear weights with the corners aligned (the fork's Interp): output i samples input
    i * (n_in - 1) / (n_out - 1)."""
    a = np.zeros((n_out, n_in))
    for i in range(n_out):
        src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        lo = min(int(np.floor(src)), n_in - 1)
        hi = min(lo + 1, n_in - 1)
        a[i, lo] += 1 - (src - lo)
        a[i, hi] += src - lo
    return a


def np_interp(x, h, w):
    return np.einsum("ph,nchw,qw->ncpq", interp_matrix(x.shape[2], h), x,
                     interp_matrix(x.shape[3], w))


def excerpt_net(tmp_path):
    path = tmp_path / "pspnet_excerpt.prototxt"
    path.write_text(PSPNET_EXCERPT)
    return caffe.Net(str(path), caffe.TEST)


def fill_bn_blobs(net, rng):
    for name, layer in net.layer_dict.items():
        if layer.type == "BN":
            c = layer.blobs[0].count
            set_blobs(layer, rng.uniform(0.5, 1.5, c), rng.uniform(-0.5, 0.5, c),
                      rng.uniform(-0.3, 0.3, c), rng.uniform(0.2, 2.0, c))


def excerpt_reference(net, x):
    def p(name, i=0):
        return net.params[name][i].data.astype(np.float64)

    def block(name, inp, stride=1, pad=0):
        y = np_conv(inp, p(name), stride, pad)
        bn = "%s/bn" % name
        y = fork_forward(y, p(bn, 0).ravel(), p(bn, 1).ravel(), p(bn, 2).ravel(),
                         p(bn, 3).ravel(), float(np.float32(1e-5)))
        return np.maximum(y, 0)

    f = block("conv1_1_3x3_s2", x, stride=2, pad=1)
    levels = {}
    for level, k in ((1, 9), (3, 3)):
        name = "conv1_1_3x3_s2_pool%d_conv" % level
        levels[level] = np_interp(block(name, np_ave_pool(f, k)), 9, 9)
    cat = np.concatenate([f, levels[3], levels[1]], axis=1)
    y = np_conv(cat, p("conv6"), bias=p("conv6", 1))
    return np_interp(y, 17, 17)  # zoom_factor 2: (9 - 1) * 2 + 1


def test_pspnet_excerpt_builds_and_runs(tmp_path):
    """PSPNet's own layout (legacy input_dim, conv + frozen BN + ReLU in place, the pyramid
    pooling: AVE pooling, 1x1 conv + BN + ReLU, Interp to the feature size, Concat, then
    Interp by zoom_factor) against NumPy."""
    net = excerpt_net(tmp_path)
    bn_layers = [n for n, layer in net.layer_dict.items() if layer.type == "BN"]
    assert len(bn_layers) == 3
    assert all(type(net.layer_dict[n]) is PSPNetBNLayer for n in bn_layers)
    assert [len(net.params[n]) for n in bn_layers] == [4, 4, 4]
    rng = np.random.default_rng(11)
    fill_bn_blobs(net, rng)
    x = rng.standard_normal((1, 3, 17, 17)).astype(np.float32)
    out = net.forward(data=x)["conv6_interp"]
    assert out.shape == (1, 3, 17, 17)
    np.testing.assert_allclose(out, excerpt_reference(net, x.astype(np.float64)), rtol=1e-4,
                               atol=1e-5)


# ---- the fork's binary files ------------------------------------------------------------------

def f32(number, value):
    return tag(number, 5) + struct.pack("<f", value)


def fork_filler(value):
    return string(1, "constant") + f32(2, value)


def fork_bn_param(momentum=0.95, eps=None, engine=None):
    """PSPNet's BNParameter bytes, its numbers: slope_filler 1, bias_filler 2, momentum 3
    (float), eps 4 (float), frozen 5 (bool), engine 6 (enum)."""
    out = length_delimited(1, fork_filler(1.0)) + length_delimited(2, fork_filler(0.0))
    out += f32(3, momentum) + tag(5, 0) + varint(1)
    if eps is not None:
        out += f32(4, eps)
    if engine is not None:
        out += tag(6, 0) + varint(engine)
    return out


def blob_bytes(values):
    """A BlobProto: shape 1 x C x 1 x 1 (field 7: BlobShape, packed dims) and data (field 5,
    packed floats)."""
    dims = b"".join(varint(d) for d in (1, len(values), 1, 1))
    return length_delimited(7, length_delimited(1, dims)) + \
        length_delimited(5, struct.pack("<%df" % len(values), *values))


SLOPE, BIAS = [1.25, 0.5, 2.0], [0.1, -0.2, 0.3]
MEAN, VAR = [0.5, -1.0, 0.25], [4.0, 0.25, 1.0]


def fork_caffemodel():
    """A NetParameter as the fork writes it: an Input layer and a BN layer whose bn_param is
    in LayerParameter field 152 with the fork's numbers, and four blobs."""
    shape = length_delimited(1, b"".join(varint(d) for d in (2, 3, 2, 2)))
    layers = [
        fork_layer("data", "Input", [], ["data"],
                   length_delimited(143, length_delimited(1, shape))),
        fork_layer("data/bn", "BN", ["data"], ["data"],
                   b"".join(length_delimited(7, blob_bytes(v)) for v in (SLOPE, BIAS, MEAN, VAR))
                   + length_delimited(152, fork_bn_param(0.95, eps=1e-3, engine=2))),
    ]
    return string(1, "pspnet") + b"".join(length_delimited(100, layer) for layer in layers)


def test_fork_binary_bn_param_decodes_into_ours(tmp_path):
    path = tmp_path / "pspnet.caffemodel"
    path.write_bytes(fork_caffemodel())
    param = protoio.read_net_param(str(path))
    bn = param.layer[1]
    p = bn.bn_param
    assert (p.slope_filler.type, p.slope_filler.value) == ("constant", 1.0)
    assert p.HasField("bias_filler") and p.bias_filler.value == 0.0
    assert p.momentum == pytest.approx(0.95) and p.eps == pytest.approx(1e-3)
    assert p.frozen and p.engine == caffe_pb2.BNParameter.CUDNN
    # nothing of it read as SegNet's fields, nothing left unknown
    assert not any(p.HasField(f) for f in ("bn_mode", "scale_filler", "shift_filler"))
    assert fork_fields.unknown_fields(param) == []


def test_fork_binary_runs_with_its_four_blobs(tmp_path):
    """The file as the net definition and as weights: blob 0 slope, 1 bias, 2 running mean,
    3 running variance; frozen, so TRAIN uses the running statistics too."""
    path = tmp_path / "pspnet.caffemodel"
    path.write_bytes(fork_caffemodel())
    x = np.random.default_rng(2).standard_normal((2, 3, 2, 2)).astype(np.float32)
    expected = fork_forward(x.astype(np.float64), SLOPE, BIAS, MEAN, VAR,
                            float(np.float32(1e-3)))
    for phase in (caffe.TEST, caffe.TRAIN):
        net = caffe.Net(str(path), phase)
        np.testing.assert_allclose(net.forward(data=x)["data"], expected, rtol=1e-5)

    deploy = tmp_path / "deploy.prototxt"
    deploy.write_text('name: "pspnet"\ninput: "data"\ninput_dim: 2\ninput_dim: 3\n'
                      'input_dim: 2\ninput_dim: 2\nlayer { name: "data/bn" type: "BN" '
                      'bottom: "data" top: "data" bn_param { slope_filler { type: "constant" '
                      'value: 1 } eps: 0.001 frozen: true } }\n')
    net = caffe.Net(str(deploy), str(path), caffe.TEST)
    for blob, values in zip(net.params["data/bn"], (SLOPE, BIAS, MEAN, VAR)):
        np.testing.assert_array_equal(blob.data.ravel(), np.float32(values))
    np.testing.assert_allclose(net.forward(data=x)["data"], expected, rtol=1e-5)


def test_our_files_round_trip(tmp_path):
    """A PSPNet BN net saved here (bn_param in field 45, PSPNet's fields at 1000-1005) reads
    back with the same parameters and blobs."""
    deploy = tmp_path / "deploy.prototxt"
    deploy.write_text('name: "n"\ninput: "data"\ninput_shape { dim: 1 dim: 3 dim: 2 dim: 2 }\n'
                      'layer { name: "bn" type: "BN" bottom: "data" top: "y" bn_param { '
                      'slope_filler { type: "constant" value: 2 } momentum: 0.8 eps: 0.125 '
                      'engine: CAFFE } }\n')
    net = caffe.Net(str(deploy), caffe.TEST)
    for blob, values in zip(net.params["bn"], (SLOPE, BIAS, MEAN, VAR)):
        blob.data[...] = stats_shape(values)
    saved = tmp_path / "saved.caffemodel"
    net.save(str(saved))
    param = protoio.read_net_param(str(saved))
    p = param.layer[-1].bn_param
    assert (p.slope_filler.value, p.momentum, p.eps, p.frozen, p.engine) == (
        2.0, pytest.approx(0.8), 0.125, False, caffe_pb2.BNParameter.CAFFE)
    twin = caffe.Net(str(saved), caffe.TEST)
    for blob, values in zip(twin.params["bn"], (SLOPE, BIAS, MEAN, VAR)):
        np.testing.assert_array_equal(blob.data.ravel(), np.float32(values))
    x = np.random.default_rng(4).standard_normal((1, 3, 2, 2)).astype(np.float32)
    np.testing.assert_allclose(twin.forward(data=x)["y"],
                               fork_forward(x.astype(np.float64), SLOPE, BIAS, MEAN, VAR,
                                            0.125), rtol=1e-5)


def test_weights_of_the_other_kind_say_so(tmp_path):
    """PSPNet's four BN blobs copied into SegNet's BN (two blobs): the error says which is
    which."""
    path = tmp_path / "pspnet.caffemodel"
    path.write_bytes(fork_caffemodel())
    deploy = tmp_path / "segnet.prototxt"
    deploy.write_text('name: "n"\ninput: "data"\ninput_shape { dim: 2 dim: 3 dim: 2 dim: 2 }\n'
                      'layer { name: "data/bn" type: "BN" bottom: "data" top: "data" '
                      'bn_param { bn_mode: INFERENCE } }\n')
    with pytest.raises(ShapeError, match="4 blobs is PSPNet's"):
        caffe.Net(str(deploy), str(path), caffe.TEST)
    layer = make_layer(caffe_pb2.LayerParameter(
        name="b", type="BN", blobs=[caffe.io.array_to_blobproto(np.ones((1, 2, 1, 1)))] * 4))
    with pytest.raises(CaffeError, match="PSPNet's BN"):
        layer.SetUp(random_blobs([(1, 2, 2, 2)]), empty_blobs(1))
