"""Net drawings: our DOT generator, rendering through Graphviz's ``dot`` (a stand-in here), the
clear error without it, and the ``draw_net`` command and tool."""

import os
import re
import stat
import subprocess
import sys

import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli, draw
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NET = """
name: "drawme"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 8 dim: 1 dim: 12 dim: 12 } shape { dim: 8 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 6 kernel_size: 5 stride: 1 pad: 2 } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1"
        param { lr_mult: 1 decay_mult: 1 } param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 10 } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss"
        include { phase: TRAIN } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip1" bottom: "label" top: "accuracy"
        include { phase: TEST } }
"""


def net_param():
    from google.protobuf import text_format
    return text_format.Parse(NET, caffe_pb2.NetParameter())


def edges(dot):
    return re.findall(r'^\s*"([^"]+)" -> "([^"]+)"(?: \[label="([^"]*)"\])?;', dot, re.M)


def nodes(dot):
    return dict(re.findall(r'^\s*"([^"]+)" \[(.*)\];$', dot, re.M))


def test_dot_has_every_layer_blob_and_edge():
    dot = draw.get_dot_graph(net_param())
    assert dot.startswith('digraph "drawme" {') and "rankdir=LR;" in dot
    found = nodes(dot)
    for layer in ["data_Input", "conv1_Convolution", "relu1_ReLU", "pool1_Pooling",
                  "ip1_InnerProduct", "loss_SoftmaxWithLoss", "accuracy_Accuracy"]:
        assert 'shape="record"' in found[layer], layer
    for blob in ["data", "label", "conv1", "pool1", "ip1", "loss", "accuracy"]:
        assert 'shape="octagon"' in found[blob + "_blob"]
        assert 'label="%s"' % blob in found[blob + "_blob"]
    assert set(edges(dot)) == {
        ("data_Input", "data_blob", ""), ("data_Input", "label_blob", ""),
        ("data_blob", "conv1_Convolution", ""), ("conv1_Convolution", "conv1_blob", "6"),
        ("conv1_blob", "relu1_ReLU", ""), ("relu1_ReLU", "conv1_blob", ""),
        ("conv1_blob", "pool1_Pooling", ""), ("pool1_Pooling", "pool1_blob", ""),
        ("pool1_blob", "ip1_InnerProduct", ""), ("ip1_InnerProduct", "ip1_blob", "10"),
        ("ip1_blob", "loss_SoftmaxWithLoss", ""), ("label_blob", "loss_SoftmaxWithLoss", ""),
        ("loss_SoftmaxWithLoss", "loss_blob", ""),
        ("ip1_blob", "accuracy_Accuracy", ""), ("label_blob", "accuracy_Accuracy", ""),
        ("accuracy_Accuracy", "accuracy_blob", ""),
    }
    # Caffe's colours: convolution red, pooling orange, inner product purple, in-place green
    assert 'fillcolor="#FF5050"' in found["conv1_Convolution"]
    assert 'fillcolor="#FF9900"' in found["pool1_Pooling"]
    assert 'fillcolor="#CC33FF"' in found["ip1_InnerProduct"]
    assert 'fillcolor="#90EE90"' in found["relu1_ReLU"]
    assert 'label="conv1\\n(Convolution)\\nkernel size: 5\\nstride: 1\\npad: 2"' in \
        found["conv1_Convolution"]
    assert "(Pooling MAX)" in found["pool1_Pooling"]


def test_rankdir_and_phase_filter():
    tb = draw.get_dot_graph(net_param(), rankdir="TB", phase=caffe.TEST)
    assert "rankdir=TB;" in tb
    assert "accuracy_Accuracy" in nodes(tb) and "loss_SoftmaxWithLoss" not in nodes(tb)
    # top-bottom drawings put a layer's label on one line
    assert 'label="conv1 (Convolution) kernel size: 5 stride: 1 pad: 2"' in tb
    train = draw.get_dot_graph(net_param(), rankdir="BT", phase=caffe.TRAIN)
    assert "loss_SoftmaxWithLoss" in nodes(train) and "accuracy_Accuracy" not in nodes(train)
    assert "rankdir=BT;" in train
    assert "rankdir=RL;" in draw.get_dot_graph(net_param(), rankdir="RL")
    with pytest.raises(CaffeError, match="rankdir must be one of LR, TB, BT, RL, got 'XY'"):
        draw.get_dot_graph(net_param(), rankdir="XY")


def test_display_lrm_and_names_that_need_escaping():
    param = net_param()
    param.layer[1].name = 'conv "1" {a|b}'
    dot = draw.get_dot_graph(param, display_lrm=True)
    assert 'lr mult: 1, 2\\ndecay mult: 1, 0' in dot
    assert r'"conv \"1\" {a|b}_Convolution" [label="conv \"1\" \{a\|b\}\n' in dot


def test_dot_from_a_built_net_and_a_path(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(NET)
    from_path = draw.get_dot_graph(str(path))
    assert "conv1_Convolution" in from_path
    net = caffe.Net(str(path), caffe.TEST)
    from_net = draw.get_dot_graph(net)
    assert "accuracy_Accuracy" in from_net and "loss_SoftmaxWithLoss" not in from_net


def test_dot_file_needs_no_graphviz(tmp_path, monkeypatch):
    monkeypatch.setattr(draw.shutil, "which", lambda prog: None)
    out = tmp_path / "net.dot"
    draw.draw_net_to_file(net_param(), str(out))
    assert out.read_text() == draw.get_dot_graph(net_param())
    assert draw.draw_net(net_param(), ext="gv").decode() == draw.get_dot_graph(net_param())


def test_missing_graphviz_gives_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(draw.shutil, "which", lambda prog: None)
    out = tmp_path / "net.png"
    with pytest.raises(draw.GraphvizNotFoundError) as info:
        draw.draw_net_to_file(net_param(), str(out))
    message = str(info.value)
    assert "Graphviz is not installed" in message and "'dot'" in message
    assert ".dot" in message  # says what works without it
    assert isinstance(info.value, CaffeError)
    assert not out.exists()


def fake_dot(folder, body):
    path = folder / "dot"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_rendering_runs_dot_with_the_format(tmp_path, monkeypatch):
    # a stand-in for Graphviz: prints its arguments, then echoes the DOT text it was fed
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake_dot(bindir, 'echo "ARGS $*"\ncat\n')
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    out = tmp_path / "net.svg"
    draw.draw_net_to_file(net_param(), str(out), rankdir="TB")
    text = out.read_text()
    assert text.startswith("ARGS -Tsvg\n")
    assert text[len("ARGS -Tsvg\n"):] == draw.get_dot_graph(net_param(), rankdir="TB")
    graph = draw.get_pydot_graph(net_param())
    assert graph.create(format="png").startswith(b"ARGS -Tpng\n")
    graph.write_pdf(tmp_path / "net.pdf")
    assert (tmp_path / "net.pdf").read_bytes().startswith(b"ARGS -Tpdf\n")
    graph.write_raw(tmp_path / "net.raw")
    assert (tmp_path / "net.raw").read_text() == graph.to_string()
    # pydot's per-format methods, for any format: create_png() (IPython's Image), write_jpg
    assert graph.create_png() == b"ARGS -Tpng\n" + graph.to_string().encode()
    assert graph.create_svg(prog="dot").startswith(b"ARGS -Tsvg\n")
    graph.write_jpg(tmp_path / "net.jpg")
    assert (tmp_path / "net.jpg").read_bytes().startswith(b"ARGS -Tjpg\n")
    with pytest.raises(AttributeError):
        graph.no_such_method()


def test_failing_dot_reports_its_message(tmp_path, monkeypatch):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake_dot(bindir, 'echo "Format: \\"xyz\\" not recognized" >&2\nexit 1\n')
    monkeypatch.setenv("PATH", str(bindir) + os.pathsep + os.environ.get("PATH", ""))
    with pytest.raises(CaffeError, match=r"failed to render format 'xyz' \(exit 1\).*xyz"):
        draw.draw_net(net_param(), ext="xyz")


def test_draw_net_command(tmp_path, monkeypatch, capsys):
    path = tmp_path / "net.prototxt"
    path.write_text(NET)
    out = tmp_path / "net.dot"
    rc = cli.main(["draw_net", str(path), str(out), "-rankdir", "TB", "-phase", "TRAIN"])
    assert rc == 0
    assert "Drawing net to" in capsys.readouterr().out
    text = out.read_text()
    assert "rankdir=TB;" in text and "loss_SoftmaxWithLoss" in text
    assert "accuracy_Accuracy" not in text
    monkeypatch.setattr(draw.shutil, "which", lambda prog: None)
    rc = cli.main(["draw_net", str(path), str(tmp_path / "net.png")])
    assert rc == 1
    assert "Graphviz is not installed" in capsys.readouterr().err


def test_draw_net_command_upgrades_v1_nets(tmp_path):
    path = tmp_path / "v1.prototxt"
    path.write_text('name: "old" layers { name: "d" type: DUMMY_DATA top: "x" '
                    'dummy_data_param { shape { dim: 1 dim: 3 } } } '
                    'layers { name: "fc" type: INNER_PRODUCT bottom: "x" top: "y" '
                    'inner_product_param { num_output: 4 } }')
    out = tmp_path / "v1.dot"
    assert cli.main(["draw_net", str(path), str(out)]) == 0
    assert ("fc_InnerProduct", "y_blob", "4") in edges(out.read_text())


def test_draw_net_tool_script(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(NET)
    out = tmp_path / "net.gv"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "draw_net.py"),
                           str(path), str(out), "--rankdir", "BT"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert "rankdir=BT;" in out.read_text()


@pytest.mark.parametrize("kind", ["ConvolutionDepthwise", "DepthwiseConvolution"])
def test_the_forks_depthwise_types_are_drawn_as_convolutions(kind):
    """A depthwise convolution of a fork's type (soeaver's Xception, the MobileNet ports) is
    drawn as the same layer typed Convolution: red, with its kernel size, stride and pad, and
    its output count on the edge out."""
    param = net_param()
    param.layer[1].type = kind
    param.layer[1].convolution_param.group = 6
    found = nodes(draw.get_dot_graph(param))
    node = "conv1_%s" % kind
    assert 'label="conv1\\n(%s)\\nkernel size: 5\\nstride: 1\\npad: 2"' % kind in found[node]
    assert 'fillcolor="#FF5050"' in found[node]
    assert (node, "conv1_blob", "6") in edges(draw.get_dot_graph(param))
    assert draw.get_layer_lr_mult(param.layer[1]) == (1.0, 1.0)
