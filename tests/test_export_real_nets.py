"""Published nets (cut down to the layers that show the point) through both exporters and
back: the ONNX export runs in onnxruntime, the PyTorch export in torch, and
``import_onnx`` of the export gives the net again; every output is checked against a NumPy
forward written from the layers' definitions, to 1e-5 of its largest magnitude. A net an
exporter cannot write is refused with an error naming the layer.
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
