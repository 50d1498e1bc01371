"""Caffe's upgrade tools: ``pycaffe-lite upgrade_net_proto_text / _binary`` and
``upgrade_solver_proto_text`` (and the scripts in tools/)."""

import os
import subprocess
import sys

import numpy as np
import pytest
from google.protobuf import text_format

from pycaffe_lite import cli
from pycaffe_lite.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

V1_NET = """
name: "LeNetV1"
input: "data"
input_dim: 64
input_dim: 1
input_dim: 28
input_dim: 28
layers {
  name: "conv1" type: CONVOLUTION bottom: "data" top: "conv1"
  blobs_lr: 1 blobs_lr: 2 weight_decay: 1 weight_decay: 0
  convolution_param { num_output: 20 kernel_size: 5 stride: 1
                      weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layers { name: "pool1" type: POOLING bottom: "conv1" top: "pool1"
         pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layers { name: "ip1" type: INNER_PRODUCT bottom: "pool1" top: "ip1"
         inner_product_param { num_output: 500 } }
layers { name: "relu1" type: RELU bottom: "ip1" top: "ip1" }
layers { name: "ip2" type: INNER_PRODUCT bottom: "ip1" top: "ip2"
         inner_product_param { num_output: 10 } }
layers { name: "prob" type: SOFTMAX bottom: "ip2" top: "prob"
         include { phase: TEST } }
"""


def parse_net(text):
    return text_format.Parse(text, caffe_pb2.NetParameter())


def test_v1_text_becomes_current_text(tmp_path):
    src, dst = tmp_path / "old.prototxt", tmp_path / "new.prototxt"
    src.write_text(V1_NET)
    assert cli.main(["upgrade_net_proto_text", str(src), str(dst)]) == 0
    net = parse_net(dst.read_text())
    assert net.name == "LeNetV1"
    assert len(net.layers) == 0 and len(net.input) == 0 and len(net.input_dim) == 0
    assert [(lp.name, lp.type) for lp in net.layer] == [
        ("input", "Input"), ("conv1", "Convolution"), ("pool1", "Pooling"),
        ("ip1", "InnerProduct"), ("relu1", "ReLU"), ("ip2", "InnerProduct"), ("prob", "Softmax")]
    assert list(net.layer[0].top) == ["data"]
    assert list(net.layer[0].input_param.shape[0].dim) == [64, 1, 28, 28]
    conv = net.layer[1]
    assert [(s.lr_mult, s.decay_mult) for s in conv.param] == [(1, 1), (2, 0)]
    assert conv.convolution_param.num_output == 20
    assert list(conv.convolution_param.kernel_size) == [5]
    assert conv.convolution_param.weight_filler.type == "xavier"
    assert net.layer[2].pooling_param.pool == caffe_pb2.PoolingParameter.MAX
    assert list(net.layer[4].bottom) == ["ip1"] and list(net.layer[4].top) == ["ip1"]
    assert net.layer[6].include[0].phase == caffe_pb2.TEST
    # the output is plain current-format text that a second pass leaves unchanged
    again = tmp_path / "again.prototxt"
    assert cli.main(["upgrade_net_proto_text", str(dst), str(again)]) == 0
    assert parse_net(again.read_text()) == net


def test_v1_data_layer_transform_fields_are_moved(tmp_path):
    src, dst = tmp_path / "old.prototxt", tmp_path / "new.prototxt"
    src.write_text('layers { name: "mnist" type: DATA top: "data" top: "label" '
                   'data_param { source: "train_lmdb" batch_size: 64 scale: 0.00390625 '
                   'mirror: true crop_size: 24 backend: LMDB } }')
    assert cli.main(["upgrade_net_proto_text", str(src), str(dst)]) == 0
    layer = parse_net(dst.read_text()).layer[0]
    assert layer.type == "Data"
    assert layer.transform_param.scale == pytest.approx(0.00390625)
    assert layer.transform_param.mirror and layer.transform_param.crop_size == 24
    assert not layer.data_param.HasField("scale") and not layer.data_param.HasField("mirror")
    assert layer.data_param.source == "train_lmdb" and layer.data_param.batch_size == 64


def test_current_net_is_written_unchanged(tmp_path, caplog):
    src, dst = tmp_path / "new.prototxt", tmp_path / "out.prototxt"
    src.write_text('name: "n" layer { name: "d" type: "Input" top: "d" '
                   'input_param { shape { dim: 1 } } }')
    assert cli.main(["upgrade_net_proto_text", str(src), str(dst)]) == 0
    assert parse_net(dst.read_text()) == parse_net(src.read_text())
    assert "already in latest proto format" in caplog.text


def test_unparseable_input_exits_2_and_failed_upgrade_exits_1(tmp_path, capsys):
    bad, dst = tmp_path / "bad.prototxt", tmp_path / "out.prototxt"
    bad.write_text("layer { name: ")
    assert cli.main(["upgrade_net_proto_text", str(bad), str(dst)]) == 2
    assert "Failed to parse input text file as NetParameter" in capsys.readouterr().err
    assert not dst.exists()
    mixed = tmp_path / "mixed.prototxt"
    mixed.write_text('layers { name: "a" type: RELU } layer { name: "b" type: "ReLU" }')
    assert cli.main(["upgrade_net_proto_text", str(mixed), str(dst)]) == 1
    err = capsys.readouterr().err
    assert "Encountered error(s) while upgrading" in err and "'layers'" in err
    assert not dst.exists()
    assert cli.main(["upgrade_net_proto_text", str(tmp_path / "nope"), str(dst)]) == 2


def test_binary_v1_net_with_weights(tmp_path):
    old = caffe_pb2.NetParameter(name="binary")
    v1 = old.layers.add(name="fc", type=caffe_pb2.V1LayerParameter.INNER_PRODUCT)
    v1.bottom.append("x")
    v1.top.append("y")
    v1.blobs_lr.extend([1, 2])
    v1.inner_product_param.num_output = 2
    weights = np.arange(6, dtype=np.float32).reshape(2, 3)
    blob = v1.blobs.add(num=1, channels=1, height=2, width=3)
    blob.data.extend(weights.ravel())
    bias = v1.blobs.add(num=1, channels=1, height=1, width=2)
    bias.data.extend([0.5, -0.5])
    src, dst = tmp_path / "old.caffemodel", tmp_path / "new.caffemodel"
    src.write_bytes(old.SerializeToString())
    assert cli.main(["upgrade_net_proto_binary", str(src), str(dst)]) == 0
    new = caffe_pb2.NetParameter()
    new.ParseFromString(dst.read_bytes())
    assert len(new.layers) == 0 and len(new.layer) == 1
    layer = new.layer[0]
    assert (layer.name, layer.type, list(layer.bottom), list(layer.top)) == (
        "fc", "InnerProduct", ["x"], ["y"])
    assert [s.lr_mult for s in layer.param] == [1, 2]
    assert list(layer.blobs[0].data) == list(weights.ravel())
    assert list(layer.blobs[1].data) == [0.5, -0.5]
    bad = tmp_path / "bad.caffemodel"
    bad.write_bytes(b"\x0a\xff\xff\xff")
    assert cli.main(["upgrade_net_proto_binary", str(bad), str(dst)]) == 2


def test_solver_type_enum_becomes_type_string(tmp_path, capsys):
    src, dst = tmp_path / "solver.prototxt", tmp_path / "out.prototxt"
    src.write_text('net: "train_val.prototxt" base_lr: 0.01 momentum: 0.9 '
                   'solver_type: NESTEROV lr_policy: "step" stepsize: 1000')
    assert cli.main(["upgrade_solver_proto_text", str(src), str(dst)]) == 0
    solver = text_format.Parse(dst.read_text(), caffe_pb2.SolverParameter())
    assert solver.type == "Nesterov" and not solver.HasField("solver_type")
    assert solver.net == "train_val.prototxt" and solver.base_lr == pytest.approx(0.01)
    assert solver.lr_policy == "step" and solver.stepsize == 1000
    conflict = tmp_path / "conflict.prototxt"
    conflict.write_text('solver_type: ADAM type: "SGD"')
    out2 = tmp_path / "out2.prototxt"
    assert cli.main(["upgrade_solver_proto_text", str(conflict), str(out2)]) == 1
    assert "disagree" in capsys.readouterr().err and not out2.exists()


@pytest.mark.parametrize("tool", ["upgrade_net_proto_text", "upgrade_solver_proto_text"])
def test_tool_scripts(tmp_path, tool):
    src, dst = tmp_path / "in.prototxt", tmp_path / "out.prototxt"
    if tool == "upgrade_net_proto_text":
        src.write_text(V1_NET)
    else:
        src.write_text("solver_type: ADAGRAD base_lr: 0.1")
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", tool + ".py"),
                           str(src), str(dst)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    text = dst.read_text()
    assert ('type: "Convolution"' in text) if tool.startswith("upgrade_net") else \
        ('type: "AdaGrad"' in text)
