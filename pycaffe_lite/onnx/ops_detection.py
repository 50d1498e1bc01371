"""DetectionOutput (the SSD fork) as ONNX operators: the boxes decoded, per class the
``top_k`` best candidates (TopK) through NonMaxSuppression, then ``keep_top_k`` over the
classes of each image, in the layer's row order and with its placeholder rows when nothing
is detected.

How each step keeps the layer's result:

- candidates: the layer sorts the scores above ``confidence_threshold`` best first (ties in
  prior order) and keeps ``top_k`` of them; TopK sorts the same way (ties by lower index), and
  taking the top ``k`` first and the threshold after selects the same set;
- suppression: NonMaxSuppression runs greedily over each class's candidates, suppressing
  overlaps above the threshold as the layer does with a fixed threshold (``eta`` 1, or a
  threshold of at most 0.5, which ``eta`` never lowers); the adaptive threshold has no ONNX
  equivalent: an export error. The layer counts an inverted box (xmax < xmin or
  ymax < ymin) as overlapping nothing, where ONNX reorders its corners: such boxes are given
  to NonMaxSuppression as empty boxes, which overlap nothing there either;
- order: the rows are sorted by (image, class, rank among the class's candidates), which is
  the layer's (classes ascending, scores descending, ties in prior order), whatever order
  NonMaxSuppression lists them in;
- ``keep_top_k``: a detection is kept when fewer than ``keep_top_k`` detections of its image
  beat it (a higher score, or an equal score earlier in that order), the layer's stable sort;
- no detection at all: one row ``[i, -1, -1, -1, -1, -1, -1]`` per image, as the layer.
"""

import numpy as np

from ..proto import caffe_pb2
from .builder import register_converter

CORNER = caffe_pb2.PriorBoxParameter.CORNER
CENTER_SIZE = caffe_pb2.PriorBoxParameter.CENTER_SIZE
CORNER_SIZE = caffe_pb2.PriorBoxParameter.CORNER_SIZE

FLOAT = 1  # onnx.TensorProto.FLOAT
INT64 = 7  # onnx.TensorProto.INT64


class _Ops:
    """Short names for the nodes of one DetectionOutput layer."""

    def __init__(self, call):
        self.call = call

    def __call__(self, op, inputs, suffix, out=None, **attrs):
        return self.call.node(op, inputs, out, suffix=suffix, **attrs)

    def split(self, x, n, axis, suffix):
        outs = [self.call.g.fresh("%s/%s%d" % (self.call.name, suffix, i)) for i in range(n)]
        return self("Split", [x, self.call.ints(suffix + "/sizes", [1] * n)], suffix, outs,
                    axis=axis)

    def column(self, x, index, suffix):
        """Column ``index`` of a 2-D value, as a 1-D value."""
        return self("Gather", [x, self.call.const(suffix + "/index", index, np.int64)], suffix,
                    axis=1)

    def scalar(self, shape, suffix):
        """The first entry of a 1-D int64 shape, as a scalar."""
        return self("Gather", [shape, self.call.const(suffix + "/index", 0, np.int64)], suffix,
                    axis=0)


def _decode(ops, call, loc, priors, variances, layer):
    """Boxes ``(N, L, P, 4)`` from the offsets ``loc`` ``(N, L, P, 4)``; ``priors`` and
    ``variances`` are ``(1, P, 4)``. The same float32 operations in the same order as the
    layer's decoding."""
    in_target = layer.variance_encoded_in_target
    if layer.code_type == CORNER:
        scaled = loc if in_target else ops("Mul", [variances, loc], "var_loc")
        return ops("Add", [priors, scaled], "decoded")
    p0, p1, p2, p3 = ops.split(priors, 4, 2, "prior")
    pw = ops("Sub", [p2, p0], "prior_w")
    ph = ops("Sub", [p3, p1], "prior_h")
    if layer.code_type == CORNER_SIZE:
        scale = ops("Concat", [pw, ph, pw, ph], "prior_scale", axis=2)
        scaled = loc if in_target else ops("Mul", [variances, loc], "var_loc")
        return ops("Add", [priors, ops("Mul", [scaled, scale], "scaled")], "decoded")
    two = call.const("two", 2.0)
    pcx = ops("Div", [ops("Add", [p0, p2], "prior_x_sum"), two], "prior_cx")
    pcy = ops("Div", [ops("Add", [p1, p3], "prior_y_sum"), two], "prior_cy")
    o = ops.split(loc, 4, 3, "offset")
    if not in_target:
        v = ops.split(variances, 4, 2, "variance")
        o = [ops("Mul", [vi, oi], "var_offset%d" % i) for i, (vi, oi) in enumerate(zip(v, o))]
    cx = ops("Add", [ops("Mul", [o[0], pw], "dx"), pcx], "cx")
    cy = ops("Add", [ops("Mul", [o[1], ph], "dy"), pcy], "cy")
    half_w = ops("Div", [ops("Mul", [ops("Exp", [o[2]], "exp_w"), pw], "w"), two], "half_w")
    half_h = ops("Div", [ops("Mul", [ops("Exp", [o[3]], "exp_h"), ph], "h"), two], "half_h")
    return ops("Concat", [ops("Sub", [cx, half_w], "xmin"), ops("Sub", [cy, half_h], "ymin"),
                          ops("Add", [cx, half_w], "xmax"), ops("Add", [cy, half_h], "ymax")],
               "decoded", axis=3)


def _as_suppressed(ops, boxes):
    """``boxes`` ``(..., 4)`` with each inverted box replaced by the empty box at its first
    corner, so that it overlaps nothing in NonMaxSuppression (as in the layer)."""
    x0, y0, x1, y1 = ops.split(boxes, 4, 2, "nms_coord")
    inverted = ops("Or", [ops("Less", [x1, x0], "x_inverted"),
                          ops("Less", [y1, y0], "y_inverted")], "inverted")
    empty = ops("Concat", [x0, y0, x0, y0], "empty_box", axis=2)
    return ops("Where", [inverted, empty, boxes], "nms_boxes")


@register_converter("DetectionOutput")
def detection_output(call):
    layer = call.layer
    if not layer.normalized:
        raise call.error("normalized_bbox: false (OpenCV's DetectionOutput on pixel boxes) is "
                         "not converted to ONNX: only the normalised form is")
    # the threshold adapts (times eta after each kept box) only while it is above 0.5
    if layer.eta < 1.0 and layer.nms_threshold > 0.5:
        raise call.error("nms_param eta %g with nms_threshold %g (adaptive suppression) has "
                         "no ONNX equivalent: NonMaxSuppression keeps its threshold fixed; "
                         "export with eta 1 (or a threshold of at most 0.5, which eta never "
                         "changes)" % (layer.eta, layer.nms_threshold))
    if layer.code_type not in (CORNER, CENTER_SIZE, CORNER_SIZE):
        raise call.error("code_type %d does not convert to ONNX" % layer.code_type)
    if len(call.inputs) > 3:
        raise call.error("RefineDet's form (the ARM's bottoms after the priors) does not "
                         "convert to ONNX")
    ops = _Ops(call)
    loc, conf, prior = call.inputs
    # a prior blob of several images' priors (N x 2 x 4P): the first image's, as the layer
    prior_shape = list(call.in_shapes[2])
    images = prior_shape[0] if len(prior_shape) >= 3 and prior_shape[0] > 1 else 1
    P = int(np.prod(prior_shape)) // images // 8
    C = layer.num_classes
    L = layer.num_loc_classes
    classes = [c for c in range(C) if c != layer.background_label_id]
    if not classes:
        raise call.error("every class is the background class: nothing to detect")
    CP = len(classes)
    k = P if layer.top_k < 0 else min(layer.top_k, P)
    call.out_dims = [[1, 1, call.name + "_detections", 7]]
    if k == 0:  # no candidates (top_k 0): the placeholder rows alone
        _with_placeholder(ops, call, None, loc)
        return

    # priors and variances (1, P, 4); offsets (N, L, P, 4); boxes decoded (N, L, P, 4)
    prior = call.reshape(prior, [2 * images, P, 4], suffix="prior")
    if images > 1:
        prior = ops("Slice", [prior, call.ints("prior/starts", [0]), call.ints("prior/ends", [2]),
                              call.ints("prior/axes", [0])], "first_image_priors")
    pri, var = ops.split(prior, 2, 0, "prior_var")
    offsets = call.reshape(loc, [0, P, L, 4], suffix="loc")
    offsets = ops("Transpose", [offsets], "loc_by_class", perm=[0, 2, 1, 3])
    boxes = _decode(ops, call, offsets, pri, var, layer)
    if layer.clip:
        boxes = ops("Clip", [boxes, call.const("zero", 0.0), call.const("one", 1.0)], "clip")

    # scores (N, C', P) of the classes but the background; the k best per class
    scores = call.reshape(conf, [0, P, C], suffix="conf")
    scores = ops("Transpose", [scores], "conf_by_class", perm=[0, 2, 1])
    class_ids = call.const("classes", classes, np.int64) if CP != C else None
    if class_ids is not None:
        scores = ops("Gather", [scores, class_ids], "foreground", axis=1)
    names = [call.g.fresh(call.name + "/top_scores"), call.g.fresh(call.name + "/top_priors")]
    top_scores, top_priors = ops("TopK", [scores, call.ints("k", [k])], "top_k", names,
                                 axis=2, largest=1, sorted=1)
    if L == 1:
        flat_boxes = call.reshape(boxes, [0, P, 4], suffix="shared_boxes")
        picks = call.reshape(top_priors, [0, CP * k, 1], suffix="picks")
        candidates = ops("GatherND", [flat_boxes, picks], "candidates", batch_dims=1)
    else:
        if class_ids is not None:
            boxes = ops("Gather", [boxes, class_ids], "foreground_boxes", axis=1)
        picks = ops("Unsqueeze", [top_priors, call.ints("picks/axes", [3])], "picks")
        candidates = ops("GatherND", [boxes, picks], "candidates", batch_dims=2)
    candidates = call.reshape(candidates, [-1, k, 4], suffix="candidate_boxes")

    # suppression per (image, class): NonMaxSuppression over N * C' batches of one class
    nms_inputs = [_as_suppressed(ops, candidates),
                  call.reshape(top_scores, [-1, 1, k], suffix="candidate_scores"),
                  call.ints("max_per_class", [k]),
                  call.const("iou_threshold", [min(layer.nms_threshold, 1.0)])]
    if layer.confidence_threshold > -np.finfo(np.float32).max:
        nms_inputs.append(call.const("score_threshold", [layer.confidence_threshold]))
    selected = ops("NonMaxSuppression", nms_inputs, "nms")
    batch = ops.column(selected, 0, "batch_of")
    rank = ops.column(selected, 2, "rank_of")
    kk = call.const("k_size", k, np.int64)
    flat = ops("Add", [ops("Mul", [batch, kk], "batch_offset"), rank], "candidate_of")
    # the layer's order: image, class, then rank among the class's candidates
    count = ops("Shape", [flat], "count")
    flat = ops("TopK", [flat, count], "order",
               [call.g.fresh(call.name + "/sorted"), call.g.fresh(call.name + "/positions")],
               axis=0, largest=0, sorted=1)[0]
    cp = call.const("num_foreground", CP, np.int64)
    batch = ops("Div", [flat, kk], "batch")
    image = ops("Cast", [ops("Div", [batch, cp], "image_int")], "image", to=FLOAT)
    label = ops("Gather", [call.const("labels", np.asarray(classes, np.float32)),
                           ops("Mod", [batch, cp], "class_index")], "label", axis=0)
    score = ops("Gather", [call.reshape(top_scores, [-1], suffix="all_scores"), flat],
                "score", axis=0)
    found = ops("Gather", [call.reshape(candidates, [-1, 4], suffix="all_boxes"), flat],
                "boxes", axis=0)
    one_axis = call.ints("column_axes", [1])
    rows = ops("Concat", [ops("Unsqueeze", [image, one_axis], "image_col"),
                          ops("Unsqueeze", [label, one_axis], "label_col"),
                          ops("Unsqueeze", [score, one_axis], "score_col"), found],
               "rows", axis=1)
    if -1 < layer.keep_top_k:
        rows = _keep_top_k(ops, call, rows, image, score, count, layer.keep_top_k)
    _with_placeholder(ops, call, rows, loc)


def _keep_top_k(ops, call, rows, image, score, count, keep):
    """The rows of detections beaten by fewer than ``keep`` others of their image: a
    higher score, or an equal one earlier in the rows' order."""
    col = call.ints("col_axes", [1])
    row = call.ints("row_axes", [0])
    n = ops.scalar(count, "count_scalar")
    position = ops("Range", [call.const("range_start", 0, np.int64), n,
                             call.const("range_step", 1, np.int64)], "position")
    pairs = []
    for what, x in (("image", image), ("score", score), ("position", position)):
        pairs.append((ops("Unsqueeze", [x, col], what + "_i"),
                      ops("Unsqueeze", [x, row], what + "_j")))
    (img_i, img_j), (s_i, s_j), (p_i, p_j) = pairs
    tie = ops("And", [ops("Equal", [s_j, s_i], "equal_score"),
                      ops("Less", [p_j, p_i], "earlier")], "tie_before")
    beats = ops("Or", [ops("Greater", [s_j, s_i], "higher"), tie], "beats_by_score")
    beats = ops("And", [beats, ops("Equal", [img_j, img_i], "same_image")], "beats")
    beaten = call.g.reduce("ReduceSum", ops("Cast", [beats], "beats_count", to=INT64), [1],
                           False, name=call.name + "/beaten")
    kept = ops("Less", [beaten, call.const("keep_top_k", keep, np.int64)], "kept")
    index = call.reshape(ops("NonZero", [kept], "kept_where"), [-1], suffix="kept_index")
    return ops("Gather", [rows, index], "kept_rows", axis=0)


def _with_placeholder(ops, call, rows, loc):
    """``rows`` as ``(1, 1, K, 7)``, or the placeholders ``[i, -1, ..., -1]`` for each image
    ``i`` when there are none: the two stacked, and the first ``K`` rows taken, or the
    ``N`` placeholders when ``K`` is 0. ``rows`` None: the placeholders alone."""
    num = ops("Slice", [ops("Shape", [loc], "loc_shape"), call.ints("n_start", [0]),
                        call.ints("n_end", [1])], "num_images")
    ids = ops("Range", [call.const("ids_start", 0.0), ops("Cast", [ops.scalar(num, "n")],
                                                              "n_float", to=FLOAT),
                        call.const("ids_step", 1.0)], "image_ids")
    minus = ops("Expand", [call.const("minus_one", -np.ones((1, 6), np.float32)),
                           ops("Concat", [num, call.ints("six", [6])], "minus_shape",
                               axis=0)], "minus_ones")
    placeholder = ops("Concat", [ops("Unsqueeze", [ids, call.ints("id_axes", [1])], "id_col"),
                                 minus], "placeholder", axis=1)
    if rows is None:
        call.reshape(placeholder, [1, 1, -1, 7], call.outputs, suffix="output")
        return
    stacked = ops("Concat", [rows, placeholder], "stacked", axis=0)
    found = ops("Slice", [ops("Shape", [rows], "rows_shape"), call.ints("k_start", [0]),
                          call.ints("k_end", [1])], "found")
    none = ops("Cast", [ops("Equal", [found, call.ints("zero_rows", [0])], "none_found")],
               "none_int", to=INT64)
    end = ops("Add", [found, ops("Mul", [none, num], "placeholder_rows")], "end")
    taken = ops("Slice", [stacked, call.ints("rows_start", [0]), end,
                          call.ints("rows_axes", [0])], "taken")
    call.reshape(taken, [1, 1, -1, 7], call.outputs, suffix="output")
