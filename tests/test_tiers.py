"""The test tiers: every marker the tests use is registered, and conftest marks a module by the
dependencies its source uses."""

import os
import re

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
