"""GPU code held to the real CuPy 14 and cuDNN frontend API (recorded by
tools/cupy_api_reference.py in pycaffe_lite/testing/gpu_api/): the simulated device refuses what
CuPy lacks, and a static walk checks the explicit ``cupy.X``/``cp.X``/``fe.X``/``graph.m(kw=)``
uses in pycaffe_lite/ and the fake frontend of tests/test_cudnn_graphs.py."""
import ast
import inspect
import pathlib
import shutil

import numpy as np
import pytest

from pycaffe_lite.testing import simapi
from pycaffe_lite.testing.simdevice import simulated_device

ROOT = pathlib.Path(__file__).resolve().parents[1]
CUPY = simapi.api()
FRONTEND = simapi.api("cudnn_frontend.json")
CUPY_MAKERS = {"cupy", "_import_cupy", "cupy_module"}
# deliberate uses of what CuPy 14 lacks, each behind an ImportError the caller handles:
# backend.cudnn_modules() imports CuPy 13's own cuDNN bindings and raises on CuPy 14
KNOWN_ABSENT = {("backend.py", "cupy.cudnn")}


# ---- the simulated device refuses what CuPy 14 lacks ------------------------------------------
def test_recorded_api_is_cupy_14_and_frontend_1():
    assert CUPY["version"].startswith("14.")
    assert FRONTEND["version"].split(".")[0] == "1"
    # facts of CuPy 14 known independently of this recording
    assert CUPY["cupy"]["add"]["kind"] == "ufunc" and CUPY["cupy"]["cuda"]["kind"] == "module"
    assert "Stream" in CUPY["cupy.cuda"] and "getDeviceCount" in CUPY["cupy.cuda.runtime"]


def test_names_numpy_has_and_cupy_lacks_are_refused():
    missing = sorted(n for n in dir(np) if not n.startswith("_") and callable(getattr(np, n))
                     and n not in CUPY["cupy"])
    assert missing  # NumPy 2 has functions CuPy 14 does not
    with simulated_device() as xp:
        for name in missing[:20]:
            with pytest.raises(AttributeError, match="module 'cupy' has no attribute '%s'" % name):
                getattr(xp, name)
        assert xp.sum is not None  # what CuPy has still passes


def test_keywords_cupy_does_not_take_are_refused():
    with simulated_device() as xp:
        a = xp.arange(6, dtype=np.float32)
        assert float(xp.sum(a, axis=0, keepdims=False).get()) == 15.0
        assert float(a.sum(axis=0).get()) == 15.0
        with pytest.raises(TypeError, match="unexpected keyword argument 'initial'"):
            xp.sum(a, initial=1.0)  # NumPy takes it, cupy.sum does not
        with pytest.raises(TypeError, match="unexpected keyword argument 'initial'"):
            a.sum(initial=1.0)  # nor cupy.ndarray.sum
        with pytest.raises(TypeError, match="unexpected keyword argument 'where'"):
            a.max(where=True)


def test_ndarray_attributes_and_ufunc_methods_cupy_lacks_are_refused():
    nd = CUPY["cupy.ndarray"]
    numpy_only = sorted(n for n in dir(np.ndarray) if not n.startswith("_") and n not in nd
                        and n not in ("ctypes", "tofile"))  # host memory: refused before
    assert numpy_only
    with simulated_device() as xp:
        a = xp.zeros((2, 3), dtype=np.float32)
        for name in numpy_only:
            with pytest.raises(AttributeError, match="'cupy.ndarray' object has no attribute"):
                getattr(a, name)
        assert a.T.shape == (3, 2)
        assert "identity" not in CUPY["ufunc"] and "reduce" in CUPY["ufunc"]
        with pytest.raises(AttributeError, match="has no attribute 'identity'"):
            xp.add.identity  # noqa: B018
        assert float(xp.add.reduce(xp.ones(4, dtype=np.float32)).get()) == 4.0


def test_device_random_and_submodules_hold_to_cupy():
    from pycaffe_lite.testing.simapi import _DeviceRandom
    rnd = CUPY["cupy.random"]
    for name, fn in inspect.getmembers(_DeviceRandom, callable):
        if name.startswith("_"):
            continue
        assert name in rnd, name
        ours = [p for p in inspect.signature(fn).parameters if p not in ("self", "size")]
        theirs = rnd[name].get("params")
        if theirs is not None and "**" not in theirs:
            assert set(ours) <= set(theirs) | {"size"}, (name, ours, theirs)
    numpy_only = sorted(n for n in dir(np.linalg) if not n.startswith("_")
                        and n not in CUPY["cupy.linalg"])
    assert numpy_only  # e.g. NumPy 2's linalg functions CuPy 14 lacks
    with simulated_device() as xp:
        for name in numpy_only:
            with pytest.raises(AttributeError, match="module 'cupy.linalg' has no attribute"):
                getattr(xp.linalg, name)
        assert xp.linalg.norm is not None


# ---- the static walk --------------------------------------------------------------------------
def _chains(tree):
    """(dotted chain, line) for each outermost attribute chain rooted at a Name."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and not isinstance(getattr(node, "_parent", None),
                                                              ast.Attribute):
            parts, n = [], node
            while isinstance(n, ast.Attribute):
                parts.append(n.attr)
                n = n.value
            if isinstance(n, ast.Name):
                out.append(([n.id] + parts[::-1], node.lineno))
    return out


def _parse(path):
    tree = ast.parse(pathlib.Path(path).read_text())
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child._parent = node
    return tree


def _cupy_aliases(tree):
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in ("cupy", "cupyx"):
                    names[a.asname or a.name.split(".")[0]] = a.name if a.asname else \
                        a.name.split(".")[0]
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            f = node.value.func
            fname = f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)
            if fname in CUPY_MAKERS:
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        names[t.id] = "cupy"
    return names


def _check_cupy_chain(chain):
    """The first missing step of a dotted cupy chain, or None."""
    where = chain[0]
    for attr in chain[1:]:
        ns = CUPY.get(where)
        if ns is None:
            return None  # past what was recorded (a method of a returned object)
        if attr.startswith("__"):
            return None
        if attr not in ns:
            return "%s.%s" % (where, attr)
        where = where + "." + attr
    return None


def cupy_problems(root):
    problems = []
    for path in sorted(pathlib.Path(root).rglob("*.py")):
        tree = _parse(path)
        aliases = _cupy_aliases(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == "cupy" and "." in a.name:
                        bad = _check_cupy_chain(a.name.split("."))
                        rel = str(path.relative_to(root))
                        if bad and (rel, bad) not in KNOWN_ABSENT:
                            problems.append("%s:%d %s" % (rel, node.lineno, bad))
        for chain, line in _chains(tree):
            if chain[0] in aliases:
                bad = _check_cupy_chain(aliases[chain[0]].split(".") + chain[1:])
                if bad:
                    problems.append("%s:%d %s" % (path.relative_to(root), line, bad))
    return problems


def frontend_problems(path, graph_names=("graph",), fe_names=("fe",)):
    problems = []
    tree = _parse(path)
    pg, module, enums = FRONTEND["pygraph"], FRONTEND["module"], FRONTEND["enums"]
    for chain, line in _chains(tree):
        if chain[0] in fe_names and len(chain) > 1:
            if chain[1] not in module:
                problems.append("%d cudnn.%s" % (line, chain[1]))
            elif chain[1] in enums and len(chain) > 2 and chain[2] not in enums[chain[1]]:
                problems.append("%d cudnn.%s.%s" % (line, chain[1], chain[2]))
        if chain[0] in graph_names and len(chain) == 2 and not chain[1].startswith("_"):
            if chain[1] not in pg:
                problems.append("%d pygraph.%s" % (line, chain[1]))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        f = node.func
        if isinstance(f.value, ast.Name) and f.value.id in fe_names and f.attr == "pygraph":
            method = "__init__"
        elif isinstance(f.value, ast.Name) and f.value.id in graph_names and f.attr in pg:
            method = f.attr
        else:
            continue
        params = pg.get(method) or []
        for kw in node.keywords:
            if kw.arg is not None and "**" not in params and kw.arg not in params:
                problems.append("%d pygraph.%s(%s=)" % (node.lineno, method, kw.arg))
    return problems


def fake_frontend_problems(path):
    """The fake frontend's graph methods and their keyword names exist on the real pygraph."""
    tree = _parse(path)
    pg = FRONTEND["pygraph"]
    problems = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "FakeGraph"):
        for fn in (n for n in cls.body if isinstance(n, ast.FunctionDef)):
            if fn.name.startswith("_"):
                continue
            if fn.name not in pg:
                problems.append("FakeGraph.%s" % fn.name)
                continue
            real = pg[fn.name] or []
            ours = [a.arg for a in fn.args.args[1:] + fn.args.kwonlyargs]
            if "**" not in real:
                problems += ["FakeGraph.%s(%s)" % (fn.name, a) for a in ours if a not in real]
    return problems


def test_cupy_uses_in_the_package_exist_in_cupy_14():
    assert cupy_problems(ROOT / "pycaffe_lite") == []


def test_frontend_uses_exist_in_the_recorded_frontend():
    assert frontend_problems(ROOT / "pycaffe_lite/ops/gpu/cudnn_graphs.py") == []
    assert frontend_problems(ROOT / "pycaffe_lite/ops/gpu/cudnn.py") == []


def test_fake_frontend_matches_the_real_one():
    assert fake_frontend_problems(ROOT / "tests/test_cudnn_graphs.py") == []


def test_static_checks_catch_planted_wrong_names(tmp_path):
    pkg = tmp_path / "pkg"
    shutil.copytree(ROOT / "pycaffe_lite/ops/gpu", pkg)
    src = (pkg / "cudnn_graphs.py").read_text()
    assert "cp.cuda.Event" in src and "graph.validate()" in src and "fe.heur_mode" in src
    src = src.replace("cp.cuda.Event", "cp.cuda.Evnet", 1)
    src = src.replace("graph.validate()", "graph.validate_all()", 1)
    src = src.replace("fe.build_plan_policy.ALL", "fe.build_plan_policy.EVERYTHING", 1)
    src = src.replace("graph.relu(input=y,", "graph.relu(inp=y,", 1)
    (pkg / "cudnn_graphs.py").write_text(src)
    assert any("cupy.cuda.Evnet" in p for p in cupy_problems(pkg))
    found = frontend_problems(pkg / "cudnn_graphs.py")
    assert any("pygraph.validate_all" in p for p in found)
    assert any("build_plan_policy.EVERYTHING" in p for p in found)
    assert any("pygraph.relu(inp=)" in p for p in found)
    fake = (ROOT / "tests/test_cudnn_graphs.py").read_text()
    fake = fake.replace("def check_support(self):", "def check_supported(self):", 1)
    fake = fake.replace("def relu(self, input, compute_data_type):",
                        "def relu(self, input, compute_type):", 1)
    (tmp_path / "fake.py").write_text(fake)
    assert set(fake_frontend_problems(tmp_path / "fake.py")) >= {
        "FakeGraph.check_supported", "FakeGraph.relu(compute_type)"}


def test_numpy_functions_on_device_arrays_hold_to_cupy():
    # np.<f>(device array) runs cupy.<f> through __array_function__ on a GPU
    missing = sorted(n for n in dir(np) if not n.startswith("_") and n not in CUPY["cupy"]
                     and inspect.isfunction(getattr(np, n))
                     and getattr(np, n).__module__ == "numpy")
    assert missing
    with simulated_device() as xp:
        a = xp.ones(3, dtype=np.float32)
        assert float(np.sum(a).get()) == 3.0
        with pytest.raises(TypeError, match="unexpected keyword argument 'initial'"):
            np.sum(a, initial=1.0)
    for name in missing:
        with pytest.raises(TypeError, match="no implementation found for 'numpy.%s'" % name):
            simapi.check_function(getattr(np, name), {})


def test_device_functions_the_sim_defines_itself_take_cupys_keywords():
    from pycaffe_lite.testing.simdevice import SimulatedDevice
    # the simulated device's own seams that backend.py reaches by getattr, not CuPy's names
    seams = {"capture_graph", "counts", "forbid", "recording", "empty_pinned"}
    checked = 0
    for name, fn in inspect.getmembers(SimulatedDevice, inspect.isfunction):
        if name.startswith("_") or name in seams:
            continue
        assert name in CUPY["cupy"], name
        theirs = CUPY["cupy"][name].get("params")
        ours = [p.name for p in inspect.signature(fn).parameters.values()
                if p.name != "self" and p.kind is not p.VAR_POSITIONAL]
        if theirs and "**" not in theirs:
            assert set(ours) <= set(theirs), (name, ours, theirs)
            checked += 1
    assert checked >= 4  # asarray, array, ascontiguousarray, asnumpy, copyto
    assert "empty_pinned" in CUPY["cupyx"]  # backend.pinned_empty's path on a GPU
