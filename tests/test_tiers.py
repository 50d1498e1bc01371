"""The test tiers: every marker the tests use is registered, and conftest marks a module by the
dependencies its source uses; where a test dependency is not installed, the modules that need it
skip with the reason instead of failing the collection."""

import os
import re
import subprocess
import sys

from conftest import MODULE_MARKERS, module_markers

TESTS = os.path.dirname(os.path.abspath(__file__))


def test_every_marker_is_registered(pytestconfig):
    registered = {line.split(":")[0].strip() for line in pytestconfig.getini("markers")}
    used = set(MODULE_MARKERS) | {"slow", "gpu"}
    for folder, _, files in os.walk(TESTS):
        for name in files:
            if name.endswith(".py"):
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    used |= set(re.findall(r"pytest\.mark\.(\w+)", f.read()))
    builtin = {"parametrize", "skip", "skipif", "xfail", "usefixtures", "filterwarnings"}
    assert used - builtin <= registered, used - builtin - registered
    assert {"slow", "mpi", "onnx", "opencv", "torch", "fuzz", "gpu"} <= registered


def test_modules_are_marked_by_what_they_import():
    assert module_markers("import numpy as np\nimport pytest\n") == []
    assert module_markers("import cv2\nimport torch\n") == ["opencv", "torch"]
    assert module_markers('cv2 = pytest.importorskip("cv2")\n') == ["opencv"]
    assert module_markers("from helpers.onnx_runtime import run_ort\n") == ["onnx"]
    assert module_markers("from hypothesis import given\n") == ["fuzz"]
    assert module_markers("from helpers.mpi import Job\n") == ["mpi"]
    # a word in prose is not an import
    assert module_markers('"""compares with torch and onnx"""\n') == []


def test_this_suites_modules_carry_their_markers():
    def markers(name):
        with open(os.path.join(TESTS, name), encoding="utf-8") as f:
            return module_markers(f.read())

    assert "onnx" in markers("test_onnx_export.py")
    assert "opencv" in markers("test_opencv_interop.py")
    assert "mpi" in markers("test_parallel_mpi.py")
    assert "fuzz" in markers("test_fuzz.py")
    assert markers("test_blob.py") == []


HIDE_AND_COLLECT = """
import importlib.abc
import importlib.util
import sys

HIDDEN = set(sys.argv[1].split(","))


class Hide(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    \"\"\"Importing a hidden module (or one below it) fails as where it is not installed.\"\"\"

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            return importlib.util.spec_from_loader(name, self)
        return None

    def create_module(self, spec):
        raise ModuleNotFoundError("No module named %r" % spec.name, name=spec.name)

    def exec_module(self, module):
        pass


sys.meta_path.insert(0, Hide())
import pytest  # noqa: E402

sys.exit(pytest.main(["--collect-only", "-q", "-rs", "-p", "no:cacheprovider"] + sys.argv[2:]))
"""

# the modules of each distribution of the test extra (pytest itself aside)
TEST_EXTRA_MODULES = {
    "scipy": ["scipy"], "hypothesis": ["hypothesis"], "h5py": ["h5py"],
    "opencv-python-headless": ["cv2"], "plyvel": ["plyvel"], "matplotlib": ["matplotlib"],
    "grpcio-tools": ["grpc_tools"], "mpi4py": ["mpi4py"], "mpich": [], "onnx": ["onnx"],
    "onnxruntime": ["onnxruntime"], "tensorboard": ["tensorboard"], "pyflakes": ["pyflakes"],
    "ruff": [], "torch": ["torch"],
}


def test_without_the_test_extras_packages_their_modules_skip_with_the_reason():
    """Where a package of the test extra is missing (PyTorch, a test dependency only, is several
    GB on some Pythons), the modules that need it skip and name it: the rest of the suite still
    collects and runs, and ``-m "not torch"`` and the like work there."""
    from test_packaging import extras, names

    assert names(extras()["test"]) - {"pytest"} <= set(TEST_EXTRA_MODULES)
    hidden = sorted(m for modules in TEST_EXTRA_MODULES.values() for m in modules)
    mentions = re.compile(r"\b(%s)\b" % "|".join(hidden))
    files = []
    for folder, _, filenames in os.walk(TESTS):
        for name in sorted(filenames):
            if name.startswith("test_") and name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    if mentions.search(f.read()):
                        files.append(os.path.relpath(path, os.path.dirname(TESTS)))
    assert "tests/layers/test_in_place_layers.py" in files and len(files) >= 40
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    run = subprocess.run([sys.executable, "-c", HIDE_AND_COLLECT, ",".join(hidden)] + files,
                         cwd=os.path.dirname(TESTS), env=env, capture_output=True, text=True,
                         timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "ModuleNotFoundError" not in out and "ERROR" not in out, out[-3000:]
    skipped = dict(re.findall(r"^SKIPPED \[\d+\] (\S+?):\d+: (.+)$", out, re.M))
    assert skipped["tests/layers/test_in_place_layers.py"] == (
        "PyTorch (the reference) is a test dependency"), skipped
    assert skipped["tests/layers/test_softmax_layer.py"] == (
        "SciPy (the reference) is a test dependency"), skipped
    assert all(reason.strip() for reason in skipped.values()), skipped
