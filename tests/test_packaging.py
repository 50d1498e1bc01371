"""The extras of pyproject.toml give what the docs use: the ``tools`` extra holds every other
extra but the GPU's and the test suite's, and every package that a Python block of the README
or docs/ imports is a dependency or in ``tools`` (module -> distribution as the installed
packages say, importlib.metadata); the README names the extra. An install without the C
kernels (no compiler) runs the NumPy code and says so in one warning."""

import ast
import glob
import importlib.metadata
import logging
import os
import re
import sys
import types

import numpy as np

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: tomli, which pytest itself needs there
    import tomli as tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```", re.S | re.M)
BASE = {"numpy", "protobuf", "lmdb", "pillow"}  # setup.py's install_requires
# extras that the tools extra leaves out, and why
NOT_IN_TOOLS = {"gpu": "needs an NVIDIA GPU and CUDA 12",
                "gpu-cuda13": "needs an NVIDIA GPU and CUDA 13", "test": "the test suite's own"}
# modules a docs block imports that are not packages to install
NOT_PACKAGES = {"pycaffe_lite", "model"}  # `model`: the module export_pytorch writes


def extras():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def names(requirements):
    return {re.split(r"[<>=!~\[; ]", r, maxsplit=1)[0].lower() for r in requirements}


def docs_imports():
    """{top-level module: [page]} of the Python blocks of the README and docs/*.md."""
    found = {}
    for page in [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs",
                                                                                  "*.md"))):
        with open(page, encoding="utf-8") as f:
            text = f.read()
        for m in FENCE.finditer(text):
            if m.group(1) != "python":
                continue
            for node in ast.walk(ast.parse(m.group(2))):
                if isinstance(node, ast.Import):
                    modules = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0:
                    modules = [node.module]
                else:
                    continue
                for module in modules:
                    found.setdefault(module.split(".")[0], []).append(os.path.basename(page))
    return found


def test_the_onnx_extra_runs_what_it_exports():
    assert {"onnx", "onnxruntime"} <= names(extras()["onnx"])


def test_the_tools_extra_holds_every_other_extra_but_the_gpu_and_test_ones():
    all_extras = extras()
    tools = names(all_extras["tools"])
    for extra, requirements in all_extras.items():
        if extra in NOT_IN_TOOLS or extra == "tools":
            continue
        assert names(requirements) <= tools, (extra, names(requirements) - tools)
    # compare's engines and export_pytorch's check
    assert {"opencv-python-headless", "onnxruntime", "torch"} <= tools


def test_every_package_the_docs_import_comes_with_the_tools_extra():
    provided = BASE | names(extras()["tools"])
    of_module = importlib.metadata.packages_distributions()
    wrong = []
    for module, pages in sorted(docs_imports().items()):
        if module in sys.stdlib_module_names or module in NOT_PACKAGES:
            continue
        dists = {d.lower() for d in of_module.get(module, [])}
        if not dists & provided:
            wrong.append("%s (imported in %s; distributions %s)" % (module, ", ".join(sorted(
                set(pages))), sorted(dists) or "unknown"))
    assert not wrong, wrong


def test_the_readme_names_the_tools_extra():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert re.search(r"pip install ['\"]?(\.|pycaffe-lite)\[tools\]", text)


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def _without_the_built_kernels(monkeypatch, package_file=None):
    """``pycaffe_lite.ops.cpu._library`` as after an install without a C compiler: the
    extension is not found, and nothing was loaded yet; the package imported from
    ``package_file``'s folder (by default an installed one, outside any source checkout)."""
    from pycaffe_lite.ops.cpu import _library

    monkeypatch.setattr(_library, "__file__", package_file or os.path.join(
        os.sep, "site-packages", "pycaffe_lite", "ops", "cpu", "_library.py"))
    monkeypatch.setattr(_library, "_state", {"lib": None, "checked": False, "error": None})
    monkeypatch.setattr(_library, "importlib", types.SimpleNamespace(
        util=types.SimpleNamespace(find_spec=lambda name: None)))
    records = _Records()
    logger = logging.getLogger("pycaffe_lite")
    logger.addHandler(records)
    monkeypatch.setattr(logger, "level", logging.INFO)
    return records, lambda: logger.removeHandler(records)


def test_an_install_without_the_c_kernels_says_so_once_and_runs_numpy(monkeypatch):
    from pycaffe_lite.ops import cpu
    from pycaffe_lite.ops.im2col import im2col

    records, done = _without_the_built_kernels(monkeypatch)
    try:
        assert cpu.kernels_enabled() is False
        assert cpu.kernels_enabled() is False
        x = np.arange(2 * 3 * 4 * 4, dtype=np.float32).reshape(2, 3, 4, 4)
        cols = im2col(x, (2, 2), (0, 0), (2, 2), (1, 1))
    finally:
        done()
    warnings = [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "_kernels was not built" in warnings[0] and "NumPy" in warnings[0]
    assert "where a C compiler is present" in warnings[0]
    assert "PYCAFFE_LITE_CPU_KERNELS=0" in warnings[0]
    # the NumPy code's columns: image 0, channel 0, kernel offset (0, 0), output pixel (0, 1)
    assert cols.shape[0] == 3 * 2 * 2 and cols[0, 1] == x[0, 0, 0, 2]


def test_kernels_not_built_in_the_imported_source_checkout_name_it(monkeypatch, tmp_path):
    """After 'pip install .', Python run in the repository root imports the checkout's
    pycaffe_lite/, where nothing was compiled: the message names the checkout, not a compiler."""
    from pycaffe_lite.ops import cpu

    (tmp_path / "proto").mkdir()
    (tmp_path / "proto" / "caffe.proto").write_text('syntax = "proto2";\n')
    (tmp_path / "setup.py").write_text("")
    package_file = tmp_path / "pycaffe_lite" / "ops" / "cpu" / "_library.py"
    records, done = _without_the_built_kernels(monkeypatch, str(package_file))
    try:
        assert cpu.kernels_enabled() is False
    finally:
        done()
    warnings = [r.getMessage() for r in records.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "not built in the source checkout %s," % tmp_path in warnings[0]
    assert "pip install -e ." in warnings[0] and "C compiler" not in warnings[0]


def test_kernels_switched_off_need_no_message(monkeypatch):
    from pycaffe_lite.ops import cpu

    records, done = _without_the_built_kernels(monkeypatch)
    old = cpu.set_kernels_enabled(False)
    try:
        assert cpu.kernels_enabled() is False
    finally:
        cpu.set_kernels_enabled(old)
        done()
    assert not records.records


def _local_includes(path, seen):
    """The files ``#include "..."`` pulls into ``path``, recursively (paths from the root)."""
    with open(path, encoding="utf-8") as f:
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+)"', f.read(), re.M):
            header = os.path.normpath(os.path.join(os.path.dirname(path), name))
            if header not in seen:
                seen.add(header)
                _local_includes(header, seen)
    return seen


def test_the_sdist_manifest_holds_every_header_the_c_kernels_include():
    included = set()
    with open(os.path.join(ROOT, "MANIFEST.in"), encoding="utf-8") as f:
        for line in f:
            words = line.split()
            if words and words[0] == "include":
                for pattern in words[1:]:
                    included.update(os.path.normpath(p)
                                    for p in glob.glob(os.path.join(ROOT, pattern)))
    headers = _local_includes(os.path.join(ROOT, "pycaffe_lite", "ops", "cpu", "kernels.c"),
                              set())
    assert len(headers) >= 5  # kernels_impl, conv_impl, train_impl, blocked_impl, blocked_body
    missing = sorted(os.path.relpath(h, ROOT) for h in headers - included)
    assert not missing, missing
    assert os.path.join(ROOT, "proto", "caffe.proto") in included


def test_pyproject_reads_without_setuptools_deprecations():
    """setuptools stops building projects that use its deprecated pyproject.toml forms (a
    ``project.license`` table: no longer built from 2027-02-18)."""
    import warnings

    from setuptools import __version__ as setuptools_version
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution
    from setuptools.warnings import SetuptoolsDeprecationWarning

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        requires = tomllib.load(f)["build-system"]["requires"]
    bound = [r for r in requires if r.startswith("setuptools")]
    assert bound == ["setuptools>=77"], requires  # PEP 639's license string
    if int(setuptools_version.split(".")[0]) < 77:
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), os.path.join(ROOT, "pyproject.toml"))
    deprecated = [str(w.message).splitlines()[0] for w in caught
                  if issubclass(w.category, SetuptoolsDeprecationWarning)]
    assert not deprecated, deprecated
    assert dist.metadata.license_expression == "BSD-2-Clause"
