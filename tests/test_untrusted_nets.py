"""Python layers turned off for untrusted net files: ``Net(..., allow_python_layers=False)``,
``PYCAFFE_LITE_ALLOW_PYTHON_LAYERS=0`` and ``--no_python_layers``. A refused net fails before the
layer's module is imported: the module writes a marker file when it is imported, and the tests
look for it (and for the module in ``sys.modules``)."""

import itertools
import os
import sys

import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli
from pycaffe_lite.errors import NetError
from pycaffe_lite.python_layers import ENV

_ids = itertools.count()

MODULE = '''
import pathlib
pathlib.Path(%(marker)r).write_text("imported")
import pycaffe_lite as caffe


class Ident(caffe.Layer):
    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = top[0].diff
'''

NET = '''
name: "untrusted"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 dim: 2 }
                           data_filler { type: "gaussian" } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "sneaky" type: "Python" bottom: "z" top: "w"
        python_param { module: "%(module)s" layer: "Ident" } }
layer { name: "loss" type: "EuclideanLoss" bottom: "w" bottom: "y" top: "loss" }
'''


@pytest.fixture
def untrusted(tmp_path, monkeypatch):
    """(net path, module name, marker path) in a fresh folder that is the working directory;
    the module name is new to this process."""
    module = "marker_layer_%d" % next(_ids)
    marker = tmp_path / "imported.txt"
    (tmp_path / (module + ".py")).write_text(MODULE % dict(marker=str(marker)))
    net = tmp_path / "net.prototxt"
    net.write_text(NET % dict(module=module))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV, raising=False)
    yield net, module, marker
    sys.modules.pop(module, None)


def _assert_not_imported(module, marker):
    assert not marker.exists()
    assert module not in sys.modules


def test_default_imports_the_module_as_caffe_does(untrusted):
    net_path, module, marker = untrusted
    net = caffe.Net(str(net_path), caffe.TRAIN)
    assert marker.read_text() == "imported"
    net.forward()
    assert (net.blobs["w"].data == net.blobs["z"].data).all()


def test_allow_python_layers_false_refuses_before_import(untrusted):
    net_path, module, marker = untrusted
    with pytest.raises(NetError) as err:
        caffe.Net(str(net_path), caffe.TRAIN, allow_python_layers=False)
    message = str(err.value)
    assert "'sneaky'" in message and "'%s'" % module in message and str(net_path) in message
    _assert_not_imported(module, marker)


def test_environment_variable_refuses_and_the_argument_overrides_it(untrusted, monkeypatch):
    net_path, module, marker = untrusted
    monkeypatch.setenv(ENV, "0")
    with pytest.raises(NetError, match="sneaky"):
        caffe.Net(str(net_path), caffe.TEST)
    _assert_not_imported(module, marker)
    caffe.Net(str(net_path), caffe.TEST, allow_python_layers=True)
    assert marker.exists()


def test_no_python_layers_flag_on_train_and_time(untrusted, capsys):
    net_path, module, marker = untrusted
    solver = net_path.parent / "solver.prototxt"
    solver.write_text('net: "net.prototxt" base_lr: 0.01 lr_policy: "fixed" max_iter: 2 '
                      'solver_mode: CPU snapshot_after_train: false')
    assert cli.main(["train", "--solver", str(solver), "--no_python_layers"]) == 1
    err = capsys.readouterr().err
    assert "'sneaky'" in err and module in err
    assert cli.main(["time", "--model", str(net_path), "--iterations", "1",
                     "-no_python_layers"]) == 1
    assert "'sneaky'" in capsys.readouterr().err
    _assert_not_imported(module, marker)
    assert ENV not in os.environ  # the flag does not outlive the command


@pytest.mark.parametrize("command", [
    ["test", "--weights", "w.caffemodel", "--iterations", "1"],
    ["summary"],
    ["evaluate", "--weights", "w.caffemodel", "--iterations", "1"],
    ["export_onnx", "--weights", "w.caffemodel", "--output", "out.onnx"],
])
def test_every_command_that_reads_nets_takes_the_flag(untrusted, capsys, command):
    net_path, module, marker = untrusted
    assert cli.main(command[:1] + ["--model", str(net_path), "--no_python_layers"]
                    + command[1:]) == 1
    err = capsys.readouterr().err
    assert "'sneaky'" in err and module in err
    _assert_not_imported(module, marker)


def test_the_refusal_names_the_switch_that_was_used(untrusted, capsys, monkeypatch):
    """The flag's refusal names the flag, not the variable the command sets for it (which the
    user never set); the variable's refusal names the variable and its value."""
    net_path, module, marker = untrusted
    assert cli.main(["summary", "--model", str(net_path), "--no_python_layers"]) == 1
    err = capsys.readouterr().err
    assert "Python layers are turned off (--no_python_layers)" in err
    assert ENV not in err
    assert cli.main(["summary", "--model", str(net_path), "--plugin", module,
                     "--no_python_layers"]) == 1
    err = capsys.readouterr().err
    assert "plugins are turned off with Python layers (--no_python_layers)" in err
    assert ENV not in err
    monkeypatch.setenv(ENV, "off")
    assert cli.main(["summary", "--model", str(net_path)]) == 1
    err = capsys.readouterr().err
    assert "Python layers are turned off (%s=off)" % ENV in err
    _assert_not_imported(module, marker)
