"""The export option sweep's generators of the common and element-wise layers (see
export_sweep_cases.py)."""

import numpy as np

from .export_sweep import Case, fmt, maybe, pick, rand_shape
from .export_sweep_cases import axis_in, gen


def _shape(rng, lo=1, hi=5, dims=(1, 6)):
    return rand_shape(rng, int(rng.integers(lo, hi + 1)), *dims)


def _msg(name, parts):
    return "%s { %s }" % (name, " ".join(parts)) if parts or name else ""


# ---- element-wise ----------------------------------------------------------------------

def _neuron(type_, param=None, fields=(), positive=False, lo=1):
    @gen(type_, param)
    def make(rng):
        parts = ["%s: %s" % (f, v(rng)) for f, v in fields if maybe(rng, 0.75)]
        return Case(type_, _msg(param, parts) if param and parts else "",
                    {"data": _shape(rng, lo)}, feeds={"data": "positive"} if positive else {})
    return make


def _u(lo, hi):
    return lambda rng: fmt(rng.uniform(lo, hi))


_neuron("ReLU", "relu_param", [("negative_slope", _u(-0.5, 1.5))])
_neuron("ELU", "elu_param", [("alpha", _u(0.0, 2.0))])
_neuron("Swish", "swish_param", [("beta", _u(-1.0, 3.0))])


@gen("Threshold", "threshold_param")
def threshold(rng):
    """Inputs equal to the threshold now and then (the comparison is strict)."""
    t = float(rng.integers(-2, 3)) if maybe(rng) else float(rng.uniform(-1, 1))
    parts = ["threshold: %s" % fmt(t)] if t != 0 or maybe(rng) else []
    return Case("Threshold", _msg("threshold_param", parts) if parts else "",
                {"data": _shape(rng)}, feeds={"data": pick(rng, ["coarse", "uniform"])})



for _t, _p in (("Sigmoid", "sigmoid_param"), ("TanH", "tanh_param"), ("Mish", "mish_param"),
               ("AbsVal", None), ("BNLL", None), ("ReLU6", None)):
    _neuron(_t, _p)


@gen("Clip", "clip_param")
def clip(rng):
    a, b = sorted(rng.uniform(-1.2, 1.2, 2))
    return Case("Clip", "clip_param { min: %s max: %s }" % (fmt(a), fmt(b)),
                {"data": _shape(rng)})


@gen("PReLU", "prelu_param")
def prelu(rng):
    parts = ["channel_shared: %s" % pick(rng, ["true", "false"])] if maybe(rng, 0.7) else []
    return Case("PReLU", _msg("prelu_param", parts) if parts else "", {"data": _shape(rng, 2)})


@gen("Power", "power_param")
def power(rng):
    p = pick(rng, [1.0, 2.0, 3.0, 0.0, 0.5, -1.0, 1.5, -0.5, 2.5])
    integral = p == int(p) and p >= 0
    scale = rng.uniform(-1.5, 2.0) if integral else rng.uniform(0.2, 2.0)
    shift = rng.uniform(-1.0, 1.0) if integral else rng.uniform(0.0, 1.0)
    if maybe(rng, 0.1):
        scale = 0.0
        shift = shift if integral else 0.5
    fields = [("power", p), ("scale", scale), ("shift", shift)]
    parts = ["%s: %s" % (f, fmt(v)) for f, v in fields if maybe(rng, 0.8) or
             (f != "power" and not integral)]
    return Case("Power", _msg("power_param", parts) if parts else "", {"data": _shape(rng)},
                feeds={} if integral or maybe(rng, 0.2) else {"data": "positive"})


@gen("Exp", "exp_param")
def exp(rng):
    parts = []
    if maybe(rng, 0.7):
        parts.append("base: %s" % fmt(pick(rng, [-1.0, 2.0, 10.0, 0.5, np.e])))
    if maybe(rng, 0.7):
        parts.append("scale: %s" % fmt(rng.uniform(-2.0, 2.0)))
    if maybe(rng, 0.7):
        parts.append("shift: %s" % fmt(rng.uniform(-1.0, 1.0)))
    return Case("Exp", _msg("exp_param", parts) if parts else "", {"data": _shape(rng)})


@gen("Log", "log_param")
def log(rng):
    parts = []
    if maybe(rng, 0.7):
        parts.append("base: %s" % fmt(pick(rng, [-1.0, 2.0, 10.0, 0.5, np.e])))
    if maybe(rng, 0.7):
        parts.append("scale: %s" % fmt(rng.uniform(0.2, 2.0)))
    if maybe(rng, 0.7):
        parts.append("shift: %s" % fmt(rng.uniform(0.0, 1.0)))
    # now and then inputs of any sign: NaN and -inf where Caffe computes them
    return Case("Log", _msg("log_param", parts) if parts else "", {"data": _shape(rng)},
                feeds={"data": "positive" if maybe(rng, 0.8) else "uniform"})


@gen("Dropout", "dropout_param")
def dropout(rng):
    parts = []
    if maybe(rng, 0.8):
        parts.append("dropout_ratio: %s" % fmt(pick(rng, [0.0, 0.1, 0.5, 0.9])))
    if maybe(rng, 0.6):
        parts.append("scale_train: %s" % pick(rng, ["true", "false"]))
    return Case("Dropout", _msg("dropout_param", parts) if parts else "",
                {"data": _shape(rng)})


# ---- normalisation ---------------------------------------------------------------------

@gen("BatchNorm", "batch_norm_param")
def batch_norm(rng):
    parts = []
    if maybe(rng, 0.7):
        parts.append("use_global_stats: %s" % pick(rng, ["true", "false"]))
    if maybe(rng, 0.4):
        parts.append("moving_average_fraction: %s" % fmt(rng.uniform(0.5, 1.0)))
    if maybe(rng, 0.6):
        parts.append("eps: %s" % fmt(pick(rng, [1e-5, 1e-3, 0.1])))
    fork = int(rng.integers(5))
    if fork == 1:
        parts.append("scale_bias: %s" % pick(rng, ["true", "false"]))
    elif fork == 2:
        parts += ["engine: %s" % pick(rng, ["DEFAULT", "CAFFE", "MKLDNN", "MKL2017"]),
                  "use_weight_bias: %s" % pick(rng, ["true", "false"]),
                  "bias_term: %s" % pick(rng, ["true", "false"])]
        if maybe(rng):
            parts.append("relu: %s" % pick(rng, ["true", "false"]))
    return Case("BatchNorm", _msg("batch_norm_param", parts) if parts else "",
                {"data": _shape(rng, 1)})


@gen("BN", "bn_param")
def bn(rng):
    parts = []
    if maybe(rng, 0.4):  # SegNet / ENet's layer
        parts.append("bn_mode: %s" % pick(rng, ["LEARN", "INFERENCE"]))
    else:  # PSPNet's, under the same type name
        if maybe(rng, 0.5):
            parts.append("frozen: %s" % pick(rng, ["true", "false"]))
        if maybe(rng, 0.5):
            parts.append("eps: %s" % fmt(pick(rng, [1e-5, 1e-3, 0.1])))
        if maybe(rng, 0.3):
            parts.append("momentum: %s" % fmt(rng.uniform(0.5, 1.0)))
        if maybe(rng, 0.2):
            parts.append("engine: %s" % pick(rng, ["DEFAULT", "CAFFE"]))
    shape = _shape(rng, 4, 4)
    return Case("BN", _msg("bn_param", parts) if parts else "", {"data": shape})


@gen("MVN", "mvn_param")
def mvn(rng):
    parts = []
    for f in ("normalize_variance", "across_channels"):
        if maybe(rng, 0.7):
            parts.append("%s: %s" % (f, pick(rng, ["true", "false"])))
    if maybe(rng):
        parts.append("eps: %s" % fmt(pick(rng, [1e-9, 1e-3, 0.5])))
    return Case("MVN", _msg("mvn_param", parts) if parts else "", {"data": _shape(rng, 2)})


def _scale_or_bias(rng, type_):
    param = "scale_param" if type_ == "Scale" else "bias_param"
    rank = int(rng.integers(1, 6))
    shape = rand_shape(rng, rank, 1, 5)
    parts = []
    axis = 1 if rank > 1 else 0
    if maybe(rng, 0.7) or rank == 1:
        axis = axis_in(rng, rank)
        parts.append("axis: %d" % axis)
    a = axis % rank
    two = maybe(rng, 0.4)
    if two:
        n = int(rng.integers(0, rank - a + 1))
        shapes = {"data": shape, "b": shape[a:a + n]}
        if n == 0:
            shapes["b"] = (1,) if maybe(rng) else ()
        if maybe(rng, 0.2):
            parts.append("num_axes: %d" % pick(rng, [-1, 0, 1]))  # read only with one bottom
        bottoms = ("data", "b")
    else:
        if maybe(rng, 0.6):
            parts.append("num_axes: %d" % pick(rng, [-1] + list(range(0, rank - a + 1))))
        shapes, bottoms = {"data": shape}, ("data",)
    if type_ == "Scale" and maybe(rng, 0.5):
        parts.append("bias_term: %s" % pick(rng, ["true", "false"]))
    if shapes.get("b") == ():
        return None  # an Input cannot have no axes
    return Case(type_, _msg(param, parts) if parts else "", shapes, bottoms)


@gen("Scale", "scale_param")
def scale(rng):
    return _scale_or_bias(rng, "Scale")


@gen("Bias", "bias_param")
def bias(rng):
    return _scale_or_bias(rng, "Bias")


@gen("Axpy")
def axpy(rng):
    n, c, h, w = rand_shape(rng, 4, 1, 5)
    a = (n, c, 1, 1) if maybe(rng) else (n, c)
    return Case("Axpy", "", {"a": a, "x": (n, c, h, w), "y": (n, c, h, w)}, ("a", "x", "y"))
