"""The ``export_pytorch`` and ``compare`` commands: the export checked against our forward,
``--train`` fine-tuning in PyTorch with Caffe's BatchNorm statistics, and ``compare`` over
OpenCV, onnxruntime and PyTorch finding a weight planted in one engine's copy at its
layer."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is a test dependency (marker: torch)")

import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite import cli  # noqa: E402
from pycaffe_lite.pytorch.compare import compare, load_module, prepare  # noqa: E402
from pycaffe_lite.pytorch.export import build_net  # noqa: E402

pytestmark = pytest.mark.torch

LENET = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models",
                     "lenet", "lenet.prototxt")

SMALL = """name: "small"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 16 dim: 3 dim: 6
        dim: 6 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 8 kernel_size: 3 pad: 1 bias_term: false
        weight_filler { type: "msra" } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: AVE kernel_size: 3 stride: 2 } }
layer { name: "drop" type: "Dropout" bottom: "pool" top: "pool"
        dropout_param { dropout_ratio: 0.2 } }
layer { name: "fc" type: "InnerProduct" bottom: "pool" top: "fc"
        inner_product_param { num_output: 4 weight_filler { type: "xavier" } } }
"""


@pytest.fixture
def small(tmp_path):
    proto = tmp_path / "small.prototxt"
    proto.write_text(SMALL)
    caffe.set_random_seed(5)
    net = caffe.Net(str(proto), caffe.TEST)
    rng = np.random.default_rng(5)
    bn = net.params["bn"]
    bn[0].data[...] = rng.normal(0, 0.3, 8) * 2  # the sums, scaled by the factor 2
    bn[1].data[...] = rng.uniform(0.5, 1.5, 8) * 2
    bn[2].data[...] = 2
    net.params["scale"][0].data[...] = rng.uniform(0.5, 1.5, 8)
    weights = tmp_path / "small.caffemodel"
    net.save(str(weights))
    return proto, weights


def test_export_command_checks_against_our_forward(small, tmp_path, capsys):
    proto, weights = small
    out = tmp_path / "out"
    assert cli.main(["export_pytorch", "--model", str(proto), "--weights", str(weights),
                     "--output-dir", str(out), "--class-name", "Small"]) == 0
    printed = capsys.readouterr().out
    assert "class Small: inputs data; outputs fc" in printed
    assert "output fc: largest difference" in printed and "over the tolerance" not in printed
    assert "class Small(nn.Module):" in (out / "model.py").read_text()
    # a tolerance that no float computation in another order meets: the check fails
    assert cli.main(["export_pytorch", "--model", str(proto), "--weights", str(weights),
                     "--output-dir", str(out), "--tolerance", "0"]) == 1
    assert "over the tolerance 0" in capsys.readouterr().out


TRAIN_TEST = """name: "tt"
layer { name: "mnist" type: "Data" top: "data" top: "label"
        data_param { source: "%s" batch_size: 4 backend: LMDB } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "xavier" }
                              bias_filler { type: "uniform" } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def test_export_command_takes_a_train_test_net(tmp_path, capsys):
    """A train/test prototxt (a Data layer; the label read by Accuracy and the loss through a
    Split): the module takes the images only and returns the scores, and the check runs."""
    from helpers.mpi import make_lmdb

    proto = tmp_path / "tt.prototxt"
    proto.write_text(TRAIN_TEST % make_lmdb(tmp_path / "db", n=8, shape=(1, 2, 2)))
    net = caffe.Net(str(proto), caffe.TEST)
    weights = tmp_path / "tt.caffemodel"
    net.save(str(weights))
    w, b = (np.array(p.data, np.float64) for p in net.params["ip"])
    net.close()
    out = tmp_path / "out"
    assert cli.main(["export_pytorch", "--model", str(proto), "--weights", str(weights),
                     "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "class tt: inputs data; outputs ip" in printed
    assert "output ip: largest difference" in printed and "over the tolerance" not in printed
    module = load_module(str(out)).load()
    x = np.random.default_rng(3).normal(size=(5, 1, 2, 2)).astype(np.float32)
    with torch.no_grad():
        scores = module(torch.from_numpy(x)).numpy()  # the images alone
    np.testing.assert_allclose(scores, x.reshape(5, 4).astype(np.float64) @ w.T + b,
                               rtol=1e-5, atol=1e-6)


def test_compare_refuses_a_net_that_reads_its_own_data(tmp_path, capsys):
    """compare gives every engine one input through Input layers: a train/test net (a Data
    layer) is bad input, named, rather than three engines failing each in its own way."""
    from helpers.mpi import make_lmdb

    proto = tmp_path / "tt.prototxt"
    proto.write_text(TRAIN_TEST % make_lmdb(tmp_path / "db", n=8, shape=(1, 2, 2)))
    assert cli.main(["compare", "--model", str(proto), "--engines", "pytorch"]) == 2
    assert capsys.readouterr().err.strip() == (
        "pycaffe-lite compare: error: %s: layer 'mnist' (type Data) reads its own data, which "
        "compare cannot give the other engines; compare the deploy net, whose inputs are "
        "Input layers" % proto)


def test_export_command_errors(small, tmp_path, capsys, monkeypatch):
    proto, weights = small
    assert cli.main(["export_pytorch", "--model", str(proto), "--output-dir", str(tmp_path)]) == 1
    assert "no --weights" in capsys.readouterr().err
    assert not (tmp_path / "weights.pt").exists()
    assert cli.main(["export_pytorch", "--model", str(proto), "--output-dir", str(tmp_path),
                     "--weights", str(weights), "--random_weights"]) == 1
    assert "exclude each other" in capsys.readouterr().err
    assert cli.main(["export_pytorch", "--model", str(proto), "--output-dir", str(tmp_path),
                     "--random_weights", "--class-name", "class"]) == 1
    assert "--class-name 'class' is not a usable Python class name" in capsys.readouterr().err
    assert cli.main(["export_pytorch", "--model", str(tmp_path / "none.prototxt"),
                     "--random_weights", "--output-dir", str(tmp_path)]) == 1
    assert "none.prototxt" in capsys.readouterr().err
    # without torch the files are written all the same (weights.pt needs no torch)
    monkeypatch.setitem(sys.modules, "torch", None)
    assert cli.main(["export_pytorch", "--model", str(proto), "--weights", str(weights),
                     "--output-dir", str(tmp_path / "no_torch")]) == 0
    assert "torch is not installed" in capsys.readouterr().out
    assert (tmp_path / "no_torch" / "weights.pt").exists()


def test_train_form_fine_tunes_with_caffe_batch_norm(small, tmp_path, capsys):
    proto, weights = small
    out = tmp_path / "train"
    assert cli.main(["export_pytorch", "--model", str(proto), "--weights", str(weights),
                     "--output-dir", str(out), "--train"]) == 0  # eval form: our forward
    text = (out / "model.py").read_text()
    bn = "BatchNorm(8, eps=1e-05, momentum=0.999, use_global_stats=True, trainable=%s)"
    assert "nn.Dropout(0.2)" in text and bn % True in text
    model = load_module(str(out)).load()
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.uniform(-1, 1, (16, 3, 6, 6)).astype(np.float32))

    # one training forward: the batch's statistics, and the buffers updated as Caffe's
    # TRAIN-phase BatchNorm updates its blobs
    model.train()
    with torch.no_grad():
        model(x)
    ours = caffe.Net(str(proto), str(weights), caffe.TRAIN)
    ours.forward(data=x.numpy())
    for i, name in enumerate(("mean", "variance", "scale_factor")):
        np.testing.assert_allclose(getattr(model.bn, name).numpy(),
                                   ours.params["bn"][i].data.reshape(-1), rtol=1e-5, atol=1e-6)

    torch.manual_seed(0)
    labels = torch.from_numpy(rng.integers(0, 4, 16))
    optimiser = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses = []
    for _ in range(30):
        optimiser.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), labels)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert np.mean(losses[-5:]) < 0.5 * losses[0], losses
    # the deploy form has neither: Dropout is an identity, BatchNorm uses its buffers
    deploy = tmp_path / "deploy"
    assert cli.main(["export_pytorch", "--model", str(proto), "--weights", str(weights),
                     "--output-dir", str(deploy)]) == 0
    text = (deploy / "model.py").read_text()
    assert "nn.Identity()" in text and bn % False in text
    module = load_module(str(deploy)).load().train()
    with torch.no_grad():
        np.testing.assert_allclose(module(x).numpy(), caffe.Net(
            str(proto), str(weights), caffe.TEST).forward(data=x.numpy())["fc"], rtol=1e-5,
            atol=1e-5)


# ---- compare ---------------------------------------------------------------------------

def test_compare_agrees_on_lenet(capsys):
    assert cli.main(["compare", "--model", LENET]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0].split()[:8] == ["layer", "blob", "opencv", "abs", "opencv", "rel",
                                    "onnxruntime", "abs"]
    assert [ln.split()[0] for ln in lines[1:9]] == ["conv1", "pool1", "conv2", "pool2", "ip1",
                                                     "relu1", "ip2", "prob"]
    for engine in ("opencv", "onnxruntime", "pytorch"):
        assert "%s: agrees" % engine in printed


def _perturb(engine, layer):
    if engine.name == "pytorch":
        with torch.no_grad():
            getattr(engine.module, layer).weight[0, 0, 0, 0] += 0.5
    elif engine.name == "onnxruntime":
        from onnx import numpy_helper

        for i, init in enumerate(engine.model.graph.initializer):
            if init.name == layer + "/weight":
                w = numpy_helper.to_array(init).copy()
                w[0, 0, 0, 0] += 0.5
                engine.model.graph.initializer[i].CopyFrom(numpy_helper.from_array(w, init.name))
                break
        else:
            raise AssertionError("no initializer %s/weight" % layer)
    else:
        w = engine.net.getParam(layer, 0).copy()
        w[0, 0, 0, 0] += 0.5
        engine.net.setParam(engine.net.getLayerId(layer), 0, w)


@pytest.mark.parametrize("planted", ["opencv", "onnxruntime", "pytorch"])
def test_compare_finds_a_planted_divergence_at_its_layer(planted, tmp_path):
    pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    pytest.importorskip("onnxruntime", reason="onnxruntime is a test dependency")
    caffe.set_random_seed(2)
    net = build_net(LENET)
    weights = tmp_path / "w.caffemodel"
    net.save(str(weights))
    engines = prepare(["opencv", "onnxruntime", "pytorch"], LENET, weights, net)
    assert [e.name for e in engines] == ["opencv", "onnxruntime", "pytorch"]
    _perturb(next(e for e in engines if e.name == planted), "conv2")
    x = np.random.default_rng(1).uniform(-1, 1, (64, 1, 28, 28)).astype(np.float32)
    rows, first = compare(net, engines, {"data": x}, 1e-4)
    assert rows[first[planted]][:2] == ("conv2", "conv2")
    assert all(first[e] is None for e in first if e != planted)
    # before it, the engine agreed
    assert all(r[2][planted][1] <= 1e-4 for r in rows[:first[planted]])


def test_compare_skips_a_missing_engine_and_takes_inputs(tmp_path, capsys, monkeypatch):
    x = np.random.default_rng(2).uniform(0, 1, (3, 1, 28, 28)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    monkeypatch.setitem(sys.modules, "cv2", None)
    assert cli.main(["compare", "--model", LENET, "--engines", "opencv", "pytorch",
                     "--input", "data=%s" % (tmp_path / "x.npy")]) == 0
    printed = capsys.readouterr().out
    assert "skipped opencv: cv2 (opencv-python-headless) is not installed" in printed
    assert "pytorch: agrees" in printed and "opencv abs" not in printed


def test_compare_takes_an_image(tmp_path, capsys):
    from PIL import Image

    image = np.random.default_rng(3).integers(0, 256, (40, 30), dtype=np.uint8)
    Image.fromarray(image).save(tmp_path / "digit.png")
    assert cli.main(["compare", "--model", LENET, "--engines", "pytorch", "--input",
                     str(tmp_path / "digit.png")]) == 0
    assert "pytorch: agrees" in capsys.readouterr().out


@pytest.mark.parametrize("spec,message", [
    ("label=x.npy", "'label' is not an input of the net (inputs: data)"),
    ("data=missing.npy", "cannot read missing.npy as a .npy array"),
    ("data=wrong.npy", "shape (2, 28, 28), the net's input 'data' is (64, 1, 28, 28)"),
    ("nosuch.png", "no such image file"),
    ("data=x.prototxt", "--input data=x.prototxt: x.prototxt is not a .npy file (no NumPy "
                        "header)"),
])
def test_compare_bad_input_exits_2(spec, message, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    np.save(tmp_path / "wrong.npy", np.zeros((2, 28, 28), np.float32))
    (tmp_path / "x.prototxt").write_text('name: "not an array"\n')
    assert cli.main(["compare", "--model", LENET, "--input", spec]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert "allow_pickle" not in err


def test_compare_with_no_engine_installed_compared_nothing_and_fails(capsys, monkeypatch):
    for module in ("cv2", "onnxruntime", "torch"):
        monkeypatch.setitem(sys.modules, module, None)  # as if not installed
    assert cli.main(["compare", "--model", LENET]) == 3
    captured = capsys.readouterr()
    assert captured.out.count("skipped ") == 3 and "agrees" not in captured.out
    assert captured.err.strip().splitlines() == [
        "pycaffe-lite compare: error: nothing was compared: none of the engines asked for "
        "(opencv, onnxruntime, pytorch) is installed; install the tools extra (pip install "
        "'.[tools]' in pycaffe-lite's source tree) or name an installed engine with --engines"]


@pytest.mark.slow
@pytest.mark.parametrize("key", ["res10", "mobilenet_ssd", "googlenet"])
def test_compare_agrees_on_zoo_and_ssd_nets(key, tmp_path):
    """Every layer of the public SSD nets and of GoogLeNet, in every engine, within 1e-4
    of ours (OpenCV lists detections in another order: compared as sets of rows)."""
    pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    pytest.importorskip("onnxruntime", reason="onnxruntime is a test dependency")
    from test_model_zoo import fill_random, path
    from test_ssd_opencv import DATA, random_weights

    caffe.set_random_seed(3)
    if key in ("res10", "mobilenet_ssd"):
        model = os.path.join(DATA, key + "_deploy.prototxt")
        net = build_net(model)
        random_weights(net, 0, 0.2 if key == "res10" else 1.0)
    else:
        model = path(key)
        net = build_net(model)
        fill_random(net, 1)
    weights = tmp_path / "w.caffemodel"
    net.save(str(weights))
    engines = prepare(["opencv", "onnxruntime", "pytorch"], model, weights, net)
    x = np.random.default_rng(0).uniform(-1, 1, net.blobs["data"].shape).astype(np.float32)
    rows, first = compare(net, engines, {"data": x}, 1e-4)
    assert first == {"opencv": None, "onnxruntime": None, "pytorch": None}
    assert all(d is not None for _, _, diffs in rows for n, d in diffs.items()
               if n == "pytorch")
    if key in ("res10", "mobilenet_ssd"):
        assert net.blobs["detection_out"].shape[2] >= 20  # detections to compare


def test_an_engine_that_cannot_run_the_net_diverges(tmp_path, capsys):
    """OpenCV has no Reduction layer: a line saying so, the others compared, exit 1."""
    pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    proto = tmp_path / "reduction.prototxt"
    proto.write_text('layer { name: "data" type: "Input" top: "data" input_param { shape { '
                     'dim: 2 dim: 3 dim: 5 dim: 5 } } }\nlayer { name: "red" type: "Reduction" '
                     'bottom: "data" top: "red" reduction_param { axis: 1 } }\n')
    assert cli.main(["compare", "--model", str(proto), "--engines", "opencv", "pytorch"]) == 1
    printed = capsys.readouterr().out
    assert "opencv: cannot run the net:" in printed and "Reduction" in printed
    assert "pytorch: agrees" in printed


def test_the_command_line_names_the_engines_compare_knows():
    from pycaffe_lite.commands import compare as command
    from pycaffe_lite.pytorch import compare as engines

    assert command.ENGINES == engines.ENGINES


def test_compare_leaves_no_temporary_files(tmp_path):
    """Each run's exported PyTorch module went to a temporary folder that nothing removed: a
    run in a process of its own, with TMPDIR pointing at an empty folder, leaves it empty."""
    pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")
    import subprocess

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch))
    done = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli", "compare", "--model", LENET,
                           "--engines", "opencv", "pytorch"], env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "pytorch: agrees" in done.stdout
    assert sorted(p.name for p in scratch.iterdir()) == []
