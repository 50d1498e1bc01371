"""The Darknet sections, each as the Caffe layers it becomes (the table is in ``README.md``).

:class:`SectionConverters` holds one method per section kind, ``(section, previous output,
layer index) -> output``; the building blocks they use (``layer``, ``params``, ``activation``,
``batch_norm``, ``refuse``, ...) and the driver are the converter's, in :mod:`.convert`.
"""

import numpy as np

from ..proto import caffe_pb2

PP = caffe_pb2.PoolingParameter
EP = caffe_pb2.EltwiseParameter


def _set(field, **values):
    return lambda lp: [setattr(getattr(lp, field), k, v) for k, v in values.items()]


# Darknet activation name (activations.h) -> Caffe layers applied in turn, as pairs (layer
# type, parameter setter); None for linear.
ACTIVATIONS = {
    "linear": None,
    "leaky": ("ReLU", _set("relu_param", negative_slope=0.1)),
    "relie": ("ReLU", _set("relu_param", negative_slope=0.01)),
    "ramp": ("ReLU", _set("relu_param", negative_slope=1 / 11),     # x > 0: 1.1 x; else 0.1 x
             "Power", _set("power_param", scale=1.1)),
    "relu": ("ReLU", None),
    "logistic": ("Sigmoid", None),
    "loggy": ("Sigmoid", None, "Power", _set("power_param", scale=2.0, shift=-1.0)),
    "tanh": ("TanH", None),
    "mish": ("Mish", None),
    "swish": ("Swish", None),
    "elu": ("ELU", None),
    "selu": ("ELU", _set("elu_param", alpha=1.6732), "Power", _set("power_param", scale=1.0507)),
    "relu6": ("ReLU6", None),
}

# Activations that Darknet's activate_array does not compute: its activate() has no case for
# them and returns 0 (AlexeyAB's fork; pjreddie's does not know them), so [activation],
# [connected], [scale_channels] and [sam] sections, which apply it, give zeros; relu6 only on
# the CPU (the GPU builds' activate_array_ongpu computes it).
UNAPPLIED = ("swish", "mish", "relu6")


def refuse_unapplied(sec, default="linear"):
    act = sec.get_str("activation", default)
    if act not in UNAPPLIED:
        return
    if act == "relu6":
        why = ("computes it in GPU builds only (on the CPU its output would be zeros), so the "
               "result depends on the build")
    else:
        why = "does not compute it (its output would be zeros)"
    raise sec.error("activation=%s: Darknet's [%s] %s; use linear, leaky, relu, logistic, tanh "
                    "or elu" % (act, sec.header, why), "activation")


class _Out:
    """A Darknet layer's output: its Caffe blob and Darknet's (c, h, w); ``flat`` when the
    blob has two axes (N, c), as after [connected]."""

    __slots__ = ("blob", "c", "h", "w", "flat")

    def __init__(self, blob, c, h, w, flat=False):
        self.blob, self.c, self.h, self.w, self.flat = blob, c, h, w, flat

    @property
    def size(self):
        return self.c * self.h * self.w


class SectionConverters:
    """The per-section converters of :class:`~.convert._Converter` (a mixin)."""

    def convolutional(self, sec, prev, i):
        name = "conv%d" % i
        prev = self.image_input(sec, prev, name)
        n = sec.get_int("filters", 1)
        size = sec.get_int("size", 1)
        stride = sec.get_int("stride", 1)
        sx = sec.get_int("stride_x", -1)
        sy = sec.get_int("stride_y", -1)
        sx = stride if sx < 1 else sx
        sy = stride if sy < 1 else sy
        pad = sec.get_int("pad", 0)
        padding = sec.get_int("padding", 0)
        if pad:
            padding = size // 2
        groups = sec.get_int("groups", 1)
        bn = sec.get_int("batch_normalize", 0)
        for key in ("binary", "xnor", "bin_output", "flipped", "sway", "rotate", "stretch",
                    "stretch_sway", "antialiasing", "cbn", "deform"):
            self.refuse(sec, key)
        dilation = sec.get_int("dilation", 1)
        dilation = 1 if size == 1 else dilation  # as parse_convolutional
        if sec.has("share_index"):
            raise sec.error("share_index (weights shared with another layer) cannot be "
                            "converted", "share_index")
        if n < 1 or size < 1 or sx < 1 or sy < 1 or groups < 1 or padding < 0 or dilation < 1:
            raise sec.error("filters, size, stride, groups and dilation must be positive and "
                            "padding non-negative (got filters=%d size=%d stride=%dx%d groups=%d"
                            " padding=%d dilation=%d)" % (n, size, sx, sy, groups, padding,
                                                          dilation))
        if prev.c % groups or n % groups:
            raise sec.error("groups=%d must divide the input channels (%d) and filters (%d)"
                            % (groups, prev.c, n), "groups")
        oh = (prev.h + 2 * padding - size) // sy + 1
        ow = (prev.w + 2 * padding - size) // sx + 1
        if oh < 1 or ow < 1:
            raise sec.error("a %dx%d kernel with padding %d does not fit the %dx%d input"
                            % (size, size, padding, prev.h, prev.w))
        # Darknet sizes the output as without dilation, but convolves with padding * dilation
        span = dilation * (size - 1) + 1
        if ((prev.h + 2 * padding * dilation - span) // sy + 1,
                (prev.w + 2 * padding * dilation - span) // sx + 1) != (oh, ow):
            raise sec.error("dilation=%d with size=%d and padding %d: Darknet's output is %dx%d "
                            "but its dilated im2col fills another size, so its result mixes "
                            "rows; no Caffe layer does the same" % (dilation, size, padding,
                                                                      oh, ow), "dilation")
        lp = self.layer(name, "Convolution", [prev.blob], [name])
        cp = lp.convolution_param
        cp.num_output = n
        cp.kernel_size.append(size)
        if sx == sy:
            if sx != 1:
                cp.stride.append(sx)
        else:
            cp.stride_h, cp.stride_w = sy, sx
        if padding:
            cp.pad.append(padding * dilation)
        if dilation > 1:
            cp.dilation.append(dilation)
        if groups > 1:
            cp.group = groups
        cp.bias_term = not bn
        lr = self.lr_scale(sec)
        self.params(lp, lr, (1,) if bn else (1, 0))
        per = prev.c // groups * size * size
        wshape = (n, prev.c // groups, size, size)
        if bn:
            bn_name, sc_name = self.batch_norm(sec, name, name)
            what = [("biases", n), ("scales", n), ("rolling mean", n), ("rolling variance", n),
                    ("weights", n * per)]

            def assign(a, name=name, bn_name=bn_name, sc_name=sc_name):
                self.blobs[name] = [a[4].reshape(wshape)]
                self.blobs[bn_name] = self.bn_blobs(a[2], a[3])
                self.blobs[sc_name] = [a[1], a[0]]
        else:
            what = [("biases", n), ("weights", n * per)]

            def assign(a, name=name):
                self.blobs[name] = [a[1].reshape(wshape), a[0]]
        self.loads.append((sec, what, assign))
        self.activation(sec, name, name, default="logistic")
        return _Out(name, n, oh, ow)

    def _rename_top(self, old, new):
        for lp in self.net.layer:
            for blobs in (lp.top, lp.bottom):
                for k, b in enumerate(blobs):
                    if b == old:
                        blobs[k] = new

    def avgpool(self, sec, prev, i):
        name = "avgpool%d" % i
        prev = self.image_input(sec, prev, name)
        lp = self.layer(name, "Pooling", [prev.blob], [name])
        lp.pooling_param.pool = PP.AVE
        lp.pooling_param.global_pooling = True
        return _Out(name, prev.c, 1, 1)

    def dropout(self, sec, prev, i):
        name = "dropout%d" % i
        p = sec.get_float("probability", 0.2)
        if not 0 <= p < 1:
            raise sec.error("probability=%g must be in [0, 1)" % p, "probability")
        if sec.get_int("dropblock", 0):
            sec.warn("dropblock=1 becomes a plain Dropout layer (DropBlock drops whole blocks "
                     "in training; at inference both are the identity)", "dropblock")
        lp = self.layer(name, "Dropout", [prev.blob], [name])
        lp.dropout_param.dropout_ratio = p
        return _Out(name, prev.c, prev.h, prev.w, prev.flat)

    def connected(self, sec, prev, i):
        name = "fc%d" % i
        n = sec.get_int("output", 1)
        bn = sec.get_int("batch_normalize", 0)
        if n < 1:
            raise sec.error("output must be positive, got %d" % n, "output")
        inputs = prev.size
        lp = self.layer(name, "InnerProduct", [prev.blob], [name])
        lp.inner_product_param.num_output = n
        lp.inner_product_param.bias_term = not bn
        self.params(lp, self.lr_scale(sec), (1,) if bn else (1, 0))
        transpose = self.transpose_connected

        def weights(a):
            if transpose:
                return np.ascontiguousarray(a.reshape(inputs, n).T)
            return a.reshape(n, inputs)
        if bn:
            bn_name, sc_name = self.batch_norm(sec, name, name)
            what = [("biases", n), ("weights", n * inputs), ("scales", n), ("rolling mean", n),
                    ("rolling variance", n)]

            def assign(a, name=name, bn_name=bn_name, sc_name=sc_name):
                self.blobs[name] = [weights(a[1])]
                self.blobs[bn_name] = self.bn_blobs(a[3], a[4])
                self.blobs[sc_name] = [a[2], a[0]]
        else:
            what = [("biases", n), ("weights", n * inputs)]

            def assign(a, name=name):
                self.blobs[name] = [weights(a[1]), a[0]]
        self.loads.append((sec, what, assign))
        refuse_unapplied(sec, "logistic")
        self.activation(sec, name, name, default="logistic")
        return _Out(name, n, 1, 1, flat=True)

    def batchnorm(self, sec, prev, i):
        name = "batchnorm%d" % i
        lp = self.layer(name, "BatchNorm", [prev.blob], [name])
        lp.batch_norm_param.use_global_stats = True
        lp.batch_norm_param.eps = self.bn_eps()
        sc = self.layer(name + "_scale", "Scale", [name], [name])
        sc.scale_param.bias_term = True
        self.params(sc, self.lr_scale(sec), (0, 0))
        c = prev.c
        what = [("scales", c), ("rolling mean", c), ("rolling variance", c)]
        if self.bn_variant == "alexeyab":
            # AlexeyAB's fork stores the biases first; pjreddie's Darknet stores none (its
            # biases stay 0, though its forward adds them too).
            what.insert(0, ("biases", c))

        def assign(a, name=name, sc_name=sc.name):
            scales, mean, var = a[-3:]
            biases = a[0] if len(a) == 4 else np.zeros(c, np.float32)
            self.blobs[name] = self.bn_blobs(mean, var)
            self.blobs[sc_name] = [scales, biases]
        self.loads.append((sec, what, assign))
        return _Out(name, prev.c, prev.h, prev.w, prev.flat)

    def softmax(self, sec, prev, i):
        name = "softmax%d" % i
        groups = sec.get_int("groups", 1)
        temperature = sec.get_float("temperature", 1.0)
        if sec.has("tree"):
            raise sec.error("tree (a hierarchical softmax) cannot be converted", "tree")
        self.refuse(sec, "spatial")
        inputs = prev.size
        if groups < 1 or inputs % groups:
            raise sec.error("groups=%d must divide the %d inputs" % (groups, inputs), "groups")
        if temperature <= 0:
            raise sec.error("temperature must be positive, got %g" % temperature,
                            "temperature")
        blob = prev.blob
        if temperature != 1:
            lp = self.layer(name + "_temperature", "Power", [blob], [name + "_scaled"])
            lp.power_param.scale = 1.0 / temperature
            blob = name + "_scaled"
        if groups == 1 and (prev.flat or prev.h * prev.w == 1):
            self.layer(name, "Softmax", [blob], [name])
            return _Out(name, prev.c, prev.h, prev.w, prev.flat)
        # Darknet's softmax runs over the flattened input (per group of inputs / groups).
        lp = self.layer(name + "_groups", "Reshape", [blob], [name + "_grouped"])
        lp.reshape_param.shape.dim.extend([0, groups, -1])
        sm = self.layer(name + "_softmax", "Softmax", [name + "_grouped"], [name + "_soft"])
        sm.softmax_param.axis = 2
        back = self.layer(name, "Reshape", [name + "_soft"], [name])
        back.reshape_param.shape.dim.extend([0, prev.c] if prev.flat else
                                            [0, prev.c, prev.h, prev.w])
        return _Out(name, prev.c, prev.h, prev.w, prev.flat)

    def route(self, sec, prev, i):
        name = "route%d" % i
        refs = sec.get_ints("layers")
        if not refs:
            raise sec.error("layers is required (the layers to route)", "layers")
        srcs = self.same_form(name, [self.outs[self.source(sec, "layers", r)] for r in refs])
        groups = sec.get_int("groups", 1)
        group_id = sec.get_int("group_id", 0)
        if groups < 1 or not 0 <= group_id < groups:
            raise sec.error("group_id=%d must be in 0..groups-1 (groups=%d)"
                            % (group_id, groups), "group_id")
        first = srcs[0]
        for r, s in zip(refs, srcs):
            if (s.h, s.w) != (first.h, first.w) or s.flat != first.flat:
                raise sec.error("layers %s: the outputs are %s; routed layers must have the "
                                "same height and width" % (
                                    ",".join(map(str, refs)),
                                    ", ".join("%dx%dx%d" % (o.c, o.h, o.w) for o in srcs)),
                                "layers")
            if s.c % groups:
                raise sec.error("groups=%d does not divide the %d channels of layer %d "
                                "(Darknet would split inside a channel)" % (groups, s.c, r),
                                "groups")
        parts = []
        for k, s in enumerate(srcs):
            if groups == 1:
                parts.append(s.blob)
                continue
            part = s.c // groups
            points = [p for p in (group_id * part, (group_id + 1) * part) if 0 < p < s.c]
            keep = 1 if group_id > 0 else 0
            tops = ["%s_part%d_%d" % (name, k, j) for j in range(len(points) + 1)]
            sl = self.layer("%s_slice%d" % (name, k), "Slice", [s.blob], tops)
            sl.slice_param.axis = 1
            sl.slice_param.slice_point.extend(points)
            self.layer(sl.name + "_silence", "Silence",
                       [t for j, t in enumerate(tops) if j != keep], [])
            parts.append(tops[keep])
        c = sum(s.c // groups for s in srcs)
        if len(parts) == 1:
            if groups == 1:
                return _Out(parts[0], c, first.h, first.w, first.flat)
            self._rename_top(parts[0], name)
            return _Out(name, c, first.h, first.w, first.flat)
        lp = self.layer(name, "Concat", parts, [name])
        lp.concat_param.axis = 1
        return _Out(name, c, first.h, first.w, first.flat)

    def shortcut(self, sec, prev, i):
        name = "shortcut%d" % i
        refs = sec.get_ints("from")
        if not refs:
            raise sec.error("from is required (the layer to add)", "from")
        alpha = sec.get_float("alpha", 1.0)
        beta = sec.get_float("beta", 1.0)
        srcs = [self.outs[self.source(sec, "from", r)] for r in refs]
        prev, *srcs = self.same_form(name, [prev] + srcs)
        if sec.get_str("weights_type", "none") != "none":
            return self.weighted_shortcut(sec, name, prev, srcs, refs)
        if len(srcs) == 1 and srcs[0].c != prev.c and not prev.flat and \
                (srcs[0].h, srcs[0].w, srcs[0].flat) == (prev.h, prev.w, prev.flat):
            self._shortcut_channels(name, prev, srcs[0], alpha, beta)
            self.activation(sec, name, name)
            return _Out(name, prev.c, prev.h, prev.w, prev.flat)
        for r, s in zip(refs, srcs):
            if (s.h, s.w) != (prev.h, prev.w) and len(srcs) == 1:
                raise sec.error(self.shortcut_sizes_message(r if r >= 0 else r + i, s, prev),
                                "from")
            if (s.c, s.h, s.w) != (prev.c, prev.h, prev.w):
                raise sec.error("layer %d gives %dx%dx%d but the previous layer gives %dx%dx%d; "
                                "a shortcut between different shapes cannot be converted"
                                % (r if r >= 0 else r + i, s.c, s.h, s.w, prev.c, prev.h,
                                   prev.w), "from")
        lp = self.layer(name, "Eltwise", [prev.blob] + [s.blob for s in srcs], [name])
        lp.eltwise_param.operation = EP.SUM
        coeffs = [alpha] + [beta] * len(srcs)
        if any(cf != 1 for cf in coeffs):
            lp.eltwise_param.coeff.extend(coeffs)
        self.activation(sec, name, name)
        return _Out(name, prev.c, prev.h, prev.w, prev.flat)

    def _shortcut_channels(self, name, prev, src, alpha, beta):
        """Darknet's shortcut of a layer with other channels than the previous one's (the
        ResNet cfgs' first blocks): the first min(channels) channels are added (``alpha *
        previous + beta * added``), the previous layer's others pass unchanged and the added
        layer's others are not read: Slice, Eltwise on the common part, Concat."""
        common = min(prev.c, src.c)
        parts = {}
        for role, out in (("prev", prev), ("from", src)):
            if out.c == common:
                parts[role] = out.blob
                continue
            tops = ["%s_%s_common" % (name, role), "%s_%s_rest" % (name, role)]
            sl = self.layer("%s_%s_slice" % (name, role), "Slice", [out.blob], tops)
            sl.slice_param.axis = 1
            sl.slice_param.slice_point.append(common)
            parts[role] = tops[0]
            if role == "from":
                self.layer(sl.name + "_silence", "Silence", [tops[1]], [])
        summed = name if prev.c == common else name + "_common"
        lp = self.layer(summed, "Eltwise", [parts["prev"], parts["from"]], [summed])
        lp.eltwise_param.operation = EP.SUM
        if alpha != 1 or beta != 1:
            lp.eltwise_param.coeff.extend([alpha, beta])
        if prev.c != common:
            cat = self.layer(name, "Concat", [summed, "%s_prev_rest" % name], [name])
            cat.concat_param.axis = 1

    def upsample(self, sec, prev, i):
        name = "upsample%d" % i
        prev = self.image_input(sec, prev, name)
        stride = sec.get_int("stride", 2)
        scale = sec.get_float("scale", 1.0)
        if stride < 0:
            return self.downsample(sec, prev, name, -stride, scale)
        if stride == 0:
            raise sec.error("stride=0 gives an empty output", "stride")
        lp = self.layer(name, "Upsample", [prev.blob], [name])
        lp.upsample_param.scale = stride
        if scale != 1:
            pw = self.layer(name + "_scale", "Power", [name], [name])
            pw.power_param.scale = scale
        return _Out(name, prev.c, prev.h * stride, prev.w * stride)

    def yolo(self, sec, prev, i):
        name = "yolo%d" % i
        prev = self.image_input(sec, prev, name)
        classes = sec.get_int("classes", 20)
        total = sec.get_int("num", 1)
        mask = sec.get_ints("mask")
        anchors = sec.get_floats("anchors", [])
        scale_x_y = sec.get_float("scale_x_y", 1.0)
        new_coords = sec.get_int("new_coords", 0)
        if classes < 0 or total < 1:
            raise sec.error("classes must be >= 0 and num >= 1 (got classes=%d num=%d)"
                            % (classes, total))
        if mask is None:
            mask = list(range(total))
        bad = [m for m in mask if not 0 <= m < total]
        if bad:
            raise sec.error("mask %s refers to anchors %s, but num=%d" % (mask, bad, total),
                            "mask")
        anchors = self.anchor_list(sec, anchors, total)
        expected = len(mask) * (5 + classes)
        if prev.c != expected:
            raise sec.error("the layer before gives %d channels; [yolo] with %d masked anchors "
                            "and classes=%d needs %d = %d x (5 + %d) (filters= of the "
                            "[convolutional] before it)" % (prev.c, len(mask), classes,
                                                            expected, len(mask), classes))
        lp = self.layer(name, "Yolo", [prev.blob], [name])
        yp = lp.yolo_param
        yp.classes = classes
        yp.num = total
        yp.mask.extend(mask)
        yp.anchors.extend(anchors)
        if scale_x_y != 1:
            yp.scale_x_y = scale_x_y
        if new_coords:
            yp.new_coords = True
        yp.ignore_thresh = sec.get_float("ignore_thresh", 0.5)
        yp.truth_thresh = sec.get_float("truth_thresh", 1.0)
        self.result.outputs.append(name)
        return _Out(name, prev.c, prev.h, prev.w)

    def region(self, sec, prev, i):
        name = "region%d" % i
        prev = self.image_input(sec, prev, name)
        coords = sec.get_int("coords", 4)
        classes = sec.get_int("classes", 20)
        num = sec.get_int("num", 1)
        softmax = sec.get_int("softmax", 0)
        background = sec.get_int("background", 0)
        if sec.has("tree"):
            raise sec.error("tree (a hierarchical softmax) cannot be converted", "tree")
        if coords < 2 or classes < 0 or num < 1:
            raise sec.error("coords must be >= 2, classes >= 0 and num >= 1 (got coords=%d "
                            "classes=%d num=%d)" % (coords, classes, num))
        anchors = self.anchor_list(sec, sec.get_floats("anchors", []), num)
        expected = num * (coords + 1 + classes)
        if prev.c != expected:
            raise sec.error("the layer before gives %d channels; [region] with num=%d, "
                            "coords=%d and classes=%d needs %d (filters= of the "
                            "[convolutional] before it)" % (prev.c, num, coords, classes,
                                                            expected))
        lp = self.layer(name, "Region", [prev.blob], [name])
        rp = lp.region_param
        rp.classes = classes
        rp.coords = coords
        rp.num = num
        rp.anchors.extend(anchors)
        rp.softmax = bool(softmax)
        rp.background = bool(background)
        self.result.outputs.append(name)
        return _Out(name, prev.c, prev.h, prev.w)

    def anchor_list(self, sec, anchors, count):
        if not anchors:
            return []
        if len(anchors) > 2 * count:
            sec.warn("anchors lists %d values; only the first %d (num=%d pairs) are used, as "
                     "in Darknet" % (len(anchors), 2 * count, count), "anchors")
            anchors = anchors[:2 * count]
        elif len(anchors) < 2 * count:
            sec.warn("anchors lists %d values for num=%d anchors; the missing ones are 0.5, "
                     "Darknet's initial value" % (len(anchors), count), "anchors")
            anchors = anchors + [0.5] * (2 * count - len(anchors))
        return anchors

    # ---- driver ----------------------------------------------------------------------------
    def cost(self, sec, prev, i):
        """A loss, read only in training: Darknet's output at inference is that of the last
        layer before its trailing [cost] sections (get_network_output skips them), so it
        adds no Caffe layer. One that another section follows is refused: at inference its
        output is never computed."""
        later = [s for s in self.cfg.layers[i + 1:] if s.name != "cost"]
        if later:
            raise sec.error("a [cost] section (a training loss, not computed at inference) "
                            "converts only after the last layer; %s follows it"
                            % later[0].describe())
        self.result.notes.append("%s: %s: a training loss; not converted (the net's output "
                                 "is %s, as in Darknet)" % (sec.where(), sec.describe(),
                                                            prev.blob))
        return prev

    HANDLERS = {
        "cost": cost,
        "convolutional": convolutional, "avgpool": avgpool,
        "dropout": dropout, "connected": connected, "softmax": softmax, "route": route,
        "shortcut": shortcut, "upsample": upsample, "yolo": yolo, "region": region,
        "batchnorm": batchnorm,
    }
