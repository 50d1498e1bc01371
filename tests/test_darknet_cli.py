"""``pycaffe-lite darknet2caffe`` and tools/darknet2caffe.py."""

import logging
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers.darknet import CLASSIFIER, darknet_forward, random_params, weights_bytes

import pycaffe_lite
from pycaffe_lite.cli import main
from pycaffe_lite.commands.darknet2caffe import split_files
from pycaffe_lite.darknet import DarknetError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture
def model(tmp_path):
    (tmp_path / "m.cfg").write_text(CLASSIFIER + "\n[dropout]\nprobability=.1\nbogus=1\n")
    data = weights_bytes(random_params(CLASSIFIER, 4))
    (tmp_path / "m.weights").write_bytes(data)
    return tmp_path, data


def test_command_writes_everything(model, caplog):
    tmp, data = model
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        rc = main(["darknet2caffe", str(tmp / "m.cfg"), str(tmp / "m.weights"),
                   str(tmp / "out.prototxt"), str(tmp / "out.caffemodel"),
                   "-solver", str(tmp / "solver.prototxt"), "--batch", "2"])
    assert rc == 0
    line = CLASSIFIER.count("\n") + 4
    assert "m.cfg:%d: layer 7 [dropout]: unknown key bogus=1" % line in caplog.text
    assert "Wrote %s" % (tmp / "out.caffemodel") in caplog.text
    net = pycaffe_lite.Net(str(tmp / "out.prototxt"), str(tmp / "out.caffemodel"),
                           pycaffe_lite.TEST)
    assert net.blobs["data"].data.shape == (2, 3, 7, 10)
    image = np.random.default_rng(0).uniform(0, 1, (3, 7, 10))
    net.blobs["data"].data[...] = image
    net.forward()
    ref = darknet_forward(CLASSIFIER, data, image)[-1]
    np.testing.assert_allclose(net.blobs["softmax6"].data[1], ref, rtol=1e-5, atol=1e-7)
    solver = (tmp / "solver.prototxt").read_text()
    assert 'net: "out.prototxt"' in solver and 'lr_policy: "poly"' in solver


def test_caffemodel_name_defaults_to_the_prototxt(model):
    tmp, _ = model
    assert main(["darknet2caffe", str(tmp / "m.cfg"), str(tmp / "m.weights"),
                 str(tmp / "deploy.prototxt")]) == 0
    assert (tmp / "deploy.caffemodel").exists()


def test_structure_only(model):
    tmp, _ = model
    assert main(["darknet2caffe", str(tmp / "m.cfg"), str(tmp / "only.prototxt")]) == 0
    assert (tmp / "only.prototxt").exists() and not (tmp / "only.caffemodel").exists()


def test_errors_exit_1_with_the_line(model, capsys):
    tmp, _ = model
    (tmp / "bad.cfg").write_text("[net]\nwidth=4\nheight=4\nchannels=1\n\n[lstm]\n")
    assert main(["darknet2caffe", str(tmp / "bad.cfg"), str(tmp / "x.prototxt")]) == 1
    err = capsys.readouterr().err
    assert "pycaffe-lite darknet2caffe: error: %s:6: layer 0 [lstm]" % (tmp / "bad.cfg") in err
    (tmp / "short.weights").write_bytes(weights_bytes(random_params(CLASSIFIER, 4))[:-8])
    assert main(["darknet2caffe", str(tmp / "m.cfg"), str(tmp / "short.weights"),
                 str(tmp / "x.prototxt")]) == 1
    assert "the file ends early: layer 5 [connected]" in capsys.readouterr().err


@pytest.mark.parametrize("files,expected", [
    (["a.cfg", "a.weights", "b.prototxt", "b.caffemodel"],
     ("a.cfg", "a.weights", "b.prototxt", "b.caffemodel")),
    (["a.cfg", "b.prototxt", "a.weights"], ("a.cfg", "a.weights", "b.prototxt", "b.caffemodel")),
    (["a.cfg", "b.prototxt"], ("a.cfg", None, "b.prototxt", None)),
])
def test_split_files(files, expected):
    assert split_files(files) == expected


@pytest.mark.parametrize("files", [["a.cfg"], ["a.cfg", "a.weights"],
                                   ["a.cfg", "b.prototxt", "c.prototxt"]])
def test_split_files_errors(files):
    with pytest.raises(DarknetError):
        split_files(files)


def test_tools_script(model):
    tmp, _ = model
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "darknet2caffe.py"),
                           str(tmp / "m.cfg"), str(tmp / "m.weights"), str(tmp / "t.prototxt")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert (tmp / "t.caffemodel").exists()


@pytest.mark.parametrize("body,message", [
    ("[convolutional]\nfilters=5000000000\nsize=1\n",
     ":7: layer 0 [convolutional]: filters=5000000000 is out of range: allowed "
     "-2147483648..2147483647"),
    ("[convolutional]\nfilters=2\nsize=1\nstride=4294967296\n",
     ":9: layer 0 [convolutional]: stride=4294967296 is out of range: allowed "
     "-2147483648..2147483647"),
])
def test_integer_out_of_range_exits_1_with_the_line(tmp_path, capsys, body, message):
    cfg = tmp_path / "big.cfg"
    cfg.write_text("[net]\nwidth=4\nheight=4\nchannels=2\n\n" + body)
    out = tmp_path / "big.prototxt"
    assert main(["darknet2caffe", str(cfg), str(out)]) == 1
    err = capsys.readouterr().err
    assert "pycaffe-lite darknet2caffe: error: %s%s" % (cfg, message) in err
    assert not out.exists()
    # the installed command line: the message, exit status 1, no traceback
    proc = subprocess.run([sys.executable, "-m", "pycaffe_lite", "darknet2caffe", str(cfg),
                           str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    assert proc.returncode == 1
    assert "%s%s" % (cfg, message) in proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_batch_beyond_int_exits_1(model, capsys):
    tmp, _ = model
    assert main(["darknet2caffe", str(tmp / "m.cfg"), str(tmp / "b.prototxt"),
                 "--batch", "3000000000"]) == 1
    assert "batch_size must be in 1..2147483647, got 3000000000" in capsys.readouterr().err
