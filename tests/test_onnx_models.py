"""Whole models through ONNX: the zoo deploy nets (random weights, He-scaled, as
test_model_zoo.py fills them) and a LeNet trained here on real MNIST digits export, and
onnxruntime gives our outputs; the CLI commands write files that run the same.

Deep nets are compared to 1e-4 relative (plus 1e-4 of the largest magnitude), as the zoo's
OpenCV comparison is: float32 sums over tens of layers in a different order; single layers
are held to 1e-5 in test_onnx_export.py.
"""

import os

import numpy as np
import pytest

from helpers.onnx_runtime import assert_close, onnx, run_ort
from test_model_zoo import LOGITS, filled

import pycaffe_lite as caffe
from pycaffe_lite import cli
from pycaffe_lite.proto import protoio
from pycaffe_lite import onnx as caffe_onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "models", "lenet")
RTOL = 1e-4


def export_zoo_and_compare(key, net, x):
    prob = net.forward(data=x)["prob"].copy()
    logits = net.blobs[LOGITS[key]].data.copy()
    # in memory (the .caffemodel round trip of these nets is test_model_zoo.py's; the file
    # path is the LeNet test's)
    model, report = caffe_onnx.export(net, None)
    assert report["inputs"] == ["data"] and report["outputs"] == ["prob"]
    # the logits are an intermediate value of the graph: expose them to compare
    model.graph.output.append(onnx.helper.make_tensor_value_info(LOGITS[key],
                                                                 onnx.TensorProto.FLOAT, None))
    theirs = run_ort(model, {"data": x})
    assert_close(logits, theirs[LOGITS[key]], "%s: %s" % (key, LOGITS[key]), rtol=RTOL)
    assert_close(prob, theirs["prob"], "%s: prob" % key, rtol=RTOL)
    assert prob.argmax() == theirs["prob"].argmax()


def test_squeezenet_exports():
    export_zoo_and_compare("squeezenet1.1", *filled("squeezenet1.1"))


@pytest.mark.slow
@pytest.mark.parametrize("key", ["caffenet", "alexnet", "googlenet", "resnet50", "vgg16"])
def test_zoo_net_exports(key, filled_zoo_net):
    export_zoo_and_compare(key, *filled_zoo_net(key))


def _mnist_test_images(n):
    from pycaffe_lite.data.mnist import read_idx_images, read_idx_labels
    images = read_idx_images(os.path.join(LENET, "mnist5k", "t10k-images-idx3-ubyte.gz"))
    labels = read_idx_labels(os.path.join(LENET, "mnist5k", "t10k-labels-idx1-ubyte.gz"))
    # the Data layer's transform_param scale: 0.00390625
    return images[:n, None].astype(np.float32) * np.float32(0.00390625), labels[:n]


@pytest.mark.slow
def test_trained_lenet_exports_through_the_command(trained_lenet, tmp_path, capsys):
    _, weights, _ = trained_lenet
    out = tmp_path / "lenet.onnx"
    deploy = os.path.join(LENET, "lenet.prototxt")
    assert cli.main(["export_onnx", "--model", deploy, "--weights", str(weights),
                     "--output", str(out)]) == 0
    assert "wrote %s" % out in capsys.readouterr().out
    model = onnx.load(str(out))
    onnx.checker.check_model(model, full_check=True)
    x, labels = _mnist_test_images(200)
    net = caffe.Net(deploy, str(weights), caffe.TEST)
    net.blobs["data"].reshape(*x.shape)
    net.reshape()
    ours = net.forward(data=x)["prob"]
    theirs = run_ort(model, {"data": x})["prob"]
    assert_close(ours, theirs, "LeNet prob", rtol=RTOL)
    assert (ours.argmax(1) == theirs.argmax(1)).all()
    assert (theirs.argmax(1) == labels).mean() > 0.8  # it is trained

    # and back: the imported Caffe files give the same numbers here
    prefix = tmp_path / "lenet_back"
    assert cli.main(["import_onnx", str(out), "--output-prefix", str(prefix),
                     "--input-shape", "data=200,1,28,28"]) == 0
    back = caffe.Net(str(prefix) + ".prototxt", str(prefix) + ".caffemodel", caffe.TEST)
    assert_close(ours, back.forward(data=x)["prob"], "LeNet after import", rtol=RTOL)


@pytest.mark.slow
def test_train_test_net_drops_losses_and_takes_data_as_inputs(trained_lenet, tmp_path,
                                                             capsys):
    _, weights, net_param = trained_lenet
    prototxt = tmp_path / "train_test.prototxt"
    protoio.write_text(net_param, str(prototxt))
    out = tmp_path / "tt.onnx"
    assert cli.main(["export_onnx", "--model", str(prototxt), "--weights", str(weights),
                     "--output", str(out), "--static-batch"]) == 0
    printed = capsys.readouterr().out
    assert "dropped layer 'accuracy' (type Accuracy)" in printed
    assert "dropped layer 'loss' (type SoftmaxWithLoss)" in printed
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == ["data"]
    assert [o.name for o in model.graph.output] == ["ip2"]
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 100


def test_commands_report_bad_input(tmp_path, capsys):
    assert cli.main(["import_onnx", str(tmp_path / "missing.onnx"),
                     "--output-prefix", str(tmp_path / "p")]) == 1
    assert "no such ONNX file" in capsys.readouterr().err
    assert cli.main(["import_onnx", "x.onnx", "--output-prefix", "p",
                     "--input-shape", "data=1,a"]) == 1
    assert "expected NAME=D0,D1" in capsys.readouterr().err
    garbage = tmp_path / "garbage.onnx"  # not an ONNX file: one line, no traceback
    garbage.write_bytes(bytes(range(256)) * 4)
    assert cli.main(["import_onnx", str(garbage), "--output-prefix",
                     str(tmp_path / "g")]) == 1
    err = capsys.readouterr().err
    assert "garbage.onnx: cannot read as an ONNX model" in err and "Traceback" not in err
    # an input shape for a name that is no input of the model
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    small = tmp_path / "relu.onnx"
    onnx.save(helper.make_model(graph), str(small))
    assert cli.main(["import_onnx", str(small), "--output-prefix", str(tmp_path / "r"),
                     "--input-shape", "nosuch=1,2"]) == 1
    assert "an input shape is given for 'nosuch', not an input of the ONNX model (its " \
        "inputs: x)" in capsys.readouterr().err
    assert not (tmp_path / "r.prototxt").exists()
