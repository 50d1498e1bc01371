"""The export option sweep's generators of the layers that move, join, split, reduce or index
values (see export_sweep_cases.py)."""

import numpy as np

from .export_sweep import Case, fmt, maybe, pick, rand_shape
from .export_sweep_cases import axis_in, gen


def _rank(rng, lo=1, hi=5):
    return int(rng.integers(lo, hi + 1))


def _msg(name, parts):
    return "%s { %s }" % (name, " ".join(parts)) if parts else ""


@gen("InnerProduct", "inner_product_param")
def inner_product(rng):
    rank = _rank(rng, 1)
    shape = rand_shape(rng, rank, 1, 5)
    parts = ["num_output: %d" % rng.integers(1, 6)]
    if maybe(rng, 0.6) or rank == 1:
        parts.append("axis: %d" % axis_in(rng, rank))
    if maybe(rng, 0.4):
        parts.append("bias_term: %s" % pick(rng, ["true", "false"]))
    if maybe(rng, 0.4):
        parts.append("transpose: %s" % pick(rng, ["true", "false"]))
    return Case("InnerProduct", _msg("inner_product_param", parts), {"data": shape})


@gen("Embed", "embed_param")
def embed(rng):
    dim = int(rng.integers(1, 9))
    parts = ["num_output: %d" % rng.integers(1, 6), "input_dim: %d" % dim]
    if maybe(rng, 0.5):
        parts.append("bias_term: %s" % pick(rng, ["true", "false"]))
    shape = rand_shape(rng, _rank(rng, 1, 3), 1, 5)
    return Case("Embed", _msg("embed_param", parts), {"data": shape},
                feeds={"data": ("indices", dim)})


@gen("Softmax", "softmax_param")
def softmax(rng):
    rank = _rank(rng)
    parts = ["axis: %d" % axis_in(rng, rank)] if maybe(rng, 0.7) or rank == 1 else []
    return Case("Softmax", _msg("softmax_param", parts), {"data": rand_shape(rng, rank)})


def _axis_or_legacy(rng, rank, legacy, parts):
    """A Concat's or Slice's axis, drawn with its field into ``parts``: sometimes the legacy
    field (``concat_dim`` / ``slice_dim``, never negative), else mostly ``axis``; the default
    (1, or 0 for one axis) otherwise."""
    axis = 1 if rank > 1 else 0
    if maybe(rng, 0.15) and rank > 1:
        axis = int(rng.integers(0, rank))
        parts.append("%s: %d" % (legacy, axis))
    elif maybe(rng, 0.7) or rank == 1:
        axis = axis_in(rng, rank)
        parts.append("axis: %d" % axis)
    return axis


@gen("Concat", "concat_param")
def concat(rng):
    rank = _rank(rng)
    shape = rand_shape(rng, rank, 1, 4)
    parts = []
    axis = _axis_or_legacy(rng, rank, "concat_dim", parts)
    shapes = {}
    for i in range(int(rng.integers(1, 4))):
        s = list(shape)
        s[axis % rank] = int(rng.integers(1, 4))
        shapes["x%d" % i] = tuple(s)
    return Case("Concat", _msg("concat_param", parts), shapes, tuple(shapes))


@gen("Slice", "slice_param")
def slice_(rng):
    rank = _rank(rng)
    shape = list(rand_shape(rng, rank, 1, 4))
    parts = []
    axis = _axis_or_legacy(rng, rank, "slice_dim", parts)
    a = axis % rank
    n = int(rng.integers(1, 4))
    if maybe(rng):
        shape[a] = n * int(rng.integers(1, 3))
    else:
        shape[a] = int(rng.integers(n, n + 4))
        points = sorted(rng.choice(np.arange(1, shape[a]), n - 1, replace=False)) \
            if n > 1 else []
        parts += ["slice_point: %d" % p for p in points]
    tops = tuple("s%d" % i for i in range(n))
    return Case("Slice", _msg("slice_param", parts), {"data": tuple(shape)}, tops=tops)


@gen("Split")
def split(rng):
    tops = tuple("t%d" % i for i in range(int(rng.integers(1, 4))))
    return Case("Split", "", {"data": rand_shape(rng, _rank(rng))}, tops=tops)


@gen("Flatten", "flatten_param")
def flatten(rng):
    rank = _rank(rng)
    parts = []
    if maybe(rng, 0.7):
        parts.append("axis: %d" % axis_in(rng, rank))
    if maybe(rng, 0.7):
        parts.append("end_axis: %d" % axis_in(rng, rank))
    return Case("Flatten", _msg("flatten_param", parts), {"data": rand_shape(rng, rank)})


def _factor(rng, n, parts):
    out = []
    for _ in range(parts - 1):
        divs = [d for d in range(1, n + 1) if n % d == 0]
        d = pick(rng, divs)
        out.append(d)
        n //= d
    return out + [n]


@gen("Reshape", "reshape_param")
def reshape(rng):
    rank = _rank(rng)
    shape = rand_shape(rng, rank, 1, 4)
    parts = []
    start, end = 0, rank
    if maybe(rng, 0.4):
        axis = int(rng.integers(-rank - 1, rank + 1))
        parts.append("axis: %d" % axis)
        start = axis if axis >= 0 else rank + 1 + axis
    if maybe(rng, 0.4):
        num = int(rng.integers(-1, rank - start + 1))
        parts.append("num_axes: %d" % num)
        end = rank if num == -1 else start + num
    count = int(np.prod(shape[start:end], dtype=np.int64))
    dims = _factor(rng, count, int(rng.integers(0 if count == 1 else 1, 4)) or 1) \
        if end > start or maybe(rng) else []
    if end == start and maybe(rng):
        dims = [1] * int(rng.integers(1, 3))
    for i, d in enumerate(dims):  # 0 copies the bottom's axis at the same place
        if start + i < rank and shape[start + i] == d and maybe(rng, 0.4):
            dims[i] = 0
    if dims and maybe(rng, 0.6):
        dims[int(rng.integers(len(dims)))] = -1
    parts.insert(0, "shape { %s }" % " ".join("dim: %d" % d for d in dims))
    return Case("Reshape", _msg("reshape_param", parts), {"data": shape})


@gen("Eltwise", "eltwise_param")
def eltwise(rng):
    shape = rand_shape(rng, _rank(rng))
    n = int(rng.integers(2, 4))
    shapes = {"x%d" % i: shape for i in range(n)}
    parts = []
    op = pick(rng, ["PROD", "SUM", "MAX", None])
    if op:
        parts.append("operation: %s" % op)
    if op in ("SUM", None) and maybe(rng, 0.6):
        parts += ["coeff: %s" % fmt(rng.uniform(-2, 2)) for _ in range(n)]
    bottoms = tuple(shapes)
    if maybe(rng, 0.15):
        bottoms = bottoms[:-1] + ("x0",)  # one bottom twice
        shapes.pop("x%d" % (n - 1))
    feeds = {k: "coarse" for k in shapes} if op == "MAX" and maybe(rng) else {}
    return Case("Eltwise", _msg("eltwise_param", parts), shapes, bottoms, feeds=feeds)


@gen("ArgMax", "argmax_param")
def argmax(rng):
    rank = _rank(rng)
    shape = rand_shape(rng, rank, 1, 5)
    parts = []
    if maybe(rng, 0.6):
        axis = axis_in(rng, rank)
        parts.append("axis: %d" % axis)
        size = shape[axis]
    else:
        size = int(np.prod(shape[1:], dtype=np.int64))
    if maybe(rng, 0.6):
        parts.append("top_k: %d" % rng.integers(1, size + 1))
    if maybe(rng, 0.6):
        parts.append("out_max_val: %s" % pick(rng, ["true", "false"]))
    feeds = {"data": "coarse"} if maybe(rng, 0.3) else {}  # ties: the order Caffe ranks them
    return Case("ArgMax", _msg("argmax_param", parts), {"data": shape}, feeds=feeds)


@gen("Reduction", "reduction_param")
def reduction(rng):
    rank = _rank(rng)
    parts = []
    if maybe(rng, 0.8):
        parts.append("operation: %s" % pick(rng, ["SUM", "ASUM", "SUMSQ", "MEAN"]))
    if maybe(rng, 0.7):
        parts.append("axis: %d" % axis_in(rng, rank))
    if maybe(rng, 0.5):
        parts.append("coeff: %s" % fmt(rng.uniform(-2, 3)))
    return Case("Reduction", _msg("reduction_param", parts), {"data": rand_shape(rng, rank)})


@gen("Tile", "tile_param")
def tile(rng):
    rank = _rank(rng)
    parts = ["tiles: %d" % rng.integers(1, 4)]
    if maybe(rng, 0.7) or rank == 1:
        parts.append("axis: %d" % axis_in(rng, rank))
    return Case("Tile", _msg("tile_param", parts), {"data": rand_shape(rng, rank)})


@gen("Parameter", "parameter_param")
def parameter(rng):
    dims = rand_shape(rng, _rank(rng))
    return Case("Parameter", "parameter_param { shape { %s } }"
                % " ".join("dim: %d" % d for d in dims), {}, ())
