"""Intel Caffe's int8 convolution with the Eltwise sum (and ReLU) after it fused in, as its net
compiler (CompilationRuleConvSumFusion) and MKL-DNN int8 convolution compute it, against
hand computations in NumPy written from docs/int8.md's formulas."""

import logging

import numpy as np
import pytest

import pycaffe_lite as caffe

f32 = np.float32


def _qp(scale_in, scale_out, scale_params, bw_out=8, signed=False):
    return ('quantization_param { bw_layer_in: 8 bw_layer_out: %d bw_params: 8 scale_in: %r '
            'scale_out: %r scale_params: %r%s }' % (bw_out, scale_in, scale_out, scale_params,
                                                    " is_negative_input: true" if signed
                                                    else ""))


def _conv(name, bottom, top, qp, n=4, engine=""):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" %s'
            'convolution_param { num_output: %d kernel_size: 1 } %s }\n'
            % (name, bottom, top, 'engine: "%s" ' % engine if engine else "", n, qp))


def _net(body, header="", shape=(2, 4, 3, 3)):
    text = ('name: "block" %s layer { name: "d" type: "Input" top: "d" input_param { shape { %s '
            '} } }\n%s' % (header, " ".join("dim: %d" % d for d in shape), body))
    return caffe.Net(text, caffe.TEST)


def _fill(net, seed, std):
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        for blob in layer.blobs:
            blob.data[...] = rng.normal(0, std, blob.shape)
    return rng


# ---- the hand computation (1x1 convolutions) ------------------------------------------------
def _acc(xq, w, b, scale_in, scale_params):
    """The integer sums of a 1x1 convolution of integers ``xq`` with s8 weights and the int32
    bias (float32 products with the scales), and the multiplier's denominator."""
    sp = f32(scale_params)
    wq = np.clip(np.rint(np.asarray(w, f32).reshape(w.shape[0], -1) * sp), -128, 127)
    bq = np.rint(np.asarray(b, f32) * (f32(scale_in) * sp))
    acc = np.einsum("nchw,oc->nohw", xq.astype(np.int64), wq.astype(np.int64))
    return acc + bq.astype(np.int64)[None, :, None, None], f32(scale_in) * sp


def _int8(net, name, xq, scale_in, scale_out, scale_params):
    """A plain int8 convolution's rescaled sums, float32, before any ReLU or rounding."""
    acc, den = _acc(xq, net.params[name][0].data, net.params[name][1].data, scale_in,
                    scale_params)
    return acc.astype(f32) * (f32(scale_out) / den)


def _fused(y, other_q, scale_out, other_scale, relu, lo, hi):
    """The fused sum: y + (s_out / s_b) * b_q in one multiply-add (an add when the factor is
    1), the ReLU, one rounding (ties to even) saturated to [lo, hi]."""
    factor = f32(f32(scale_out) / f32(other_scale))
    if factor == 1:
        s = y + other_q.astype(f32)
    else:
        s = (y.astype(np.float64) + other_q.astype(np.float64) * np.float64(factor)).astype(f32)
    pre = s
    if relu:
        s = np.maximum(s, f32(0))
    return np.clip(np.rint(s), lo, hi), pre


def _identity_block(header="", engine="", op="", third_reader=False):
    """d -> conv0 (+ ReLU, u8 at 30) -> conv1 (s_out 150) -> Eltwise(c0, c1) -> ReLU."""
    body = (_conv("conv0", "d", "c0", _qp(40.0, 30.0, 100.0))
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + _conv("conv1", "c0", "c1", _qp(30.0, 150.0, 90.0), engine=engine)
            + ('layer { name: "extra" type: "Pooling" bottom: "c0" top: "extra" '
               'pooling_param { pool: MAX kernel_size: 1 } }\n' if third_reader else "")
            + 'layer { name: "sum" type: "Eltwise" bottom: "c0" bottom: "c1" top: "s" %s}\n'
            % ("eltwise_param { operation: %s } " % op if op else "")
            + 'layer { name: "relus" type: "ReLU" bottom: "s" top: "s" }\n')
    net = _net(body, header)
    rng = _fill(net, 11, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    y0 = _int8(net, "conv0", xq, 40.0, 30.0, 100.0)
    q0 = np.clip(np.rint(np.maximum(y0, f32(0))), 0, 255)   # u8 at 30
    # conv1 reads c0 at its own scale 30: the same integers
    y1 = _int8(net, "conv1", q0, 30.0, 150.0, 90.0)
    return net, q0, y1


def test_identity_shortcut_rounds_the_sum_once_onto_the_u8_branch(caplog):
    with caplog.at_level(logging.INFO):
        net, q0, y1 = _identity_block()
    assert "Eltwise 'sum' and ReLU 'relus' fused into int8 convolution 'conv1'" in caplog.text
    assert net.int8_layers == ["conv0", "conv1"]
    q, pre = _fused(y1, q0, 150.0, 30.0, True, 0, 255)
    expected = q / f32(150)
    np.testing.assert_array_equal(net.blobs["s"].data, expected)
    assert (q == 255).any() and (pre < 0).any()  # saturated, and negative sums cut by the ReLU
    # unfused, conv1 alone rounds to s8 (saturating at -128) and the sum is float: the fused
    # engine differs from that
    q1 = np.clip(np.rint(y1), -128, 127)
    unfused = np.maximum(q1 / f32(150) + q0 / f32(30), f32(0))
    assert not np.array_equal(expected, unfused)


@pytest.mark.parametrize("case", ["net engine MKLDNN:CPU", "conv engine MKLDNN:CPU", "PROD",
                                  "a Split of three tops"])
def test_without_the_fusion_conditions_the_sum_is_float(case):
    """Intel Caffe fuses only in a net whose engine is exactly MKLDNN (or none), a
    convolution of no engine or exactly MKLDNN, and not where the Eltwise reads a Split top
    (not the last) of more than two; a PROD is not fused here. "MKLDNN:CPU" still makes the
    convolutions MKL-DNN ones (int8, conv0's ReLU fused: the rule reads a prefix), but no sum
    is fused. Then conv1 rounds alone (s8) and the Eltwise and ReLU compute in float."""
    kw = {"net engine MKLDNN:CPU": {"header": 'engine: "MKLDNN:CPU"'},
          "conv engine MKLDNN:CPU": {"engine": "MKLDNN:CPU"}, "PROD": {"op": "PROD"},
          "a Split of three tops": {"third_reader": True}}[case]
    net, q0, y1 = _identity_block(**kw)
    assert net.int8_layers == ["conv0", "conv1"]
    q1 = np.clip(np.rint(y1), -128, 127)
    a, b = q0 / f32(30), q1 / f32(150)
    s = a * b if case == "PROD" else a + b
    np.testing.assert_allclose(net.blobs["s"].data, np.maximum(s, 0), rtol=1e-6, atol=0)


def test_a_projection_shortcut_makes_the_sum_s8_even_after_the_relu():
    """convA (the shortcut, no ReLU: s8 at 60) comes first; the compiler leaves it and fuses
    the Eltwise and ReLU into convB, which adds convA's s8 integers and writes s8: the ReLU's
    output saturates at 127 / 90, not 255 / 90."""
    body = (_conv("convA", "d", "A", _qp(40.0, 60.0, 100.0))
            + _conv("convB", "d", "B", _qp(40.0, 90.0, 80.0))
            + 'layer { name: "sum" type: "Eltwise" bottom: "A" bottom: "B" top: "s" }\n'
            + 'layer { name: "relus" type: "ReLU" bottom: "s" top: "r" }\n')
    net = _net(body)
    rng = _fill(net, 6, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    qa = np.clip(np.rint(_int8(net, "convA", xq, 40.0, 60.0, 100.0)), -128, 127)
    np.testing.assert_array_equal(net.blobs["A"].data, qa / f32(60))
    yb = _int8(net, "convB", xq, 40.0, 90.0, 80.0)
    q, pre = _fused(yb, qa, 90.0, 60.0, True, -128, 127)
    np.testing.assert_array_equal(net.blobs["r"].data, q / f32(90))
    # sums a u8 output would keep (up to 255) saturate at 127; negative ones become 0
    assert (q == 127).any() and ((pre > 127.5) & (pre < 254.5)).any() and (pre < 0).any()


def test_a_float_branch_leaves_the_fused_convolution_in_float(caplog):
    """The other branch is the net's float input: Intel Caffe's engine then runs the fused
    convolution in float (its quantization_param unused), so the block is float."""
    body = (_conv("conv1", "d", "c1", _qp(40.0, 25.0, 90.0))
            + 'layer { name: "sum" type: "Eltwise" bottom: "d" bottom: "c1" top: "s" }\n'
            + 'layer { name: "relus" type: "ReLU" bottom: "s" top: "s" }\n')
    with caplog.at_level(logging.INFO):
        net = _net(body)
    assert net.int8_layers == []
    assert "int8 convolution 'conv1' computes in float" in caplog.text
    rng = _fill(net, 2, 0.5)
    x = rng.uniform(-1, 2, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    w = np.asarray(net.params["conv1"][0].data, np.float64).reshape(4, 4)
    b = np.asarray(net.params["conv1"][1].data, np.float64)
    conv = np.einsum("nchw,oc->nohw", x.astype(np.float64), w) + b[None, :, None, None]
    np.testing.assert_allclose(net.blobs["s"].data, np.maximum(conv + x, 0), rtol=1e-5,
                               atol=1e-6)


# ---- a calibrated residual block: quantize's Intel Caffe layout, run fused -----------------
def test_a_calibrated_residual_block_runs_fused_and_differs_from_unfused(tmp_path):
    """conv1 + ReLU -> conv2a + ReLU -> conv2b (1x1) -> Eltwise(conv1, conv2b) -> ReLU ->
    conv3, calibrated (min-max) into Intel Caffe's quantization_param by quantize's writer.
    conv2b's output is the fused sum after the ReLU: scale_out 255 / max of it. Run fused, the
    block is the hand computation from conv1's and conv2a's int8 outputs; with the net's
    engine CAFFE (no fusion) it is conv2b's own s8 rounding plus a float sum, which differs."""
    pytest.importorskip("onnx")
    from pycaffe_lite.quantization import intel
    from pycaffe_lite.quantization.run import qdq_model
    body = ('layer { name: "conv1" type: "Convolution" bottom: "d" top: "c1" convolution_param '
            '{ num_output: 4 kernel_size: 3 pad: 1 } }\n'
            'layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" }\n'
            'layer { name: "conv2a" type: "Convolution" bottom: "c1" top: "c2a" '
            'convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }\n'
            'layer { name: "relu2a" type: "ReLU" bottom: "c2a" top: "c2a" }\n'
            + _conv("conv2b", "c2a", "c2b", "")
            + 'layer { name: "res2" type: "Eltwise" bottom: "c1" bottom: "c2b" top: "res2" }\n'
            'layer { name: "relu2" type: "ReLU" bottom: "res2" top: "res2" }\n'
            + _conv("conv3", "res2", "c3", ""))
    text = ('name: "res" layer { name: "d" type: "Input" top: "d" input_param { shape { dim: 2 '
            'dim: 4 dim: 6 dim: 6 } } }\n' + body)
    path, weights = tmp_path / "net.prototxt", tmp_path / "w.caffemodel"
    path.write_text(text)
    net = caffe.Net(str(path), caffe.TEST)
    rng = _fill(net, 4, 0.4)
    net.save(str(weights))
    net = caffe.Net(str(path), str(weights), caffe.TEST, fold=False)
    batches = [{"d": rng.normal(0, 1, (2, 4, 6, 6)).astype(f32)} for _ in range(3)]
    q = qdq_model(net, batches, method="minmax")
    out = tmp_path / "quantized.prototxt"
    written = {p["name"]: p for p in intel.write_quantized_prototxt(
        str(path), net, q["tops"], q["stats"], q["thresholds"], set(), False, str(out))}
    res2_max = 0.0
    for feed in batches:
        net.forward(**feed)
        res2_max = max(res2_max, float(np.abs(net.blobs["res2"].data).max()))
    p2b = written["conv2b"]
    assert p2b["fused_relu"] and p2b["bw_layer_out"] == 8
    assert p2b["scale_out"] == pytest.approx(255 / res2_max, rel=1e-6)

    fused = caffe.Net(str(out), str(weights), caffe.TEST)
    unfused_text = 'engine: "MKLDNN:CPU"\n' + out.read_text()  # int8, no sum fusion
    unfused_path = tmp_path / "unfused.prototxt"
    unfused_path.write_text(unfused_text)
    unfused = caffe.Net(str(unfused_path), str(weights), caffe.TEST)
    assert fused.int8_layers == unfused.int8_layers == ["conv1", "conv2a", "conv2b", "conv3"]
    x = rng.normal(0, 1, (2, 4, 6, 6)).astype(f32)
    fused.forward(d=x)
    unfused.forward(d=x)
    p1, p2a = written["conv1"], written["conv2a"]
    # the block's inputs: conv1's and conv2a's u8 outputs (the same in both nets)
    np.testing.assert_array_equal(fused.blobs["c2a"].data, unfused.blobs["c2a"].data)
    q1 = np.rint(fused.blobs["c1"].data * f32(p1["scale_out"]))
    q2a = np.rint(fused.blobs["c2a"].data * f32(p2a["scale_out"]))
    xq = np.clip(np.rint(q2a / f32(p2a["scale_out"]) * f32(p2b["scale_in"])), 0, 255)
    y = _int8(fused, "conv2b", xq, p2b["scale_in"], p2b["scale_out"], p2b["scale_params"][0])
    qs, pre = _fused(y, q1, p2b["scale_out"], p1["scale_out"], True, 0, 255)
    np.testing.assert_array_equal(fused.blobs["res2"].data, qs / f32(p2b["scale_out"]))
    # unfused: conv2b rounds alone to s8 at its scale_out, the sum and ReLU are float
    q2b = np.clip(np.rint(y), -128, 127)
    expected_unfused = np.maximum(q2b / f32(p2b["scale_out"]) + q1 / f32(p1["scale_out"]), 0)
    np.testing.assert_allclose(unfused.blobs["res2"].data, expected_unfused, rtol=1e-6)
    differ = fused.blobs["res2"].data != unfused.blobs["res2"].data
    assert differ.any() and (pre < 0).any()


def _projection(prefix, bottom, sa, sb, relu="", relu_top=None):
    """A shortcut convolution (s8 at ``sa``), the branch's convolution (``sb``), their
    Eltwise and, with ``relu`` (a relu_param body or ""), a ReLU after it."""
    top = relu_top or prefix + "s"
    text = (_conv(prefix + "A", bottom, prefix + "A", _qp(40.0, sa, 100.0))
            + _conv(prefix + "B", bottom, prefix + "B", _qp(40.0, sb, 80.0))
            + 'layer { name: "%ssum" type: "Eltwise" bottom: "%sA" bottom: "%sB" top: "%ss" }\n'
            % (prefix, prefix, prefix, prefix))
    if relu is not None:
        text += ('layer { name: "%srelu" type: "ReLU" bottom: "%ss" top: "%s" relu_param { %s '
                 '} }\n' % (prefix, prefix, top, relu))
    return text


def _branches(net, prefix, xq, sa, sb):
    qa = np.clip(np.rint(_int8(net, prefix + "A", xq, 40.0, sa, 100.0)), -128, 127)
    return qa, _int8(net, prefix + "B", xq, 40.0, sb, 80.0)


def test_the_next_block_adds_the_fused_output_at_its_type_and_scale():
    """Block 1 (projection) writes s8 at 90 into r1; block 2 reads r1 (through a Split) as
    its shortcut: its fused convolution adds r1's s8 integers at scale 90 and writes s8."""
    body = (_projection("b1", "d", 60.0, 90.0, "", "r1")
            + _conv("conv2", "r1", "c2", _qp(90.0, 70.0, 60.0))
            + 'layer { name: "sum2" type: "Eltwise" bottom: "r1" bottom: "c2" top: "s2" }\n'
            + 'layer { name: "relu2" type: "ReLU" bottom: "s2" top: "s2" }\n')
    net = _net(body)
    rng = _fill(net, 6, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    qa, yb = _branches(net, "b1", xq, 60.0, 90.0)
    r1, _ = _fused(yb, qa, 90.0, 60.0, True, -128, 127)
    np.testing.assert_array_equal(net.blobs["r1"].data, r1 / f32(90))
    y2 = _int8(net, "conv2", r1, 90.0, 70.0, 60.0)  # u8 input at 90: the same integers
    q2, pre = _fused(y2, r1, 70.0, 90.0, True, -128, 127)
    np.testing.assert_array_equal(net.blobs["s2"].data, q2 / f32(70))
    assert (pre < 0).any() and (q2 > 0).any()


@pytest.mark.parametrize("before", [False, True])
def test_a_leaky_relu_after_the_sum_fuses_as_a_plain_relu_until_an_eltwise_has_none(before):
    """The compiler sets relu on the fused convolution without the ReLU's slope: a leaky
    ReLU after the sum becomes max(y, 0). Its ReLU flag is cleared for good by an Eltwise no
    ReLU reads (``before``: a block whose sum goes straight on): the leaky ReLU of the next
    block then stays a layer, on the s8 sum the fused convolution wrote."""
    body = (_projection("p", "d", 60.0, 90.0, None) if before else "") \
        + _projection("b", "d", 60.0, 90.0, "negative_slope: 0.25", "r")
    net = _net(body)
    rng = _fill(net, 6, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    qa, yb = _branches(net, "b", xq, 60.0, 90.0)
    q, pre = _fused(yb, qa, 90.0, 60.0, not before, -128, 127)
    got = net.blobs["r"].data
    if before:
        np.testing.assert_allclose(got, np.where(q > 0, q, q * f32(0.25)) / f32(90),
                                   rtol=1e-6)
        assert (got < 0).any()
    else:
        np.testing.assert_array_equal(got, q / f32(90))
    assert (pre < 0).any()


def test_a_relu_before_the_eltwise_applies_after_the_sum():
    """conv1 -> ReLU -> Eltwise(c0, c1), no ReLU after: the compiler has fused the ReLU into
    conv1 first, then fuses the Eltwise; the engine's post-ops are the sum, then the ReLU, so
    the block computes max(conv1 + c0, 0), not max(conv1, 0) + c0."""
    body = (_conv("conv0", "d", "c0", _qp(40.0, 30.0, 100.0))
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + _conv("conv1", "c0", "c1", _qp(30.0, 150.0, 90.0))
            + 'layer { name: "relu1" type: "ReLU" bottom: "c1" top: "c1" }\n'
            + 'layer { name: "sum" type: "Eltwise" bottom: "c0" bottom: "c1" top: "s" }\n')
    net = _net(body)
    rng = _fill(net, 11, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    q0 = np.clip(np.rint(np.maximum(_int8(net, "conv0", xq, 40.0, 30.0, 100.0), 0)), 0, 255)
    y1 = _int8(net, "conv1", q0, 30.0, 150.0, 90.0)
    q, pre = _fused(y1, q0, 150.0, 30.0, True, 0, 255)
    np.testing.assert_array_equal(net.blobs["s"].data, q / f32(150))
    assert ((y1 < 0) & (pre > 0.5)).any()  # a negative conv1 the sum lifts above 0


def test_a_shortcut_from_an_unfused_eltwise_is_left_unfused_with_a_warning(caplog):
    """The other branch comes from an Eltwise the compiler does not fuse (of two poolings),
    whose int8 type and scale are not followed here: the block computes unfused, and the log
    names the Eltwise and the convolution."""
    body = (_conv("conv0", "d", "c0", _qp(40.0, 30.0, 100.0), n=4)
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + 'layer { name: "pa" type: "Pooling" bottom: "c0" top: "pa" pooling_param { '
              'pool: MAX kernel_size: 1 } }\n'
            + 'layer { name: "pb" type: "Pooling" bottom: "c0" top: "pb" pooling_param { '
              'pool: MAX kernel_size: 1 } }\n'
            + 'layer { name: "e" type: "Eltwise" bottom: "pa" bottom: "pb" top: "e" }\n'
            + _conv("conv1", "e", "c1", _qp(15.0, 150.0, 90.0))
            + 'layer { name: "sum" type: "Eltwise" bottom: "e" bottom: "c1" top: "s" }\n')
    with caplog.at_level(logging.INFO):
        net = _net(body)
    assert "fuses Eltwise 'sum' into int8 convolution 'conv1'" in caplog.text
    assert "computed unfused" in caplog.text
    rng = _fill(net, 11, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    q0 = np.clip(np.rint(np.maximum(_int8(net, "conv0", xq, 40.0, 30.0, 100.0), 0)), 0, 255)
    e = q0 / f32(30) + q0 / f32(30)
    eq = np.clip(np.rint(e * f32(15)), 0, 255)
    q1 = np.clip(np.rint(_int8(net, "conv1", eq, 15.0, 150.0, 90.0)), -128, 127)
    np.testing.assert_allclose(net.blobs["s"].data, q1 / f32(150) + e, rtol=1e-6)


def test_a_shortcut_from_a_concat_of_u8_and_s8_is_float_so_the_convolution_is(caplog):
    """Intel Caffe's Concat of inputs of different int8 types concatenates in float, so the
    convolution fused with the sum on it runs in float."""
    body = (_conv("conv0", "d", "c0", _qp(40.0, 30.0, 100.0), n=2)
            + 'layer { name: "relu0" type: "ReLU" bottom: "c0" top: "c0" }\n'
            + _conv("conv0b", "d", "c0b", _qp(40.0, 30.0, 100.0), n=2)
            + 'layer { name: "cat" type: "Concat" bottom: "c0" bottom: "c0b" top: "cat" }\n'
            + _conv("conv1", "cat", "c1", _qp(30.0, 150.0, 90.0))
            + 'layer { name: "sum" type: "Eltwise" bottom: "cat" bottom: "c1" top: "s" }\n')
    with caplog.at_level(logging.INFO):
        net = _net(body)
    assert "int8 convolution 'conv1' computes in float" in caplog.text
    assert net.int8_layers == ["conv0", "conv0b"]
    rng = _fill(net, 11, 0.5)
    x = rng.uniform(0, 2.5, (2, 4, 3, 3)).astype(f32)
    net.forward(d=x)
    xq = np.clip(np.rint(x * f32(40)), 0, 255)
    y = _int8(net, "conv0", xq, 40.0, 30.0, 100.0)
    yb = _int8(net, "conv0b", xq, 40.0, 30.0, 100.0)
    cat = np.concatenate([np.clip(np.rint(np.maximum(y, 0)), 0, 255),
                          np.clip(np.rint(yb), -128, 127)], axis=1) / f32(30)
    w = np.asarray(net.params["conv1"][0].data, np.float64).reshape(4, 4)
    b = np.asarray(net.params["conv1"][1].data, np.float64)
    conv = np.einsum("nchw,oc->nohw", cat.astype(np.float64), w) + b[None, :, None, None]
    np.testing.assert_allclose(net.blobs["s"].data, conv + cat, rtol=1e-5, atol=1e-6)


def test_the_fused_block_is_the_same_in_gpu_mode():
    """On the (simulated) device the Eltwise SUM -> ReLU chain would run as one kernel of
    its own; the fused sum's Eltwise and ReLU are the int8 convolution's, so they stay out of
    that chain and the block gives the CPU's values."""
    from pycaffe_lite import backend
    from pycaffe_lite.testing.simdevice import simulated_device
    net, q0, y1 = _identity_block()
    cpu = net.blobs["s"].data.copy()
    with simulated_device():
        backend.set_mode_gpu()
        dev, _, _ = _identity_block()
        np.testing.assert_array_equal(np.asarray(dev.blobs["s"].data), cpu)
