"""One input through our net and other engines, compared layer by layer.

Each engine gives the value of every (layer, top blob) it can show:

- ``opencv``: OpenCV's dnn module on the Caffe files themselves (its own importer), with its
  layer fusion off, each layer's output asked for by the layer's name (the first top of a
  layer with several);
- ``onnxruntime``: our ONNX export, every layer's values added as graph outputs, the
  runtime's graph optimisations off;
- ``pytorch``: our PyTorch export, imported, with a forward hook on each layer's attribute.

Differences are the largest absolute difference and that divided by the largest magnitude of
our value (``rel``); an engine diverges at the first layer, in the net's order, whose
``rel`` is above the tolerance, or whose value has another number of elements. Detections
(DetectionOutput) are compared as sets of rows: see :func:`canonical_detections`.
"""

import importlib.util
import os
import sys
import tempfile

import numpy as np


ENGINES = ("opencv", "onnxruntime", "pytorch")


class EngineMissing(Exception):
    """The engine's package is not installed."""


def difference(ours, theirs):
    """``(abs, rel)``: infinite when the sizes differ."""
    ours = np.asarray(ours, dtype=np.float64)
    theirs = np.asarray(theirs, dtype=np.float64)
    if ours.size != theirs.size:
        return float("inf"), float("inf")
    if ours.size == 0:
        return 0.0, 0.0
    d = float(np.abs(ours.reshape(-1) - theirs.reshape(-1)).max())
    if not np.isfinite(d) and np.array_equal(ours.reshape(-1), theirs.reshape(-1),
                                             equal_nan=True):
        d = 0.0
    scale = float(np.abs(ours).max())
    return d, (d / scale if scale > 0 else (0.0 if d == 0 else float("inf")))


def load_module(folder):
    """The ``model.py`` in ``folder``, imported under a name of its own (torch needed)."""
    path = os.path.join(folder, "model.py")
    name = "pycaffe_lite_export_%d" % abs(hash(os.path.abspath(path)))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def our_values(net, inputs):
    """Runs ``net`` on ``inputs``; {(layer, top blob): a copy of the top after the layer}
    for each layer but the data layers and Splits, in the net's order."""
    from ..onnx.export import DATA_TYPES

    for name, value in inputs.items():
        if tuple(net.blobs[name].shape) != value.shape:
            net.blobs[name].reshape(*value.shape)
    net.reshape()
    for name, value in inputs.items():
        net.blobs[name].data[...] = value
    values = {}
    names = net.blob_names

    def record(i):
        rec = net.records[i]
        if rec.layer.type in DATA_TYPES or rec.layer.type == "Split":
            return  # a Split's tops are its bottom's value in the other engines
        for t, blob in zip(rec.top_ids, rec.tops):
            values[(rec.name, names[t])] = np.array(blob.data, copy=True)

    net.after_forward(record)
    try:  # from the first layer that computes: data layers would overwrite the inputs
        net.forward_from_to(_first_computed(net), None)
    finally:
        net._hooks["after_forward"].remove(record)
    return values


def _first_computed(net):
    from ..onnx.export import DATA_TYPES

    for i, layer in enumerate(net.layers):
        if layer.type not in DATA_TYPES:
            return i
    return len(net.records)


class OpenCV:
    name = "opencv"

    def __init__(self, model, weights, net):
        try:
            import cv2
        except ImportError:
            raise EngineMissing("cv2 (opencv-python-headless)") from None
        self.net = cv2.dnn.readNetFromCaffe(str(model), str(weights))
        self.net.enableFusion(False)
        self.layers = set(self.net.getLayerNames())
        self.names = [(layer, net.top_names[layer][0]) for layer in net.layer_names
                      if layer in self.layers and net.top_names[layer]]

    def run(self, inputs):
        for name, value in inputs.items():
            self.net.setInput(value, name)
        outs = self.net.forward([layer for layer, _ in self.names])
        return {key: np.asarray(v) for key, v in zip(self.names, outs)}


class OnnxRuntime:
    name = "onnxruntime"

    def __init__(self, model, weights, net):
        try:
            import onnx
            import onnxruntime
        except ImportError as exc:
            raise EngineMissing(exc.name) from None
        from ..onnx import export

        self.onnxruntime = onnxruntime
        self.model, report = export(net, None)
        graph = self.model.graph
        constants = {i.name for i in graph.initializer}
        declared = {o.name for o in graph.output}
        self.values = {}
        for layer, blob, value in report["values"]:
            if value in constants:
                continue
            self.values[(layer, blob)] = value
            if value not in declared:
                declared.add(value)
                graph.output.append(onnx.helper.make_tensor_value_info(
                    value, onnx.TensorProto.FLOAT, None))

    def run(self, inputs):
        options = self.onnxruntime.SessionOptions()
        options.graph_optimization_level = self.onnxruntime.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = self.onnxruntime.InferenceSession(self.model.SerializeToString(), options,
                                                    providers=["CPUExecutionProvider"])
        wanted = sorted(set(self.values.values()))
        feeds = {i.name: inputs[i.name] for i in session.get_inputs()}
        outs = dict(zip(wanted, session.run(wanted, feeds)))
        return {key: outs[value] for key, value in self.values.items()}


class PyTorch:
    name = "pytorch"

    def __init__(self, model, weights, net, folder=None):
        try:
            import torch
        except ImportError:
            raise EngineMissing("torch") from None
        from .export import export

        self.torch = torch
        if folder is not None:
            self.report = export(net, folder)
            self.module = load_module(folder).load()
            return
        # the exported files are needed only while the module loads
        with tempfile.TemporaryDirectory(prefix="pycaffe_lite_compare_") as tmp:
            self.report = export(net, tmp)
            self.module = load_module(tmp).load()

    def run(self, inputs):
        torch = self.torch
        values, handles = {}, []
        for layer, attr, tops in self.report["layers"]:
            def hook(_module, _args, output, layer=layer, tops=tops):
                outs = output if isinstance(output, (tuple, list)) else [output]
                for top, out in zip(tops, outs):
                    values[(layer, top)] = out.detach().cpu().numpy().copy()
            handles.append(getattr(self.module, attr).register_forward_hook(hook))
        try:
            with torch.no_grad():
                self.module(*[torch.from_numpy(np.ascontiguousarray(inputs[n]))
                              for n in self.report["inputs"]])
        finally:
            for h in handles:
                h.remove()
        return values


ENGINE_CLASSES = {"opencv": OpenCV, "onnxruntime": OnnxRuntime, "pytorch": PyTorch}


class Failed:
    """An engine that could not load or run the net: it diverges before the first layer."""

    def __init__(self, name, error):
        self.name, self.error = name, error

    def run(self, inputs):
        raise RuntimeError(self.error)


def _message(exc):
    return " ".join(str(exc).split()) or type(exc).__name__


def prepare(engines, model, weights, net, out=None):
    """The engines, set up: a missing package skips its engine with a line; an engine that
    cannot load the net is a :class:`Failed` one."""
    out = sys.stdout if out is None else out
    ready = []
    for name in engines:
        try:
            ready.append(ENGINE_CLASSES[name](model, weights, net))
        except EngineMissing as exc:
            print("skipped %s: %s is not installed" % (name, exc), file=out)
        except Exception as exc:  # the engine's own error, whatever its type
            ready.append(Failed(name, "cannot load the net: %s" % _message(exc)))
    return ready


def compare(net, engines, inputs, tolerance):
    """``(rows, first)``: one row ``(layer, blob, {engine: (abs, rel) or None})`` per
    (layer, top) of our net, and ``first``: {engine: the first row index where it diverges,
    None where it agrees, or a message when it could not load or run the net}."""
    ours = our_values(net, inputs)
    theirs, first = {}, {}
    for engine in engines:
        try:
            theirs[engine.name] = engine.run(inputs)
            first[engine.name] = None
        except Exception as exc:  # the engine's own error, whatever its type
            theirs[engine.name] = {}
            first[engine.name] = getattr(engine, "error", None) or \
                "cannot run the net: %s" % _message(exc)
    detections = {n for n, lay in zip(net.layer_names, net.layers)
                  if lay.type == "DetectionOutput"}
    rows = []
    for (layer, blob), value in ours.items():
        diffs = {}
        for e in engines:
            mine, other = value, theirs[e.name].get((layer, blob))
            if other is not None and layer in detections:
                mine, other = canonical_detections(mine), canonical_detections(other)
            diffs[e.name] = None if other is None else difference(mine, other)
            if diffs[e.name] is not None and first[e.name] is None and \
                    not diffs[e.name][1] <= tolerance:
                first[e.name] = len(rows)
        rows.append((layer, blob, diffs))
    return rows, first


def canonical_detections(rows):
    """DetectionOutput rows ordered by image, label, descending score, then box, without
    all-zero rows (OpenCV lists an image's detections by score, not by class, and pads its
    output with zero rows up to keep_top_k)."""
    rows = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    rows = rows[np.any(rows != 0, axis=1)]
    keys = [rows[:, k] for k in (6, 5, 4, 3)] + [-rows[:, 2], rows[:, 1], rows[:, 0]]
    return rows[np.lexsort(keys)]


def format_table(rows, names):
    head = ["layer", "blob"] + ["%s %s" % (n, k) for n in names for k in ("abs", "rel")]
    lines = []
    for layer, blob, diffs in rows:
        cells = [layer, blob]
        for n in names:
            d = diffs.get(n)
            cells += ["-", "-"] if d is None else ["%.3g" % d[0], "%.3g" % d[1]]
        lines.append(cells)
    widths = [max(len(str(c)) for c in col) for col in zip(head, *lines)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
                     for cells in [head] + lines)
