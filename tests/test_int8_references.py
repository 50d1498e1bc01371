"""int8 calibration against the int8 tools' own definitions: onnxruntime's quantization
tooling (``onnxruntime.quantization.quantize_static``, QDQ, MinMax, symmetric) on the same
float model and the same batches; Intel Caffe's calibrator (``scripts/calibrator.py``:
``transform_convolutions`` and ``force_fp32_opt``) on hand cases; and the errors of bad
input."""

import os

import numpy as np
import pytest
from google.protobuf import text_format

from helpers.onnx_runtime import onnx, ort
from test_int8 import _filled

import pycaffe_lite as caffe
from pycaffe_lite import cli
from pycaffe_lite.onnx import export
from pycaffe_lite.proto import caffe_pb2, protoio
from pycaffe_lite.quantization import intel, qdq
from pycaffe_lite.quantization.run import qdq_model

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "models", "lenet")


def _mnist_batches(n, size):
    from pycaffe_lite.data.mnist import read_idx_images
    px = read_idx_images(os.path.join(LENET, "mnist5k", "t10k-images-idx3-ubyte.gz"))
    x = (px[:n * size, None] * np.float32(0.00390625)).astype(np.float32)
    return [{"data": x[k * size:(k + 1) * size]} for k in range(n)]


@pytest.fixture(scope="module")
def lenet_logits(tmp_path_factory):
    """LeNet's deploy net up to ip2 (the Softmax left out, which onnxruntime's tool would
    quantize too), seeded random weights, its float ONNX and two batches of MNIST digits."""
    tmp = tmp_path_factory.mktemp("int8ref")
    param = protoio.read_net_param(os.path.join(LENET, "lenet.prototxt"))
    assert param.layer[-1].name == "prob"
    del param.layer[-1]
    proto = tmp / "lenet_logits.prototxt"
    protoio.write_text(param, str(proto))
    caffe.set_random_seed(5)
    net = caffe.Net(str(proto), caffe.TEST, fold=False)
    model, _ = export(net, None, opset=17)
    path = tmp / "float.onnx"
    onnx.save(model, str(path))
    yield net, path, _mnist_batches(2, 64), tmp
    net.close()


def _ort_quantized(path, batches, per_channel, out):
    oq = pytest.importorskip("onnxruntime.quantization")

    class Reader(oq.CalibrationDataReader):
        def __init__(self):
            self.it = iter(batches)

        def get_next(self):
            return next(self.it, None)

    oq.quantize_static(str(path), str(out), Reader(), quant_format=oq.QuantFormat.QDQ,
                       per_channel=per_channel, activation_type=oq.QuantType.QInt8,
                       weight_type=oq.QuantType.QInt8,
                       calibrate_method=oq.CalibrationMethod.MinMax,
                       extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    return onnx.load(str(out))


def _random_weights(net, seed):
    """Every learnable blob of ``net`` drawn from N(0, 0.4); returns the generator."""
    return _filled(net, seed, std=0.4)


def _random_test_net(text, seed):
    """The TEST net of prototxt ``text`` with :func:`_random_weights`: ``(net, rng)``."""
    param = caffe_pb2.NetParameter()
    text_format.Merge(text, param)
    param.state.phase = caffe.TEST
    net = caffe.Net.from_param(param)
    return net, _random_weights(net, seed)


def _inits(model):
    return {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


def _optimized_ops(model, path):
    so = ort.SessionOptions()
    so.optimized_model_filepath = str(path)
    so.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [n.op_type for n in onnx.load(str(path)).graph.node]


@pytest.mark.parametrize("per_channel", [False, True])
def test_minmax_scales_weights_and_biases_are_onnxruntimes(lenet_logits, per_channel):
    """onnxruntime's MinMax with symmetric activations: scale = max |x| / 127 (its int8 range
    -127..127 when symmetric); weights: max |w| / 127 per tensor or per output channel,
    round half to even; bias: int32 at input scale x weight scale. Ours, from the same batches,
    must be the same numbers."""
    net, path, batches, tmp = lenet_logits
    tag = "pc" if per_channel else "pt"
    ref = _ort_quantized(path, batches, per_channel, tmp / ("ort_%s.onnx" % tag))
    ours = qdq_model(net, batches, method="minmax", per_channel=per_channel)["model"]
    io, ir = _inits(ours), _inits(ref)
    # activations computed alike by both engines: the same scales, to the sums' rounding (each
    # engine's convolution sums in its own order, which moves max |x| by a few float32 steps
    # with some NumPy / BLAS builds)
    for value in ("data", "conv1", "conv2", "ip1/ip1"):
        assert io[value + "/scale"] == pytest.approx(float(ir[value + "_scale"]), rel=1e-6), \
            value
        assert io[value + "/zero_point"] == ir[value + "_zero_point"] == 0, value
    # a MaxPool's output: both re-quantize it at its input's scale
    qpool = {n.input[0]: n.input[1] for n in ref.graph.node if n.op_type == "QuantizeLinear"}
    assert qpool["pool1"] == "conv1_scale" and io["pool1/scale"] == io["conv1/scale"]
    # relu1's output ip1 and ip1/ip1, which only relu1 reads: both at the ReLU output's range
    # (onnxruntime's adjust_tensor_ranges; a ReLU keeps the int8 grid)
    assert io["ip1/scale"] == io["ip1/ip1/scale"] and ir["ip1_scale"] == ir["ip1/ip1_scale"]
    assert io["ip1/scale"] == pytest.approx(float(ir["ip1_scale"]), rel=1e-6)
    # ip2 is a float Gemm over 500 products in each engine, summed in another order
    assert io["ip2/scale"] == pytest.approx(float(ir["ip2_scale"]), rel=1e-6)
    # ip1's Flatten keeps pool2's grid (conv2's scale), as onnxruntime's tool quantizes it since
    # Flatten joined Reshape among the ops that keep their input's parameters (onnxruntime pull
    # request 28340, 2026); its releases before that (1.23.2, the last for Python 3.10) gave
    # the Flatten a range of its own, and ip1's bias that range's scale
    assert io["ip1/flatten/scale"] == io["conv2/scale"]
    own_flatten = "ip1/flatten_scale" in ir
    if not own_flatten:
        assert qpool["ip1/flatten"] == "conv2_scale"
    for layer in ("conv1", "conv2", "ip1", "ip2"):
        np.testing.assert_array_equal(io[layer + "/weight/scale"].ravel(),
                                      ir[layer + "/weight_scale"].ravel(), err_msg=layer)
        np.testing.assert_array_equal(io[layer + "/weight/int8"],
                                      ir[layer + "/weight_quantized"], err_msg=layer)
        if layer == "ip1" and own_flatten:
            # onnxruntime's own rule on its Flatten's scale, and ours on conv2's, from its numbers
            np.testing.assert_allclose(ir["ip1/bias_quantized_scale"].ravel(),
                                       ir["ip1/flatten_scale"] * ir["ip1/weight_scale"].ravel(),
                                       rtol=1e-6)
            scale = ir["conv2_scale"] * ir["ip1/weight_scale"].ravel()
            np.testing.assert_allclose(io["ip1/bias/scale"].ravel(), scale, rtol=1e-6)
            np.testing.assert_allclose(io["ip1/bias/int32"],
                                       np.rint(net.params["ip1"][1].data / scale), rtol=0, atol=1)
            continue
        # input scale x weight scale: as close as the input scales
        np.testing.assert_allclose(io[layer + "/bias/scale"].ravel(),
                                   ir[layer + "/bias_quantized_scale"].ravel(), rtol=1e-6,
                                   err_msg=layer)
        np.testing.assert_allclose(io[layer + "/bias/int32"], ir[layer + "/bias_quantized"],
                                   rtol=0, atol=1, err_msg=layer)
        assert io[layer + "/bias/int32"].dtype == ir[layer + "/bias_quantized"].dtype == np.int32
    # onnxruntime runs both as int8 kernels, not as float between Q and DQ
    for model, name in ((ours, "ours"), (ref, "ort")):
        ops = _optimized_ops(model, tmp / ("opt_%s_%s.onnx" % (name, tag)))
        assert ops.count("QLinearConv") == 2 and ops.count("QGemm") == 2, (name, ops)
        assert "Conv" not in ops and "Gemm" not in ops, (name, ops)
    # and both give the same int8 logits: steps of ip2's grid, equal but where a scale's last
    # bits differ (then one step apart); not with the older tool's Flatten, 4% off ours here,
    # whose logits are up to 3 steps apart
    if own_flatten:
        return
    x = np.concatenate([b["data"] for b in batches])
    yo = ort.InferenceSession(ours.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    yr = ort.InferenceSession(ref.SerializeToString(),
                              providers=["CPUExecutionProvider"]).run(None, {"data": x})[0]
    steps_o, steps_r = np.rint(yo / io["ip2/scale"]), np.rint(yr / ir["ip2_scale"])
    assert np.abs(steps_o - steps_r).max() <= 1
    assert np.mean(steps_o == steps_r) >= 0.99
    # where the steps agree, the logits agree to float rounding
    same = steps_o == steps_r
    np.testing.assert_allclose(yo[same], yr[same], rtol=1e-6, atol=0)


BRANCHY = """
layer { name: "data" type: "Input" top: "data"
  input_param { shape { dim: 4 dim: 4 dim: 10 dim: 10 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 3 pad: 1 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2a" type: "Convolution" bottom: "conv1" top: "conv2a"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 group: 2 } }
layer { name: "conv2b" type: "Convolution" bottom: "conv1" top: "conv2b"
  convolution_param { num_output: 4 kernel_size: 1 } }
layer { name: "cat" type: "Concat" bottom: "conv2a" bottom: "conv2b" top: "cat" }
layer { name: "conv3" type: "Convolution" bottom: "cat" top: "conv3"
  convolution_param { num_output: 8 kernel_size: 3 pad: 1 stride: 2 } }
layer { name: "ave" type: "Pooling" bottom: "conv3" top: "ave"
  pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "sig" type: "Sigmoid" bottom: "ave" top: "sig" }
layer { name: "conv4" type: "Convolution" bottom: "sig" top: "conv4"
  convolution_param { num_output: 6 kernel_size: 1 } }
layer { name: "ip" type: "InnerProduct" bottom: "conv4" top: "ip"
  inner_product_param { num_output: 5 } }
"""


@pytest.mark.parametrize("per_channel", [False, True])
def test_a_branching_net_has_onnxruntimes_scales(tmp_path, per_channel):
    """Groups, padding, stride, a Concat, an average pool and a Sigmoid between the int8
    layers, and conv1's output read only by an in-place ReLU whose largest magnitude is
    negative: onnxruntime ranges that output as the ReLU's (adjust_tensor_ranges), and so
    must quantize; every scale, int8 weight and int32 bias equal to onnxruntime's."""
    net, rng = _random_test_net(BRANCHY, seed=0)
    batches = [{"data": rng.normal(0, 1, (4, 4, 10, 10)).astype(np.float32)}
               for _ in range(3)]
    model, _ = export(net, None, opset=17)
    onnx.save(model, str(tmp_path / "float.onnx"))
    ref = _ort_quantized(tmp_path / "float.onnx", batches, per_channel, tmp_path / "ort.onnx")
    ours = qdq_model(net, batches, method="minmax", per_channel=per_channel)["model"]
    io, ir = _inits(ours), _inits(ref)
    so = {n.input[0].replace("/float", ""): float(io[n.input[1]])
          for n in ours.graph.node if n.op_type == "QuantizeLinear"}
    sr = {n.input[0]: float(ir[n.input[1]])
          for n in ref.graph.node if n.op_type == "QuantizeLinear"}
    conv_min, relu_max = 0.0, 0.0
    for feed in batches:  # conv1's float output, then the in-place ReLU's
        net.forward(end="conv1", **feed)
        conv_min = min(conv_min, float(net.blobs["conv1"].data.min()))
        net.forward(end="relu1", **feed)
        relu_max = max(relu_max, float(net.blobs["conv1"].data.max()))
    assert -conv_min > relu_max  # conv1's largest magnitude is negative: ReLU's range differs
    assert so["conv1/conv1"] == sr["conv1/conv1"] == so["conv1"] == sr["conv1"] \
        == np.float32(relu_max / 127.0)
    for value in ("data", "conv2a", "conv2b", "cat", "conv3", "sig"):
        assert so[value] == sr[value], value
    # after the Sigmoid both engines' float sums differ in the last bit
    assert so["conv4"] == pytest.approx(sr["conv4"], rel=1e-6)
    assert so["ip"] == pytest.approx(sr["ip_QuantizeLinear_Input"], rel=1e-6)
    for layer in ("conv1", "conv2a", "conv2b", "conv3", "conv4", "ip"):
        np.testing.assert_array_equal(io[layer + "/weight/int8"],
                                      ir[layer + "/weight_quantized"], err_msg=layer)
        np.testing.assert_array_equal(io[layer + "/weight/scale"].ravel(),
                                      ir[layer + "/weight_scale"].ravel(), err_msg=layer)
        np.testing.assert_array_equal(io[layer + "/bias/int32"],
                                      ir[layer + "/bias_quantized"], err_msg=layer)
    # onnxruntime fuses the same nodes into int8 kernels in both (conv2a and conv2b, behind
    # the ReLU, stay float convolutions between DequantizeLinear and QuantizeLinear in both)
    ops = [_optimized_ops(m, tmp_path / ("opt%d.onnx" % k)) for k, m in enumerate((ours, ref))]
    for op in ("QLinearConv", "QGemm", "QLinearConcat", "Conv"):
        assert ops[0].count(op) == ops[1].count(op), (op, ops)
    assert ops[0].count("QLinearConv") == 3 and ops[0].count("QGemm") == 1, ops[0]


INNER = """
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 6 } } }
layer { name: "ipt" type: "InnerProduct" bottom: "data" top: "ipt"
  inner_product_param { num_output: 5 transpose: true } }
layer { name: "ip3" type: "InnerProduct" bottom: "ipt" top: "ip3"
  inner_product_param { num_output: 3 } }
layer { name: "r" type: "Reshape" bottom: "ip3" top: "r"
  reshape_param { shape { dim: 4 dim: 3 dim: 1 } } }
layer { name: "ipa" type: "InnerProduct" bottom: "r" top: "ipa"
  inner_product_param { num_output: 2 axis: 2 } }
"""


@pytest.mark.parametrize("per_channel", [False, True])
def test_inner_products_of_every_export_form_match_onnxruntime(tmp_path, per_channel):
    """InnerProduct as Gemm with transB 0 (transpose: true) and 1, and as MatMul + Add (axis
    2): weights per tensor or per output channel (axis 1, 0 and the last) as onnxruntime
    quantizes them, and the MatMul's output, which is no Caffe blob, at onnxruntime's scale,
    so that onnxruntime runs it as QLinearMatMul instead of a float Gemm between
    DequantizeLinear nodes."""
    net, rng = _random_test_net(INNER, seed=0)
    batches = [{"data": rng.normal(0, 1, (4, 6)).astype(np.float32)} for _ in range(3)]
    model, _ = export(net, None, opset=17)
    assert [n.op_type for n in model.graph.node if n.op_type in ("Gemm", "MatMul")] == \
        ["Gemm", "Gemm", "MatMul"]
    onnx.save(model, str(tmp_path / "float.onnx"))
    ref = _ort_quantized(tmp_path / "float.onnx", batches, per_channel, tmp_path / "ort.onnx")
    ours = qdq_model(net, batches, method="minmax", per_channel=per_channel)["model"]
    io, ir = _inits(ours), _inits(ref)
    for w in ("ipt/weight", "ip3/weight", "ipa/weight"):
        np.testing.assert_array_equal(io[w + "/scale"], ir[w + "_scale"], err_msg=w)
        np.testing.assert_array_equal(io[w + "/int8"], ir[w + "_quantized"], err_msg=w)
    for value in ("data", "ipt", "ip3"):
        assert io[value + "/scale"] == ir[value + "_scale"], value
    assert io["ipa/matmul/scale"] == ir["ipa/matmul_scale"]
    ops = _optimized_ops(ours, tmp_path / "opt.onnx")
    assert ops.count("QGemm") == 2 and ops.count("QLinearMatMul") == 1, ops
    assert "Gemm" not in ops and "MatMul" not in ops, ops


def test_uint8_activations_are_the_int8_grid_shifted_by_128(lenet_logits):
    """uint8 with zero point 128 at max |x| / 127: every activation pair is uint8 / 128,
    onnxruntime still runs QLinearConv and QGemm, and the outputs are the int8 model's."""
    net, _, batches, tmp = lenet_logits
    m8 = qdq_model(net, batches, method="minmax")["model"]
    mu = qdq_model(net, batches, method="minmax", activation_type="uint8")["model"]
    iu = _inits(mu)
    for node in mu.graph.node:
        if node.op_type == "QuantizeLinear":
            zp = iu[node.input[2]]
            assert zp.dtype == np.uint8 and zp == 128, node.name
    ops = _optimized_ops(mu, tmp / "opt_uint8.onnx")
    assert ops.count("QLinearConv") == 2 and ops.count("QGemm") == 2, ops
    x = np.concatenate([b["data"] for b in batches])
    run = [ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
           .run(None, {"data": x})[0] for m in (m8, mu)]
    np.testing.assert_array_equal(run[0], run[1])


@pytest.mark.parametrize("activation_type", ["int8", "uint8"])
def test_activation_pairs_round_half_to_even_and_saturate_in_onnxruntime(lenet_logits,
                                                                        activation_type):
    """The input's pair at scale 1/128 (calibrated on max |x| = 127/128): ONNX QuantizeLinear
    rounds x / scale half to even and saturates (int8 at -128..127; uint8 at 0..255 around
    zero point 128, the same steps). x = k / 256 makes every tie exact."""
    net, _, batches, _ = lenet_logits
    calib = np.zeros_like(batches[0]["data"])
    calib.flat[0] = 127 / 128
    q = qdq_model(net, [{"data": calib}], method="minmax", activation_type=activation_type)
    model = q["model"]
    assert _inits(model)["data/scale"] == np.float32(1 / 128)
    model.graph.output.append(onnx.helper.make_tensor_value_info(
        "data/dequantized", onnx.TensorProto.FLOAT, None))
    steps = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 126.5, 127.5, 130, -127.5, -128.5,
                      -140], np.float32)
    x = np.zeros_like(calib)
    x.flat[:steps.size] = steps / 128
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(None, {"data": x})))["data/dequantized"]
    np.testing.assert_array_equal(got.flat[:steps.size] * 128,
                                  [0, 2, 2, -0, -2, -2, 126, 127, 127, -128, -128, -128])


def test_weight_and_bias_ties_round_to_even_and_saturate():
    """ONNX QuantizeLinear's rule, by hand: ties to the even integer, saturation at the int8
    range. max |w| = 127 gives scale 1."""
    w = np.array([127.0, 2.5, 3.5, -0.5, -126.5, 1.5], np.float32)
    s = qdq.weight_scales(w, 0, False)
    assert s == np.float32(1.0)
    np.testing.assert_array_equal(qdq.quantize_weights(w, s, 0), [127, 2, 4, 0, -126, 2])
    # per channel: each row's own max; a row of zeros gets scale 1 (not 0)
    w2 = np.array([[2.0, -1.0], [0.0, 0.0], [-254.0, 127.0]], np.float32)
    np.testing.assert_array_equal(qdq.weight_scales(w2, 0, True),
                                  np.float32([2 / 127, 1.0, 2.0]))
    np.testing.assert_array_equal(
        qdq.quantize_weights(w2, qdq.weight_scales(w2, 0, True), 0),
        [[127, -64], [0, 0], [-127, 64]])   # -1 * 127 / 2 = -63.5 -> -64; 63.5 -> 64


# ---- entropy (TensorRT's KL calibration) on a hand case -------------------------------------
def test_kl_spreads_the_candidate_over_the_references_non_empty_bins():
    """counts [2, 0, 1, 0, 3], a threshold after i = 4 bins, 2 levels of 2 bins. The
    reference P: [2, 0, 1, 0 + 3] / 6 (the outlier in the last bin). The candidate merges
    [2, 0] -> 2 and [1, 0] -> 1 and spreads each level over the bins where P is not empty,
    as Intel Caffe's calibrator (expand_quantized_bins over the reference bins) and
    onnxruntime's (nonzeros of p) do: [2, 0, 0.5, 0.5] / 3. Smoothing: the one empty bin of
    each gets eps, the three others give eps / 3."""
    from pycaffe_lite.quantization import calibrate
    e = 1e-4
    p = [2 / 6 - e / 3, e, 1 / 6 - e / 3, 3 / 6 - e / 3]
    q = [2 / 3 - e / 3, e, 0.5 / 3 - e / 3, 0.5 / 3 - e / 3]
    expected = sum(a * np.log(a / b) for a, b in zip(p, q))
    assert calibrate.kl_divergence([2, 0, 1, 0, 3], 4, levels=2) == \
        pytest.approx(expected, rel=1e-12)


# ---- Intel Caffe's calibrator on hand cases -------------------------------------------------
def _intel_net(body, tmp_path, shape=(2, 2, 8, 8)):
    text = ('name: "t" layer { name: "data" type: "Input" top: "data" input_param { shape { '
            + " ".join("dim: %d" % d for d in shape) + " } } }\n" + body)
    path = tmp_path / "net.prototxt"
    path.write_text(text)
    net = caffe.Net(str(path), caffe.TEST, fold=False)
    return net, path, _random_weights(net, 3)


def _conv(name, bottom, top, n=3):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" convolution_param '
            '{ num_output: %d kernel_size: 3 pad: 1 } }\n' % (name, bottom, top, n))


def _intel_params(net, path, batches, tmp_path, per_channel=False, skip=()):
    q = qdq_model(net, batches, method="minmax", per_channel=per_channel, skip=skip)
    out = tmp_path / "quantized.prototxt"
    written = intel.write_quantized_prototxt(str(path), net, q["tops"], q["stats"],
                                             q["thresholds"], set(skip), per_channel, str(out))
    return {p["name"]: p for p in written}, protoio.read_net_param(str(out))


def _float_blobs(net, batches):
    """max |x| and min of every blob over the batches, from float forward passes."""
    amax, amin = {}, {}
    for feed in batches:
        net.forward(**feed)
        for name, blob in net.blobs.items():
            v = blob.cpu_data()
            amax[name] = max(amax.get(name, 0.0), float(np.abs(v).max()))
            amin[name] = min(amin.get(name, np.inf), float(v.min()))
    return amax, amin


def test_calibrator_scales_and_the_last_convolution_writes_float(tmp_path):
    """conv1 + ReLU (fused) -> pool -> conv2 -> pool. transform_convolutions: scale_in 127/t
    with is_negative_input for an input with negative values, 255/t for the fused conv's u8
    output read by conv2; scale_out 255/t after a fused ReLU; scale_params 127 / max |w|.
    force_fp32_opt: the net's last Convolution always writes float (bw_layer_out 32,
    scale_out 1), even though a Pooling reads it."""
    body = (_conv("conv1", "data", "conv1")
            + 'layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }\n'
            + 'layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" '
              'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n'
            + _conv("conv2", "pool1", "conv2", 4)
            + 'layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" '
              'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n')
    net, path, rng = _intel_net(body, tmp_path)
    batches = [{"data": rng.normal(0, 1, (2, 2, 8, 8)).astype(np.float32)} for _ in range(2)]
    params, written = _intel_params(net, path, batches, tmp_path)
    amax, amin = _float_blobs(net, batches)
    w1 = np.abs(net.params["conv1"][0].data).max()
    w2 = np.abs(net.params["conv2"][0].data).max()
    assert amin["data"] < 0 and amin["pool1"] >= 0
    c1, c2 = params["conv1"], params["conv2"]
    assert c1["is_negative_input"] and c1["scale_in"] == pytest.approx(127 / amax["data"])
    assert c1["fused_relu"] and c1["bw_layer_out"] == 8
    assert c1["scale_out"] == pytest.approx(255 / amax["conv1"])
    assert c1["scale_params"] == [pytest.approx(127 / w1)]
    assert not c2["is_negative_input"] and c2["scale_in"] == pytest.approx(255 / amax["pool1"])
    assert c2["bw_layer_out"] == 32 and c2["scale_out"] == 1.0
    assert c2["scale_params"] == [pytest.approx(127 / w2)]
    q2 = [lp for lp in written.layer if lp.name == "conv2"][0].quantization_param
    assert q2.bw_layer_out == 32 and list(q2.scale_out) == [1.0]


def test_a_leaky_relu_is_fused_but_its_output_is_s8(tmp_path):
    """Intel Caffe fuses a leaky ReLU into the convolution too, but only a slope of 0 makes
    the output u8 (analyze_conv_output_with_relu): scale_out 127 / t of the leaky output, and
    the next convolution's input is s8 (is_negative_input, 127 / t)."""
    body = (_conv("conv1", "data", "conv1")
            + 'layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" '
              'relu_param { negative_slope: 0.1 } }\n'
            + _conv("conv2", "conv1", "conv2") + _conv("conv3", "conv2", "conv3"))
    net, path, rng = _intel_net(body, tmp_path)
    batches = [{"data": rng.normal(0, 1, (2, 2, 8, 8)).astype(np.float32)}]
    params, _ = _intel_params(net, path, batches, tmp_path)
    amax, amin = _float_blobs(net, batches)   # conv1 holds the leaky ReLU's output
    assert amin["conv1"] < 0
    c1, c2 = params["conv1"], params["conv2"]
    assert c1["fused_relu"] and c1["bw_layer_out"] == 8
    assert c1["scale_out"] == pytest.approx(127 / amax["conv1"])
    assert c2["is_negative_input"] and c2["scale_in"] == pytest.approx(127 / amax["conv1"])


POOL = ('layer { name: "%s" type: "Pooling" bottom: "conv1" top: "%s" '
        'pooling_param { pool: MAX kernel_size: 2 stride: 2 } }\n')
IP = ('layer { name: "ip" type: "InnerProduct" bottom: "conv1" top: "ip" '
      'inner_product_param { num_output: 2 } }\n')


@pytest.mark.parametrize("readers, expected", [
    # a reader in the int8 set (Pooling) beside one outside it (InnerProduct): int8
    (IP + POOL % ("pool", "pool"), 8),
    # a float layer computing in place on the value, an int8 one after it: float
    ('layer { name: "drop" type: "Dropout" bottom: "conv1" top: "conv1" }\n'
     + POOL % ("pool", "pool"), 32),
    # no reader in the int8 set: float
    (IP + 'layer { name: "prob" type: "Softmax" bottom: "conv1" top: "prob" }\n', 32),
])
def test_calibrator_output_width_follows_its_readers(tmp_path, readers, expected):
    """force_fp32_opt on a convolution that is not the net's last."""
    body = _conv("conv1", "data", "conv1") + readers + _conv("conv_last", "data", "conv_last")
    net, path, rng = _intel_net(body, tmp_path)
    batches = [{"data": rng.normal(0, 1, (2, 2, 8, 8)).astype(np.float32)}]
    params, _ = _intel_params(net, path, batches, tmp_path)
    amax, _ = _float_blobs(net, batches)
    c = params["conv1"]
    assert c["bw_layer_out"] == expected
    assert c["scale_out"] == (pytest.approx(127 / amax["conv1"]) if expected == 8 else 1.0)
    assert params["conv_last"]["bw_layer_out"] == 32


# ---- bad input ---------------------------------------------------------------------------
TINY = """name: "tiny"
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 4 dim: 2 dim: 6 dim: 6 } shape { dim: 4 }
    data_filler { type: "uniform" min: -1 max: 1 } data_filler { type: "constant" value: 1 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 3 kernel_size: 3 weight_filler { type: "%s" } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "ip" type: "InnerProduct" bottom: "conv2" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
"""


def _tiny(tmp_path, filler="xavier"):
    proto = tmp_path / ("tiny_%s.prototxt" % filler)
    proto.write_text(TINY % filler)
    caffe.set_random_seed(1)
    net = caffe.Net(str(proto), caffe.TEST)
    weights = tmp_path / ("tiny_%s.caffemodel" % filler)
    net.save(str(weights))
    net.close()
    return str(proto), str(weights)


def _quantize(proto, weights, out, *extra):
    return cli.main(["quantize", "--model", proto, "--weights", weights,
                     "--calibration_iterations", "2", "--output_dir", str(out),
                     "--method", "minmax", *extra])


def test_an_activation_that_is_always_zero_is_refused_naming_it(tmp_path, capsys):
    """conv1's weights are all zero: its top is 0 in every batch. A scale of 0 (or a
    stand-in 1) would make an int8 layer that cannot hold other values: an error names the
    blob and the layer, and nothing is written."""
    proto, weights = _tiny(tmp_path, "constant")
    out = tmp_path / "q"
    assert _quantize(proto, weights, out, "--eval_iterations", "0") == 1
    err = capsys.readouterr().err
    # conv1's output takes the range of its in-place ReLU's, the blob of the same name
    assert "blob 'conv1' (top of layer 'relu1') is 0 in every calibration batch" in err, err
    assert "--skip conv1" in err and "Traceback" not in err
    assert not out.exists()
    # the Intel prototxt's own check, where the QDQ graph has no such value: conv1's fused
    # ReLU gives 0 everywhere (every sum negative), read by conv2, which is kept in float
    net, path, rng = _intel_net(_conv("conv1", "data", "conv1")
                                + 'layer { name: "relu1" type: "ReLU" bottom: "conv1" '
                                  'top: "r1" }\n' + _conv("conv2", "r1", "conv2"), tmp_path)
    net.params["conv1"][0].data[...] = np.abs(net.params["conv1"][0].data)
    net.params["conv1"][1].data[...] = -1.0
    batches = [{"data": -np.abs(rng.normal(0, 1, (2, 2, 8, 8))).astype(np.float32)}]
    with pytest.raises(caffe.CaffeError, match="blob 'r1' \\(top of layer 'relu1'\\) is 0 in "
                                               "every calibration batch.*--skip conv1"):
        _intel_params(net, path, batches, tmp_path, skip=("conv2",))


def test_an_output_dir_that_is_a_file_is_refused_before_calibrating(tmp_path, capsys):
    proto, weights = _tiny(tmp_path)
    taken = tmp_path / "taken"
    taken.write_text("x")
    assert _quantize(proto, weights, taken) == 1
    err = capsys.readouterr().err
    assert "--output_dir %s is a file, not a folder" % taken in err, err
    assert taken.read_text() == "x"


def test_a_net_without_accuracy_says_its_accuracy_is_not_measured(tmp_path, capsys):
    proto, weights = _tiny(tmp_path)
    out = tmp_path / "q"
    assert _quantize(proto, weights, out, "--eval_iterations", "2") == 0
    printed = capsys.readouterr().out
    assert "accuracy not measured: the TEST net of %s has no Accuracy layer" % proto \
        in printed, printed
    assert sorted(p.name for p in out.iterdir()) == ["model.int8.onnx", "quantized.prototxt",
                                                     "report.json"]


def test_non_finite_values_from_the_weights_are_blamed_on_the_weights(tmp_path, capsys):
    proto, weights = _tiny(tmp_path)
    net = caffe.Net(proto, weights, caffe.TEST)
    net.params["conv2"][0].data[0, 0, 0, 0] = np.nan
    bad = str(tmp_path / "nan.caffemodel")
    net.save(bad)
    net.close()
    assert _quantize(proto, bad, tmp_path / "q") == 1
    err = capsys.readouterr().err
    assert "top 'conv2' of layer 'conv2' holds NaN or infinite values; its inputs are " \
        "finite: check the layer's weights" in err, err


TRAIN_ONLY_DATA = """\
name: "train_only"
layer { name: "data" type: "DummyData" top: "data" top: "label" include { phase: TRAIN }
        dummy_data_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } shape { dim: 4 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 2 kernel_size: 3
                            weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "conv1" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def test_a_net_whose_data_layers_are_train_only_is_told_what_is_missing(tmp_path, capsys):
    """Calibration runs the TEST phase: with data layers that only TRAIN includes, the error
    was the net builder's 'unknown bottom blob data', which does not say that quantize needs
    a TEST data layer; it now says so, naming the file and the TRAIN-only layer."""
    proto = tmp_path / "train_only.prototxt"
    proto.write_text(TRAIN_ONLY_DATA)
    weights = tmp_path / "w.caffemodel"
    caffe.Net(str(proto), caffe.TRAIN).save(str(weights))
    out = tmp_path / "q"
    assert _quantize(str(proto), str(weights), out) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "%s: the TEST phase has no data layer" % proto in err, err
    assert "'data' (DummyData) is included in TRAIN only" in err, err
    assert not out.exists()
