#!/usr/bin/env python3
"""Record the API surface of the real CuPy 14 and cuDNN frontend as JSON fixtures.

The simulated GPU device (pycaffe_lite/testing/simapi.py) refuses names, methods and keyword
arguments that these fixtures do not list. Run in a venv of its own (no GPU needed):

    python3 -m venv /tmp/cupy-venv
    /tmp/cupy-venv/bin/pip install 'cupy-cuda13x>=14,<15' nvidia-cudnn-frontend numpy
    /tmp/cupy-venv/bin/python tools/cupy_api_reference.py

It writes pycaffe_lite/testing/gpu_api/cupy14.json and cudnn_frontend.json.
"""
import inspect
import json
import os
import re
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pycaffe_lite", "testing",
                   "gpu_api")


def params(obj):
    """Parameter names of a callable, with '**' when it takes any keyword; None if unreadable."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return _doc_params(obj)
    names = []
    for p in sig.parameters.values():
        if p.kind is p.VAR_KEYWORD:
            names.append("**")
        elif p.kind is not p.VAR_POSITIONAL and p.name != "self":
            names.append(p.name)
    return names


def _doc_params(obj):
    """Cython methods without binding=True embed their signature as the docstring's first
    line: ``_ndarray_base.sum(self, axis=None, dtype=None, out=None, keepdims=False) -> ...``."""
    name = getattr(obj, "__name__", None)
    first = ((getattr(obj, "__doc__", None) or "").strip().splitlines() or [""])[0]
    m = re.match(r"[\w.]*\b%s\((.*?)\)(\s*->.*)?$" % re.escape(name or "?"), first)
    if not m:
        return None
    names = []
    for part in m.group(1).split(","):
        part = part.split("=")[0].strip()
        if part.startswith("**"):
            names.append("**")
        elif part and not part.startswith("*") and part != "self":
            names.append(part)
    return names


def kind(obj, ufunc_type):
    if isinstance(obj, ufunc_type):
        return "ufunc"
    if inspect.ismodule(obj):
        return "module"
    if isinstance(obj, type):
        return "class"
    if callable(obj):
        return "function"
    return "other"


def namespace(mod, ufunc_type):
    out = {}
    for name in sorted(dir(mod)):
        if name.startswith("__"):
            continue
        try:
            obj = getattr(mod, name)
        except Exception:  # noqa: BLE001 - a lazy attribute that needs a GPU
            out[name] = {"kind": "other"}
            continue
        entry = {"kind": kind(obj, ufunc_type)}
        if entry["kind"] == "function":
            entry["params"] = params(obj)
        out[name] = entry
    return out


def cupy_api():
    import cupy
    import cupyx
    from cupy import _core
    ufunc_type = _core.ufunc
    api = {"version": cupy.__version__, "cupy": namespace(cupy, ufunc_type)}
    for sub in ("random", "linalg", "fft", "cuda", "cuda.runtime", "cuda.graph", "testing"):
        mod = cupy
        try:
            for part in sub.split("."):
                mod = getattr(mod, part)
        except AttributeError:
            continue
        api["cupy." + sub] = namespace(mod, ufunc_type)
    api["cupyx"] = namespace(cupyx, ufunc_type)
    for cls in ("Stream", "Event", "MemoryPool", "PinnedMemoryPool", "Graph", "Device"):
        obj = getattr(cupy.cuda, cls, None)
        if obj is not None:
            api["cupy.cuda." + cls] = {n: {"params": params(getattr(obj, n, None))}
                                       for n in dir(obj) if not n.startswith("__")}
    nd = {}
    for name in dir(cupy.ndarray):
        obj = getattr(cupy.ndarray, name)
        nd[name] = {"params": params(obj)} if callable(obj) else {}
    api["cupy.ndarray"] = nd
    api["ufunc"] = sorted(n for n in dir(cupy.add) if not n.startswith("__"))
    return api


def frontend_api():
    try:
        import cudnn
    except Exception as e:  # noqa: BLE001
        sys.exit("cannot import the cuDNN frontend: %s" % e)
    api = {"version": getattr(cudnn, "__version__", "?"), "module": {}, "pygraph": {},
           "enums": {}}
    for name in sorted(dir(cudnn)):
        if name.startswith("_"):
            continue
        obj = getattr(cudnn, name)
        members = getattr(obj, "__members__", None)
        if members is not None:
            api["enums"][name] = sorted(members)
        api["module"][name] = kind(obj, ())
    for name in sorted(dir(cudnn.pygraph)):
        if name.startswith("__") and name != "__init__":
            continue
        obj = getattr(cudnn.pygraph, name)
        if not callable(obj):
            api["pygraph"][name] = None
            continue
        sig = params(obj)
        if sig is not None:
            api["pygraph"][name] = sig
            continue
        doc = getattr(obj, "__doc__", None) or ""
        # pybind11 signatures: "name(self: ..., a: T, b: T = ..., **kwargs) -> R"
        kw = set()
        for line in doc.splitlines():
            m = re.match(r"\s*(?:\d+\.\s*)?%s\((.*)\)\s*->" % re.escape(name), line)
            if m:
                kw.update(re.findall(r"(?:^|,\s*)(\*{0,2}\w+)\s*:", m.group(1)))
                if "**kwargs" in m.group(1):
                    kw.add("**")
        kw.discard("self")
        api["pygraph"][name] = sorted(kw)
    return api


def main():
    os.makedirs(OUT, exist_ok=True)
    for fname, api in (("cupy14.json", cupy_api()), ("cudnn_frontend.json", frontend_api())):
        with open(os.path.join(OUT, fname), "w") as f:
            json.dump(api, f, indent=0, sort_keys=True)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
