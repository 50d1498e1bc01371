"""``pycaffe-lite summary`` and :func:`pycaffe_lite.summary.summarize` against figures computed
by hand from the layers' shapes (LeNet, AlexNet, a small net with in-place, shared and
deconvolution layers)."""

import json
import pathlib

import pytest

from pycaffe_lite import cli
from pycaffe_lite.summary import summarize

ROOT = pathlib.Path(__file__).resolve().parents[1]
LENET = ROOT / "models" / "lenet" / "lenet.prototxt"
ALEXNET = ROOT / "models" / "zoo" / "alexnet_deploy.prototxt"


def conv(c_in, c_out, k, out_hw, group=1, batch=1):
    """(params, MACs) of a square convolution with bias, by the textbook formulas."""
    params = c_out * (c_in // group) * k * k + c_out
    macs = batch * c_out * out_hw * out_hw * (c_in // group) * k * k
    return params, macs


def fc(n_in, n_out, batch=1):
    return n_out * n_in + n_out, batch * n_in * n_out


def test_lenet_by_hand(capsys):
    # 64 x 1 x 28 x 28 -> conv1 5x5 (20) 24x24 -> pool 12x12 -> conv2 5x5 (50) 8x8 -> pool 4x4
    # -> ip1 800->500 -> relu (in place) -> ip2 500->10 -> softmax
    expected = {"conv1": conv(1, 20, 5, 24, batch=64), "conv2": conv(20, 50, 5, 8, batch=64),
                "ip1": fc(800, 500, batch=64), "ip2": fc(500, 10, batch=64)}
    assert cli.main(["summary", "--model", str(LENET), "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    by_name = {e["name"]: e for e in s["layers"]}
    for name, (params, macs) in expected.items():
        assert (by_name[name]["params"], by_name[name]["macs"]) == (params, macs), name
    assert s["params"] == 431080 == sum(p for p, _ in expected.values())
    assert s["macs"] == sum(m for _, m in expected.values()) == 64 * 2293000
    assert by_name["conv1"]["top_shapes"] == [[64, 20, 24, 24]]
    assert by_name["pool1"]["element_ops"] == 64 * 20 * 12 * 12 * 4  # 2x2 windows
    assert by_name["relu1"]["activation_bytes"] == 0  # in place
    assert by_name["relu1"]["element_ops"] == 64 * 500
    floats = (64 * (784 + 20 * 576 + 20 * 144 + 50 * 64 + 50 * 16 + 500 + 10 + 10))
    assert s["activation_bytes"] == 4 * floats
    assert by_name["data"]["element_ops"] == 0


@pytest.mark.parametrize("phase_flag", [[], ["--phase", "TEST"]])
def test_alexnet_parameter_count_and_macs(phase_flag, capsys):
    # AlexNet (BVLC deploy): conv2, conv4, conv5 in two groups; 227 -> 55 -> 27 -> 13 -> 6
    layers = [conv(3, 96, 11, 55), conv(96, 256, 5, 27, group=2), conv(256, 384, 3, 13),
              conv(384, 384, 3, 13, group=2), conv(384, 256, 3, 13, group=2),
              fc(256 * 6 * 6, 4096), fc(4096, 4096), fc(4096, 1000)]
    assert cli.main(["summary", "--model", str(ALEXNET), "--json"] + phase_flag) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["params"] == sum(p for p, _ in layers) == 60965224  # the published figure
    assert s["macs"] == sum(m for _, m in layers)


def test_shared_params_deconvolution_and_table(tmp_path, capsys):
    net = tmp_path / "net.prototxt"
    net.write_text('''
name: "small"
input: "x" input_shape { dim: 2 dim: 3 dim: 5 dim: 5 }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "a"
        param { name: "w" } param { name: "b" } inner_product_param { num_output: 4 } }
layer { name: "b" type: "InnerProduct" bottom: "x" top: "b"
        param { name: "w" } param { name: "b" } inner_product_param { num_output: 4 } }
layer { name: "up" type: "Deconvolution" bottom: "x" top: "up"
        convolution_param { num_output: 6 kernel_size: 2 stride: 2 group: 3 } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "sum" }
''')
    s = summarize(str(net))
    by_name = {e["name"]: e for e in s["layers"]}
    assert by_name["a"]["params"] == 4 * 75 + 4 and by_name["b"]["params"] == 0  # shared
    assert by_name["b"]["macs"] == 2 * 75 * 4
    # deconvolution: every input element meets (6 / 3) x 2 x 2 weights
    assert by_name["up"]["macs"] == 2 * 3 * 25 * 2 * 2 * 2
    assert by_name["up"]["top_shapes"] == [[2, 6, 10, 10]]
    assert by_name["up"]["params"] == 3 * 2 * 2 * 2 + 6
    assert by_name["sum"]["element_ops"] == 8
    assert s["params"] == 304 + 30
    assert "x" not in by_name  # legacy input fields make no layer
    assert cli.main(["summary", "--model", str(net)]) == 0
    out = capsys.readouterr().out
    assert "Deconvolution" in out and "334 params" in out


# a deploy net whose last layer exists in one phase only: which phase was built shows
PHASED = """name: "phased"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 4 } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" include { phase: TEST } }
layer { name: "train_only" type: "ReLU" bottom: "ip" top: "r" include { phase: TRAIN } }
"""


def test_the_command_line_and_python_build_the_same_phase(tmp_path, capsys):
    model = tmp_path / "phased.prototxt"
    model.write_text(PHASED)
    assert cli.main(["summary", "--model", str(model), "--json"]) == 0
    from_cli = json.loads(capsys.readouterr().out)
    from_python = summarize(str(model))
    assert from_cli == from_python
    assert [e["name"] for e in from_cli["layers"]] == ["data", "ip", "prob"]  # TEST
    assert cli.main(["summary", "--model", str(model), "--json", "--phase", "TRAIN"]) == 0
    train = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in train["layers"]] == ["data", "ip", "train_only"]
    assert train == summarize(str(model), phase=0)


@pytest.mark.parametrize("kind", ["ConvolutionDepthwise", "DepthwiseConvolution"])
def test_the_forks_depthwise_types_count_as_convolutions(kind, capsys, tmp_path):
    """A depthwise convolution of a fork's type (MobileNet ports, soeaver's Xception) costs
    what the same layer as a grouped Convolution does: 8 channels, 3 x 3, 10 x 10 out."""
    text = ('layer { name: "data" type: "Input" top: "data" '
            'input_param { shape { dim: 2 dim: 8 dim: 10 dim: 10 } } }\n'
            'layer { name: "dw" type: "%s" bottom: "data" top: "dw" '
            'convolution_param { num_output: 8 group: 8 kernel_size: 3 pad: 1 } }\n')
    (tmp_path / "fork.prototxt").write_text(text % kind)
    (tmp_path / "bvlc.prototxt").write_text(text % "Convolution")
    params, macs = conv(8, 8, 3, 10, group=8, batch=2)
    for name in ("fork", "bvlc"):
        assert cli.main(["summary", "--model", str(tmp_path / (name + ".prototxt")),
                         "--json"]) == 0
        row = json.loads(capsys.readouterr().out)["layers"][1]
        assert (row["params"], row["macs"], row["element_ops"]) == (params, macs, 0), name
