"""The test tiers: every marker the tests use is registered, and conftest marks a module by the
dependencies its source uses; where a tier's dependency is not installed, its modules skip with
the reason instead of failing the collection (so ``-m "not torch"`` and the like work there)."""

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
import sys

HIDDEN = set(sys.argv[1].split(","))


class Hide(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError("No module named %r" % name, name=name)


sys.meta_path.insert(0, Hide())
import pytest  # noqa: E402

sys.exit(pytest.main(["--collect-only", "-q", "-rs", "-p", "no:cacheprovider"] + sys.argv[2:]))
"""


def test_without_the_tiers_dependencies_their_modules_skip_with_the_reason():
    tiers = {"torch": ["torch"], "onnx": ["onnx", "onnxruntime"], "fuzz": ["hypothesis"],
             "opencv": ["cv2"], "mpi": ["mpi4py"]}
    files = []
    for folder, _, names in os.walk(TESTS):
        for name in sorted(names):
            if name.startswith("test_") and name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    if set(module_markers(f.read())) & set(tiers):
                        files.append(os.path.relpath(path, os.path.dirname(TESTS)))
    assert "tests/layers/test_in_place_layers.py" in files and len(files) >= 20
    hidden = ",".join(m for modules in tiers.values() for m in modules)
    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
    run = subprocess.run([sys.executable, "-c", HIDE_AND_COLLECT, hidden] + files,
                         cwd=os.path.dirname(TESTS), env=env, capture_output=True, text=True,
                         timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-3000:]
    assert "ModuleNotFoundError" not in out and "ERROR" not in out, out[-3000:]
    skipped = re.findall(r"^SKIPPED \[\d+\] (\S+?):\d+: (.+)$", out, re.M)
    assert ("tests/layers/test_in_place_layers.py",
            "PyTorch (the reference) is a test dependency") in skipped, skipped
    assert all(reason.strip() for _, reason in skipped), skipped
