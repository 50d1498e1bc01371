"""A blob padded, cropped or read with a stride along its axes, built of BVLC Caffe's Slice,
Concat, Tile, DummyData, Reshape and Silence layers: the values are copied, never computed,
so NaN, infinities and signed zeros come through unchanged. The ONNX importer (Pad, Slice
with steps) and the MXNet one (Pad) build their layers here through a :class:`Layers`.

Padding goes one axis after another, which fills the corners as ONNX and MXNet do: constant
pieces come from DummyData, or the importer's own constant blobs (either of the converted
input's batch size: the net keeps that batch size), the edge slice is repeated by Tile, a
reflection is single slices in reverse order, a wrap the slices of the other end. A stride
``s > 0`` views the axis as ``(n / s, s)`` by a Reshape and keeps the first of each ``s``; a
negative step is single slices concatenated in reverse order (at most :data:`MAX_PIECES` of
them)."""

MAX_PIECES = 512
MODES = ("constant", "edge", "reflect", "wrap")


class Layers:
    """What the builders need of an importer. ``layer(type_, name, bottoms, tops)`` appends a
    LayerParameter and returns it (its name and tops as the importer settled them); ``done``
    is called on it once its parameters are set (an importer that sets layers up to learn
    their shapes does so there); ``fresh(name)`` gives a blob name not used so far;
    ``error(message)`` the exception to raise, naming the node converted; ``constant(dims,
    value, name)``, where given, the blob of a constant (else :meth:`dummy`)."""

    def __init__(self, layer, error, done=None, fresh=None, constant=None):
        self.layer = layer
        self.error = error
        self.done = done or (lambda lp: lp)
        self.fresh = fresh or (lambda name: name)
        self.constant = constant or self.dummy

    def dummy(self, dims, value, name):
        """A blob of ``dims`` filled with ``value`` by a DummyData layer."""
        def setup(lp):
            lp.dummy_data_param.shape.add().dim.extend(dims)
            lp.dummy_data_param.data_filler.add(type="constant", value=value)
        return self.add("DummyData", name, [], [self.fresh(name)], setup)[0]

    def add(self, type_, name, bottoms, tops, setup=None):
        """Appends a layer, ``setup(lp)`` filling in its parameters; returns its tops."""
        lp = self.layer(type_, name, list(bottoms), list(tops))
        if setup is not None:
            setup(lp)
        self.done(lp)
        return list(lp.top)


def cut(em, x, shape, axis, ranges, name):
    """The pieces ``x[lo:hi]`` along ``axis`` for each ``(lo, hi)`` of ``ranges`` (in
    increasing order, not overlapping), by one Slice; what lies between them goes to a
    Silence layer."""
    n = shape[axis]
    if list(ranges) == [(0, n)]:
        return [x]
    points = sorted({p for r in ranges for p in r if 0 < p < n})
    edges = [0] + points + [n]

    def setup(lp):
        lp.slice_param.axis = axis
        lp.slice_param.slice_point.extend(points)
    tops = em.add("Slice", name, [x], [em.fresh("%s/%d" % (name, k))
                                       for k in range(len(edges) - 1)], setup)
    piece = {(edges[k], edges[k + 1]): top for k, top in enumerate(tops)}
    kept = [piece[tuple(r)] for r in ranges]
    spare = [t for t in tops if t not in kept]
    if spare:
        em.add("Silence", name + "/spare", spare, [])
    return kept


def take(em, x, shape, axis, lo, hi, name):
    """``x[lo:hi]`` along ``axis`` (``x`` itself when that is all of it)."""
    return cut(em, x, shape, axis, [(lo, hi)], name)[0]


def concat(em, pieces, axis, name, out):
    """The pieces joined along ``axis`` into ``out`` (one piece: that piece)."""
    if len(pieces) == 1:
        return pieces[0]

    def setup(lp):
        lp.concat_param.axis = axis
    return em.add("Concat", name, pieces, [out], setup)[0]


def rows(em, x, shape, axis, indices, name):
    """The single slices ``x[i]`` along ``axis`` for each (distinct) index, in the order
    given."""
    if len(indices) > MAX_PIECES:
        raise em.error("it would take %d single slices of axis %d (at most %d convert)"
                       % (len(indices), axis, MAX_PIECES))
    order = sorted(indices)
    pieces = dict(zip(order, cut(em, x, shape, axis, [(i, i + 1) for i in order], name)))
    return [pieces[i] for i in indices]


def pad_axis(em, x, shape, axis, before, after, mode, value, name, out):
    """``x`` (of ``shape``) padded by ``before`` and ``after`` (>= 0) along ``axis``, in
    ``mode``, into the blob ``out``; returns the blob, the input itself when there is no
    pad."""
    n = shape[axis]
    if mode == "reflect" and max(before, after) >= n:
        raise em.error("reflect pads %d, %d of axis %d (of size %d): a reflection needs pads "
                       "smaller than the axis" % (before, after, axis, n))
    if mode == "wrap" and max(before, after) > n:
        raise em.error("wrap pads %d, %d of axis %d (of size %d): only a wrap around the axis "
                       "once converts" % (before, after, axis, n))
    if not (before or after):
        return x
    tag = "%s/axis%d" % (name, axis)
    pieces = []
    for side, count in (("before", before), ("after", after)):
        if not count:
            continue
        label = "%s_%s" % (tag, side)
        if mode == "constant":
            dims = list(shape[:axis]) + [count] + list(shape[axis + 1:])
            piece = [em.constant(dims, value, "%s/%s" % (tag, side))]
        elif mode == "edge":  # the first / last slice, repeated
            edge = take(em, x, shape, axis, *((0, 1) if side == "before" else (n - 1, n)),
                        name=label)
            if count == 1:
                piece = [edge]
            else:
                def setup(lp, count=count):
                    lp.tile_param.axis = axis
                    lp.tile_param.tiles = count
                piece = em.add("Tile", label + "_tile", [edge],
                               [em.fresh("%s/%s" % (tag, side))], setup)
        elif mode == "reflect":  # the slices next to the edge (not the edge itself), mirrored
            lo, hi = (1, count + 1) if side == "before" else (n - 1 - count, n - 1)
            piece = rows(em, x, shape, axis, list(range(lo, hi))[::-1], label)
        else:  # wrap: the slices at the other end
            lo, hi = (n - count, n) if side == "before" else (0, count)
            piece = [take(em, x, shape, axis, lo, hi, label)]
        pieces.append((side, piece))
    joined = [b for side, piece in pieces if side == "before" for b in piece] + [x] + \
        [b for side, piece in pieces if side == "after" for b in piece]
    return concat(em, joined, axis, tag, out)


def pad(em, x, shape, before, after, mode, value, name, out):
    """``x`` (of ``shape``) with ``before[i]`` and ``after[i]`` entries added on axis ``i``
    (a negative count removes that many first: ONNX crops before it pads, as onnxruntime
    does) into the blob ``out``; returns (the blob, its shape), the input itself when nothing
    changes."""
    if mode not in MODES:
        raise em.error("mode %s does not convert (%s do)" % (mode, ", ".join(MODES)))
    shape = list(shape)
    cropped = [(axis, -min(b, 0), shape[axis] + min(a, 0))
               for axis, (b, a) in enumerate(zip(before, after)) if b < 0 or a < 0]
    padded = [axis for axis, (b, a) in enumerate(zip(before, after)) if b > 0 or a > 0]
    for k, (axis, lo, hi) in enumerate(cropped):
        if hi <= lo:
            raise em.error("its pads %d, %d crop axis %d (of size %d) to nothing; a Caffe blob "
                           "cannot be empty" % (before[axis], after[axis], axis, shape[axis]))
        last = k == len(cropped) - 1 and not padded
        name_k = "%s/crop%d" % (name, axis)
        x = cut(em, x, shape, axis, [(lo, hi)], name_k)[0] if not last else \
            _take_into(em, x, shape, axis, lo, hi, name_k, out)
        shape[axis] = hi - lo
    for axis in padded:
        top = out if axis == padded[-1] else em.fresh("%s/axis%d" % (out, axis))
        x = pad_axis(em, x, shape, axis, max(before[axis], 0), max(after[axis], 0), mode,
                     value, name, top)
        shape[axis] += max(before[axis], 0) + max(after[axis], 0)
    return x, tuple(shape)


def _take_into(em, x, shape, axis, lo, hi, name, out):
    """``x[lo:hi]`` along ``axis`` written to the blob ``out``."""
    n = shape[axis]
    points = [p for p in (lo, hi) if 0 < p < n]
    tops = ([em.fresh(name + "/before")] if lo > 0 else []) + [out] + \
        ([em.fresh(name + "/after")] if hi < n else [])

    def setup(lp):
        lp.slice_param.axis = axis
        lp.slice_param.slice_point.extend(points)
    tops = em.add("Slice", name, [x], tops, setup)
    kept = tops[1 if lo > 0 else 0]
    em.add("Silence", name + "/spare", [t for t in tops if t != kept], [])
    return kept


def strided(em, x, shape, axis, start, step, count, name, out):
    """``count`` entries of ``x`` along ``axis`` from ``start`` on, ``step`` apart (``step``
    not 0), into the blob ``out``; returns the blob (the input itself when that is all of
    it). A positive step: the whole steps from ``start`` viewed as ``(count, step)`` by a
    Reshape, the first of each kept by a Slice and a Reshape back (an entry past the last
    whole step by a Slice of its own); a negative step: single slices in that order."""
    n = shape[axis]
    if step == 1 or count == 1:
        if (start, count) == (0, n):
            return x
        return _take_into(em, x, shape, axis, start, start + count, name, out)
    if step < 0:
        picks = rows(em, x, shape, axis, [start + step * i for i in range(count)], name)
        return concat(em, picks, axis, name + "/join", out)
    whole = count if start + step * count <= n else count - 1
    ranges = [(start, start + step * whole)]
    if whole < count:
        ranges.append((start + step * whole, start + step * whole + 1))
    pieces = cut(em, x, shape, axis, ranges, name + "/cut")
    rest = pieces[1:]
    inner = list(shape)
    inner[axis:axis + 1] = [whole, step]

    def view(lp, dims, num_axes):
        lp.reshape_param.shape.dim.extend(dims)
        lp.reshape_param.axis = axis
        lp.reshape_param.num_axes = num_axes
    grid = em.add("Reshape", name + "/grid", [pieces[0]], [em.fresh(name + "/grid")],
                  lambda lp: view(lp, [whole, step], 1))[0]
    first = take(em, grid, inner, axis + 1, 0, 1, name + "/first")
    top = out if not rest else em.fresh(name + "/whole")
    kept = em.add("Reshape", name + "/kept", [first], [top],
                  lambda lp: view(lp, [whole], 2))[0]
    return concat(em, [kept] + rest, axis, name + "/join", out)


__all__ = ["Layers", "MAX_PIECES", "MODES", "concat", "cut", "pad", "pad_axis", "rows",
           "strided", "take"]
