"""The command line against bad input a user really gives it: files of the wrong kind, empty
or missing files, outputs that cannot be written, flags with bad values. Each must end in one
line naming the file or flag and exit status 1 (2 for usage errors), never a traceback, a
silently wrong result or a half-written set of outputs."""

import os
import subprocess
import sys

import pytest

import pycaffe_lite as caffe
from pycaffe_lite import cli

DEPLOY = """\
name: "dep"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "prob" type: "Softmax" bottom: "z" top: "prob" }
"""

EVAL_NET = """\
name: "ev"
layer { name: "data" type: "DummyData" top: "x" top: "label"
        dummy_data_param { shape { dim: 8 dim: 3 } shape { dim: 8 }
                           data_filler { type: "gaussian" }
                           data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "z" bottom: "label" top: "loss" }
layer { name: "acc" type: "Accuracy" bottom: "z" bottom: "label" top: "acc" }
"""

TINY_CFG = """\
[net]
width=8
height=8
channels=3

[convolutional]
filters=2
size=3
stride=1
pad=1
activation=leaky
"""

# the first bytes of a JPEG file (SOI, APP0 JFIF): binary, not UTF-8
JPEG_BYTES = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00\xff\xdb"


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A folder (the working directory) with a deploy net, its weights, a TEST net with
    DummyData, a tiny Darknet cfg, an empty file, a text file and a JPEG."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deploy.prototxt").write_text(DEPLOY)
    (tmp_path / "eval.prototxt").write_text(EVAL_NET)
    (tmp_path / "tiny.cfg").write_text(TINY_CFG)
    (tmp_path / "empty.txt").write_bytes(b"")
    (tmp_path / "text.txt").write_text("hello world\nnot a model\n")
    (tmp_path / "img.jpg").write_bytes(JPEG_BYTES)
    (tmp_path / "adir").mkdir()
    caffe.Net(str(tmp_path / "deploy.prototxt"), caffe.TEST).save(str(tmp_path / "w.caffemodel"))
    return tmp_path


def run_main(argv, capsys):
    """``(exit status, the error line)`` of ``cli.main(argv)`` in this process; an exception
    escaping it fails the test (the user would see a traceback)."""
    capsys.readouterr()
    try:
        rc = cli.main(argv)
    except SystemExit as exc:
        rc = exc.code
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("pycaffe-lite ")]
    return rc, (lines[-1] if lines else "")


def process_env():
    """The environment of a child Python that imports this package (the tree under test)."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    root = os.path.dirname(os.path.dirname(os.path.abspath(caffe.__file__)))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def run_process(argv, cwd):
    """``(exit status, stderr)`` of ``python -m pycaffe_lite.cli argv`` as its own process."""
    result = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli"] + list(argv), cwd=cwd,
                            capture_output=True, text=True, timeout=600, env=process_env())
    assert "Traceback" not in result.stderr, result.stderr
    return result.returncode, result.stderr


# ---- import_onnx -------------------------------------------------------------------------
@pytest.mark.parametrize("name, needle", [("empty.txt", "the file is empty"),
                                          ("w.caffemodel", "no IR version or graph")])
def test_import_onnx_refuses_a_file_that_is_not_onnx(files, capsys, name, needle):
    """protobuf reads an empty file or a caffemodel as an empty ModelProto: that was written
    out as a net of no layers, exit status 0."""
    pytest.importorskip("onnx")
    rc, line = run_main(["import_onnx", name, "--output-prefix", "out"], capsys)
    assert rc == 1
    assert line.startswith("pycaffe-lite import_onnx: error: %s: not an ONNX model" % name)
    assert needle in line
    assert not os.path.exists("out.prototxt") and not os.path.exists("out.caffemodel")


# ---- evaluate ----------------------------------------------------------------------------
def test_evaluate_labels_file_that_is_not_text(files, capsys):
    """A binary file given as --labels raised UnicodeDecodeError (a traceback)."""
    rc, line = run_main(["evaluate", "--model", "eval.prototxt", "--weights", "w.caffemodel",
                         "--iterations", "1", "--labels", "img.jpg"], capsys)
    assert rc == 1
    assert line.startswith("pycaffe-lite evaluate: error: cannot read the labels file img.jpg")
    assert "not UTF-8" in line


def test_evaluate_json_that_is_a_directory(files, capsys):
    """--json naming a folder: refused before the run, and no stray 'adir.tmp' is left."""
    rc, line = run_main(["evaluate", "--model", "eval.prototxt", "--weights", "w.caffemodel",
                         "--iterations", "1", "--json", "adir"], capsys)
    assert rc == 1
    assert line == ("pycaffe-lite evaluate: error: --json adir: is a directory; give the name "
                    "of a file to write")
    assert sorted(os.listdir(files)) == sorted(["adir", "deploy.prototxt", "empty.txt",
                                                "eval.prototxt", "img.jpg", "text.txt",
                                                "tiny.cfg", "w.caffemodel"])


# ---- converters writing a prototxt and a caffemodel: all of them or none ------------------
def _left_alone(folder):
    """out.prototxt still holds what it held, and no temporary file is left in ``folder``."""
    assert (folder / "out.prototxt").read_text() == "KEEP"
    assert not [n for n in os.listdir(folder) if ".tmp" in n]


def test_darknet2caffe_writes_no_output_when_one_cannot_be_written(files, capsys):
    """The prototxt was replaced before the solver's missing folder failed the run."""
    (files / "out.prototxt").write_text("KEEP")
    rc, line = run_main(["darknet2caffe", "tiny.cfg", "out.prototxt", "--solver",
                         "nodir/s.prototxt"], capsys)
    assert rc == 1
    assert line.startswith("pycaffe-lite darknet2caffe: error: nodir/s.prototxt: cannot write")
    _left_alone(files)


def test_import_onnx_writes_no_output_when_one_cannot_be_written(files, capsys):
    """PREFIX.caffemodel a folder: PREFIX.prototxt was replaced all the same."""
    pytest.importorskip("onnx")
    assert run_main(["export_onnx", "--model", "deploy.prototxt", "--weights", "w.caffemodel",
                     "--output", "m.onnx"], capsys)[0] == 0
    (files / "out.prototxt").write_text("KEEP")
    (files / "out.caffemodel").mkdir()
    rc, line = run_main(["import_onnx", "m.onnx", "--output-prefix", "out"], capsys)
    assert rc == 1
    assert line.startswith("pycaffe-lite import_onnx: error: out.caffemodel: cannot write")
    assert "is a directory" in line
    _left_alone(files)


def test_import_mxnet_writes_no_output_when_one_cannot_be_written(files, capsys):
    (files / "m-symbol.json").write_text(
        '{"nodes": [{"op": "null", "name": "data", "inputs": []}, {"op": "Activation", '
        '"name": "relu1", "attrs": {"act_type": "relu"}, "inputs": [[0, 0, 0]]}], '
        '"arg_nodes": [0], "heads": [[1, 0, 0]]}')
    (files / "out.prototxt").write_text("KEEP")
    (files / "out.caffemodel").mkdir()
    rc, line = run_main(["import_mxnet", "--symbol", "m-symbol.json", "--params", "empty.txt",
                         "--output-prefix", "out", "--input-shape", "data=1,3"], capsys)
    assert rc == 1
    assert line.startswith("pycaffe-lite import_mxnet: error: out.caffemodel: cannot write")
    _left_alone(files)


# ---- export_onnx: a failed write keeps the previous file ----------------------------------
FILE_SIZE_LIMITED = """
import resource, signal, sys
from pycaffe_lite import cli
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (64, resource.RLIM_INFINITY))
sys.exit(cli.main(sys.argv[1:]))
"""


def test_export_onnx_that_cannot_be_written_keeps_the_previous_file(files):
    """The file size limit stops the write (a full disk): the model was saved straight into
    the output, truncating the previous one to the first 64 bytes of the new."""
    pytest.importorskip("onnx")
    previous = b"previous model " * 40
    (files / "m.onnx").write_bytes(previous)
    result = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMITED, "export_onnx", "--model", "deploy.prototxt",
         "--weights", "w.caffemodel", "--output", "m.onnx"], cwd=files, capture_output=True,
        text=True, timeout=600, env=process_env())
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "pycaffe-lite export_onnx: error: m.onnx: cannot write the ONNX model: no space " \
           "left" in result.stderr
    assert (files / "m.onnx").read_bytes() == previous
    assert not [n for n in os.listdir(files) if ".tmp" in n]


BIG_DEPLOY = """\
name: "big"
input: "x"
input_shape { dim: 1 dim: 64 }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 64 weight_filler { type: "gaussian" std: 0.1 } } }
"""


def test_export_pytorch_that_cannot_write_its_weights_keeps_the_previous_pair(files):
    """model.py and weights.pt belong together: with room for the module's source (about 900
    bytes) but not for its weights (about 17 KB), the new model.py replaced the old one beside
    the old weights.pt, a pair that no longer loads. Now neither file is replaced."""
    (files / "big.prototxt").write_text(BIG_DEPLOY)
    caffe.Net(str(files / "big.prototxt"), caffe.TEST).save(str(files / "big.caffemodel"))
    out = files / "out"
    out.mkdir()
    (out / "model.py").write_text("# the previous module\n")
    (out / "weights.pt").write_bytes(b"previous weights")
    limited = FILE_SIZE_LIMITED.replace("(64,", "(4096,")
    result = subprocess.run(
        [sys.executable, "-c", limited, "export_pytorch", "--model", "big.prototxt",
         "--weights", "big.caffemodel", "--output-dir", "out"], cwd=files,
        capture_output=True, text=True, timeout=600, env=process_env())
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert "pycaffe-lite export_pytorch: error: " in result.stderr
    assert "weights.pt: cannot write" in result.stderr and "no space left" in result.stderr
    assert (out / "model.py").read_text() == "# the previous module\n"
    assert (out / "weights.pt").read_bytes() == b"previous weights"
    assert sorted(os.listdir(out)) == ["model.py", "weights.pt"]


# ---- flags with bad values ---------------------------------------------------------------
@pytest.mark.parametrize("flag", ["abc", "-1", "0,x"])
def test_device_query_refuses_a_bad_gpu_flag(files, flag):
    """Without a GPU any --gpu value was accepted (exit 0, 'no CUDA device'): a typo in a
    script went unnoticed until it ran on a GPU machine."""
    rc, err = run_process(["device_query", "--gpu=" + flag], files)
    assert rc == 1
    assert err.startswith("pycaffe-lite device_query: error: --gpu")


@pytest.mark.parametrize("argv", [
    ["time", "--model", "deploy.prototxt", "--gpu=-1"],
    ["test", "--model", "eval.prototxt", "--weights", "w.caffemodel", "--gpu=-1"],
    ["time", "--model", "deploy.prototxt", "--gpu=0,-2"]])
def test_a_negative_gpu_id_is_refused_naming_the_flag(files, capsys, argv):
    """time and test said 'device id must be >= 0' without naming --gpu (device_query did)."""
    rc, line = run_main(argv, capsys)
    assert rc == 1
    assert line.startswith("pycaffe-lite %s: error: --gpu: device id must be >= 0, got -"
                           % argv[0]), line


@pytest.mark.parametrize("argv, flag", [
    (["convert_imageset", "--resize_width=-5", "--resize_height=3"], "--resize_width"),
    (["convert_imageset", "--resize_width=4", "--resize_height=-4"], "--resize_height"),
    (["convert_annoset", "--min_dim=-3"], "--min_dim"),
    (["convert_annoset", "--max_dim=-1"], "--max_dim"),
])
def test_negative_image_sizes_are_usage_errors(files, capsys, argv, flag):
    """A negative size was taken as 'not set' (the images were stored unresized, exit 0)."""
    (files / "list.txt").write_text("img.jpg 0\n")
    rc, line = run_main(argv + [str(files) + "/", "list.txt", "db"], capsys)
    assert rc == 2
    assert line.startswith("pycaffe-lite %s: error: argument %s: a size in pixels >= 0"
                           % (argv[0], flag))
    assert not os.path.exists("db")


@pytest.mark.parametrize("argv", [
    ["test", "--model", "eval.prototxt", "--iterations", "1"],
    ["evaluate", "--model", "eval.prototxt", "--iterations", "1"],
    ["train", "--solver", "solver.prototxt"],
])
def test_weights_flag_naming_no_file(files, capsys, argv):
    """``--weights ,`` (an unset variable in 'a.caffemodel,$B'): test scored the fillers'
    random weights and train started from scratch, both with exit 0; evaluate said
    'weights file not found' naming no file."""
    (files / "snaps").mkdir()
    (files / "solver.prototxt").write_text('net: "eval.prototxt"\nbase_lr: 0.01\n'
                                           'lr_policy: "fixed"\nmax_iter: 1\n'
                                           'snapshot_prefix: "snaps/run"\n'
                                           'snapshot_after_train: false\n')
    rc, line = run_main(argv + ["--weights", ","], capsys)
    assert rc == 1
    assert line == ("pycaffe-lite %s: error: --weights ',' names no weights file (give file "
                    "names separated by ',')" % argv[0])
    assert os.listdir("snaps") == []


# ---- every command as its own process: one bad input each, one line, the right status -----
MATRIX = [
    (["compare", "--model", "nope.prototxt"], 2, "nope.prototxt: file not found"),
    (["compute_image_mean", "img.jpg", "out.binaryproto"], 1, "'img.jpg' is not a LMDB"),
    (["convert_annoset", "./", "nope.txt", "db"], 1, "list file 'nope.txt' not found"),
    (["convert_cifar_data", "adir", "out", "lmdb"], 1, "'adir/data_batch_1.bin' not found"),
    (["convert_imageset", "./", "adir", "db"], 1, "list file 'adir': Is a directory"),
    (["convert_mnist", "text.txt", "text.txt", "db"], 1, "magic in 'text.txt'"),
    (["convert_mnist_data", "empty.txt", "empty.txt", "db"], 1, "'empty.txt' is too short"),
    (["convert_mnist_siamese_data", "img.jpg", "img.jpg", "db"], 1, "magic in 'img.jpg'"),
    (["darknet2caffe", "text.txt", "out.prototxt"], 1, "text.txt:1: option 'hello world'"),
    (["device_query", "--gpu", "x"], 1, "--gpu takes device ids"),
    (["download_model", "text.txt"], 1, "cannot read text.txt/readme.md"),
    (["draw_net", "text.txt", "out.dot"], 1, "text.txt:1:1: cannot parse"),
    (["evaluate", "--model", "eval.prototxt", "--weights", "text.txt"], 1,
     "text.txt: this is a text file"),
    (["export_onnx", "--model", "deploy.prototxt", "--weights", "w.caffemodel", "--output",
      "adir"], 1, "adir: cannot write the ONNX model"),
    (["export_pytorch", "--model", "deploy.prototxt", "--weights", "img.jpg", "--output-dir",
      "pt"], 1, "img.jpg: cannot decode"),
    (["extract_features", "w.caffemodel", "deploy.prototxt", "prob", "db", "x", "lmdb"], 1,
     "num_mini_batches must be an integer, got 'x'"),
    (["import_mxnet", "--symbol", "img.jpg", "--params", "empty.txt", "--output-prefix", "o"],
     1, "img.jpg: byte offset 0: not UTF-8"),
    (["import_onnx", "text.txt", "--output-prefix", "o"], 1, "text.txt: cannot read as an ONNX"),
    (["quantize", "--model", "eval.prototxt", "--weights", "w.caffemodel",
      "--calibration_iterations", "1", "--output_dir", "text.txt"], 1,
     "--output_dir text.txt is a file, not a folder"),
    (["summary", "--model", "empty.txt"], 1, "empty.txt: file is empty"),
    (["test", "--model", "eval.prototxt", "--weights", "adir"], 1, "adir: is a directory"),
    (["time", "--model", "w.caffemodel", "--iterations", "0"], 1, "--iterations must be >= 1"),
    (["train", "--solver", "deploy.prototxt"], 1, "deploy.prototxt:1:1: cannot parse"),
    (["upgrade_net_proto_binary", "text.txt", "out.caffemodel"], 2, "text.txt: cannot decode"),
    (["upgrade_net_proto_text", "img.jpg", "out.prototxt"], 2, "img.jpg:1:1: cannot parse"),
    (["upgrade_solver_proto_text", "deploy.prototxt", "out.prototxt"], 2,
     "deploy.prototxt:1:1: cannot parse"),
]


@pytest.mark.slow   # a Python process per command
@pytest.mark.parametrize("argv, status, needle", MATRIX, ids=[m[0][0] for m in MATRIX])
def test_every_command_in_a_process(files, argv, status, needle):
    rc, err = run_process(argv, files)
    assert rc == status, err
    assert needle in err, err
    assert not [n for n in os.listdir(files) if n.startswith(("out", "db", "pt", "o."))]


def test_the_matrix_covers_every_command():
    from pycaffe_lite.commands import MODULE_OF
    assert sorted(m[0][0] for m in MATRIX) == sorted(MODULE_OF)
