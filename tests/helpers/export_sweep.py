"""Random one-layer nets for the export option sweep: for each layer type that the ONNX
exporter or the PyTorch generator handles, a seeded generator of its ``*_param`` fields
(and the input shapes it accepts), and the run of one such net through onnxruntime (at the
exporter's lowest and highest opsets) and through the generated PyTorch module, each against
our forward.

A generator returns a :class:`Case`; ``Case.text`` is the net (Input layers, then the layer,
named ``layer``). What counts as a valid combination is what our Net builds: a CaffeError at
build is a refused combination, left out of the comparison (tests/test_export_option_sweep.py
checks a set of those refusals against BVLC's own checks)."""

import os
import tempfile

import numpy as np
from google.protobuf import text_format

from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2

from .onnx_runtime import input_layers, net_from_text, run_ort

def max_opset():
    """The highest opset the exporter offers: the installed onnx package's."""
    import onnx

    return onnx.defs.onnx_opset_version()


OPSETS = (13, max_opset())  # the exporter's lowest and highest
RTOL = 1e-5


class Case:
    def __init__(self, type_, params="", shapes=None, bottoms=("data",), tops=("out",),
                 feeds=None, before=""):
        self.type = type_
        self.params = params
        self.shapes = dict({"data": (2, 3, 4, 5)} if shapes is None else shapes)
        self.bottoms = tuple(bottoms)
        self.tops = tuple(tops)
        # input name -> "uniform" | "positive" | "relu" | "coarse" | ("indices", n) | an array
        self.feeds = feeds or {}
        self.before = before  # layers between the inputs and the swept one

    @property
    def text(self):
        return input_layers(self.shapes) + self.before + (
            '\nlayer { name: "layer" type: "%s" %s %s %s }' % (
                self.type, " ".join('bottom: "%s"' % b for b in self.bottoms),
                " ".join('top: "%s"' % t for t in self.tops), self.params))

    def fields(self):
        """(message, field) pairs that the layer's params set (nested messages by name)."""
        lp = caffe_pb2.LayerParameter()
        text_format.Merge(self.params, lp)
        out = set()
        for f, value in lp.ListFields():
            for g, _ in value.ListFields():
                out.add((f.name, g.name))
        return out

    def __repr__(self):
        return "%s %s %s" % (self.type, self.shapes, self.params)


# ---- the values ------------------------------------------------------------------------

def rand_shape(rng, rank, lo=1, hi=6):
    return tuple(int(rng.integers(lo, hi + 1)) for _ in range(rank))


def pick(rng, values):
    return values[int(rng.integers(len(values)))]


def maybe(rng, p=0.5):
    return bool(rng.random() < p)


def fmt(x):
    return repr(float(np.float32(x)))


def per_axis(rng, name, values, nd, hw=True):
    """A repeated spatial field as Caffe spells it: one value for every axis, one per axis,
    or ``name_h``/``name_w`` (2-D only)."""
    if nd == 2 and hw and maybe(rng, 0.3):
        return "%s_h: %d %s_w: %d" % (name, values[0], name, values[1])
    if len(set(values)) == 1 and maybe(rng):
        return "%s: %d" % (name, values[0])
    return " ".join("%s: %d" % (name, v) for v in values)


def fill(net, rng):
    for layer in net.layers:
        for i, blob in enumerate(layer.blobs):
            if layer.type == "BatchNorm" and i < 3:
                blob.data[...] = [rng.normal(0, 0.5, blob.shape),
                                  rng.uniform(0.5, 2.0, blob.shape),
                                  np.full(blob.shape, pick(rng, [1.0, 0.5, 4.0, 0.0]))][i]
            elif layer.type == "BN" and i == 3:  # PSPNet's running variance
                blob.data[...] = rng.uniform(0.5, 2.0, blob.shape)
            else:
                blob.data[...] = rng.normal(0, 0.5, blob.shape)


def feeds_for(case, rng):
    feeds = {}
    for name, shape in case.shapes.items():
        kind = case.feeds.get(name, "uniform")
        if isinstance(kind, np.ndarray):
            feeds[name] = kind.reshape(shape).astype(np.float32)
        elif kind == "positive":
            feeds[name] = rng.uniform(0.2, 1.5, shape).astype(np.float32)
        elif kind == "relu":  # about half zeros
            feeds[name] = np.maximum(rng.uniform(-1.5, 1.5, shape), 0).astype(np.float32)
        elif kind == "coarse":  # few distinct values: ties
            feeds[name] = rng.integers(-2, 3, shape).astype(np.float32)
        elif isinstance(kind, tuple) and kind[0] == "indices":
            feeds[name] = rng.integers(0, kind[1], shape).astype(np.float32)
        else:
            feeds[name] = rng.uniform(-1.5, 1.5, shape).astype(np.float32)
    return feeds


# ---- the runs --------------------------------------------------------------------------

class Refused(Exception):
    """The exporter refused the net, with a CaffeError naming the layer."""


def relative_error(ours, theirs):
    ours = np.asarray(ours, np.float64)
    theirs = np.asarray(theirs, np.float64)
    if ours.shape != theirs.shape:
        return "shape %s, ours %s" % (theirs.shape, ours.shape)
    if ours.size == 0:
        return None
    finite = np.isfinite(ours)
    atol = RTOL * max(1.0, float(np.abs(ours[finite]).max())) if finite.any() else 0.0
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(theirs - ours) <= atol + RTOL * np.abs(ours))
    bad &= ~(theirs == ours)  # the same infinity
    bad &= ~(np.isnan(ours) & np.isnan(theirs))  # NaN where Caffe computes NaN
    if bad.any():
        d = np.abs(theirs - ours)
        return "max abs diff %.3g of largest magnitude %.3g (%d of %d entries)" % (
            float(np.nanmax(d)), float(np.nanmax(np.abs(ours))), int(bad.sum()), bad.size)
    return None


def build(case, seed):
    """(net, feeds, our outputs), or None where our Net refuses the combination."""
    try:
        net = net_from_text(case.text)
        rng = np.random.default_rng(seed)
        fill(net, rng)
        feeds = feeds_for(case, rng)
        # a forward may refuse what only the data shows (a max-unpooling mask that does
        # not fit the top)
        with np.errstate(invalid="ignore", divide="ignore"):  # Log or Power of x < 0
            ours = {k: np.array(v, copy=True) for k, v in net.forward(**feeds).items()}
    except CaffeError:
        return None
    return net, feeds, ours


def refused(exc, case):
    """An export refusal must name the layer it refuses; anything else is the exporter's
    bug."""
    if "layer 'layer'" not in str(exc) and not (case.before and "layer 'pool'" in str(exc)):
        raise AssertionError("%r: the refusal does not name the layer: %s" % (case, exc))
    return Refused(str(exc))


def run_onnx(net, feeds, opset, case):
    from pycaffe_lite import onnx as caffe_onnx

    try:
        model, _ = caffe_onnx.export(net, None, opset=opset)
    except CaffeError as exc:
        raise refused(exc, case) from None
    return run_ort(model, feeds)


# The exported files of each case live only for the case: in memory where the machine has a
# tmpfs at /dev/shm (the export's fsync of each file is then no wait on a disk), otherwise in
# the default temporary folder.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def run_pytorch(net, feeds, case):
    import torch

    from pycaffe_lite.pytorch import export
    from pycaffe_lite.pytorch.compare import load_module

    with tempfile.TemporaryDirectory(prefix="export_sweep_", dir=SCRATCH) as tmp:
        try:
            report = export(net, tmp)
        except CaffeError as exc:
            raise refused(exc, case) from None
        module = load_module(tmp).load()
        with torch.no_grad():
            out = module(*[torch.from_numpy(np.ascontiguousarray(feeds[n]))
                           for n in report["inputs"]])
        if not isinstance(out, dict):
            out = {report["outputs"][0]: out}
        os.remove(os.path.join(tmp, "model.py"))
        return {k: v.numpy() for k, v in out.items()}


def engines(opsets):
    return ["onnx-%d" % o for o in opsets] + ["pytorch"]


def run_case(case, seed, which):
    """{engine: "ok" | "refused: ..." | "mismatch: ..." | "crash: ..."}, or None where our Net
    refuses the combination."""
    built = build(case, seed)
    if built is None:
        return None
    net, feeds, ours = built
    result = {}
    for engine in which:
        try:
            if engine == "pytorch":
                theirs = run_pytorch(net, feeds, case)
            else:
                theirs = run_onnx(net, feeds, int(engine.split("-")[1]), case)
        except Refused as exc:
            result[engine] = "refused: %s" % exc
            continue
        except Exception as exc:  # the engine's own error, whatever its type
            result[engine] = "crash: %s: %s" % (type(exc).__name__,
                                                 " ".join(str(exc).split())[:300])
            continue
        problems = []
        if sorted(theirs) != sorted(ours):
            problems.append("outputs %s, ours %s" % (sorted(theirs), sorted(ours)))
        for name, value in ours.items():
            if name in theirs:
                err = relative_error(value, theirs[name])
                if err:
                    problems.append("%s: %s" % (name, err))
        result[engine] = "mismatch: " + "; ".join(problems) if problems else "ok"
    return result
