"""``pycaffe-lite quantize``: the QDQ model it writes (ONNX checker, onnxruntime), the
report's scales against the data, and LeNet trained here quantized at (almost) no cost in
accuracy, its Intel Caffe prototxt running as int8. The thresholds and the int8 run of Intel
Caffe's files, which need no ONNX, are test_int8.py's."""

import json
import os

import numpy as np
import pytest

from helpers.onnx_runtime import onnx, ort

import pycaffe_lite as caffe
from pycaffe_lite import cli
from pycaffe_lite.proto import protoio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "models", "lenet")


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


def test_skip_repeated_keeps_every_layer_named(random_lenet, tmp_path):
    proto, weights = random_lenet
    out = tmp_path / "q"
    assert cli.main(["quantize", "--model", str(proto), "--weights", str(weights),
                     "--calibration_iterations", "1", "--output_dir", str(out),
                     "--method", "minmax", "--eval_iterations", "0",
                     "--skip", "conv1", "--skip", "ip2"]) == 0
    layers = {e["name"]: e for e in json.loads((out / "report.json").read_text())["layers"]}
    assert [n for n in ("conv1", "conv2", "ip1", "ip2") if layers[n]["precision"] == "int8"] \
        == ["conv2", "ip1"]
    assert "--skip" in layers["conv1"]["reason"] and "--skip" in layers["ip2"]["reason"]


def test_quantize_reports_bad_input(random_lenet, tmp_path, capsys):
    proto, weights = random_lenet
    assert cli.main(["quantize", "--model", str(proto), "--weights", str(weights),
                     "--calibration_iterations", "1", "--output_dir", str(tmp_path),
                     "--skip", "conv9"]) == 1
    assert "--skip: no layer named 'conv9'" in capsys.readouterr().err
    assert cli.main(["quantize", "--model", str(proto), "--weights", str(weights),
                     "--output_dir", str(tmp_path)]) == 1
    assert "--calibration_iterations" in capsys.readouterr().err


def test_a_report_that_cannot_be_written_leaves_no_temporary(random_lenet, tmp_path, capsys):
    proto, weights = random_lenet
    (tmp_path / "report.json").mkdir()    # the report's name is taken by a folder
    # one evaluation batch: the report still holds the accuracies (50 batches, the default,
    # measured nothing this test looks at)
    assert cli.main(["quantize", "--model", str(proto), "--weights", str(weights),
                     "--calibration_iterations", "1", "--eval_iterations", "1",
                     "--output_dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "report.json" in err and "cannot write the quantization report" in err, err
    assert "Traceback" not in err
    assert not [p.name for p in tmp_path.iterdir() if "tmp" in p.name]


def test_calibration_without_data_or_with_non_finite_values_is_refused(random_lenet,
                                                                        tmp_path, capsys):
    # no batch reaching the net would calibrate on whatever the input blob holds: refused
    from pycaffe_lite.quantization.run import qdq_model
    proto, weights = random_lenet
    deploy = os.path.join(LENET, "lenet.prototxt")
    assert cli.main(["quantize", "--model", deploy, "--weights", str(weights),
                     "--calibration_iterations", "2", "--output_dir",
                     str(tmp_path / "q")]) == 1
    err = capsys.readouterr().err
    assert "calibration runs 2 batches of the net's own data layers, but its input 'data' " \
        "comes from an Input layer" in err
    assert not (tmp_path / "q").exists()
    net = caffe.Net(deploy, str(weights), caffe.TEST, fold=False)
    x = (_mnist_test_pixels(64)[:, None] * np.float32(0.00390625)).astype(np.float32)
    with pytest.raises(caffe.CaffeError, match="calibration batch 0 is a ndarray, not a "
                                               "\\{input blob: array\\} dict"):
        qdq_model(net, [x])
    with pytest.raises(caffe.CaffeError, match="calibration batch 1 gives no values for the "
                                               "input 'data'"):
        qdq_model(net, [{"data": x}, {}])
    with pytest.raises(caffe.CaffeError, match="no calibration batch was given"):
        qdq_model(net, [])
    bad = x.copy()
    bad[3, 0, 5, 5] = np.nan  # one pixel: NaN through the data and conv1
    with pytest.raises(caffe.CaffeError, match="calibration batch 1: top 'data' of layer "
                                               "'data' holds NaN or infinite values"):
        qdq_model(net, [{"data": x}, {"data": bad}])
    bad[3, 0, 5, 5] = -np.inf
    with pytest.raises(caffe.CaffeError, match="batch 0: top 'data' .* NaN or infinite"):
        qdq_model(net, [{"data": bad}])
    # and fed batches calibrate on their values: the input's threshold is their largest
    q = qdq_model(net, [{"data": x}], method="minmax")
    assert q["thresholds"]["data"] == pytest.approx(float(x.max()), rel=1e-6)


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


@pytest.mark.parametrize("activation_type", ["int8", "uint8"])
def test_layers_without_int8_weights_stay_float_and_the_graph_still_runs(activation_type,
                                                                          tmp_path):
    """A ReLU, a Deconvolution (ConvTranspose), an Eltwise sum and a Softmax stay float with
    their reason; an InnerProduct on axis 2 (MatMul then Add) is int8; onnxruntime runs the
    graph close to float, with int8 activations (zero point 0) or uint8 ones (zero point
    128)."""
    from pycaffe_lite.proto import caffe_pb2
    from pycaffe_lite.quantization.run import qdq_model
    from google.protobuf import text_format

    param = caffe_pb2.NetParameter()
    text_format.Merge('''
      layer { name: "d" type: "Input" top: "d"
              input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
      layer { name: "c1" type: "Convolution" bottom: "d" top: "c1"
              convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
      layer { name: "r1" type: "ReLU" bottom: "c1" top: "c1" }
      layer { name: "up" type: "Deconvolution" bottom: "c1" top: "up"
              convolution_param { num_output: 4 kernel_size: 1 } }
      layer { name: "sum" type: "Eltwise" bottom: "up" bottom: "c1" top: "sum" }
      layer { name: "ip" type: "InnerProduct" bottom: "sum" top: "ip"
              inner_product_param { num_output: 5 axis: 2 } }
      layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }''', param)
    param.state.phase = caffe_pb2.TEST
    net = caffe.Net.from_param(param)
    rng = np.random.default_rng(0)
    for layer in net.layers:
        for blob in layer.blobs:
            blob.data[...] = rng.normal(0, 0.5, blob.shape)
    feeds = [{"d": rng.normal(0, 1, (2, 3, 8, 8)).astype(np.float32)} for _ in range(3)]
    q = qdq_model(net, feeds, method="minmax", per_channel=True,
                  activation_type=activation_type)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in q["model"].graph.initializer}
    zero = inits["d/zero_point"]
    assert (zero.dtype, int(zero)) == ((np.dtype(np.int8), 0) if activation_type == "int8"
                                       else (np.dtype(np.uint8), 128))
    assert inits["c1/weight/int8"].dtype == np.int8
    layers = q["layers"]
    assert [n for n, e in layers.items() if e["precision"] == "int8"] == ["c1", "ip"]
    assert layers["ip"]["onnx"] == ["Reshape", "MatMul", "Add"]
    # the MatMul's output is no Caffe blob: its range is the top's less the bias
    bias = np.asarray(net.params["ip"][1].data)
    amax = 0.0
    for f in feeds:
        net.forward(**f)
        amax = max(amax, float(np.abs(net.blobs["ip"].data - bias).max()))
    assert layers["ip"]["output_scale"] == pytest.approx(amax / 127, rel=1e-6)
    assert len(layers["ip"]["weight_scales"]) == 5  # per output column
    for name, op in (("r1", "Relu"), ("up", "ConvTranspose"), ("sum", "Sum"),
                     ("prob", "Softmax")):
        assert layers[name]["reason"].startswith("ONNX %s: computed on the dequantized" % op)
    onnx.checker.check_model(q["model"], full_check=True)
    # the int8 logits against float: no further off than onnxruntime's own quantization of
    # the same ops (Conv, MatMul; MinMax, symmetric, per channel) from the same batches
    oq = pytest.importorskip("onnxruntime.quantization")
    x = feeds[0]["d"]
    net.forward(d=x)
    logits = net.blobs["ip"].data.copy()
    from pycaffe_lite.onnx import export
    path = tmp_path / "float.onnx"
    onnx.save(export(net, None, opset=17)[0], str(path))

    class Reader(oq.CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    oq.quantize_static(str(path), str(tmp_path / "ort.onnx"), Reader(),
                       quant_format=oq.QuantFormat.QDQ, per_channel=True,
                       activation_type=oq.QuantType.QInt8, weight_type=oq.QuantType.QInt8,
                       calibrate_method=oq.CalibrationMethod.MinMax,
                       op_types_to_quantize=["Conv", "MatMul"],
                       extra_options={"ActivationSymmetric": True, "WeightSymmetric": True})
    errors = []
    for model in (q["model"], onnx.load(str(tmp_path / "ort.onnx"))):
        model.graph.output.append(onnx.helper.make_tensor_value_info(
            "ip", onnx.TensorProto.FLOAT, None))
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        out = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"d": x})))
        errors.append(float(np.abs(out["ip"] - logits).max()))
    assert 0 < errors[0] <= errors[1], errors
