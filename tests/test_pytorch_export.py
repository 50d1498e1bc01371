"""export_pytorch against PyTorch 2.x itself.

- Whole nets (LeNet trained here on real MNIST digits, the zoo's deploy nets and the two
  public SSD deploy nets with random weights): the exported model.py and weights.pt, run in a
  process where importing pycaffe_lite is impossible (one for the module's checks), give our
  forward's outputs to 1e-5 of their largest magnitude.
- Every layer type, one layer at a time (the ONNX tests' cases, tricky parameters included),
  every top compared through forward hooks; the generated code compiles and passes ruff.
- ``--train``: the module fine-tunes in PyTorch (the loss falls) with Caffe's BatchNorm
  statistics.
"""

import json
import os
import queue
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is a test dependency (marker: torch)")

import pycaffe_lite as caffe  # noqa: E402
import test_onnx_export as onnx_cases  # noqa: E402
import test_onnx_forks as fork_cases  # noqa: E402
from helpers.onnx_runtime import fill_random, input_layers, net_from_text  # noqa: E402
from pycaffe_lite.proto import protoio  # noqa: E402
from pycaffe_lite.errors import CaffeError  # noqa: E402
from pycaffe_lite.proto import caffe_pb2  # noqa: E402
from pycaffe_lite.pytorch import GENERATORS, export  # noqa: E402
from pycaffe_lite.pytorch.codegen import HELPERS  # noqa: E402
from pycaffe_lite.pytorch.compare import PyTorch, compare, load_module  # noqa: E402
from test_model_zoo import fill_random as zoo_fill_random, path as zoo_path  # noqa: E402
import test_onnx_models  # noqa: E402
from test_ssd_opencv import DATA as SSD_DATA, random_weights as ssd_weights  # noqa: E402

pytestmark = pytest.mark.torch
LENET = test_onnx_models.LENET

HERE = os.path.dirname(os.path.abspath(__file__))
RTOL = 1e-5


# ---- whole nets, run without pycaffe_lite ----------------------------------------------

def export_with_expectation(net, feeds, folder):
    """Exports ``net`` into ``folder`` with inputs.npz and our outputs as expected.npz."""
    ours = {k: v.copy() for k, v in net.forward(**feeds).items()}
    report = export(net, str(folder))
    np.savez(folder / "inputs.npz", __order__=np.array(report["inputs"]), **feeds)
    np.savez(folder / "expected.npz", **{n: ours[n] for n in report["outputs"]})
    return report


class Standalone:
    """tests/helpers/pytorch_standalone_check.py --serve: one process for the module's
    checks, where importing pycaffe_lite is impossible (PyTorch is imported once, not once a
    test). ``run(folders)`` is the script's answer for them."""

    GUARD_S = 600  # a guard against a hang only

    def __init__(self, cwd):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        script = os.path.join(HERE, "helpers", "pytorch_standalone_check.py")
        self.errors = open(os.path.join(str(cwd), "stderr.txt"), "w+")  # read on a failure
        self.proc = subprocess.Popen([sys.executable, script, "--serve"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.errors, text=True,
                                     env=env, cwd=str(cwd))
        self.lines = queue.Queue()  # its answers; None once its output ends
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def run(self, folders):
        self.proc.stdin.write(json.dumps([str(f) for f in folders]) + "\n")
        self.proc.stdin.flush()
        try:
            line = self.lines.get(timeout=self.GUARD_S)
        except queue.Empty:
            line = None
        if line is None:  # it ended (or hangs): its error output says why
            self.proc.kill()
            self.errors.seek(0)
            pytest.fail("the standalone check ended: %s" % self.errors.read()[-3000:])
        answer = json.loads(line)
        assert "error" not in answer, answer.get("error")
        return answer

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()
        self.errors.close()


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    checker = Standalone(tmp_path_factory.mktemp("standalone"))
    yield checker
    checker.close()


def assert_standalone_matches(standalone, folders):
    results = standalone.run(folders)
    assert sorted(results) == sorted(str(f) for f in folders)
    for folder, diffs in results.items():
        assert diffs, folder
        for name, (abs_diff, rel) in diffs.items():
            assert rel is not None and rel <= RTOL, "%s %s: %s" % (folder, name, abs_diff)


def test_the_standalone_process_refuses_an_import_of_pycaffe_lite(tmp_path, standalone):
    """The checks' process: a model.py that imports pycaffe_lite fails there with the
    blocker's error, and the process answers the next check."""
    (tmp_path / "model.py").write_text("import pycaffe_lite\n\n\ndef load():\n    pass\n")
    with pytest.raises(AssertionError, match="the exported module must not import pycaffe_lite"):
        standalone.run([tmp_path])
    with pytest.raises(AssertionError, match="No such file"):
        standalone.run([tmp_path / "missing"])


def zoo_net(key, size=None):
    """A zoo deploy net (TEST, unfolded) with random weights, its input resized to ``size``
    where the net allows it (global pooling before the classifier)."""
    param = protoio.read_net_param(zoo_path(key))
    if size is not None:
        dims = param.layer[0].input_param.shape[0].dim
        dims[2] = dims[3] = size
    param.state.phase = caffe_pb2.TEST
    caffe.set_random_seed(11)
    net = caffe.Net.from_param(param)
    rng = zoo_fill_random(net, seed=sum(map(ord, key)))
    return net, {"data": rng.uniform(-1, 1, net.blobs["data"].shape).astype(np.float32)}


def test_lenet_and_small_zoo_nets_run_without_pycaffe_lite(trained_lenet, tmp_path, standalone):
    _, weights, _ = trained_lenet
    folders = []
    net = caffe.Net(os.path.join(LENET, "lenet.prototxt"), str(weights), caffe.TEST)
    x = np.random.default_rng(0).uniform(0, 1, net.blobs["data"].shape).astype(np.float32)
    folders.append(tmp_path / "lenet")
    export_with_expectation(net, {"data": x}, folders[-1])
    for key, size in (("squeezenet1.1", 99), ("mobilenet", 96)):
        net, feeds = zoo_net(key, size)
        folders.append(tmp_path / key)
        assert export_with_expectation(net, feeds, folders[-1])["outputs"] == ["prob"]
    assert_standalone_matches(standalone, folders)
    # the files are what the issue names: one class, load(), a state_dict
    text = (tmp_path / "lenet" / "model.py").read_text()
    assert "class LeNet(nn.Module):" in text and "def load(device=\"cpu\"):" in text
    assert "pycaffe_lite" not in text
    state = torch.load(str(tmp_path / "lenet" / "weights.pt"))
    np.testing.assert_array_equal(state["conv1.weight"].numpy(), net_params(weights, "conv1"))


def net_params(weights, layer):
    net = caffe.Net(os.path.join(LENET, "lenet.prototxt"), str(weights), caffe.TEST,
                    fold=False)
    return net.params[layer][0].data


@pytest.mark.slow
@pytest.mark.parametrize("key", ["caffenet", "googlenet", "resnet50", "vgg16"])
def test_zoo_net_runs_without_pycaffe_lite(key, tmp_path, filled_zoo_net, standalone):
    net, x = filled_zoo_net(key)  # as zoo_net(key) builds it, shared with the other zoo tests
    export_with_expectation(net, {"data": x}, tmp_path)
    assert_standalone_matches(standalone, [tmp_path])


@pytest.mark.slow
@pytest.mark.parametrize("name,conf_scale", [("res10_deploy.prototxt", 0.2),
                                             ("mobilenet_ssd_deploy.prototxt", 1.0)])
def test_ssd_deploy_net_runs_without_pycaffe_lite(name, conf_scale, tmp_path, standalone):
    caffe.set_random_seed(3)
    param = protoio.read_net_param(os.path.join(SSD_DATA, name))
    param.state.phase = caffe_pb2.TEST
    net = caffe.Net.from_param(param)
    ssd_weights(net, 0, conf_scale)
    x = np.random.default_rng(0).uniform(-1, 1, net.blobs["data"].shape).astype(np.float32)
    export_with_expectation(net, {"data": x}, tmp_path)
    found = np.load(tmp_path / "expected.npz")["detection_out"].reshape(-1, 7)
    assert len(found) >= 20 and (found[:, 1] >= 0).all()  # real detections to compare
    assert_standalone_matches(standalone, [tmp_path])


# ---- one layer at a time ---------------------------------------------------------------

LAYER_CASES = {}
for _key, (_text, _shapes) in onnx_cases.CASES.items():
    LAYER_CASES[_key] = (_text, _shapes, "caffe")
for _key, (_text, _shapes) in fork_cases.CASES.items():
    LAYER_CASES["fork_" + _key] = (_text, _shapes, "fork")
for _key in fork_cases.DET_CASES:
    LAYER_CASES["detection_" + _key] = (None, None, "detection")
# the adaptive threshold, which ONNX cannot express, and inverted boxes
LAYER_CASES["detection_adaptive_eta"] = (None, None, "detection")
EXTRA = {
    "pool_max_pad_over_half_kernel": onnx_cases.pool("pool: MAX kernel_size: 3 stride: 2 pad: 2",
                                                     7, 7),
    "pool_ave_pad_over_half_kernel": onnx_cases.pool("pool: AVE kernel_size: 3 stride: 3 pad: 2",
                                                     8, 7),
    "deconv_dilation_group_bias_off": onnx_cases.one(
        "Deconvolution", "convolution_param { num_output: 6 kernel_h: 3 kernel_w: 2 stride: 3 "
        "pad: 2 dilation: 2 group: 2 bias_term: false }"),
    "scale_two_bottoms_bias": onnx_cases.one("Scale", "scale_param { axis: 1 bias_term: true }",
                                             {"data": (2, 4, 3, 3), "s": (4, 3)},
                                             ("data", "s")),
    "bias_two_bottoms": onnx_cases.one("Bias", "bias_param { axis: 2 }",
                                       {"data": (2, 4, 3, 5), "b": (3, 5)}, ("data", "b")),
    "scale_scalar_bias": onnx_cases.one("Scale", "scale_param { num_axes: 0 bias_term: true }"),
    "power_zero": onnx_cases.one("Power", "power_param { power: 0 scale: 0 shift: 3 }"),
}
for _key, (_text, _shapes) in EXTRA.items():
    LAYER_CASES[_key] = (_text, _shapes, "caffe")


def layer_problem(key):
    text, shapes, kind = LAYER_CASES[key]
    if kind == "detection":
        name = key[len("detection_"):]
        if name == "adaptive_eta":
            params, options = (fork_cases.DET.replace("nms_threshold: 0.45",
                                                      "nms_threshold: 0.8 eta: 0.7"), {})
        else:
            params, options = fork_cases.DET_CASES[name]
        return fork_cases.detection_problem(params, **options)
    net = net_from_text(text)
    rng = fill_random(net, seed=sum(map(ord, key)))
    if kind == "fork":
        return net, fork_cases.feeds_for(shapes, rng)
    return net, onnx_cases.inputs_for(key, net, shapes, rng)


@pytest.mark.parametrize("key", sorted(LAYER_CASES))
def test_layer_matches_our_forward_top_by_top(key, tmp_path):
    net, feeds = layer_problem(key)
    engine = PyTorch(None, None, net, folder=str(tmp_path))
    rows, first = compare(net, [engine], feeds, RTOL)
    assert rows or key == "split"  # a Split's tops are its bottom's variable: no layer
    with torch.no_grad():
        out = engine.module(*[torch.from_numpy(feeds[n]) for n in engine.report["inputs"]])
    ours = net.forward(**feeds)
    if not isinstance(out, dict):
        out = {engine.report["outputs"][0]: out}
    assert sorted(out) == sorted(ours)
    for name, value in ours.items():
        np.testing.assert_allclose(out[name].numpy(), value, rtol=RTOL,
                                   atol=RTOL * float(np.abs(value).max()), err_msg=name)
    for layer, blob, diffs in rows:
        assert diffs["pytorch"] is not None, "%s: no PyTorch value for %s" % (layer, blob)
        assert diffs["pytorch"][1] <= RTOL, "%s %s: %s" % (layer, blob, diffs["pytorch"])
    assert first == {"pytorch": None}
    if key.startswith("detection_") and "nothing" not in key and "none" not in key \
            and "candidates" not in key:
        assert net.blobs["det"].shape[2] >= 7  # real detections, in the layer's order


def test_adaptive_eta_changes_the_detections():
    """The case above is a real test of eta: without it, other boxes survive."""
    rows = []
    for extra in ("eta: 0.7", ""):
        net, feeds = fork_cases.detection_problem(fork_cases.DET.replace(
            "nms_threshold: 0.45", "nms_threshold: 0.8 " + extra))
        rows.append(net.forward(**feeds)["det"].copy())
    assert rows[0].shape != rows[1].shape or not np.array_equal(rows[0], rows[1])


def test_every_onnx_type_has_a_generator_and_is_covered():
    from pycaffe_lite.onnx import CONVERTERS

    # Split is no generator: its tops are the bottom's variable
    assert set(CONVERTERS) - {"Split"} <= set(GENERATORS), set(CONVERTERS) - set(GENERATORS)
    covered = {"DetectionOutput"}
    for text, _, kind in LAYER_CASES.values():
        if text is not None:
            covered.add(text.split('type: "')[-1].split('"')[0])
    assert set(GENERATORS) | {"Split"} <= covered, set(GENERATORS) - covered


def test_caffe_pooling_geometry_is_spelled_out():
    """PyTorch rejects a padding over half the kernel: those layers get CaffePool2d (checked
    against our forward above); ceil-mode pooling with the last window clipped is native."""
    net, _ = layer_problem("pool_max_pad_over_half_kernel")
    from pycaffe_lite.pytorch import generate

    text, _, _ = generate(net)
    assert "CaffePool2d('MAX', (3, 3), (2, 2), (2, 2))" in text
    net, _ = layer_problem("max_pool_clipped_last_window")
    text, _, _ = generate(net)
    assert "nn.MaxPool2d(2, stride=2, padding=1, ceil_mode=True)" in text


# ---- the code itself -------------------------------------------------------------------

def _ruff():
    exe = shutil.which("ruff") or os.path.join(os.path.dirname(sys.executable), "ruff")
    return exe if os.path.exists(exe) else None


def test_generated_code_passes_ruff_and_names_layers_after_caffe(tmp_path):
    text = input_layers({"data": (2, 3, 8, 8)}) + """
layer { name: "conv1/3x3" type: "Convolution" bottom: "data" top: "conv1/3x3"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 } }
layer { name: "conv1/relu" type: "ReLU" bottom: "conv1/3x3" top: "conv1/3x3" }
layer { name: "class" type: "Pooling" bottom: "conv1/3x3" top: "2pool"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "forward" type: "Slice" bottom: "2pool" top: "lambda" top: "b"
        slice_param { axis: 1 slice_point: 2 } }
layer { name: "a very long layer name that goes on and on and on for quite a while" type: "Eltwise"
        bottom: "lambda" bottom: "lambda" top: "sum" eltwise_param { coeff: 0.5 coeff: 2 } }
layer { name: "loss" type: "EuclideanLoss" bottom: "sum" bottom: "b" top: "loss" }
"""
    net = net_from_text(text)
    fill_random(net)
    report = export(net, str(tmp_path))
    assert report["dropped"] == [("loss", "EuclideanLoss")]
    assert [a for _, a, _ in report["layers"]] == [
        "conv1_3x3", "conv1_relu", "class_", "forward_", "a_very_long_layer_name_that_goes_on_"
        "and_on_and_on_for_quite_a_while"]
    assert report["outputs"] == ["b", "sum"]
    source = (tmp_path / "model.py").read_text()
    compile(source, "model.py", "exec")
    assert "conv1_3x3 = self.conv1_relu(conv1_3x3)" in source  # in place: the same name
    assert "_2pool = self.class_(conv1_3x3)" in source
    assert "return {'b': b, 'sum': sum}" in source
    ruff = _ruff()
    if ruff is None:
        pytest.skip("ruff is not installed")
    # and every helper class a model.py may hold, in one file
    helpers = tmp_path / "helpers"
    helpers.mkdir()
    (helpers / "all_helpers.py").write_text(
        "import math\n\nimport torch\nimport torch.nn.functional as F\nfrom torch import nn"
        "\n\n\n" + "\n\n".join(HELPERS.values()) + "\n\n\nUSED = (math, F)\n")
    for config in (["--isolated"], ["--config", os.path.join(HERE, "..", "pyproject.toml")]):
        out = subprocess.run([ruff, "check", "--no-cache"] + config + [str(tmp_path)],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stdout + out.stderr
    module = load_module(str(tmp_path)).load()
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    net.forward(data=x)  # (our net's output is the loss)
    theirs = module(torch.from_numpy(x))
    for name in ("sum", "b"):
        np.testing.assert_allclose(theirs[name].detach().numpy(), net.blobs[name].data, rtol=1e-5,
                                   atol=1e-6)


def test_unknown_layer_type_is_an_error_naming_it(tmp_path):
    net = net_from_text(input_layers({"data": (1, 2, 5, 5)}) + """
layer { name: "cols" type: "Im2col" bottom: "data" top: "out"
        convolution_param { kernel_size: 3 } }""")
    with pytest.raises(CaffeError, match=r"layer 'cols' of type Im2col has no PyTorch "
                                         r"equivalent; it cannot be exported"):
        export(net, str(tmp_path))
    assert not (tmp_path / "model.py").exists()


def test_pooling_with_a_window_outside_the_input_is_refused(tmp_path):
    # PyTorch's ceil mode drops a last window that starts past the input; Caffe keeps it
    # where there is no pad (kernel 2, stride 3 over 6 rows: 3 windows)
    net = net_from_text(input_layers({"data": (1, 1, 6, 3)}) + """
layer { name: "pool" type: "Pooling" bottom: "data" top: "out"
        pooling_param { pool: AVE kernel_size: 2 stride: 3 } }""")
    assert net.blobs["out"].shape == (1, 1, 3, 2)
    with pytest.raises(CaffeError, match="layer 'pool' \\(type Pooling\\): kernel 2, stride "
                                         "3, pad 0 over height 6 gives 3 windows.*PyTorch "
                                         "pooling has no such window"):
        export(net, str(tmp_path))
    assert not (tmp_path / "model.py").exists()


def test_weights_file_is_read_by_torch_load(tmp_path):
    """weights.pt is written without torch; torch.load (weights_only) reads every shape,
    in order, bit for bit."""
    from collections import OrderedDict

    from pycaffe_lite.pytorch.weights_file import save_state_dict

    rng = np.random.default_rng(0)
    weights = OrderedDict([("a.weight", rng.normal(size=(3, 2, 5, 5))), ("a.bias", np.arange(3)),
                           ("scalar", np.float32(2.5)), ("empty", np.zeros((0, 4))),
                           ("big", rng.normal(size=70000)), ("ünïcode.w", np.ones((1, 1)))])
    save_state_dict(weights, str(tmp_path / "w.pt"))
    state = torch.load(str(tmp_path / "w.pt"), weights_only=True)
    assert list(state) == list(weights)
    for name, value in weights.items():
        t = state[name]
        assert t.dtype == torch.float32 and tuple(t.shape) == np.shape(value)
        np.testing.assert_array_equal(t.numpy(), np.asarray(value, np.float32))
    # and PyTorch's own file of the same tensors loads the same
    torch.save(state, str(tmp_path / "theirs.pt"))
    again = torch.load(str(tmp_path / "theirs.pt"), weights_only=True)
    assert all(torch.equal(again[k], state[k]) for k in state)
