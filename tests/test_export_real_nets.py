"""Published nets (cut down to the layers that show the point) through both exporters and
back: the ONNX export runs in onnxruntime, the PyTorch export in torch, and
``import_onnx`` of the export gives the net again; every output is checked, to 1e-5 of its
largest magnitude, against a NumPy forward written from the layers' definitions (the forks'
sources where they differ from BVLC Caffe) or, for nets the ONNX importer wrote, the PyTorch
module the ONNX file came from. A net an exporter cannot write is refused with an error
naming the layer.
"""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is a test dependency (marker: torch)")

import pycaffe_lite as caffe  # noqa: E402
from helpers.onnx_runtime import assert_close, onnx, run_ort  # noqa: E402
from pycaffe_lite import onnx as caffe_onnx  # noqa: E402
from pycaffe_lite.pytorch import export as export_pytorch  # noqa: E402
from pycaffe_lite.pytorch.compare import load_module  # noqa: E402
from test_importers_real_files import _darknet_reorg_cpu  # noqa: E402
from test_fork_pspnet_bn import (PSPNET_EXCERPT, excerpt_reference,  # noqa: E402
                                 fill_bn_blobs)

pytestmark = pytest.mark.torch
HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


def run_torch(net, folder, feeds):
    report = export_pytorch(net, str(folder))
    module = load_module(str(folder)).load()
    with torch.no_grad():
        out = module(*[torch.from_numpy(feeds[n]) for n in report["inputs"]])
    if not isinstance(out, dict):
        out = {report["outputs"][0]: out}
    return {k: v.numpy() for k, v in out.items()}


def round_trip(path, prefix, feeds):
    """The exported ONNX file imported back as Caffe files, built and run."""
    caffe_onnx.to_caffe(str(path), str(prefix),
                        input_shapes={k: v.shape for k, v in feeds.items()})
    net = caffe.Net(str(prefix) + ".prototxt", str(prefix) + ".caffemodel", caffe.TEST)
    return net.forward(**{k: v for k, v in feeds.items() if k in net.inputs})


def exports_and_back(expected, net, x, folder, output="out"):
    """The net's ONNX export in onnxruntime, its PyTorch export in torch and the ONNX export
    imported back all give ``expected`` at ``output`` for the input 'data' = x; the ONNX
    model is returned."""
    model, _ = caffe_onnx.export(net, folder / "ours.onnx")
    assert_close(expected, run_ort(model, {"data": x})[output], "onnxruntime")
    assert_close(expected, run_torch(net, folder / "pt", {"data": x})[output], "torch")
    assert_close(expected, round_trip(folder / "ours.onnx", folder / "back",
                                      {"data": x})[output], "round trip")
    return model


def imported_from_torch(module, x, folder):
    """The module's output for x, and the net the ONNX importer writes from the module's
    torch.onnx export (input 'data', output 'out')."""
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    torch.onnx.export(module, (torch.from_numpy(x),), str(folder / "torch.onnx"),
                      dynamo=False, opset_version=13, input_names=["data"],
                      output_names=["out"])
    caffe_onnx.to_caffe(str(folder / "torch.onnx"), str(folder / "first"))
    net = caffe.Net(str(folder / "first.prototxt"), str(folder / "first.caffemodel"),
                    caffe.TEST)
    return expected, net


def prelu(x, slope):
    return np.maximum(x, 0) + slope * np.minimum(x, 0)


def test_opencv_prelu_net_rewrites_its_input_in_place(tmp_path):
    """OpenCV's layer_prelu.prototxt: a PReLU in place on the Input blob. The ONNX export
    named that PReLU's output after the graph input, which onnx.checker rejects (not SSA);
    the value after it now has a name of its own and the input keeps the blob's."""
    net = caffe.Net(os.path.join(REAL, "opencv_layer_prelu.prototxt"), caffe.TEST)
    rng = np.random.default_rng(0)
    per_channel = rng.uniform(0.1, 0.9, 6).astype(np.float32)
    net.params["prelu_1"][0].data[...] = per_channel
    net.params["output"][0].data[...] = 0.3
    x = rng.normal(0, 1, (2, 6, 75, 113)).astype(np.float32)
    expected = prelu(prelu(x.astype(np.float64), per_channel.reshape(1, 6, 1, 1)), 0.3)
    model, report = caffe_onnx.export(net, tmp_path / "prelu.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert [i.name for i in model.graph.input] == ["input"]
    assert report["outputs"] == ["output"]
    assert_close(expected, run_ort(model, {"input": x})["output"], "onnxruntime")
    assert_close(expected, run_torch(net, tmp_path / "pt", {"input": x})["output"], "torch")
    back = round_trip(tmp_path / "prelu.onnx", tmp_path / "back", {"input": x})
    assert_close(expected, back["output"], "round trip")


def test_in_place_layer_on_an_input_that_is_the_output(tmp_path):
    """An Input blob that an in-place ReLU rewrites and nothing reads afterwards: the graph
    input is 'data', the output the ReLU's value (ONNX has no value of two writers)."""
    net = caffe.Net.from_param(_param(
        'layer { name: "data" type: "Input" top: "data" '
        'input_param { shape { dim: 1 dim: 2 dim: 3 dim: 3 } } }\n'
        'layer { name: "relu" type: "ReLU" bottom: "data" top: "data" }'))
    x = np.random.default_rng(1).normal(0, 1, (1, 2, 3, 3)).astype(np.float32)
    model, report = caffe_onnx.export(net, tmp_path / "relu.onnx")
    assert [i.name for i in model.graph.input] == ["data"]
    assert report["outputs"] == ["relu/data"]
    assert_close(np.maximum(x, 0), run_ort(model, {"data": x})["relu/data"], "onnxruntime")


def _param(text):
    from google.protobuf import text_format

    from pycaffe_lite.proto import caffe_pb2

    param = caffe_pb2.NetParameter()
    text_format.Merge(text, param)
    param.state.phase = caffe_pb2.TEST
    return param


class _MobileHead(torch.nn.Module):
    """MobileNetV3's inverted block as torchvision writes it (Hardswish, a squeeze-excitation
    gate by Hardsigmoid) and a half-pixel bilinear upsampling by 2 (LR-ASPP's head)."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, 2, 1)
        self.act = torch.nn.Hardswish()
        self.fc1 = torch.nn.Conv2d(8, 4, 1)
        self.fc2 = torch.nn.Conv2d(4, 8, 1)
        self.gate = torch.nn.Hardsigmoid()

    def forward(self, x):
        y = self.act(self.conv(x))
        s = self.gate(self.fc2(torch.relu(self.fc1(torch.nn.functional.adaptive_avg_pool2d(
            y, 1)))))
        return torch.nn.functional.interpolate(y * s, scale_factor=2, mode="bilinear",
                                               align_corners=False)


def test_net_written_by_the_onnx_importer_exports_and_imports_again(tmp_path):
    """The importer's own nets (the gate as Reshape + Scale with two bottoms, Hardswish as
    Power, ReLU6, Power, Eltwise, the edge-replicating Slice/Concat before a Deconvolution)
    export, and the export imports again. That second import stopped with 'top blob
    .../gate is produced by more than one layer': the exported graph names its values after
    the blobs the first import made up, and the second import made up the same names."""
    torch.manual_seed(0)
    module = _MobileHead().eval()
    x = np.random.default_rng(2).normal(0, 1, (1, 3, 16, 16)).astype(np.float32)
    expected, net = imported_from_torch(module, x, tmp_path)
    assert {"Scale", "ReLU6", "Deconvolution"} <= {layer.type for layer in net.layers}
    assert_close(expected, net.forward(data=x)["out"], "first import")
    exports_and_back(expected, net, x, tmp_path)


class _WithConstants(torch.nn.Module):
    """Constants a layer reads as tensors (``torch.cat`` with a constant channel, a maximum
    with a constant map): the ONNX importer writes them as Parameter layers."""

    def forward(self, x):
        floor = torch.linspace(-0.5, 0.5, 40).reshape(1, 2, 4, 5)
        return torch.cat([torch.maximum(x, floor), torch.ones(1, 1, 4, 5)], 1)


def test_parameter_layers_of_an_import_export_and_import_again(tmp_path):
    """Both exporters refused the importer's Parameter layers ('has no ONNX equivalent',
    'has no PyTorch equivalent'), so no net with a constant tensor went back out; the
    blob is now a constant of the graph and a parameter of the module."""
    module = _WithConstants().eval()
    x = np.random.default_rng(3).normal(0, 1, (1, 2, 4, 5)).astype(np.float32)
    expected, net = imported_from_torch(module, x, tmp_path)
    assert [layer.type for layer in net.layers].count("Parameter") == 2
    assert_close(expected, net.forward(data=x)["out"], "first import")
    exports_and_back(expected, net, x, tmp_path)


def _dropout_net(params, shape):
    return caffe.Net.from_param(_param(
        'layer { name: "data" type: "Input" top: "data" input_param { shape { %s } } }\n'
        'layer { name: "drop" type: "Dropout" bottom: "data" top: "out" dropout_param { %s } }'
        % (" ".join("dim: %d" % d for d in shape), params)))


def test_fast_rcnn_dropout_without_scale_train_scales_at_inference(tmp_path):
    """The Fast R-CNN fork's scale_train: false keeps training's values unscaled and scales
    by 1 - ratio at test (its dropout_layer.cpp: caffe_scal by 1 / scale_). The PyTorch
    export wrote nn.Identity(), a silent factor of 1 / 0.6 here."""
    net = _dropout_net("dropout_ratio: 0.4 scale_train: false", (2, 3, 4))
    x = np.random.default_rng(4).normal(0, 1, (2, 3, 4)).astype(np.float32)
    expected = x.astype(np.float64) * 0.6
    assert_close(expected, run_torch(net, tmp_path / "pt", {"data": x})["out"], "torch")
    model, _ = caffe_onnx.export(net)
    assert_close(expected, run_ort(model, {"data": x})["out"], "onnxruntime")


def _looks_like_dropout(y, ratio, kept_value):
    """Each entry 0 or the kept value, about ``ratio`` of them 0 (2**18 entries: the fraction's
    standard deviation is below 0.001), and not all alike."""
    y = np.asarray(y)
    zero = y == 0
    assert np.all(zero | np.isclose(y, kept_value, rtol=1e-6))
    assert abs(zero.mean() - ratio) < 0.01, zero.mean()


@pytest.mark.parametrize("scale_train", [True, False])
def test_bayesian_segnet_dropout_samples_at_inference_in_pytorch(tmp_path, scale_train):
    """Bayesian SegNet's sample_weights_test: true (its deploy files, SegNet-Tutorial's model
    zoo) draws a new mask at every test forward (Monte Carlo dropout, as our layer does). The
    PyTorch export wrote nn.Identity(): the same deterministic output every run."""
    params = "dropout_ratio: 0.3 sample_weights_test: true scale_train: %s" % (
        "true" if scale_train else "false")
    net = _dropout_net(params, (4, 256, 256))
    x = np.ones((4, 256, 256), np.float32)
    kept = 1 / 0.7 if scale_train else 1.0
    first = run_torch(net, tmp_path / "pt", {"data": x})["out"]
    second = run_torch(net, tmp_path / "pt2", {"data": x})["out"]
    _looks_like_dropout(first, 0.3, kept)
    _looks_like_dropout(second, 0.3, kept)
    assert not np.array_equal(first, second)


@pytest.mark.parametrize("scale_train", [True, False])
def test_bayesian_segnet_dropout_samples_at_inference_in_onnxruntime(scale_train):
    """The same Monte Carlo dropout in the ONNX export: a Dropout node in training mode
    (scaled by 1 / (1 - ratio), then by 1 - ratio where scale_train is false). The export was
    an identity: every run the same, none of the entries dropped."""
    params = "dropout_ratio: 0.3 sample_weights_test: true scale_train: %s" % (
        "true" if scale_train else "false")
    net = _dropout_net(params, (4, 256, 256))
    x = np.ones((4, 256, 256), np.float32)
    model, _ = caffe_onnx.export(net)
    onnx.checker.check_model(model, full_check=True)
    first = run_ort(model, {"data": x})["out"]
    second = run_ort(model, {"data": x})["out"]
    kept = 1 / 0.7 if scale_train else 1.0
    _looks_like_dropout(first, 0.3, kept)
    _looks_like_dropout(second, 0.3, kept)
    assert not np.array_equal(first, second)


def _pool_reference(x, kernel, stride, op):
    """Windows from 0 without padding, as many as fit (the size rounded down)."""
    n, c, h, w = x.shape
    oh, ow = (h - kernel) // stride + 1, (w - kernel) // stride + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = x[:, :, i * stride:i * stride + kernel, j * stride:j * stride + kernel]
            out[:, :, i, j] = op(win, axis=(2, 3))
    return out


@pytest.mark.parametrize("rounding", ["ceil_mode: false", "round_mode: FLOOR"])
@pytest.mark.parametrize("pool,op", [("MAX", np.max), ("AVE", np.mean)])
def test_pooling_rounded_down_exports_at_its_size(tmp_path, rounding, pool, op):
    """Pooling that rounds its size down (BVLC pull request 3057's ceil_mode: false, as
    OpenCV's Caffe importer reads it; NVCaffe's round_mode: FLOOR): 3 x 3 over 8 x 9 by
    stride 2 gives 3 x 4 windows. The PyTorch export rounded up (nn.MaxPool2d with
    ceil_mode=True): 4 x 4 windows, the last row one Caffe never computes."""
    net = caffe.Net.from_param(_param(
        'layer { name: "data" type: "Input" top: "data" '
        'input_param { shape { dim: 1 dim: 2 dim: 8 dim: 9 } } }\n'
        'layer { name: "pool" type: "Pooling" bottom: "data" top: "out" '
        'pooling_param { pool: %s kernel_size: 3 stride: 2 %s } }' % (pool, rounding)))
    x = np.random.default_rng(5).normal(0, 1, (1, 2, 8, 9)).astype(np.float32)
    expected = _pool_reference(x.astype(np.float64), 3, 2, op)
    assert expected.shape == (1, 2, 3, 4)
    assert_close(expected, run_torch(net, tmp_path / "pt", {"data": x})["out"], "torch")
    model, _ = caffe_onnx.export(net)
    assert_close(expected, run_ort(model, {"data": x})["out"], "onnxruntime")


def _caffe_top_k(values, k):
    """Caffe's argmax_layer.cpp: (value, index) pairs partially sorted with std::greater,
    so equal values rank the higher index first."""
    return sorted(range(len(values)), key=lambda i: (values[i], i), reverse=True)[:k]


@pytest.mark.parametrize("params", ["top_k: 1 axis: 1", "top_k: 3 axis: -1",
                                    "top_k: 2 out_max_val: true", "top_k: 4"])
def test_argmax_with_equal_scores_ranks_as_caffe(tmp_path, params):
    """A class map's ArgMax where scores tie (a ReLU's zeros, a saturated softmax): Caffe
    ranks the higher index first. ONNX TopK and torch.topk rank the lower one first, so the
    exports gave other classes for those entries."""
    net = caffe.Net.from_param(_param(
        'layer { name: "data" type: "Input" top: "data" '
        'input_param { shape { dim: 2 dim: 6 } } }\n'
        'layer { name: "argmax" type: "ArgMax" bottom: "data" top: "out" '
        'argmax_param { %s } }' % params))
    x = np.array([[1, 2, 2, 0, 2, 1], [0, 0, 0, 0, 0, 0]], np.float32)
    k = int(params.split()[1])
    top = [_caffe_top_k(list(row), k) for row in x]
    if "out_max_val" in params:  # no axis: (N, 2, top_k), indices then values
        expected = np.array([[t, [row[i] for i in t]] for t, row in zip(top, x)])
    elif "axis" in params:
        expected = np.array(top, np.float64)
    else:
        expected = np.array(top, np.float64)[:, None, :]
    assert_close(expected, net.forward(data=x)["out"], "ours")
    assert_close(expected, run_torch(net, tmp_path / "pt", {"data": x})["out"], "torch")
    model, _ = caffe_onnx.export(net)
    assert_close(expected, run_ort(model, {"data": x})["out"], "onnxruntime")


@pytest.mark.parametrize("across", [False, True])
def test_mvn_of_a_3d_blob_gives_caffes_4d_top(tmp_path, across):
    """BVLC's MVNLayer::Reshape makes its top (num, channels, height, width): a (2, 3, 4)
    bottom gives (2, 3, 4, 1). The ONNX export computed a 3-D value under the 4-D output our
    net declares, and onnx.checker stopped it with a bare InferenceError; the PyTorch
    export returned the 3-D shape."""
    net = caffe.Net.from_param(_param(
        'layer { name: "data" type: "Input" top: "data" '
        'input_param { shape { dim: 2 dim: 3 dim: 4 } } }\n'
        'layer { name: "mvn" type: "MVN" bottom: "data" top: "out" '
        'mvn_param { across_channels: %s eps: 0.001 } }' % ("true" if across else "false")))
    x = np.random.default_rng(6).normal(0, 1, (2, 3, 4)).astype(np.float32)
    x64 = x.astype(np.float64)
    axes = (1, 2) if across else (2,)
    centred = x64 - x64.mean(axis=axes, keepdims=True)
    expected = (centred / (np.sqrt((centred ** 2).mean(axis=axes, keepdims=True)) + 0.001))
    expected = expected[..., None]
    model, _ = caffe_onnx.export(net)
    onnx.checker.check_model(model, full_check=True)
    assert_close(expected, run_ort(model, {"data": x})["out"], "onnxruntime")
    assert_close(expected, run_torch(net, tmp_path / "pt", {"data": x})["out"], "torch")


def test_pspnet_excerpt_with_its_bn_exports_and_imports_again(tmp_path):
    """PSPNet's own layout (test_fork_pspnet_bn.py's excerpt: conv + BN + ReLU, the pyramid
    pooling, Interp, Concat, Interp by zoom_factor) against its NumPy forward. Both exporters
    refused the BN layer ('has no ONNX/PyTorch equivalent'), so no PSPNet or ICNet file
    exported; PSPNet's BN at test is BatchNormalization of its four blobs."""
    path = tmp_path / "pspnet_excerpt.prototxt"
    path.write_text(PSPNET_EXCERPT)
    net = caffe.Net(str(path), caffe.TEST)
    rng = np.random.default_rng(7)
    fill_bn_blobs(net, rng)
    for name in ("conv1_1_3x3_s2", "conv6"):
        for blob in net.params[name]:
            blob.data[...] = rng.normal(0, 0.3, blob.shape)
    x = rng.normal(0, 1, (1, 3, 17, 17)).astype(np.float32)
    expected = excerpt_reference(net, x.astype(np.float64))
    model = exports_and_back(expected, net, x, tmp_path, "conv6_interp")
    assert "BatchNormalization" in {n.op_type for n in model.graph.node}


@pytest.mark.parametrize("mode", ["INFERENCE", "LEARN"])
def test_segnet_bn_exports(tmp_path, mode):
    """SegNet's and ENet's BN (bn_mode INFERENCE in their inference files: scale * x + shift;
    LEARN: the batch's statistics, E[x^2] - E[x]^2 and eps 1e-9, in every phase) was
    refused by both exporters."""
    net = caffe.Net.from_param(_param(
        'layer { name: "data" type: "Input" top: "data" '
        'input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } } }\n'
        'layer { name: "bn" type: "BN" bottom: "data" top: "out" bn_param { bn_mode: %s } }'
        % mode))
    rng = np.random.default_rng(8)
    scale, shift = rng.uniform(0.5, 1.5, 3), rng.normal(0, 1, 3)
    net.params["bn"][0].data[...] = scale.reshape(1, 3, 1, 1)
    net.params["bn"][1].data[...] = shift.reshape(1, 3, 1, 1)
    x = rng.normal(0, 1, (2, 3, 4, 5)).astype(np.float32)
    x64 = x.astype(np.float64)
    if mode == "LEARN":
        mean = x64.mean(axis=(0, 2, 3), keepdims=True)
        var = (x64 * x64).mean(axis=(0, 2, 3), keepdims=True) - mean * mean
        x64 = (x64 - mean) / np.sqrt(var + 1e-9)
    expected = x64 * scale.reshape(1, 3, 1, 1) + shift.reshape(1, 3, 1, 1)
    model, _ = caffe_onnx.export(net)
    assert_close(expected, run_ort(model, {"data": x})["out"], "onnxruntime")
    assert_close(expected, run_torch(net, tmp_path / "pt", {"data": x})["out"], "torch")


@pytest.mark.parametrize("reverse", [False, True])
def test_yolov2_reorg_exports_in_darknets_order(tmp_path, reverse):
    """caffe-yolov2's (and the Darknet importer's) Reorg, YOLOv2's passthrough: both
    exporters refused it ('has no ONNX/PyTorch equivalent'). Against Darknet's reorg_cpu
    index arithmetic, called with the input's sizes and forward=0 (reverse: forward=1)."""
    shape = (2, 8, 3, 5) if reverse else (2, 8, 6, 4)
    net = caffe.Net.from_param(_param(
        'layer { name: "data" type: "Input" top: "data" input_param { shape { %s } } }\n'
        'layer { name: "reorg" type: "Reorg" bottom: "data" top: "out" '
        'reorg_param { stride: 2 reverse: %s } }'
        % (" ".join("dim: %d" % d for d in shape), "true" if reverse else "false")))
    x = np.random.default_rng(9).normal(0, 1, shape).astype(np.float32)
    n, c, h, w = shape
    out_shape = (n, c // 4, h * 2, w * 2) if reverse else (n, c * 4, h // 2, w // 2)
    expected = np.stack([_darknet_reorg_cpu(x[i], w, h, c, 2, int(reverse))
                         for i in range(n)]).reshape(out_shape)
    exports_and_back(expected, net, x, tmp_path)
