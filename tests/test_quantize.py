"""int8: the calibration thresholds against hand computations, the QDQ model that
``pycaffe-lite quantize`` writes (ONNX checker, onnxruntime), LeNet trained here quantized at
(almost) no cost in accuracy, and Intel Caffe's ``quantization_param`` run as its int8
convolution computes it."""

import json
import logging
import math
import os

import numpy as np
import pytest

from helpers.onnx_runtime import onnx, ort
import test_onnx_models

import pycaffe_lite as caffe
from pycaffe_lite import cli, protoio
from pycaffe_lite.errors import CaffeError, NetError
from pycaffe_lite.quantization import calibrate

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "models", "lenet")
INTEL = os.path.join(ROOT, "tests", "fixtures", "forks", "intel_engines_deploy.prototxt")
trained_lenet = test_onnx_models.trained_lenet  # the fixture: LeNet trained on MNIST digits


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
def _filled(net, seed):
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        for blob in layer.blobs:
            blob.data[...] = rng.normal(0, 0.3, blob.shape)
    return rng


def _intel_int8_conv(x, w, b, scale_in, scale_out, scale_params):
    """Intel Caffe's int8 convolution (u8 input, fused ReLU, u8 output), in integers: 3x3,
    stride 1, no padding; returns what the next layer reads (y_q / scale_out)."""
    xq = np.clip(np.rint(x.astype(np.float64) * scale_in), 0, 255).astype(np.int64)
    sp = np.asarray(scale_params, np.float64)
    wq = np.clip(np.rint(w * sp[:, None, None, None]), -128, 127).astype(np.int64)
    n, _, hh, ww = x.shape
    acc = np.zeros((n, w.shape[0], hh - 2, ww - 2), np.int64)
    for di in range(3):
        for dj in range(3):
            patch = xq[:, :, di:di + hh - 2, dj:dj + ww - 2]
            acc += np.einsum("nkij,ck->ncij", patch, wq[:, :, di, dj])
    acc += np.rint(b * scale_in * sp).astype(np.int64)[None, :, None, None]
    mult = (scale_out / (scale_in * sp)).astype(np.float32)
    y = acc.astype(np.float32) * mult[None, :, None, None]
    y = np.clip(np.rint(np.maximum(y, 0)), 0, 255)
    return y / np.float32(scale_out)


def test_intel_quantized_convolution_runs_as_its_int8_engine_computes(caplog):
    with caplog.at_level(logging.INFO):
        net = caffe.Net(INTEL, caffe.TEST)
    assert net.int8_layers == ["conv1"]
    assert "1 convolutions compute in int8 (conv1)" in caplog.text
    rng = _filled(net, 3)
    flt = caffe.Net(INTEL, caffe.TEST, int8=False)
    assert flt.int8_layers == []
    for a, b in zip(flt.layers, net.layers):
        for x, y in zip(a.blobs, b.blobs):
            x.data[...] = y.data
    x = rng.uniform(-0.5, 1.5, (1, 3, 10, 10)).astype(np.float32)
    ours = net.forward(data=x)["fc"].copy()
    conv1 = net.blobs["conv1"].data.copy()
    q = protoio.read_net_param(INTEL).layer[1].quantization_param
    expected = _intel_int8_conv(x, np.asarray(net.params["conv1"][0].data, np.float64),
                                np.asarray(net.params["conv1"][1].data, np.float64),
                                float(q.scale_in[0]), float(q.scale_out[0]),
                                list(q.scale_params))
    np.testing.assert_array_equal(conv1, expected)
    assert len(np.unique(conv1)) > 3  # not saturated into nothing
    reference = flt.forward(data=x)["fc"]
    assert not np.allclose(ours, reference, rtol=0, atol=1e-6)  # int8 is not float
    # ... and the rest of the net is float on the int8 convolution's output
    flt.blobs["conv1"].data[...] = expected
    np.testing.assert_allclose(flt.forward(start="pool1")["fc"], ours, rtol=1e-5, atol=1e-6)


def test_int8_off_on_the_command_line_and_in_the_environment(caplog, monkeypatch):
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


def test_bad_quantization_param_names_the_layer(tmp_path):
    text = open(INTEL).read().replace("scale_params: 107.2", "")
    bad = tmp_path / "bad.prototxt"
    bad.write_text(text)
    with pytest.raises(NetError, match=r"layer 'conv1'.*3 scale_params for 4 output"):
        caffe.Net(str(bad), caffe.TEST)


# ---- the quantize command ----------------------------------------------------------------
def _lenet_train_test(tmp_path, lmdbs):
    net = protoio.read_net_param(os.path.join(LENET, "lenet_train_test.prototxt"))
    for layer in net.layer:
        if layer.type == "Data":
            layer.data_param.source = str(lmdbs[layer.include[0].phase])
    path = tmp_path / "train_test.prototxt"
    protoio.write_text(net, str(path))
    return path


@pytest.fixture(scope="module")
def random_lenet(tmp_path_factory, mnist_lmdbs):
    """LeNet with seeded random weights (no training) and its train/test prototxt."""
    tmp = tmp_path_factory.mktemp("qlenet")
    proto = _lenet_train_test(tmp, mnist_lmdbs)
    caffe.set_random_seed(5)
    net = caffe.Net(str(proto), caffe.TEST)
    weights = tmp / "random.caffemodel"
    net.save(str(weights))
    net.close()
    return proto, weights


def _mnist_test_pixels(n):
    from pycaffe_lite.data.mnist import read_idx_images
    return read_idx_images(os.path.join(LENET, "mnist5k", "t10k-images-idx3-ubyte.gz"))[:n]


def test_quantize_writes_a_qdq_model_onnxruntime_runs(random_lenet, tmp_path, capsys):
    proto, weights = random_lenet
    out = tmp_path / "q"
    assert cli.main(["quantize", "--model", str(proto), "--weights", str(weights),
                     "--calibration_iterations", "2", "--output_dir", str(out),
                     "--method", "minmax", "--per_channel", "--eval_iterations", "1",
                     "--skip", "ip2"]) == 0
    printed = capsys.readouterr().out
    assert "wrote %s" % (out / "model.int8.onnx") in printed
    report = json.loads((out / "report.json").read_text())
    # min-max of the data: the largest pixel of the two batches (200 digits) times the
    # Data layer's scale 1/256, over 127
    data_scale = _mnist_test_pixels(200).max() * 0.00390625 / 127
    assert report["activations"]["data"]["scale"] == pytest.approx(data_scale, rel=1e-6)
    layers = {e["name"]: e for e in report["layers"]}
    assert layers["conv1"]["precision"] == "int8"
    assert layers["conv1"]["input_scale"] == pytest.approx(data_scale, rel=1e-6)
    assert len(layers["conv1"]["weight_scales"]) == 20
    assert layers["ip2"]["precision"] == "float" and "--skip" in layers["ip2"]["reason"]
    assert layers["pool1"]["precision"] == "float" and "MaxPool" in layers["pool1"]["reason"]
    assert set(report["accuracy"]) == {"accuracy"}

    model = onnx.load(str(out / "model.int8.onnx"))
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version >= 13
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("QuantizeLinear") >= 4 and "DequantizeLinear" in ops
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    assert inits["conv1/weight/int8"].dtype == np.int8
    assert inits["conv1/weight/scale"].shape == (20,)
    assert inits["conv1/bias/int32"].dtype == np.int32
    assert "ip2/weight" in inits  # skipped: float weights
    # the int8 weights are the float ones at their per-channel scales
    w = caffe.Net(str(proto), str(weights), caffe.TEST).params["conv1"][0].data
    np.testing.assert_allclose(
        inits["conv1/weight/int8"] * inits["conv1/weight/scale"][:, None, None, None], w,
        atol=float(inits["conv1/weight/scale"].max()) / 2 + 1e-7)

    x = (_mnist_test_pixels(64)[:, None] * np.float32(0.00390625)).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    theirs = session.run(None, {"data": x})[0]
    deploy = caffe.Net(os.path.join(LENET, "lenet.prototxt"), str(weights), caffe.TEST)
    deploy.blobs["data"].reshape(*x.shape)
    deploy.reshape()
    deploy.forward(data=x)
    ours = deploy.blobs["ip2"].data
    span = float(np.abs(ours).max())
    assert np.abs(theirs - ours).max() < 0.05 * span  # int8 is close to float ...
    assert np.abs(theirs - ours).max() > 1e-6 * span  # ... and is not float
    assert (theirs.argmax(1) == ours.argmax(1)).mean() >= 0.9


def test_quantize_reports_bad_input(random_lenet, tmp_path, capsys):
    proto, weights = random_lenet
    assert cli.main(["quantize", "--model", str(proto), "--weights", str(weights),
                     "--calibration_iterations", "1", "--output_dir", str(tmp_path),
                     "--skip", "conv9"]) == 1
    assert "--skip: no layer named 'conv9'" in capsys.readouterr().err
    assert cli.main(["quantize", "--model", str(proto), "--weights", str(weights),
                     "--output_dir", str(tmp_path)]) == 1
    assert "--calibration_iterations" in capsys.readouterr().err


@pytest.mark.slow
def test_trained_lenet_quantizes_within_half_a_point(trained_lenet, tmp_path, mnist_lmdbs):
    _, weights, _ = trained_lenet
    proto = _lenet_train_test(tmp_path, mnist_lmdbs)
    report = caffe.quantize(str(proto), str(weights), 5, str(tmp_path / "q"),
                            method="entropy", per_channel=True, eval_iterations=10)
    acc = report["accuracy"]["accuracy"]
    print("LeNet float %.4f int8 %.4f" % (acc["float"], acc["int8"]))
    assert acc["float"] > 0.8  # it is trained (1,000 test digits)
    assert abs(acc["int8"] - acc["float"]) <= 0.005
    assert [e["precision"] for e in report["layers"] if e["name"] in
            ("conv1", "conv2", "ip1", "ip2")] == ["int8"] * 4

    # Intel Caffe's quantized prototxt: runs as int8 here, near float, and as float with
    # --int8 off
    quantized = protoio.read_net_param(str(tmp_path / "q" / "quantized.prototxt"))
    convs = {lp.name: lp.quantization_param for lp in quantized.layer
             if lp.HasField("quantization_param")}
    assert set(convs) == {"conv1", "conv2"}
    assert (convs["conv1"].bw_layer_in, convs["conv1"].bw_params) == (8, 8)
    assert convs["conv1"].scale_in[0] == pytest.approx(
        255 / report["activations"]["data"]["threshold"], rel=1e-6)
    assert len(convs["conv2"].scale_params) == 50
    scores = {}
    for mode in ("on", "off"):
        args = ["test", "--model", str(tmp_path / "q" / "quantized.prototxt"),
                "--weights", str(weights), "--iterations", "10", "--int8", mode]
        parsed = cli.build_parser().parse_args(args)
        assert parsed.run(parsed) == 0
        scores[mode] = parsed.results["accuracy"][0]
    assert scores["off"] == pytest.approx(acc["float"], abs=1e-6)
    assert abs(scores["on"] - acc["float"]) <= 0.01
