"""ONNX ops of resizing and of axis layout -> Caffe layers: Resize / Upsample
(nearest by an integer factor, bilinear with the corners aligned, or half-pixel bilinear by an
integer factor), Transpose (the SSD fork's Permute), Slice (Caffe's Slice, the pieces not
wanted silenced), ConvTranspose with output_padding / output_shape (a Deconvolution cut or
extended), Gemm with ``transA`` (A transposed by a Permute first) or a C of more than one
row (a fixed Scale by ones with C as its bias after the InnerProduct). Registered in
:data:`.import_ops.IMPORTERS` as the other importers."""

import numpy as np

from .axis_pieces import Layers, strided
from .import_math import _broadcast
from .import_ops import IMPORTERS, _broadcast_param, _name, _set_2d, attrs, conv, importer


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def _resize_scales(ctx, node, in_shape, out_shape):
    """The factor ONNX maps coordinates with on each axis: the ``scales`` given, else
    output over input size (``sizes`` given)."""
    a = attrs(node)
    if node.op_type == "Upsample" or ctx.opset < 11:
        scales = a.get("scales") if "scales" in a else \
            ctx.const(node.input[1], node, "scales").tolist()
    else:
        scales = None
        if len(node.input) > 2 and node.input[2]:
            given = ctx.const(node.input[2], node, "scales").reshape(-1)
            scales = given.tolist() if given.size else None
        if scales is not None and "axes" in a:  # opset 18: scales of the named axes only
            full = [1.0] * len(in_shape)
            for axis, s in zip(a["axes"], scales):
                full[axis % len(in_shape)] = s
            scales = full
    if scales is None:
        scales = [o / i for o, i in zip(out_shape, in_shape)]
    return [float(np.float32(s)) for s in scales]


def _nearest_index(mode, nearest, out, size, scale):
    """The input index ONNX's nearest Resize reads for each of ``out`` outputs along one
    axis (float32, as the runtimes work)."""
    o = np.arange(out, dtype=np.float32)
    s = np.float32(scale)
    if mode == "asymmetric":
        x = o / s
    elif mode == "half_pixel":
        x = (o + np.float32(0.5)) / s - np.float32(0.5)
    elif mode == "pytorch_half_pixel":
        x = (o + np.float32(0.5)) / s - np.float32(0.5) if out > 1 else np.zeros(out, np.float32)
    elif mode == "align_corners":
        x = o * np.float32(size - 1) / np.float32(out - 1) if out > 1 else \
            np.zeros(out, np.float32)
    else:
        return None
    if nearest == "floor":
        i = np.floor(x)
    elif nearest == "ceil":
        i = np.ceil(x)
    elif nearest == "round_prefer_ceil":
        i = np.floor(x + np.float32(0.5))
    else:  # round_prefer_floor
        i = np.ceil(x - np.float32(0.5))
    return np.clip(i, 0, size - 1).astype(np.int64)


@importer("Resize", "Upsample")
def resize(ctx, node):
    """Nearest by integer factors on the spatial axes: a Deconvolution, one group per channel,
    stride and kernel the factors, weights 1 and not learnt (each output is one input value
    times 1; OpenCV's Caffe importer runs it). Bilinear with the corners aligned: Interp to the
    output's size. Bilinear half-pixel (``align_corners=False``) by integer factors: the
    edges repeated, then a fixed bilinear Deconvolution (:func:`_bilinear_upsampling`). Other
    modes are errors naming the node."""
    a = attrs(node)
    x = node.input[0]
    in_shape = ctx.shape(x, node)
    out_shape = ctx.shape(node.output[0], node)
    mode = _text(a.get("mode", "nearest"))
    coords = _text(a.get("coordinate_transformation_mode",
                         "asymmetric" if node.op_type == "Upsample" or ctx.opset < 11
                         else "half_pixel"))
    if len(in_shape) != 4 or tuple(out_shape[:2]) != tuple(in_shape[:2]):
        raise ctx.error(node, "only a resize of the two spatial axes of a 4-D input converts "
                              "(%s -> %s)" % (in_shape, out_shape))
    if _text(a.get("keep_aspect_ratio_policy", "stretch")) != "stretch":
        raise ctx.error(node, "keep_aspect_ratio_policy %s has no Caffe equivalent"
                        % _text(a["keep_aspect_ratio_policy"]))
    if mode == "nearest":
        legacy = node.op_type == "Upsample" or ctx.opset < 11  # before nearest_mode: floor
        nearest = _text(a.get("nearest_mode", "floor" if legacy else "round_prefer_floor"))
        scales = _resize_scales(ctx, node, in_shape, out_shape)
        factors = [int(s) for s in scales[2:]]
        exact = all(s == f and f >= 1 and o == i * f for s, f, o, i in
                    zip(scales[2:], factors, out_shape[2:], in_shape[2:]))
        if exact and scales[:2] == [1.0, 1.0]:
            for f, o, i in zip(factors, out_shape[2:], in_shape[2:]):
                index = _nearest_index(coords, nearest, o, i, f)
                if index is None or not np.array_equal(index, np.arange(o) // f):
                    exact = False
        if not exact:
            raise ctx.error(node, "nearest resize converts only by integer factors that repeat "
                                  "each pixel (Caffe has no other nearest layer); scales %s, "
                                  "coordinate_transformation_mode %s, nearest_mode %s"
                            % (scales, coords, nearest))
        if factors == [1, 1]:
            ctx.alias[node.output[0]] = ctx.blob(x)
            return
        channels = in_shape[1]
        lp = ctx.layer("Deconvolution", _name(node), [x], [node.output[0]],
                       [np.ones((channels, 1) + tuple(factors), np.float32)])
        p = lp.convolution_param
        p.num_output, p.group, p.bias_term = channels, channels, False
        p.kernel_size.extend(_set_2d(p, "kernel", factors))
        p.stride.extend(_set_2d(p, "stride", factors))
        lp.param.add(lr_mult=0, decay_mult=0)
        return
    if mode == "linear" and coords in ("half_pixel", "pytorch_half_pixel"):
        scales = _resize_scales(ctx, node, in_shape, out_shape)
        factors = [int(s) for s in scales[2:]]
        if scales[:2] == [1.0, 1.0] and all(s == f >= 1 and o == i * f for s, f, o, i in
                                            zip(scales[2:], factors, out_shape[2:],
                                                in_shape[2:])):
            _bilinear_upsampling(ctx, node, x, in_shape, factors)
            return
        raise ctx.error(node, "bilinear resize with coordinate_transformation_mode %s "
                              "(F.interpolate's align_corners=False) converts only as an "
                              "upsampling by integer factors (no Caffe layer samples so "
                              "otherwise); scales %s" % (coords, scales))
    if mode == "linear" and coords == "align_corners":
        if int(a.get("antialias", 0)) and any(o < i for o, i in zip(out_shape, in_shape)):
            raise ctx.error(node, "an antialiased bilinear downscale has no Caffe equivalent")
        scales = _resize_scales(ctx, node, in_shape, out_shape)
        lengths = [i * s for i, s in zip(in_shape[2:], scales[2:])]
        if any(abs(n - o) > 1e-4 for n, o in zip(lengths, out_shape[2:])):
            # ONNX maps x to x (in - 1) / (in * scale - 1), by the unrounded length
            raise ctx.error(node, "scales %s give the fractional output lengths %s, which "
                                  "align_corners samples by (Caffe's Interp samples by the "
                                  "rounded sizes %s; give sizes instead)"
                            % (scales[2:], [float(np.float32(n)) for n in lengths],
                               list(out_shape[2:])))
        lp = ctx.layer("Interp", _name(node), [x], [node.output[0]])
        lp.interp_param.height, lp.interp_param.width = out_shape[2], out_shape[3]
        return
    why = ("Caffe's Interp samples with the corners aligned; bilinear with "
           "coordinate_transformation_mode %s (F.interpolate's align_corners=False) samples "
           "elsewhere" % coords) if mode == "linear" else \
        "Caffe has no %s interpolation layer" % mode
    raise ctx.error(node, "%s resize does not convert: %s" % (mode, why))


def _bilinear_upsampling(ctx, node, x, in_shape, factors):
    """Half-pixel bilinear upsampling by integer factors, exactly: the input's border rows
    and columns repeated once on each side (Slice, Concat: ONNX clamps the coordinates
    outside the input to its edge), then a Deconvolution with one group per channel whose
    fixed kernel is the bilinear one of Caffe's ``bilinear`` filler (size ``2f - f % 2``,
    stride ``f``), its pad ``3f // 2`` placing input pixel ``i`` at output ``(i + 0.5) f -
    0.5`` and cropping to the output's size."""
    name, top = _name(node), node.output[0]
    for axis, f in zip((2, 3), factors):
        if f == 1:
            continue
        size = in_shape[axis]
        padded = "%s/edge%d" % (top, axis)
        if size == 1:
            parts = [x, x, x]
        else:
            first, last = padded + "/first", padded + "/last"
            tops = [first, padded + "/inner", last] if size > 2 else [first, last]
            lp = ctx.layer("Slice", "%s/edge%d" % (name, axis), [x], tops)
            lp.slice_param.axis = axis
            lp.slice_param.slice_point.extend([1, size - 1] if size > 2 else [1])
            if size > 2:
                ctx.layer("Silence", "%s/edge%d/inner" % (name, axis), [tops[1]], [])
            parts = [first, x, last]
        lp = ctx.layer("Concat", "%s/pad%d" % (name, axis), parts, [padded])
        lp.concat_param.axis = axis
        x = padded
    kernels = []
    for f in factors:
        k = 2 * f - f % 2
        kernels.append(1 - np.abs(np.arange(k, dtype=np.float64) - (k - 1) / 2.0) / f)
    channels = in_shape[1]
    weight = np.broadcast_to(np.outer(*kernels), (channels, 1, len(kernels[0]),
                                                  len(kernels[1])))
    lp = ctx.layer("Deconvolution", name, [x], [top], [weight.astype(np.float32)])
    p = lp.convolution_param
    p.num_output, p.group, p.bias_term = channels, channels, False
    p.kernel_size.extend(_set_2d(p, "kernel", [len(k) for k in kernels]))
    p.stride.extend(_set_2d(p, "stride", factors))
    pads = [3 * f // 2 if f > 1 else 0 for f in factors]
    if any(pads):
        p.pad.extend(_set_2d(p, "pad", pads))
    lp.param.add(lr_mult=0, decay_mult=0)


@importer("Transpose")
def transpose(ctx, node):
    """Permute (the SSD fork's layer, which OpenCV's Caffe importer reads) with the whole
    order; ONNX's default order reverses the axes. PyTorch's ``softmax(dim=1)`` of a 4-D
    tensor before opset 13 (Transpose, Softmax over the last axis, Transpose back) converts
    so, as Permute, Softmax, Permute."""
    rank = len(ctx.shape(node.input[0], node))
    perm = [int(p) for p in attrs(node).get("perm", range(rank - 1, -1, -1))]
    perm = [p + rank if p < 0 else p for p in perm]
    if sorted(perm) != list(range(rank)):
        raise ctx.error(node, "perm %s is not an order of the input's %d axes" % (perm, rank))
    if perm == list(range(rank)):
        ctx.alias[node.output[0]] = ctx.blob(node.input[0])
        return
    lp = ctx.layer("Permute", _name(node), [node.input[0]], [node.output[0]])
    lp.permute_param.order.extend(perm)


def _slice_bounds(ctx, node, shape):
    """{axis: (start, step, count)} of a Slice with constant bounds, clamped as ONNX does:
    a negative start or end counts from the end; for a positive step both then lie in
    ``[0, size]``, for a negative one the start in ``[0, size - 1]`` and the end in
    ``[-1, size - 1]``; the entries taken are ``start, start + step, ...`` short of the
    end."""
    a = attrs(node)
    if ctx.opset < 10:  # starts, ends and axes were attributes
        starts, ends = list(a["starts"]), list(a["ends"])
        axes, steps = list(a.get("axes", range(len(starts)))), [1] * len(starts)
    else:
        def given(i, what, default):
            if len(node.input) > i and node.input[i]:
                return ctx.const(node.input[i], node, what).reshape(-1).tolist()
            return default
        starts = given(1, "starts", None)
        ends = given(2, "ends", None)
        axes = given(3, "axes", list(range(len(starts))))
        steps = given(4, "steps", [1] * len(starts))
    bounds = {}
    rank = len(shape)
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis = int(axis) + rank if int(axis) < 0 else int(axis)
        size = shape[axis]
        start, end, step = int(start), int(end), int(step)
        if step == 0:
            raise ctx.error(node, "steps %s: a step of 0 is not a slice"
                            % [int(q) for q in steps])
        start = start + size if start < 0 else start
        end = end + size if end < 0 else end
        if step > 0:
            start, end = min(max(start, 0), size), min(max(end, 0), size)
            count = max(0, -(-(end - start) // step))
        else:
            start, end = min(max(start, 0), size - 1), min(max(end, -1), size - 1)
            count = max(0, -(-(start - end) // -step))
        if count == 0:
            raise ctx.error(node, "it keeps nothing of axis %d (%d to %d by %d of %d); a Caffe "
                                  "blob cannot be empty" % (axis, start, end, step, size))
        bounds[axis] = (start, step, count)
    return bounds


@importer("Slice")
def slice_(ctx, node):
    """Constant starts and ends with a step of 1 (``x[:, :c]``, ``torch.chunk``): a Caffe
    Slice per cut axis, its slice points the bounds; the pieces before and after are
    silenced. Bounds that keep a whole axis cut nothing there; a Slice that keeps everything
    aliases its input. Other steps (YOLOv5's ``x[..., ::2, ::2]``, ``x.flip(1)``) go axis
    by axis through :func:`.axis_pieces.strided`: a positive step by a Reshape to
    ``(count, step)`` and a Slice of the first of each, a negative one by single slices
    concatenated in that order."""
    shape = ctx.shape(node.input[0], node)
    bounds = sorted(_slice_bounds(ctx, node, shape).items())
    # (a single entry, whatever the step, is the piece [start, start + 1))
    cuts = [(axis, (start, start + count)) for axis, (start, step, count) in bounds
            if (step == 1 or count == 1) and (start, count) != (0, shape[axis])]
    if any(step != 1 and count > 1 for _, (_, step, count) in bounds):
        em = Layers(ctx.layer, lambda message: ctx.error(node, message))
        x, shape, out = node.input[0], list(shape), node.output[0]
        steps = [b for b in bounds if b[1] != (0, 1, shape[b[0]])]
        for k, (axis, (start, step, count)) in enumerate(steps):
            top = out if k == len(steps) - 1 else "%s/axis%d" % (out, axis)
            x = strided(em, x, shape, axis, start, step, count,
                        _name(node) if len(steps) == 1 else "%s/axis%d" % (_name(node), axis),
                        top)
            shape[axis] = count
        return
    if not cuts:
        ctx.alias[node.output[0]] = ctx.blob(node.input[0])
        return
    _crop(ctx, node, node.input[0], shape, cuts, node.output[0])


def _crop(ctx, node, x, shape, cuts, out):
    """``x`` (of ``shape``) cut to ``[start, end)`` on each ``(axis, (start, end))`` of
    ``cuts`` into ``out``: a Caffe Slice per axis, the pieces not kept silenced."""
    spare = []
    for k, (axis, (start, end)) in enumerate(cuts):
        top = out if k == len(cuts) - 1 else "%s/axis%d" % (out, axis)
        tops, points = [], []
        if start > 0:
            tops.append("%s/before%d" % (out, axis))
            points.append(start)
        tops.append(top)
        if end < shape[axis]:
            tops.append("%s/after%d" % (out, axis))
            points.append(end)
        lp = ctx.layer("Slice", _name(node) if len(cuts) == 1 else
                       "%s/axis%d" % (_name(node), axis), [x], tops)
        lp.slice_param.axis = axis
        lp.slice_param.slice_point.extend(points)
        spare += [t for t in tops if t != top]
        x = top
    ctx.layer("Silence", _name(node) + "/spare", spare, [])


@importer("ConvTranspose")
def conv_transpose(ctx, node):
    """ConvTranspose; with ``output_padding`` or ``output_shape``, ONNX's output is the
    window ``[begin, begin + out)`` of the full transposed convolution (``s (in - 1) +
    d (k - 1) + 1`` long, zero past its end but for the bias): a Deconvolution padded by as
    much as that window leaves on both sides, the bias rows past its end concatenated as a
    constant, then the window sliced out."""
    a = attrs(node)
    mode = _text(a.get("auto_pad", b"NOTSET"))
    if not any(a.get("output_padding", [])) and "output_shape" not in a and \
            mode in ("NOTSET", "VALID"):
        conv(ctx, node)
        return
    w = ctx.const(node.input[1], node, "weight")
    x_shape = ctx.shape(node.input[0], node)
    n = w.ndim - 2
    if mode not in ("NOTSET", "SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(node, "auto_pad %s with output_padding / output_shape has no Caffe "
                              "equivalent" % mode)
    strides = [int(v) for v in a.get("strides", [1] * n)]
    dil = [int(v) for v in a.get("dilations", [1] * n)]
    pads = [int(v) for v in a.get("pads", [0] * (2 * n))]
    extra = [int(v) for v in a.get("output_padding", [0] * n)]
    full = [s * (i - 1) + d * (k - 1) + 1
            for s, i, d, k in zip(strides, x_shape[2:], dil, w.shape[2:])]
    begin = pads[:n]
    if mode != "NOTSET":  # SAME: in * stride outputs unless output_shape says otherwise
        out = [int(v) for v in a["output_shape"]][-n:] if "output_shape" in a else \
            [i * s for i, s in zip(x_shape[2:], strides)]
        total = [f + e - o for f, e, o in zip(full, extra, out)]
        if min(total) < 0:
            raise ctx.error(node, "auto_pad %s gives negative pads %s" % (mode, total))
        begin = [t // 2 if mode == "SAME_UPPER" else t - t // 2 for t in total]
    elif "output_shape" in a:
        out = [int(v) for v in a["output_shape"]][-n:]
        total = [f + e - o for f, e, o in zip(full, extra, out)]
        if [t - t // 2 for t in total] != begin:
            raise ctx.error(node, "output_shape %s puts the output at %s of the full "
                                  "transposed convolution where its pads say %s"
                            % (out, [t - t // 2 for t in total], begin))
    else:
        out = [f + e - b - q for f, e, b, q in zip(full, extra, begin, pads[n:])]
    if min(out) < 1:
        raise ctx.error(node, "its output would have no rows on an axis (sizes %s)" % out)
    caffe_pad = [min(b, max(0, f - b - o)) for b, f, o in zip(begin, full, out)]
    plain = ctx.onnx.NodeProto()
    plain.CopyFrom(node)
    del plain.attribute[:]
    plain.attribute.extend(v for v in node.attribute
                           if v.name not in ("pads", "output_padding", "output_shape",
                                             "auto_pad"))
    plain.attribute.append(ctx.onnx.helper.make_attribute("pads", caffe_pad + caffe_pad))
    blob = plain.output[0] = node.output[0] + "/full"
    conv(ctx, plain)
    shape = list(x_shape[:1]) + [w.shape[1] * int(a.get("group", 1))] + \
        [f - 2 * p for f, p in zip(full, caffe_pad)]
    bias = ctx.const(node.input[2], node, "bias") if len(node.input) > 2 and node.input[2] \
        else np.zeros(shape[1], np.float32)
    cuts = []
    for i in range(n):
        start = begin[i] - caffe_pad[i]
        past = start + out[i] - shape[2 + i]
        if past > 0:  # past the full output: the bias alone
            pad_shape = shape[:2 + i] + [past] + shape[3 + i:]
            const = node.output[0] + "/bias%d" % i
            ctx.consts[const] = np.broadcast_to(
                bias.astype(np.float32).reshape([-1] + [1] * n), pad_shape).copy()
            lp = ctx.layer("Concat", _name(node) + "/extend%d" % i, [blob, const],
                           [node.output[0] + "/extended%d" % i])
            lp.concat_param.axis = 2 + i
            blob, shape[2 + i] = lp.top[0], shape[2 + i] + past
        if (start, start + out[i]) != (0, shape[2 + i]):
            cuts.append((2 + i, (start, start + out[i])))
    if cuts:
        _crop(ctx, node, blob, shape, cuts, node.output[0])
    else:
        ctx.alias[node.output[0]] = blob


_plain_gemm = IMPORTERS["Gemm"]


@importer("Gemm")
def gemm(ctx, node):
    """``alpha A' B' + beta C``: with ``transA``, A transposed by a Permute first; a constant
    C that is not one bias per output column (a matrix, or a column) added after the
    InnerProduct as the bias of a fixed Scale by ones (not learnt); a C computed by the graph
    broadcast to the output (Reshape, Tile) and added by an Eltwise SUM with coefficients 1
    and beta. Otherwise :func:`.import_ops.gemm` (an InnerProduct, C its bias)."""
    a = attrs(node)
    c_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
    c = ctx.consts[c_name].astype(np.float32) if c_name in ctx.consts else None
    w = ctx.const(node.input[1], node, "B").astype(np.float32)
    n = w.shape[0] if a.get("transB", 0) else w.shape[1]
    if node.output[0] not in ctx.shapes and node.input[0] in ctx.shapes:
        # (M, N), where ONNX's shape inference left it out (Gemm of opset 6 and before with
        # `broadcast`): a later node that reads it needs it
        ctx.shapes[node.output[0]] = (ctx.shape(node.input[0], node)[
            1 if a.get("transA", 0) else 0], n)
    beta = np.float32(a.get("beta", 1.0))
    row_bias = c_name is None or c is not None and c.size in (1, n) and \
        not (c.ndim == 2 and c.shape[0] != 1)
    if not a.get("transA", 0) and row_bias:
        _plain_gemm(ctx, node)
        return
    x, top, name = node.input[0], node.output[0], _name(node)
    if a.get("transA", 0):
        lp = ctx.layer("Permute", name + "/transpose", [x], [top + "/a_t"])
        lp.permute_param.order.extend([1, 0])
        x = top + "/a_t"
    w = (w if a.get("transB", 0) else w.T) * np.float32(a.get("alpha", 1.0))
    blobs = [w]
    if c_name is not None and row_bias:
        blobs.append(np.broadcast_to((c * beta).reshape(-1), (n,)))
    out = top if row_bias else top + "/product"
    lp = ctx.layer("InnerProduct", name, [x], [out], blobs)
    lp.inner_product_param.num_output = n
    lp.inner_product_param.bias_term = len(blobs) > 1
    if out == top:
        return
    m = ctx.shape(node.input[0], node)[1 if a.get("transA", 0) else 0]
    if c is None:  # a tensor
        shape = tuple(ctx.shape(c_name, node))
        if shape != (m, n):
            c_name = _broadcast(ctx, node, c_name, shape, (m, n), top + "/c")
        lp = ctx.layer("Eltwise", name + "/c", [out, c_name], [top])
        lp.eltwise_param.operation = lp.eltwise_param.SUM
        lp.eltwise_param.coeff.extend([1.0, float(beta)])
        return
    axis, bias = _broadcast_param(ctx, node, (m, n), c * beta)
    lp = ctx.layer("Scale", name + "/c", [out], [top], [np.ones(bias.shape, np.float32), bias])
    lp.scale_param.axis, lp.scale_param.num_axes = axis, bias.ndim
    lp.scale_param.bias_term = True
    lp.param.add(lr_mult=0, decay_mult=0)
    lp.param.add(lr_mult=0, decay_mult=0)


# -- DepthToSpace, SpaceToDepth ---------------------------------------------------------------
@importer("DepthToSpace", "SpaceToDepth")
def depth_space(ctx, node):
    """Blocks of ``blocksize`` moved between the channels and the spatial axes, as ONNX
    defines them: a Reshape to 6 axes, a Permute, a Reshape back to 4 (the DCR and CRD orders
    of the channels); values are moved, not computed."""
    x, top, name = node.input[0], node.output[0], _name(node)
    shape = tuple(ctx.shape(x, node))
    if len(shape) != 4:
        raise ctx.error(node, "an input of shape %s: ONNX's %s takes N x C x H x W"
                        % (shape, node.op_type))
    n, c, h, w = shape
    a = attrs(node)
    b = int(a.get("blocksize", 0))
    if node.op_type == "DepthToSpace":
        if b < 1 or c % (b * b):
            raise ctx.error(node, "blocksize %d does not divide the %d channels into b^2 "
                                  "groups" % (b, c))
        if _text(a.get("mode", "DCR")) == "CRD":
            view, order = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
        else:
            view, order = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
        out = (n, c // (b * b), h * b, w * b)
    else:
        if b < 1 or h % b or w % b:
            raise ctx.error(node, "blocksize %d does not divide the spatial size %d x %d"
                            % (b, h, w))
        view = (n, c, h // b, b, w // b, b)
        order = (0, 1, 3, 5, 2, 4) if _text(a.get("mode", "DCR")) == "CRD" else \
            (0, 3, 5, 1, 2, 4)
        out = (n, c * b * b, h // b, w // b)
    lp = ctx.layer("Reshape", name + "/blocks", [x], [top + "/blocks"])
    lp.reshape_param.shape.dim.extend(view)
    lp = ctx.layer("Permute", name + "/moved", [top + "/blocks"], [top + "/moved"])
    lp.permute_param.order.extend(order)
    lp = ctx.layer("Reshape", name, [top + "/moved"], [top])
    lp.reshape_param.shape.dim.extend(out)


# -- Gelu -------------------------------------------------------------------------------------
@importer("Gelu")
def gelu(ctx, node):
    """Opset 20's Gelu: ``approximate`` none, ``x Phi(x)``, is pycaffe-lite's GELU layer (the
    erf form; BVLC Caffe and OpenCV have none); tanh, ``0.5 x (1 + tanh(sqrt(2 / pi) (x +
    0.044715 x^3)))``, is Power (cube), Eltwise SUM (x + 0.044715 x^3), TanH of it scaled by
    sqrt(2 / pi) (Power), Power ``0.5 (1 + t)`` and an Eltwise PROD by x."""
    x, top, name = node.input[0], node.output[0], _name(node)
    mode = _text(attrs(node).get("approximate", "none"))
    if mode == "none":
        ctx.layer("GELU", name, [x], [top])
        return
    if mode != "tanh":
        raise ctx.error(node, "approximate \"%s\" is not ONNX's none or tanh" % mode)
    lp = ctx.layer("Power", name + "/cube", [x], [top + "/cube"])
    lp.power_param.power = 3.0
    lp = ctx.layer("Eltwise", name + "/inner", [x, top + "/cube"], [top + "/inner"])
    lp.eltwise_param.operation = lp.eltwise_param.SUM
    lp.eltwise_param.coeff.extend([1.0, 0.044715])
    lp = ctx.layer("Power", name + "/scaled", [top + "/inner"], [top + "/scaled"])
    lp.power_param.scale = float(np.float32(np.sqrt(2.0 / np.pi)))
    ctx.layer("TanH", name + "/tanh", [top + "/scaled"], [top + "/tanh"])
    lp = ctx.layer("Power", name + "/gate", [top + "/tanh"], [top + "/gate"])
    lp.power_param.scale, lp.power_param.shift = 0.5, 0.5
    lp = ctx.layer("Eltwise", name, [x, top + "/gate"], [top])
    lp.eltwise_param.operation = lp.eltwise_param.PROD
