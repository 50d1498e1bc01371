"""The SSD fork's patch sampling (``batch_sampler``) and the box geometry it needs.

Boxes are normalized ``(xmin, ymin, xmax, ymax)`` rows in float64. The functions follow the
fork's definitions:

- size: ``w * h``, 0 when ``xmax < xmin`` or ``ymax < ymin``;
- jaccard overlap: intersection over union (0 without a positive-area intersection);
- coverage of ``a`` by ``b``: ``size(a & b) / size(a)``;
- a sampled patch: scale ``s ~ U[min_scale, max_scale]``, aspect ``r ~ U[min_aspect_ratio,
  max_aspect_ratio]`` clamped to ``[s^2, 1/s^2]``, width ``s*sqrt(r)``, height ``s/sqrt(r)``,
  top-left corner uniform over the positions that keep the patch inside the image;
- a patch satisfies a ``sample_constraint`` when some object box passes the constraint's
  jaccard / sample-coverage / object-coverage bounds (no bounds: every patch does). As in
  the fork, an object that passes one kind of bound and fails a later one still marks the
  patch as found;
- each ``batch_sampler`` makes up to ``max_trials`` patches and keeps at most
  ``max_sample`` (0 = no limit) of those that satisfy; one patch of all the samplers' kept
  patches is chosen uniformly.
"""

import math

import numpy as np

from .datum import DataError


def sizes(boxes):
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    w = boxes[:, 2] - boxes[:, 0]
    h = boxes[:, 3] - boxes[:, 1]
    return np.where((w < 0) | (h < 0), 0.0, w * h)


def intersect(box, boxes):
    """The intersection of ``box`` with each row of ``boxes`` (zeros where disjoint)."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    out = np.empty_like(boxes)
    out[:, 0] = np.maximum(box[0], boxes[:, 0])
    out[:, 1] = np.maximum(box[1], boxes[:, 1])
    out[:, 2] = np.minimum(box[2], boxes[:, 2])
    out[:, 3] = np.minimum(box[3], boxes[:, 3])
    disjoint = ((boxes[:, 0] > box[2]) | (boxes[:, 2] < box[0]) | (boxes[:, 1] > box[3])
                | (boxes[:, 3] < box[1]))
    out[disjoint] = 0.0
    return out


def jaccard(box, boxes):
    inter = intersect(box, boxes)
    iw = inter[:, 2] - inter[:, 0]
    ih = inter[:, 3] - inter[:, 1]
    isz = iw * ih
    union = sizes([box])[0] + sizes(boxes) - isz
    ok = (iw > 0) & (ih > 0)
    return np.where(ok, isz / np.where(ok, union, 1.0), 0.0)


def coverage_of_box(box, boxes):
    """``size(box & b) / size(box)`` for each ``b`` of ``boxes``."""
    isz = sizes(intersect(box, boxes))
    own = sizes([box])[0]
    return np.where(isz > 0, isz / own if own > 0 else 0.0, 0.0)


def coverage_by_box(boxes, box):
    """``size(b & box) / size(b)`` for each ``b`` of ``boxes``."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    isz = sizes(intersect(box, boxes))
    own = sizes(boxes)
    return np.where(isz > 0, isz / np.where(own > 0, own, 1.0), 0.0)


def clip(boxes):
    return np.clip(np.asarray(boxes, np.float64), 0.0, 1.0)


def locate(src, box):
    """``box`` given in ``src``'s normalized frame, in ``src``'s parent frame."""
    w = src[2] - src[0]
    h = src[3] - src[1]
    return np.array([src[0] + box[0] * w, src[1] + box[1] * h,
                     src[0] + box[2] * w, src[1] + box[3] * h])


def project(src, boxes):
    """Boxes (parent frame) seen in the frame of the window ``src``, clipped to [0, 1].
    Returns ``(keep, projected)``: boxes not overlapping ``src`` or of zero size after
    clipping are dropped."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    keep = ~((boxes[:, 0] >= src[2]) | (boxes[:, 2] <= src[0]) | (boxes[:, 1] >= src[3])
             | (boxes[:, 3] <= src[1]))
    w = src[2] - src[0]
    h = src[3] - src[1]
    proj = np.empty_like(boxes)
    proj[:, 0] = (boxes[:, 0] - src[0]) / w
    proj[:, 1] = (boxes[:, 1] - src[1]) / h
    proj[:, 2] = (boxes[:, 2] - src[0]) / w
    proj[:, 3] = (boxes[:, 3] - src[1]) / h
    proj = clip(proj)
    keep &= sizes(proj) > 0
    return keep, proj[keep]


def meet_emit_constraint(src, boxes, emit):
    """Which boxes a crop ``src`` keeps under an ``EmitConstraint`` (``None``: all)."""
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    if emit is None:
        return np.ones(len(boxes), bool)
    if emit.emit_type == emit.CENTER:
        cx = (boxes[:, 0] + boxes[:, 2]) / 2
        cy = (boxes[:, 1] + boxes[:, 3]) / 2
        return (cx >= src[0]) & (cx <= src[2]) & (cy >= src[1]) & (cy <= src[3])
    if emit.emit_type == emit.MIN_OVERLAP:
        return coverage_by_box(boxes, src) > emit.emit_overlap
    raise DataError("unknown emit_type %d in emit_constraint" % emit.emit_type)


def check_sampler(bs, where):
    s = bs.sampler
    if not 0 < s.min_scale <= s.max_scale <= 1:
        raise DataError("%s: need 0 < min_scale <= max_scale <= 1, got %g and %g"
                        % (where, s.min_scale, s.max_scale))
    if not 0 < s.min_aspect_ratio <= s.max_aspect_ratio < float("inf"):
        raise DataError("%s: need 0 < min_aspect_ratio <= max_aspect_ratio, got %g and %g"
                        % (where, s.min_aspect_ratio, s.max_aspect_ratio))


def sample_box(sampler, rng):
    """One random patch in the unit square (the fork's ``SampleBBox``)."""
    scale = rng.uniform(sampler.min_scale, sampler.max_scale)
    aspect = rng.uniform(sampler.min_aspect_ratio, sampler.max_aspect_ratio)
    aspect = min(max(aspect, scale ** 2), 1.0 / scale ** 2)
    w = scale * math.sqrt(aspect)
    h = scale / math.sqrt(aspect)
    x = rng.uniform(0.0, max(0.0, 1.0 - w))
    y = rng.uniform(0.0, max(0.0, 1.0 - h))
    return np.array([x, y, x + w, y + h])


def satisfies(patch, objects, c):
    """Whether ``patch`` meets the SampleConstraint ``c`` for some object box."""
    fields = {f.name for f, _ in c.ListFields()}
    has_j = bool(fields & {"min_jaccard_overlap", "max_jaccard_overlap"})
    has_s = bool(fields & {"min_sample_coverage", "max_sample_coverage"})
    has_o = bool(fields & {"min_object_coverage", "max_object_coverage"})
    if not (has_j or has_s or has_o):
        return True
    objects = np.asarray(objects, np.float64).reshape(-1, 4)
    if not len(objects):
        return False
    tests = []
    if has_j:
        tests.append((jaccard(patch, objects), "jaccard_overlap"))
    if has_s:
        tests.append((coverage_of_box(patch, objects), "sample_coverage"))
    if has_o:
        tests.append((coverage_by_box(objects, patch), "object_coverage"))
    found = False
    for i in range(len(objects)):
        for values, name in tests:
            v = values[i]
            if ("min_" + name) in fields and v < getattr(c, "min_" + name):
                break
            if ("max_" + name) in fields and v > getattr(c, "max_" + name):
                break
            found = True
        else:
            if found:
                return True
    return found


def generate_samples(objects, batch_samplers, rng):
    """All kept patches of all samplers (the fork's ``GenerateBatchSamples``)."""
    unit = np.array([0.0, 0.0, 1.0, 1.0])
    out = []
    for bs in batch_samplers:
        if not bs.use_original_image:
            continue
        found = 0
        for _ in range(bs.max_trials):
            if bs.HasField("max_sample") and found >= bs.max_sample:
                break
            patch = locate(unit, sample_box(bs.sampler, rng))
            if satisfies(patch, objects, bs.sample_constraint):
                found += 1
                out.append(patch)
    return out
