"""int8 without ONNX: the calibration thresholds against hand computations (min-max,
percentile, the KL divergence of TensorRT's entropy calibration), and Intel Caffe's
``quantization_param`` run as its int8 convolution computes it (``--int8 off``: float)."""

import logging
import math
import os
import re

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli
from pycaffe_lite.proto import protoio
from pycaffe_lite.errors import CaffeError, NetError
from pycaffe_lite.quantization import calibrate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INTEL = os.path.join(ROOT, "tests", "fixtures", "forks", "intel_engines_deploy.prototxt")
# Its conv1 is an MKL2017 layer (convolution_param's engine), which Intel Caffe computes in
# float; with that engine MKLDNN it is its int8 convolution (docs/int8.md, the engines).
INTEL_MKLDNN_TEXT = open(INTEL).read().replace("kernel_size: 3 engine: MKL2017 }",
                                               "kernel_size: 3 engine: MKLDNN }")
assert INTEL_MKLDNN_TEXT != open(INTEL).read()


def _intel_mkldnn(tmp_path):
    path = tmp_path / "intel_mkldnn.prototxt"
    path.write_text(INTEL_MKLDNN_TEXT)
    return str(path)


# ---- thresholds ----------------------------------------------------------------------------
def test_minmax_is_the_largest_magnitude_over_every_batch():
    h = calibrate.Histogram()
    h.add(np.array([-3.0, 1.0, 2.0]))
    h.add(np.array([0.5, -1.0]))
    assert calibrate.threshold(h, "minmax") == 3.0
    assert h.min == -3.0


def test_percentile_is_the_upper_edge_of_the_bin_reaching_the_share():
    # |x| = 1..2048: range 2048, 2048 bins of width 1; value k sits in [k, k+1) (2048 in the
    # last bin). 50 %: the 1024th smallest value, 1024, lies in [1024, 1025) -> 1025.
    # 99.9 %: 2045.952 values -> the 2046th, 2046, in [2046, 2047) -> 2047.
    h = calibrate.Histogram()
    h.add(-np.arange(1, 2049, dtype=np.float64))
    assert calibrate.percentile_threshold(h, 50) == 1025.0
    assert calibrate.percentile_threshold(h, 99.9) == 2047.0
    assert calibrate.percentile_threshold(h, 100) == 2048.0
    with pytest.raises(CaffeError, match="percentile"):
        calibrate.percentile_threshold(h, 0)


def test_a_wider_batch_moves_the_counts_into_the_new_bins():
    """1..1024 first (bins of 0.5: k < 1024 in bin 2k, centre k + 0.25; the maximum 1024 in
    the closed last bin, centre 1023.75), then 1025..2048 (bins of 1): each k < 1024 lands in
    bin k, as if all 2048 values came at once, and 1024 in bin 1023."""
    split, whole = calibrate.Histogram(), calibrate.Histogram()
    split.add(np.arange(1, 1025, dtype=np.float64))
    split.add(np.arange(1025, 2049, dtype=np.float64))
    whole.add(np.arange(1, 2049, dtype=np.float64))
    expected = whole.counts.copy()
    expected[1024] -= 1
    expected[1023] += 1
    np.testing.assert_array_equal(split.counts, expected)


def test_kl_divergence_of_a_small_histogram_by_hand():
    counts = [3, 1, 0, 2, 4, 0, 1, 1]
    # threshold after i = 4 bins, 2 levels:
    # P: [3, 1, 0, 2 + (4 + 0 + 1 + 1)] = [3, 1, 0, 8] / 12
    # Q: levels [3, 1] -> 2, 2 (two non-empty bins); [0, 2] -> 0, 2: [2, 2, 0, 2] / 6
    # smoothing: the one empty bin gets eps, the three others give eps / 3 each
    e = 1e-4
    p = [3 / 12 - e / 3, 1 / 12 - e / 3, e, 8 / 12 - e / 3]
    q = [2 / 6 - e / 3, 2 / 6 - e / 3, e, 2 / 6 - e / 3]
    expected = sum(a * math.log(a / b) for a, b in zip(p, q))
    assert calibrate.kl_divergence(counts, 4, levels=2) == pytest.approx(expected, rel=1e-12)
    # all of the mass inside the first i bins, one bin a level: Q is P, nothing diverges
    assert calibrate.kl_divergence([1, 2, 3, 4, 0, 0], 4, levels=4) == pytest.approx(0.0)


def test_entropy_keeps_the_first_threshold_that_loses_nothing():
    """Every count in the first 100 of 2048 bins: at i = 128 (one bin a level) Q equals P, so
    the search stops there: t = (128 + 0.5) * width."""
    h = calibrate.Histogram()
    h.counts[:100] = 5
    h.range, h.amax, h.count = 2048.0, 2048.0, 500
    assert calibrate.threshold(h, "entropy") == 128.5


# ---- Intel Caffe's quantization_param at run time -----------------------------------------
def _filled(net, seed, std=0.3):
    """Every learnable blob of ``net`` drawn from N(0, std); returns the generator."""
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        for blob in layer.blobs:
            blob.data[...] = rng.normal(0, std, blob.shape)
    return rng


def _intel_int8_conv(x, w, b, scale_in, scale_out, scale_params, signed=False, relu=True,
                     out_bits=8, dilation=1, slope=0.0):
    """Intel Caffe's int8 convolution, in integers: 3x3, stride 1, no padding; u8 input (s8
    when ``signed``), a fused ReLU or not, an 8-bit (u8 after the ReLU, else s8) or float
    output; returns what the next layer reads (y_q / scale_out). The scales are floats, and
    every product with them a float32 product, as in Intel Caffe and MKL-DNN's reorders."""
    f32 = np.float32
    scale_in, scale_out = f32(scale_in), f32(scale_out)
    x, w, b = (np.asarray(a, f32) for a in (x, w, b))
    lo, hi = (-128, 127) if signed else (0, 255)
    xq = np.clip(np.rint(x * scale_in), lo, hi).astype(np.int64)
    sp = np.broadcast_to(np.asarray(scale_params, f32), (w.shape[0],))
    wq = np.clip(np.rint(w * sp[:, None, None, None]), -128, 127).astype(np.int64)
    n, _, hh, ww = x.shape
    span = 2 * dilation
    acc = np.zeros((n, w.shape[0], hh - span, ww - span), np.int64)
    for di in range(3):
        for dj in range(3):
            i, j = di * dilation, dj * dilation
            patch = xq[:, :, i:i + hh - span, j:j + ww - span]
            acc += np.einsum("nkij,ck->ncij", patch, wq[:, :, di, dj])
    acc += np.rint(b * (scale_in * sp)).astype(np.int64)[None, :, None, None]
    mult = scale_out / (scale_in * sp)
    y = acc.astype(np.float32) * mult[None, :, None, None]
    if relu:  # MKL-DNN's ReLU post-op: y, or negative_slope * y below 0
        y = np.where(y > 0, y, y * np.float32(slope))
    unsigned = relu and slope == 0
    if out_bits == 8:
        y = np.clip(np.rint(y), 0 if unsigned else -128, 255 if unsigned else 127)
    return y / np.float32(scale_out)


def test_intel_quantized_convolution_runs_as_its_int8_engine_computes(caplog, tmp_path):
    """conv1 as an MKLDNN layer: int8. relu1's engine string is MKL2017, which the compiler's
    convolution + ReLU rule does not take for MKL-DNN (Net::Init makes it MKLDNN only
    afterwards): conv1 rounds to s8 unfused, and relu1 computes on that in float."""
    model = _intel_mkldnn(tmp_path)
    with caplog.at_level(logging.INFO):
        net = caffe.Net(model, caffe.TEST)
    assert net.int8_layers == ["conv1"]
    assert "1 of its layers compute in int8 (conv1)" in caplog.text
    rng = _filled(net, 3)
    flt = caffe.Net(model, caffe.TEST, int8=False)
    assert flt.int8_layers == []
    # the float net runs conv1's ReLU in its output pass (net_train_fuse); the int8 engine,
    # which replaces conv1's Forward, is never bypassed that way
    assert [[flt.layer_names[i] for i in c.indices] for c in flt._train_fuse.convs] == \
        [["conv1", "relu1"]]
    assert net._train_fuse is None
    for a, b in zip(flt.layers, net.layers):
        for x, y in zip(a.blobs, b.blobs):
            x.data[...] = y.data
    x = rng.uniform(-0.5, 1.5, (1, 3, 10, 10)).astype(np.float32)
    ours = net.forward(data=x)["fc"].copy()
    conv1 = net.blobs["conv1"].data.copy()
    q = protoio.read_net_param(INTEL).layer[1].quantization_param
    expected = np.maximum(_intel_int8_conv(
        x, np.asarray(net.params["conv1"][0].data, np.float64),
        np.asarray(net.params["conv1"][1].data, np.float64), float(q.scale_in[0]),
        float(q.scale_out[0]), list(q.scale_params), relu=False), np.float32(0))
    np.testing.assert_array_equal(conv1, expected)
    assert len(np.unique(conv1)) > 3  # not saturated into nothing
    reference = flt.forward(data=x)["fc"]
    assert not np.allclose(ours, reference, rtol=0, atol=1e-6)  # int8 is not float
    # ... and the rest of the net is float on the int8 convolution's output
    flt.blobs["conv1"].data[...] = expected
    np.testing.assert_allclose(flt.forward(start="pool1")["fc"], ours, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("bw_out,scale_out", [(8, 20.0), (32, 1.0)])
def test_signed_input_without_relu_and_both_output_widths(bw_out, scale_out):
    """s8 input (is_negative_input), one weight scale for every channel, no ReLU after the
    convolution: an s8 output, or a float one with bw_layer_out 32."""
    net = caffe.Net(
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 2 dim: 2 dim: 6 '
        'dim: 6 } } } layer { name: "c" type: "Convolution" bottom: "d" top: "c" '
        'convolution_param { num_output: 3 kernel_size: 3 } quantization_param { '
        'bw_layer_in: 8 bw_layer_out: %d bw_params: 8 scale_in: 50 scale_out: %g '
        'scale_params: 90 is_negative_input: true } } layer { name: "r" type: "TanH" '
        'bottom: "c" top: "r" }' % (bw_out, scale_out),
        caffe.TEST)
    assert net.int8_layers == ["c"]
    rng = _filled(net, 7)
    x = rng.uniform(-3, 3, (2, 2, 6, 6)).astype(np.float32)  # some beyond 127 / 50
    net.forward(d=x)
    w = np.asarray(net.params["c"][0].data, np.float64)
    b = np.asarray(net.params["c"][1].data, np.float64)
    expected = _intel_int8_conv(x, w, b, 50.0, scale_out, [90.0], signed=True, relu=False,
                                out_bits=bw_out)
    np.testing.assert_array_equal(net.blobs["c"].data, expected)
    if bw_out == 8:
        assert (expected * scale_out).min() < 0  # signed output (its reader is no ReLU)


@pytest.mark.parametrize("case", ["input", "weight", "bias"])
def test_the_scales_multiply_in_float32_as_intel_caffe_does(case):
    """0.1 * 25 in float32 is 2.5 exactly, a tie that rounds to 2 (in float64 it is a little
    above 2.5, which rounds to 3). Intel Caffe's scales are floats and MKL-DNN's reorders
    multiply in float32: the input (x = 0.1 at scale_in 25), a weight (0.1 at scale_params
    25) and a bias (0.1 at scale_in * scale_params = 5 * 5) each quantize to 2, so the
    output reads 2 * 127 / 3175 (input) or 2 / 25 (weight, bias)."""
    x, w, b, s_in, s_w, s_out, integer = {
        "input": (0.1, 1.0, 0.0, 25, 127, 3175, 2 * 127),
        "weight": (1.0, 0.1, 0.0, 1, 25, 25, 2),
        "bias": (0.0, 1.0, 0.1, 5, 5, 25, 2)}[case]
    net = caffe.Net(
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 1 dim: 1 '
        'dim: 1 } } } layer { name: "c" type: "Convolution" bottom: "d" top: "c" '
        'convolution_param { num_output: 1 kernel_size: 1 } quantization_param { '
        'bw_layer_in: 8 bw_layer_out: 32 bw_params: 8 scale_in: %g scale_out: %g '
        'scale_params: %g } }' % (s_in, s_out, s_w), caffe.TEST)
    assert net.int8_layers == ["c"]
    net.params["c"][0].data[...] = w
    net.params["c"][1].data[...] = b
    net.forward(d=np.full((1, 1, 1, 1), x, np.float32))
    # the multiplier s_out / (s_in * s_w) is 1 in each case: the output is the integer sum
    assert net.blobs["c"].data.item() == np.float32(integer) / np.float32(s_out)


@pytest.mark.parametrize("in_place,dilation,fused", [
    (False, 1, True),   # the first reader is a ReLU: fused, in place or not
    (True, 2, False),   # a dilated convolution: its engine fuses no ReLU
    (False, 2, False),
])
def test_the_relu_intel_caffe_fuses(in_place, dilation, fused):
    # Intel Caffe's net compiler fuses a ReLU (negative slope 0) that is the first layer to
    # read the convolution's top, unless the convolution is dilated: a fused one makes the
    # output u8 (up to 255 / scale_out), else s8 (up to 127 / scale_out)
    top = "c" if in_place else "r"
    net = caffe.Net(
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 2 dim: 9 '
        'dim: 9 } } } layer { name: "c" type: "Convolution" bottom: "d" top: "c" '
        'convolution_param { num_output: 3 kernel_size: 3 dilation: %d } quantization_param { '
        'bw_layer_in: 8 bw_layer_out: 8 bw_params: 8 scale_in: 20 scale_out: 80 '
        'scale_params: 50 } } layer { name: "r" type: "ReLU" bottom: "c" top: "%s" }'
        % (dilation, top), caffe.TEST)
    rng = _filled(net, 5)
    x = rng.uniform(0, 12, (1, 2, 9, 9)).astype(np.float32)
    net.forward(d=x)
    w = np.asarray(net.params["c"][0].data, np.float64)
    b = np.asarray(net.params["c"][1].data, np.float64)
    expected = _intel_int8_conv(x, w, b, 20.0, 80.0, [50.0], relu=fused, dilation=dilation)
    if not in_place:  # the convolution's own top (an in-place ReLU rewrote it)
        np.testing.assert_array_equal(net.blobs["c"].data, expected)
    np.testing.assert_array_equal(net.blobs[top].data, np.maximum(expected, 0))
    assert expected.max() == (255 if fused else 127) / np.float32(80)  # saturated


@pytest.mark.parametrize("in_place", [True, False])
def test_a_leaky_relu_is_fused_as_the_engines_post_op(in_place):
    # Intel Caffe's net compiler fuses any ReLU that first reads the convolution's top
    # (CompilationRuleConvReluFusion copies its negative_slope into the convolution); the
    # engine applies slope * y below 0 to the rescaled sums, then rounds to s8 (u8 only for
    # slope 0). The ReLU layer itself is gone, so nothing applies the slope a second time.
    top = "c" if in_place else "r"
    net = caffe.Net(
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 dim: 2 dim: 9 '
        'dim: 9 } } } layer { name: "c" type: "Convolution" bottom: "d" top: "c" '
        'convolution_param { num_output: 3 kernel_size: 3 } quantization_param { '
        'bw_layer_in: 8 bw_layer_out: 8 bw_params: 8 scale_in: 20 scale_out: 80 '
        'scale_params: 50 } } layer { name: "r" type: "ReLU" bottom: "c" top: "%s" '
        'relu_param { negative_slope: 0.1 } }' % top, caffe.TEST)
    rng = _filled(net, 5)
    x = rng.uniform(0, 12, (1, 2, 9, 9)).astype(np.float32)
    net.forward(d=x)
    w = np.asarray(net.params["c"][0].data, np.float64)
    b = np.asarray(net.params["c"][1].data, np.float64)
    expected = _intel_int8_conv(x, w, b, 20.0, 80.0, [50.0], relu=True, slope=0.1)
    np.testing.assert_array_equal(net.blobs[top].data, expected)
    if not in_place:  # the compiled net has no pre-ReLU blob: the fused values
        np.testing.assert_array_equal(net.blobs["c"].data, expected)
    assert expected.min() < 0 and expected.max() == 127 / np.float32(80)  # s8, saturated
    # rounding before the slope (an unfused s8 output, then the float ReLU) differs
    unfused = _intel_int8_conv(x, w, b, 20.0, 80.0, [50.0], relu=False)
    assert (np.where(unfused > 0, unfused, unfused * np.float32(0.1)) != expected).any()


def _intel_int8_inner_product(x, w, b, scale_in, scale_out, scale_params, relu, slope,
                              out_bits):
    """MKLDNNInnerProductLayer in int8, in integers: u8 input, s8 weights, int32 bias, the
    output scale per channel, the fused ReLU post-op (slope below 0) and, for an 8-bit
    output, u8 after any fused ReLU (s8 without one)."""
    f32 = np.float32
    s_in, s_out = f32(scale_in), f32(scale_out)
    sp = np.asarray(scale_params, f32)
    xq = np.clip(np.rint(np.asarray(x, f32) * s_in), 0, 255).astype(np.int64)
    wq = np.clip(np.rint(np.asarray(w, f32) * sp[:, None]), -128, 127).astype(np.int64)
    acc = xq.reshape(len(x), -1) @ wq.T + np.rint(np.asarray(b, f32) * (s_in * sp)).astype(
        np.int64)
    y = acc.astype(f32) * (s_out / (s_in * sp))
    if relu:
        y = np.where(y > 0, y, y * f32(slope))
    if out_bits == 8:
        y = np.clip(np.rint(y), 0 if relu else -128, 255 if relu else 127)
    return y / s_out


@pytest.mark.parametrize("relu, bw_out", [(True, 8), (True, 32), (False, 8)])
def test_intel_quantized_inner_product_runs_as_its_int8_engine_computes(relu, bw_out):
    # Intel Caffe runs an InnerProduct with a quantization_param in int8 too (the calibrator's
    # --fc_int8), fusing the ReLU that reads it (CompilationRuleFuseFCRelu; a leaky one here)
    text = (
        'layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 2 dim: 3 dim: 2 '
        'dim: 2 } } } layer { name: "fc" type: "InnerProduct" bottom: "d" top: "fc" '
        'inner_product_param { num_output: 4 } quantization_param { bw_layer_in: 8 '
        'bw_layer_out: %d bw_params: 8 scale_in: 30 scale_out: 40 scale_params: 60 '
        'scale_params: 75 scale_params: 90 scale_params: 50 } }' % bw_out)
    if relu:
        text += (' layer { name: "r" type: "ReLU" bottom: "fc" top: "r" relu_param { '
                 'negative_slope: 0.2 } }')
    net = caffe.Net(text, caffe.TEST)
    assert net.int8_layers == ["fc"]
    rng = _filled(net, 11)
    x = rng.uniform(0, 10, (2, 3, 2, 2)).astype(np.float32)  # some beyond 255 / 30
    net.forward(d=x)
    w = np.asarray(net.params["fc"][0].data, np.float64)
    b = np.asarray(net.params["fc"][1].data, np.float64)
    expected = _intel_int8_inner_product(x, w, b, 30.0, 40.0, [60.0, 75.0, 90.0, 50.0], relu,
                                         0.2, bw_out)
    np.testing.assert_array_equal(net.blobs["fc"].data, expected)
    if relu:  # fused: the ReLU layer passes the values on
        np.testing.assert_array_equal(net.blobs["r"].data, expected)
    assert (expected < 0).any() == (not relu or bw_out == 32)  # u8 after a fused ReLU
    flt = caffe.Net(text, caffe.TEST, int8=False)
    for a, c in zip(flt.params["fc"], net.params["fc"]):
        a.data[...] = c.data
    assert not np.array_equal(flt.forward(d=x)["fc" if not relu else "r"], expected)


def test_an_int8_inner_product_needs_8_bit_input():
    with pytest.raises(NetError, match=r"layer 'fc' \(type InnerProduct\).*bw_layer_in: 8, "
                                       r"got 32"):
        caffe.Net('layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 1 '
                  'dim: 3 } } } layer { name: "fc" type: "InnerProduct" bottom: "d" top: "fc" '
                  'inner_product_param { num_output: 2 } quantization_param { bw_layer_in: 32 '
                  'scale_in: 3 scale_out: 4 scale_params: 5 } }', caffe.TEST)


def test_int8_off_on_the_command_line_and_in_the_environment(caplog, monkeypatch, tmp_path):
    INTEL = _intel_mkldnn(tmp_path)  # noqa: N806 (the MKLDNN variant of the module's net)
    args = ["time", "--model", INTEL, "--phase", "TEST", "--iterations", "1"]
    with caplog.at_level(logging.INFO):
        assert cli.main(args + ["--int8", "off"]) == 0
    assert "kept; the layers compute in float (int8 turned off)" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        assert cli.main(args) == 0
    assert "compute in int8 (conv1)" in caplog.text
    monkeypatch.setenv("PYCAFFE_LITE_INT8", "0")
    assert caffe.Net(INTEL, caffe.TEST).int8_layers == []
    weights = str(tmp_path / "intel.caffemodel")
    caffe.Net(INTEL, caffe.TEST).save(weights)
    for command in (args, ["test", "--model", INTEL, "--weights", weights, "--iterations", "1"]):
        caplog.clear()  # the commands read the variable too, unless --int8 says otherwise
        with caplog.at_level(logging.INFO):
            assert cli.main(command) == 0
        assert "the layers compute in float (int8 turned off)" in caplog.text
        caplog.clear()
        with caplog.at_level(logging.INFO):
            assert cli.main(command + ["--int8", "on"]) == 0
        assert "compute in int8 (conv1)" in caplog.text


def test_bad_quantization_param_names_the_layer(tmp_path):
    text = INTEL_MKLDNN_TEXT.replace("scale_params: 107.2", "")
    bad = tmp_path / "bad.prototxt"
    bad.write_text(text)
    with pytest.raises(NetError, match=r"layer 'conv1'.*3 scale_params for 4 output"):
        caffe.Net(str(bad), caffe.TEST)
    # a NaN or infinite scale would make every output NaN
    for field in ("scale_in", "scale_out", "scale_params"):
        for value in ("nan", "inf"):
            text = re.sub(r"(%s: )[0-9.]+" % field, r"\g<1>%s" % value, INTEL_MKLDNN_TEXT,
                          count=1)
            bad.write_text(text)
            with pytest.raises(NetError, match=r"layer 'conv1'.*scales must be positive and "
                                               r"finite"):
                caffe.Net(str(bad), caffe.TEST)
