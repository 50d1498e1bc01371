"""The one blob-access rule (the Layer contract in pycaffe_lite/layer.py), read from the
layers' source: a device-generic layer reads and writes blobs through ``read_*()`` /
``write_*()`` only; a layer declaring ``host_only = True`` through ``cpu_*()`` / ``data`` /
``diff`` only. And every Blob accessor says what it gives.

A host access is a ``cpu_data()`` / ``cpu_diff()`` call, or ``.data`` / ``.diff`` on a blob
written as ``bottom[i]``, ``top[i]``, ``blobs[i]``, ``self.blobs[i]`` or ``add_blob(...)``
(a blob reached through another name is not seen: the layers index their blob lists).
"""

import ast
import inspect
import os

import pycaffe_lite
from pycaffe_lite.blob import Blob

LAYERS = os.path.join(os.path.dirname(os.path.abspath(pycaffe_lite.__file__)), "layers")
DEVICE_ACCESSORS = {"read_data", "read_diff", "write_data", "write_diff"}
HOST_CALLS = {"cpu_data", "cpu_diff"}
BLOB_LISTS = {"bottom", "top", "blobs"}


def _is_blob(node):
    if isinstance(node, ast.Subscript):
        base = node.value
        return (isinstance(base, ast.Name) and base.id in BLOB_LISTS) or \
            (isinstance(base, ast.Attribute) and base.attr == "blobs")
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
        node.func.attr == "add_blob"


def _declares_host_only(cls):
    for stmt in cls.body:
        if isinstance(stmt, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "host_only" for t in stmt.targets):
            return bool(ast.literal_eval(stmt.value))
    return None


def _accesses(cls):
    """[(line, 'host' or 'device', what)] of one class's methods."""
    found = []
    for node in ast.walk(cls):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in DEVICE_ACCESSORS:
                found.append((node.lineno, "device", node.func.attr + "()"))
            elif node.func.attr in HOST_CALLS:
                found.append((node.lineno, "host", node.func.attr + "()"))
        elif isinstance(node, ast.Attribute) and node.attr in ("data", "diff") and \
                _is_blob(node.value):
            found.append((node.lineno, "host", "." + node.attr))
    return found


def violations(sources):
    """Lines breaking the rule in ``{path: source}``; a class is host-only when it or a base
    class (by name, among these sources) declares it."""
    classes = {}
    for path, source in sources.items():
        for node in ast.walk(ast.parse(source, path)):
            if isinstance(node, ast.ClassDef):
                classes[node.name] = (path, node)

    def host_only(name, seen=()):
        if name not in classes or name in seen:
            return False
        own = _declares_host_only(classes[name][1])
        if own is not None:
            return own
        return any(host_only(b.id, seen + (name,)) for b in classes[name][1].bases
                   if isinstance(b, ast.Name))

    wrong = []
    for name, (path, cls) in sorted(classes.items()):
        expected = "host" if host_only(name) else "device"
        for line, kind, what in _accesses(cls):
            if kind != expected:
                wrong.append("%s:%d: %s uses %s but is %s" % (
                    os.path.relpath(path, os.path.dirname(LAYERS)), line, name, what,
                    "host-only" if expected == "host" else "device-generic"))
    return wrong


def _layer_sources():
    sources = {}
    for folder, _, files in os.walk(LAYERS):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    sources[path] = f.read()
    return sources


def test_the_layers_follow_the_blob_access_rule():
    sources = _layer_sources()
    assert len(sources) > 50  # the scan sees the layers
    wrong = violations(sources)
    assert not wrong, "\n".join(wrong)


def test_host_only_layers_are_the_declared_ones():
    from pycaffe_lite.layers import load_all
    from pycaffe_lite.registry import LAYERS as REGISTRY

    load_all()
    host = sorted(t for t, cls in REGISTRY.items() if getattr(cls, "host_only", False))
    for expected in ("Data", "ImageData", "HDF5Data", "MemoryData", "WindowData",
                     "AnnotatedData", "HDF5Output", "DetectionOutput",
                     "MultiBoxLoss", "DetectionEvaluate"):
        assert expected in host
    # PriorBox keeps its boxes (computed at reshape) in the mode's array: device-generic
    for generic in ("Convolution", "ReLU", "SoftmaxWithLoss", "Normalize", "BatchNorm",
                    "PriorBox"):
        assert generic not in host


def test_the_check_finds_each_kind_of_breach():
    source = '''
class Generic(Layer):
    def forward(self, bottom, top):
        top[0].write_data()[...] = bottom[0].read_data()      # fine
        top[0].data[...] = bottom[0].cpu_data()                # two breaches
        self.blobs[0].diff[...] += 1                           # a breach

class Host(Layer):
    host_only = True
    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].cpu_data()                # fine
        bottom[0].write_diff()[...] = 0                        # a breach

class HostChild(Host):
    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = top[0].cpu_diff()                # fine: inherited host_only
'''
    wrong = violations({os.path.join(LAYERS, "x.py"): source})
    assert len(wrong) == 4, wrong
    assert sum("Generic" in w for w in wrong) == 3 and "write_diff()" in wrong[-1]


def test_every_blob_accessor_has_a_docstring():
    missing = [name for name, value in vars(Blob).items()
               if not name.startswith("_") and (inspect.isfunction(value) or
                                                isinstance(value, property))
               and not (value.__doc__ or "").strip()]
    assert not missing, missing
