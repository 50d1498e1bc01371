"""The generators of the export option sweep: one per layer type, each drawing the fields of
the type's ``*_param`` message (and its input shapes) from a seeded ``numpy`` Generator.

``PARAM`` names each type's message field; ``NOT_SWEPT`` the fields no generator draws, and
why (tests/test_export_option_sweep.py checks that every other field of the schema is drawn
by some case)."""

import numpy as np

from .export_sweep import Case, fmt, maybe, per_axis, pick, rand_shape

GENERATORS = {}
PARAM = {}

# fields that change nothing an exported deploy net computes
NOT_SWEPT = {
    "convolution_param": {"weight_filler", "bias_filler", "engine", "force_nd_im2col"},
    # engine (Intel Caffe's): which layers of an int8 net compute in int8; a float net's
    # values are the same under every engine
    "inner_product_param": {"weight_filler", "bias_filler", "engine"},
    "concat_param": {"engine"},
    "embed_param": {"weight_filler", "bias_filler"},
    "pooling_param": {"engine"},
    "lrn_param": {"engine"},
    "relu_param": {"engine"},
    "softmax_param": {"engine"},
    "sigmoid_param": {"engine"},
    "tanh_param": {"engine"},
    "mish_param": {"engine"},
    "prelu_param": {"filler"},
    "scale_param": {"filler", "bias_filler"},
    "bias_param": {"filler"},
    "eltwise_param": {"stable_prod_grad", "engine"},  # backward only; Intel's engine
    # fillers and training-only statistics fields; engine: Intel's, only with relu
    "batch_norm_param": {"scale_filler", "bias_filler", "filler", "stats_batch_size"},
    "bn_param": {"scale_filler", "shift_filler", "slope_filler", "bias_filler"},
    "norm_param": {"scale_filler"},
    # a new random mask at every run: no two engines give the same numbers
    "dropout_param": {"sample_weights_test"},
}


def gen(type_, param=None):
    def wrap(fn):
        GENERATORS[type_] = fn
        PARAM[type_] = param
        return fn
    return wrap


def axis_in(rng, rank):
    """An axis of a blob of ``rank`` axes, negative half the time."""
    a = int(rng.integers(rank))
    return a - rank if maybe(rng) else a


# ---- vision ----------------------------------------------------------------------------

def _conv(rng, type_, depthwise=None):
    nd = pick(rng, [1, 2, 2, 2, 3])
    c = pick(rng, [1, 2, 3, 4, 6])
    if depthwise == "fork":  # ConvolutionDepthwise: one filter per channel
        group, num_output = None, c if maybe(rng) else None
    elif depthwise == "multiplier":
        group, num_output = None, c * int(rng.integers(1, 3))
    else:
        group = pick(rng, [g for g in range(1, c + 1) if c % g == 0])
        num_output = group * int(rng.integers(1, 3))
    k = [int(rng.integers(1, 5)) for _ in range(nd)]
    s = [int(rng.integers(1, 4)) for _ in range(nd)]
    p = [int(rng.integers(0, kk + 1)) for kk in k]
    d = [int(rng.integers(1, 4)) for _ in range(nd)]
    if maybe(rng, 0.3):
        k = [k[0]] * nd
    parts = []
    if num_output is not None:
        parts.append("num_output: %d" % num_output)
    parts.append(per_axis(rng, "kernel", k, nd).replace("kernel:", "kernel_size:"))
    if maybe(rng, 0.8):
        parts.append(per_axis(rng, "stride", s, nd))
    else:
        s = [1] * nd
    if maybe(rng, 0.7):
        parts.append(per_axis(rng, "pad", p, nd))
    else:
        p = [0] * nd
    if maybe(rng, 0.4):
        parts.append(" ".join("dilation: %d" % v for v in (d if maybe(rng) else d[:1])))
        if len(parts[-1].split()) == 2:
            d = [d[0]] * nd
    else:
        d = [1] * nd
    if depthwise and maybe(rng, 0.3):
        parts.append("group: %d" % c)  # what the forks' files write, or leave out
    elif group not in (None, 1) or (group == 1 and maybe(rng, 0.2)):
        parts.append("group: %d" % group)
    if maybe(rng, 0.3):
        parts.append("bias_term: false")
    lead = ()
    if maybe(rng, 0.15):
        parts.append("axis: %d" % pick(rng, [1, -(nd + 1)]))
    elif maybe(rng, 0.1) and nd < 3:  # the channels at axis 2: two batch-like axes
        parts.append("axis: 2")
        lead = (int(rng.integers(1, 3)),)
    spatial = []
    for kk, pp, dd in zip(k, p, d):
        low = max(1, dd * (kk - 1) + 1 - 2 * pp) if type_ != "Deconvolution" else 1
        spatial.append(low + int(rng.integers(0, 4)))
    shape = (int(rng.integers(1, 3)),) + lead + (c,) + tuple(spatial)
    return Case(type_, "convolution_param { %s }" % " ".join(parts), {"data": shape})


@gen("Convolution", "convolution_param")
def convolution(rng):
    return _conv(rng, "Convolution")


@gen("Deconvolution", "convolution_param")
def deconvolution(rng):
    return _conv(rng, "Deconvolution")


@gen("ConvolutionDepthwise", "convolution_param")
def convolution_depthwise(rng):
    return _conv(rng, "ConvolutionDepthwise", "fork")


@gen("DepthwiseConvolution", "convolution_param")
def depthwise_convolution(rng):
    return _conv(rng, "DepthwiseConvolution", "multiplier")


def _hw(rng, name, values, single=None):
    """Pooling's spelling: one value for both axes, or name_h and name_w."""
    if values[0] == values[1] and maybe(rng):
        return "%s: %d" % (single or name, values[0])
    return "%s_h: %d %s_w: %d" % (name, values[0], name, values[1])


@gen("Pooling", "pooling_param")
def pooling(rng):
    pool = pick(rng, ["MAX", "MAX", "AVE", "AVE", "STOCHASTIC"])
    parts = ["pool: %s" % pool]
    h, w = int(rng.integers(1, 10)), int(rng.integers(1, 10))
    if maybe(rng, 0.2):
        parts.append("global_pooling: true")
        if maybe(rng, 0.3):
            parts.append("stride: 1 pad: 0")
    else:
        k = [int(rng.integers(1, 5)), int(rng.integers(1, 5))]
        if maybe(rng):
            k = [k[0], k[0]]
        parts.append(_hw(rng, "kernel", k, "kernel_size"))
        if maybe(rng, 0.8):
            parts.append(_hw(rng, "stride", [int(rng.integers(1, 4)) for _ in k]))
        if maybe(rng, 0.6):
            parts.append(_hw(rng, "pad", [int(rng.integers(0, kk)) for kk in k]))
        h, w = max(h, k[0]), max(w, k[1])
    if maybe(rng, 0.4):
        parts.append("round_mode: %s" % pick(rng, ["CEIL", "FLOOR"]))
    if maybe(rng, 0.15):
        parts.append("ceil_mode: %s" % pick(rng, ["true", "false"]))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), h, w)
    # STOCHASTIC: for a ReLU's output (windows of zeros), or any sign
    feeds = {"data": pick(rng, ["relu", "uniform"])} if pool == "STOCHASTIC" else {}
    return Case("Pooling", "pooling_param { %s }" % " ".join(parts), {"data": shape},
                feeds=feeds)


@gen("LRN", "lrn_param")
def lrn(rng):
    parts = ["local_size: %d" % pick(rng, [1, 3, 5, 7]), "alpha: %s" % fmt(rng.uniform(0.1, 3)),
             "beta: %s" % fmt(rng.uniform(0.2, 1.2)), "k: %s" % fmt(rng.uniform(0.5, 3))]
    parts = [x for x in parts if maybe(rng, 0.8)]
    if maybe(rng):
        parts.append("norm_region: %s" % pick(rng, ["ACROSS_CHANNELS", "WITHIN_CHANNEL"]))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 8)), int(rng.integers(1, 8)),
             int(rng.integers(1, 8)))
    return Case("LRN", "lrn_param { %s }" % " ".join(parts), {"data": shape})


@gen("Crop", "crop_param")
def crop(rng):
    rank = int(rng.integers(2, 6))
    shape = rand_shape(rng, rank, 1, 7)
    parts = []
    axis = 2 if rank > 2 else 1
    if maybe(rng, 0.7):
        axis = axis_in(rng, rank)
        parts.append("axis: %d" % axis)
    a = axis % rank
    ref = list(shape)
    offsets = []
    for i in range(a, rank):
        ref[i] = int(rng.integers(1, shape[i] + 1))
        offsets.append(int(rng.integers(0, shape[i] - ref[i] + 1)))
    for i in range(a):  # axes before the crop axis: the reference's sizes do not matter
        ref[i] = int(rng.integers(1, 4))
    if maybe(rng, 0.3) and len(set(offsets)) > 1:
        offsets = [min(offsets)]
    if maybe(rng, 0.85):
        parts += ["offset: %d" % o for o in offsets]
    return Case("Crop", "crop_param { %s }" % " ".join(parts),
                {"data": shape, "ref": tuple(ref)}, ("data", "ref"))


@gen("Interp", "interp_param")
def interp(rng):
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), int(rng.integers(1, 9)),
             int(rng.integers(1, 9)))
    mode = int(rng.integers(4))
    parts = []
    if mode == 0:
        parts += ["height: %d" % rng.integers(1, 12), "width: %d" % rng.integers(1, 12)]
    elif mode == 1:
        parts.append("zoom_factor: %d" % rng.integers(1, 4))
    elif mode == 2:
        parts.append("shrink_factor: %d" % rng.integers(1, 4))
    else:
        parts += ["shrink_factor: %d" % rng.integers(1, 4),
                  "zoom_factor: %d" % rng.integers(1, 4)]
    if maybe(rng, 0.4):
        parts += ["pad_beg: %d" % -rng.integers(0, 2), "pad_end: %d" % -rng.integers(0, 2)]
    return Case("Interp", "interp_param { %s }" % " ".join(parts), {"data": shape})


@gen("Upsample", "upsample_param")
def upsample(rng):
    n, c = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    if maybe(rng):  # darknet's: one bottom, scale
        shape = (n, c, int(rng.integers(1, 6)), int(rng.integers(1, 6)))
        params = "upsample_param { scale: %d }" % rng.integers(1, 4) if maybe(rng, 0.8) else ""
        return Case("Upsample", params, {"data": shape})
    # SegNet's max-unpooling of a MAX pooling's mask
    k = int(rng.integers(2, 4))
    h, w = int(rng.integers(k, 9)), int(rng.integers(k, 9))
    before = ('\nlayer { name: "pool" type: "Pooling" bottom: "data" top: "pooled" '
              'top: "mask" pooling_param { pool: MAX kernel_size: %d stride: %d } }' % (k, k))
    ph, pw = -(-(h - k) // k) + 1, -(-(w - k) // k) + 1
    mode = int(rng.integers(3))
    if mode == 0:
        parts = ["upsample_h: %d" % max(2, h), "upsample_w: %d" % max(2, w)]
    elif mode == 1:
        parts = ["scale_h: %d" % k, "scale_w: %d" % k]
    else:
        parts = ["scale: %d" % k]
    if mode and k == 2 and maybe(rng):
        parts += ["pad_out_h: %s" % pick(rng, ["true", "false"]),
                  "pad_out_w: %s" % pick(rng, ["true", "false"])]
    del ph, pw
    return Case("Upsample", "upsample_param { %s }" % " ".join(parts), {"data": (n, c, h, w)},
                ("pooled", "mask"), before=before)


@gen("Reorg", "reorg_param")
def reorg(rng):
    s = int(rng.integers(1, 4))
    reverse = maybe(rng)
    if reverse:
        shape = (int(rng.integers(1, 3)), s * s * int(rng.integers(1, 3)),
                 int(rng.integers(1, 5)), int(rng.integers(1, 5)))
    else:
        shape = (int(rng.integers(1, 3)), int(rng.integers(1, 4)), s * int(rng.integers(1, 4)),
                 s * int(rng.integers(1, 4)))
    parts = ["stride: %d" % s] + (["reverse: true"] if reverse else
                                  ["reverse: false"] if maybe(rng, 0.2) else [])
    return Case("Reorg", "reorg_param { %s }" % " ".join(parts), {"data": shape})


@gen("ROIPooling", "roi_pooling_param")
def roi_pooling(rng):
    shape = (2, int(rng.integers(1, 4)), int(rng.integers(3, 12)), int(rng.integers(3, 12)))
    scale = pick(rng, [1.0, 0.5, 0.25, 0.0625])
    n = int(rng.integers(1, 6))
    hi = np.array([shape[3], shape[2]]) / scale
    x = rng.uniform(-2, hi[0] + 2, (n, 2))
    y = rng.uniform(-2, hi[1] + 2, (n, 2))
    rois = np.stack([rng.integers(0, 2, n), x[:, 0], y[:, 0], x[:, 1], y[:, 1]], 1)
    if maybe(rng):
        rois[:, 1:] = np.round(rois[:, 1:] * 2) / 2  # exact halves after scaling
    rshape = (n, 5) if maybe(rng, 0.8) else (n, 5, 1, 1)
    parts = ["pooled_h: %d" % rng.integers(1, 5), "pooled_w: %d" % rng.integers(1, 5)]
    if scale != 1.0 or maybe(rng):
        parts.append("spatial_scale: %s" % fmt(scale))
    return Case("ROIPooling", "roi_pooling_param { %s }" % " ".join(parts),
                {"data": shape, "rois": rshape}, ("data", "rois"),
                feeds={"rois": rois.astype(np.float32)})


@gen("PriorBox", "prior_box_param")
def prior_box(rng):
    fh, fw = int(rng.integers(1, 6)), int(rng.integers(1, 6))
    ih, iw = fh * int(rng.integers(4, 12)), fw * int(rng.integers(4, 12))
    sizes = sorted(rng.choice(np.arange(4, 40), int(rng.integers(1, 3)), replace=False))
    parts = ["min_size: %d" % s for s in sizes]
    if maybe(rng):
        parts += ["max_size: %d" % (s + int(rng.integers(1, 10))) for s in sizes]
    for _ in range(int(rng.integers(0, 3))):
        parts.append("aspect_ratio: %s" % fmt(pick(rng, [2.0, 3.0, 0.5, 1.5])))
    if maybe(rng, 0.3):
        parts.append("flip: %s" % pick(rng, ["true", "false"]))
    if maybe(rng):
        parts.append("clip: %s" % pick(rng, ["true", "false"]))
    v = int(rng.integers(0, 3))
    parts += ["variance: %s" % fmt(x) for x in [0.1, 0.1, 0.2, 0.2][:{0: 0, 1: 1, 2: 4}[v]]]
    m = int(rng.integers(4))
    if m == 1:
        parts.append("img_size: %d" % rng.integers(20, 60))
    elif m == 2:
        parts += ["img_h: %d" % rng.integers(20, 60), "img_w: %d" % rng.integers(20, 60)]
    m = int(rng.integers(3))
    if m == 1:
        parts.append("step: %s" % fmt(rng.integers(4, 12)))
    elif m == 2:
        parts += ["step_h: %s" % fmt(rng.integers(4, 12)), "step_w: %s" % fmt(rng.integers(4, 12))]
    if maybe(rng):
        parts.append("offset: %s" % fmt(pick(rng, [0.5, 0.25, 0.0, 1.0])))
    return Case("PriorBox", "prior_box_param { %s }" % " ".join(parts),
                {"feat": (2, 3, fh, fw), "img": (2, 3, ih, iw)}, ("feat", "img"))


@gen("Normalize", "norm_param")
def normalize(rng):
    shape = rand_shape(rng, int(rng.integers(2, 5)), 1, 4)
    parts = []
    for field in ("across_spatial", "channel_shared"):
        if maybe(rng, 0.7):
            parts.append("%s: %s" % (field, pick(rng, ["true", "false"])))
    if maybe(rng):
        parts.append("eps: %s" % fmt(pick(rng, [1e-10, 1e-3, 0.5])))
    return Case("Normalize", "norm_param { %s }" % " ".join(parts), {"data": shape})


@gen("Permute", "permute_param")
def permute(rng):
    rank = int(rng.integers(1, 6))
    order = [int(v) for v in rng.permutation(rank)]
    if maybe(rng, 0.3):
        order = order[:int(rng.integers(0, rank + 1))]  # the rest in their order
        if len(order) == 0:
            pass
    return Case("Permute", "permute_param { %s }" % " ".join("order: %d" % o for o in order),
                {"data": rand_shape(rng, rank, 1, 5)})


@gen("ShuffleChannel", "shuffle_channel_param")
def shuffle_channel(rng):
    g = int(rng.integers(1, 4))
    rank = int(rng.integers(2, 6))
    shape = list(rand_shape(rng, rank, 1, 4))
    shape[1] = g * int(rng.integers(1, 4))
    params = "shuffle_channel_param { group: %d }" % g if g > 1 or maybe(rng) else ""
    return Case("ShuffleChannel", params, {"data": tuple(shape)})
