"""Darknet ``.cfg`` (+ ``.weights``) to a Caffe net (+ parameters), and ``[net]`` to a solver.

:func:`convert` builds a NetParameter (an ``Input`` layer, then one or more Caffe layers per
Darknet layer) and, given the weights, the parameter blobs of those layers; the table of what
becomes what is in ``pycaffe_lite/darknet/README.md``. :func:`solver_from_cfg` maps the
training settings of ``[net]``. :func:`darknet2caffe` does both and writes the files.

Blob names follow Darknet's layer numbers: the output of layer ``i`` is the blob
``<kind><i>`` (``conv3``, ``maxpool4``, ``route9``, ``yolo16``), so ``net.blobs['conv3']`` is
what Darknet calls ``net.layers[3].output``. Batch normalisation, scale and activation layers
work in place on their convolution's blob.
"""

import logging
import os

import numpy as np
from google.protobuf import text_format

from .. import protoio
from ..ops.pooling import pooled_size
from ..proto import caffe_pb2
from .cfg import DarknetCfg, DarknetError, parse_cfg, read_cfg, warn
from .weights import DarknetWeights, read_weights

log = logging.getLogger("pycaffe_lite")

PP = caffe_pb2.PoolingParameter
EP = caffe_pb2.EltwiseParameter

# How Darknet normalises with its rolling statistics at inference:
#   pjreddie: (x - mean) / (sqrt(var) + 1e-6)   (blas.c, normalize_cpu)
#   alexeyab: (x - mean) / sqrt(var + 1e-5)     (AlexeyAB's fork, YOLOv4)
BN_VARIANTS = ("pjreddie", "alexeyab")
PJREDDIE_EPS = 1e-12  # with the variance adjusted, see _Converter.bn_blobs
ALEXEYAB_EPS = 1e-5

# Darknet activation name -> (Caffe layer type, parameter setter) or None for linear.
ACTIVATIONS = {
    "linear": None,
    "leaky": ("ReLU", lambda lp: setattr(lp.relu_param, "negative_slope", 0.1)),
    "relu": ("ReLU", None),
    "logistic": ("Sigmoid", None),
    "tanh": ("TanH", None),
    "mish": ("Mish", None),
    "swish": ("Swish", None),
    "elu": ("ELU", None),
    "relu6": ("ReLU6", None),
}

# Keys every layer section may carry that matter for training only (Darknet reads them in
# parse_network_cfg): accepted, and listed as notes.
COMMON_TRAINING_KEYS = {"stopbackward", "dont_update", "burnin_update", "onlyforward", "clip",
                        "train_only_bn", "dontsave", "smooth", "learning_rate"}
# Keys that change what is read from the .weights file: refused unless 0.
COMMON_REFUSED_KEYS = ("dontload", "dontloadscales", "numload")

TRAINING_KEYS = {
    "convolutional": {"angle", "assisted_excitation", "dot"},
    "maxpool": set(),
    "avgpool": set(),
    "dropout": {"dropblock", "dropblock_size_rel", "dropblock_size_abs"},
    "connected": set(),
    "softmax": {"noloss"},
    "route": {"stream", "wait_stream"},
    "shortcut": {"weights_normalization", "weights_normalizion"},
    "upsample": set(),
    "batchnorm": set(),
    "activation": set(),
    "yolo": {"jitter", "random", "max", "counters_per_class", "label_smooth_eps", "max_delta",
             "iou_normalizer", "obj_normalizer", "cls_normalizer", "delta_normalizer",
             "iou_loss", "iou_thresh_kind", "beta_nms", "nms_kind", "focal_loss",
             "iou_thresh", "map", "resize", "objectness_smooth", "track_history_size",
             "sim_thresh", "dets_for_track", "dets_for_show", "track_ciou_norm",
             "embedding_layer", "show_details"},
    "region": {"jitter", "rescore", "thresh", "classfix", "absolute", "random",
               "coord_scale", "object_scale", "noobject_scale", "mask_scale", "class_scale",
               "bias_match", "max", "focal_loss", "log", "sqrt", "map", "temperature"},
}


class Conversion:
    """The result of :func:`convert`.

    ``net_param``: the NetParameter (no blobs); ``weights_param``: the same with the blobs
    (None without weights); ``solver_param``, ``transform_param`` and ``solver_comments``:
    see :func:`solver_from_cfg`; ``blob_of_layer``: Darknet layer number -> blob name;
    ``outputs``: the blobs of the detection heads (or of the last layer); ``header``: the
    .weights header (major, minor, revision, seen) or None; ``notes``: keys accepted without
    effect on the net (training-only settings), each with its file:line.
    """

    def __init__(self):
        self.net_param = None
        self.weights_param = None
        self.solver_param = None
        self.transform_param = None
        self.solver_comments = []
        self.blob_of_layer = {}
        self.outputs = []
        self.header = None
        self.notes = []

    def solver_text(self):
        """The solver file: the comments, then the SolverParameter in text form."""
        lines = ["# " + c if c else "#" for c in self.solver_comments]
        return "\n".join(lines) + "\n" + text_format.MessageToString(self.solver_param)


class _Out:
    """A Darknet layer's output: its Caffe blob and Darknet's (c, h, w); ``flat`` when the
    blob has two axes (N, c), as after [connected]."""

    __slots__ = ("blob", "c", "h", "w", "flat")

    def __init__(self, blob, c, h, w, flat=False):
        self.blob, self.c, self.h, self.w, self.flat = blob, c, h, w, flat

    @property
    def size(self):
        return self.c * self.h * self.w


class _Converter:
    def __init__(self, cfg, batch_size, bn_variant):
        if bn_variant not in BN_VARIANTS:
            raise DarknetError("unknown batch-norm variant %r; expected one of %s"
                               % (bn_variant, ", ".join(BN_VARIANTS)))
        self.cfg = cfg
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise DarknetError("batch_size must be at least 1, got %d" % self.batch_size)
        self.bn_variant = bn_variant
        self.net = caffe_pb2.NetParameter()
        self.net.name = cfg.name
        self.outs = []          # _Out per Darknet layer
        self.loads = []         # (section, [(what, count)], assign(arrays))
        self.blobs = {}         # Caffe layer name -> [np arrays]
        self.result = Conversion()
        self.transpose_connected = False

    # ---- building blocks -------------------------------------------------------------------
    def layer(self, name, type_, bottoms, tops):
        lp = self.net.layer.add()
        lp.name = name
        lp.type = type_
        lp.bottom.extend(bottoms)
        lp.top.extend(tops)
        return lp

    @staticmethod
    def params(lp, lr, decays):
        for d in decays:
            spec = lp.param.add()
            spec.lr_mult = lr
            spec.decay_mult = d

    def activation(self, sec, name, blob, key="activation", default="linear"):
        act = sec.get_str(key, default)
        if act not in ACTIVATIONS:
            raise sec.error("activation=%s cannot be converted; supported: %s"
                            % (act, ", ".join(sorted(ACTIVATIONS))), key)
        spec = ACTIVATIONS[act]
        if spec is None:
            return
        lp = self.layer("%s_%s" % (name, act), spec[0], [blob], [blob])
        if spec[1]:
            spec[1](lp)

    def batch_norm(self, sec, name, blob):
        """BatchNorm + Scale in place on ``blob``; returns the two layers' names."""
        bn = self.layer(name + "_bn", "BatchNorm", [blob], [blob])
        bn.batch_norm_param.use_global_stats = True
        bn.batch_norm_param.eps = self.bn_eps()
        sc = self.layer(name + "_scale", "Scale", [blob], [blob])
        sc.scale_param.bias_term = True
        self.params(sc, self.lr_scale(sec), (0, 0))
        return bn.name, sc.name

    def bn_blobs(self, mean, var):
        if self.bn_variant == "pjreddie":
            # Darknet divides by sqrt(var) + 1e-6. BatchNorm divides by sqrt(var' + eps); with
            # eps = 1e-12 and var' = (sqrt(var) + 1e-6)^2 - 1e-12 = var + 2e-6 sqrt(var)
            # (never negative) the two agree, a zero variance included.
            var = var.astype(np.float64)
            with np.errstate(invalid="ignore"):
                var = (var + 2e-6 * np.sqrt(var)).astype(np.float32)
        return [mean, var, np.ones(1, np.float32)]

    def bn_eps(self):
        return PJREDDIE_EPS if self.bn_variant == "pjreddie" else ALEXEYAB_EPS

    def lr_scale(self, sec):
        return sec.get_float("learning_rate", 1.0)

    def refuse(self, sec, key, default=0):
        """Raise if ``key`` is set to something other than ``default``."""
        if sec.has(key):
            value = sec.get_float(key, default)
            if value != default:
                raise sec.error("%s=%s cannot be converted (it changes what the layer computes "
                                "or reads, and no Caffe layer does the same)"
                                % (key, sec.options[key].value), key)

    def image_input(self, sec, prev, name):
        """``prev`` as a 4-axis blob: a Reshape after a flat (2-axis) blob."""
        if not prev.flat:
            return prev
        if prev.c <= 0:
            raise sec.error("the layer before gives no image to work on")
        lp = self.layer(name + "_reshape", "Reshape", [prev.blob], [name + "_input"])
        lp.reshape_param.shape.dim.extend([0, -1, 1, 1])
        return _Out(name + "_input", prev.c, 1, 1)

    def source(self, sec, key, value):
        """A Darknet layer reference (negative: relative to this layer) as an index."""
        index = value + sec.index if value < 0 else value
        if not 0 <= index < sec.index:
            raise sec.error("%s refers to layer %d (from %d), which is not an earlier layer "
                            "(0..%d)" % (key, index, value, sec.index - 1), key)
        return index

    # ---- the sections ----------------------------------------------------------------------
    def input(self):
        net = self.cfg.net
        h = net.get_int("height", 0)
        w = net.get_int("width", 0)
        c = net.get_int("channels", 0)
        inputs = net.get_int("inputs", h * w * c)
        lp = self.layer("data", "Input", [], ["data"])
        shape = lp.input_param.shape.add()
        if h and w and c:
            shape.dim.extend([self.batch_size, c, h, w])
            return _Out("data", c, h, w)
        if inputs > 0:
            shape.dim.extend([self.batch_size, inputs])
            return _Out("data", inputs, 1, 1, flat=True)
        raise net.error("no input size: give width, height and channels (or inputs)")

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
        if size > 1:  # Darknet ignores the dilation of a 1x1 kernel
            self.refuse(sec, "dilation", 1)
        if sec.has("share_index"):
            raise sec.error("share_index (weights shared with another layer) cannot be "
                            "converted", "share_index")
        if n < 1 or size < 1 or sx < 1 or sy < 1 or groups < 1 or padding < 0:
            raise sec.error("filters, size, stride and groups must be positive and padding "
                            "non-negative (got filters=%d size=%d stride=%dx%d groups=%d "
                            "padding=%d)" % (n, size, sx, sy, groups, padding))
        if prev.c % groups or n % groups:
            raise sec.error("groups=%d must divide the input channels (%d) and filters (%d)"
                            % (groups, prev.c, n), "groups")
        oh = (prev.h + 2 * padding - size) // sy + 1
        ow = (prev.w + 2 * padding - size) // sx + 1
        if oh < 1 or ow < 1:
            raise sec.error("a %dx%d kernel with padding %d does not fit the %dx%d input"
                            % (size, size, padding, prev.h, prev.w))
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
            cp.pad.append(padding)
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

    def maxpool(self, sec, prev, i):
        name = "maxpool%d" % i
        prev = self.image_input(sec, prev, name)
        stride = sec.get_int("stride", 1)
        sx = sec.get_int("stride_x", stride)
        sy = sec.get_int("stride_y", stride)
        size = sec.get_int("size", stride)
        padding = sec.get_int("padding", size - 1)
        for key in ("maxpool_depth", "antialiasing", "maxpool_zero_nonmax"):
            self.refuse(sec, key)
        self.refuse(sec, "out_channels", 1)
        if size < 1 or sx < 1 or sy < 1 or padding < 0:
            raise sec.error("size and stride must be positive and padding non-negative (got "
                            "size=%d stride=%dx%d padding=%d)" % (size, sx, sy, padding))
        plan = []
        for axis, n, s in (("height", prev.h, sy), ("width", prev.w, sx)):
            out = (n + padding - size) // s + 1
            if out < 1:
                raise sec.error("a %d window with padding %d does not fit the input %s %d"
                                % (size, padding, axis, n))
            plan.append(_pool_axis(sec, axis, n, size, s, padding, out))
        (ph, th, ch, oh), (pw, tw, cw, ow) = plan
        lp = self.layer(name, "Pooling", [prev.blob], [name])
        pp = lp.pooling_param
        pp.pool = PP.MAX
        pp.kernel_size = size
        if sx == sy:
            pp.stride = sx
        else:
            pp.stride_h, pp.stride_w = sy, sx
        if ph == pw:
            if ph:
                pp.pad = ph
        else:
            pp.pad_h, pp.pad_w = ph, pw
        if (th, tw, ch, cw) == (0, 0, oh, ow):
            return _Out(name, prev.c, oh, ow)
        # Caffe's pooled map is larger than Darknet's (its windows start at the same places);
        # cut Darknet's out of it.
        full = name + "_full"
        lp.top[0] = full
        if (oh, ow) == (prev.h, prev.w):
            crop = self.layer(name + "_crop", "Crop", [full, prev.blob], [name])
            crop.crop_param.axis = 2
            crop.crop_param.offset.extend([th, tw] if th != tw else [th])
            return _Out(name, prev.c, oh, ow)
        blob = full
        for axis, t, c, o in ((2, th, ch, oh), (3, tw, cw, ow)):
            if (t, c) == (0, o):
                continue
            points = [p for p in (t, t + o) if 0 < p < c]
            keep = 1 if t > 0 else 0
            tops = ["%s_%s%d" % (name, "hw"[axis - 2], k) for k in range(len(points) + 1)]
            sl = self.layer("%s_slice_%s" % (name, "hw"[axis - 2]), "Slice", [blob], tops)
            sl.slice_param.axis = axis
            sl.slice_param.slice_point.extend(points)
            self.layer(sl.name + "_silence", "Silence", [t_ for k, t_ in enumerate(tops)
                                                         if k != keep], [])
            blob = tops[keep]
        self._rename_top(blob, name)  # the kept part is the layer's output blob
        return _Out(name, prev.c, oh, ow)

    def _rename_top(self, old, new):
        for lp in self.net.layer:
            for k, t in enumerate(lp.top):
                if t == old:
                    lp.top[k] = new
            for k, b in enumerate(lp.bottom):
                if b == old:
                    lp.bottom[k] = new

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
        what = [("biases", c), ("scales", c), ("rolling mean", c), ("rolling variance", c)]

        def assign(a, name=name, sc_name=sc.name):
            self.blobs[name] = self.bn_blobs(a[2], a[3])
            self.blobs[sc_name] = [a[1], a[0]]
        self.loads.append((sec, what, assign))
        return _Out(name, prev.c, prev.h, prev.w, prev.flat)

    def activation_section(self, sec, prev, i):
        name = "activation%d" % i
        act = sec.get_str("activation", "linear")
        if act not in ACTIVATIONS:
            raise sec.error("activation=%s cannot be converted; supported: %s"
                            % (act, ", ".join(sorted(ACTIVATIONS))), "activation")
        spec = ACTIVATIONS[act]
        if spec is None:
            return prev
        lp = self.layer(name, spec[0], [prev.blob], [name])
        if spec[1]:
            spec[1](lp)
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
        srcs = [self.outs[self.source(sec, "layers", r)] for r in refs]
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
        weights_type = sec.get_str("weights_type", "none")
        if weights_type != "none":
            raise sec.error("weights_type=%s (a weighted shortcut) cannot be converted"
                            % weights_type, "weights_type")
        alpha = sec.get_float("alpha", 1.0)
        beta = sec.get_float("beta", 1.0)
        srcs = [self.outs[self.source(sec, "from", r)] for r in refs]
        for r, s in zip(refs, srcs):
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

    def upsample(self, sec, prev, i):
        name = "upsample%d" % i
        prev = self.image_input(sec, prev, name)
        stride = sec.get_int("stride", 2)
        scale = sec.get_float("scale", 1.0)
        if stride < 1:
            raise sec.error("stride=%d: a negative stride (Darknet's reverse upsample, a "
                            "down-sampling sum) cannot be converted" % stride, "stride")
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
        self.refuse(sec, "new_coords")
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
    HANDLERS = {
        "convolutional": convolutional, "maxpool": maxpool, "avgpool": avgpool,
        "dropout": dropout, "connected": connected, "softmax": softmax, "route": route,
        "shortcut": shortcut, "upsample": upsample, "yolo": yolo, "region": region,
        "batchnorm": batchnorm, "activation": activation_section,
    }

    def run(self, weights):
        if weights is not None:
            self.transpose_connected = weights.transpose
        if not self.cfg.layers:
            raise self.cfg.net.error("the .cfg has no layers after [net]")
        prev = self.input()
        for sec in self.cfg.layers:
            handler = self.HANDLERS.get(sec.name)
            if handler is None:
                raise sec.error("[%s] sections cannot be converted; supported: %s"
                                % (sec.header, ", ".join(sorted(self.HANDLERS))))
            for key in COMMON_REFUSED_KEYS:
                self.refuse(sec, key)
            prev = handler(self, sec, prev, sec.index)
            self.outs.append(prev)
            self.result.blob_of_layer[sec.index] = prev.blob
            self.check_unread(sec, TRAINING_KEYS[sec.name] | COMMON_TRAINING_KEYS)
        if not self.result.outputs:
            self.result.outputs.append(self.outs[-1].blob)
        self.result.net_param = self.net
        if weights is not None:
            self.load(weights)
        return self.result

    def check_unread(self, sec, training):
        for opt in sec.unread():
            where = "%s:%d" % (sec.path, opt.line)
            if opt.key in training:
                self.result.notes.append("%s: %s: %s=%s is a training setting; not converted"
                                         % (where, sec.describe(), opt.key, opt.value))
            else:
                warn("%s: %s: unknown key %s=%s is ignored (Darknet ignores keys it does not "
                     "read, too)" % (where, sec.describe(), opt.key, opt.value))

    def load(self, weights):
        for sec, what, assign in self.loads:
            desc = "%s at %s" % (sec.describe(), sec.where())
            assign([weights.take(count, w, desc) for w, count in what])
        weights.finish()
        self.result.header = {"major": weights.major, "minor": weights.minor,
                              "revision": weights.revision, "seen": weights.seen}
        model = caffe_pb2.NetParameter()
        model.CopyFrom(self.net)
        for lp in model.layer:
            for arr in self.blobs.get(lp.name, ()):
                bp = lp.blobs.add()
                bp.shape.dim.extend(arr.shape)
                bp.data.extend(np.asarray(arr, np.float32).ravel())
        self.result.weights_param = model


def _pool_axis(sec, axis, n, size, stride, padding, out):
    """Caffe's pad for one axis of a Darknet maxpool, and the part of Caffe's output that is
    Darknet's: ``(pad, first, caffe_out, out)``.

    Darknet's window ``j`` starts at ``j * stride - padding // 2`` and the map has ``out =
    (n + padding - size) // stride + 1`` windows; both skip what lies outside the input, as
    Caffe's MAX pooling does. Caffe's window ``j`` starts at ``j * stride - pad``, so with
    ``pad = padding // 2 + first * stride`` its window ``j + first`` is Darknet's window ``j``;
    the smallest ``first`` whose Caffe map holds all of Darknet's windows is chosen (Caffe
    needs ``pad < size``).
    """
    start = padding // 2
    first = 0
    while True:
        pad = start + first * stride
        if pad >= size:
            break
        caffe_out = pooled_size(n, size, pad, stride, True)
        if caffe_out >= first + out:
            return pad, first, caffe_out, out
        first += 1
    raise sec.error("size=%d stride=%d padding=%d over an input %s of %d: Darknet's pooling "
                    "windows cannot be reproduced with Caffe's Pooling (it needs a pad "
                    "smaller than the window)" % (size, stride, padding, axis, n), "padding")


# ---- the solver ---------------------------------------------------------------------------
_NET_INPUT_KEYS = {"width", "height", "channels", "inputs"}
# [net] keys Darknet reads that have no Caffe solver or transformation equivalent.
_NET_KNOWN_KEYS = {
    "batch", "subdivisions", "learning_rate", "momentum", "decay", "max_batches", "policy",
    "steps", "scales", "step", "scale", "gamma", "power", "burn_in", "adam", "B1", "B2", "eps",
    "hue", "saturation", "exposure", "angle", "jitter", "aspect", "flip", "learning_rate_min",
    "sgdr_cycle", "sgdr_mult", "seq_scales", "time_steps", "track", "augment_speed",
    "sequential_subdivisions", "try_fix_nan", "loss_scale", "dynamic_minibatch",
    "optimized_memory", "workspace_size_limit_MB", "max_crop", "min_crop", "blur", "mixup",
    "cutmix", "mosaic", "letter_box", "label_smooth_eps", "resize_step", "gaussian_noise",
    "mosaic_bound", "contrastive", "contrastive_jit_flip", "contrastive_color",
    "unsupervised", "attention", "adversarial_lr", "max_chart_loss", "center", "notruth",
    "random", "rotate", "num_boxes", "ema_alpha", "train_only_bn", "batches_per_cycle",
    "cudnn_half", "max_batches_alpha",
}


def solver_from_cfg(cfg, net_path=None):
    """The training settings of ``cfg``'s ``[net]`` section as Caffe settings.

    Returns ``(solver_param, transform_param, comments)``: a SolverParameter (base_lr,
    momentum, weight_decay, max_iter, iter_size, lr_policy and its fields, burn_in and
    burn_in_power, the Adam settings), a TransformationParameter with the colour augmentation
    (hue, saturation, exposure) for the training data layer, and comment lines that give the
    mini-batch size and list every [net] key with no equivalent (with its line).
    """
    net = cfg.net
    sp = caffe_pb2.SolverParameter()
    tp = caffe_pb2.TransformationParameter()
    comments = []
    mapped = []
    unmapped = []

    mapped_keys = set()

    def used(key, target):
        if net.has(key):
            mapped_keys.add(key)
            mapped.append("%s=%s -> %s" % (key, net.options[key].value, target))

    if net_path:
        sp.net = net_path
    batch = net.get_int("batch", 1)
    subdivisions = net.get_int("subdivisions", 1)
    if batch < 1 or subdivisions < 1:
        raise net.error("batch and subdivisions must be positive (got batch=%d, "
                        "subdivisions=%d)" % (batch, subdivisions))
    mini = max(batch // subdivisions, 1)
    sp.iter_size = subdivisions
    used("batch", "batch_size: %d in the training data layer (batch / subdivisions)" % mini)
    used("subdivisions", "iter_size: %d" % subdivisions)
    sp.base_lr = net.get_float("learning_rate", 0.001)
    used("learning_rate", "base_lr")
    adam = net.get_int("adam", 0)
    sp.momentum = net.get_float("momentum", 0.9)
    used("momentum", "momentum")
    sp.weight_decay = net.get_float("decay", 0.0001)
    used("decay", "weight_decay")
    sp.max_iter = net.get_int("max_batches", 0)
    used("max_batches", "max_iter")
    if adam:
        sp.type = "Adam"
        sp.momentum = net.get_float("B1", 0.9)
        sp.momentum2 = net.get_float("B2", 0.999)
        sp.delta = net.get_float("eps", 0.000001)
        used("adam", 'type: "Adam"')
        used("B1", "momentum (Adam's beta1)")
        used("B2", "momentum2")
        used("eps", "delta")
    power = net.get_float("power", 4.0)
    burn_in = net.get_int("burn_in", 0)
    if burn_in:
        sp.burn_in = burn_in
        sp.burn_in_power = power
        used("burn_in", "burn_in")
    policy = net.get_str("policy", "constant")
    if policy == "constant":
        sp.lr_policy = "fixed"
    elif policy == "steps":
        steps = net.get_ints("steps")
        scales = net.get_floats("scales")
        if steps is None or scales is None:
            raise net.error("policy=steps needs steps and scales (as Darknet requires)",
                            "policy")
        if len(scales) < len(steps):
            # Darknet multiplies by 1 where scales runs out (it reads past the list's end).
            raise net.error("policy=steps: %d steps but %d scales; give one scale per step"
                            % (len(steps), len(scales)), "scales")
        if steps != sorted(steps):
            raise net.error("policy=steps: steps %s must increase (Darknet stops at the first "
                            "step not yet reached)" % steps, "steps")
        sp.lr_policy = "steps"
        sp.steps.extend(steps)
        sp.scales.extend(scales[:len(steps)])
        used("steps", "steps")
        used("scales", "scales")
    elif policy == "step":
        sp.lr_policy = "step"
        sp.stepsize = net.get_int("step", 1)
        sp.gamma = net.get_float("scale", 1.0)
        used("step", "stepsize")
        used("scale", "gamma")
    elif policy == "exp":
        sp.lr_policy = "exp"
        sp.gamma = net.get_float("gamma", 1.0)
        used("gamma", "gamma")
    elif policy == "poly":
        sp.lr_policy = "poly"
        sp.power = power
    elif policy == "sigmoid" and net.get_float("gamma", 1.0) <= 0:
        # Darknet: lr / (1 + exp(gamma * (it - step))); Caffe: exp(-gamma * (it - stepsize)),
        # with gamma >= 0 (a rising rate): only Darknet's gamma <= 0 has an equivalent.
        sp.lr_policy = "sigmoid"
        sp.gamma = -net.get_float("gamma", 1.0)
        sp.stepsize = net.get_int("step", 1)
        used("gamma", "gamma (negated: Caffe's sigmoid has the opposite sign)")
        used("step", "stepsize")
    elif policy == "sigmoid":
        sp.lr_policy = "fixed"
        unmapped.append("%s:%d: policy=sigmoid with gamma > 0 (a falling rate) has no Caffe "
                        "equivalent (Caffe's sigmoid needs gamma >= 0, a rising rate); "
                        "lr_policy \"fixed\" is used" % (net.path, net.options["policy"].line))
        mapped_keys.add("policy")
    else:
        sp.lr_policy = "fixed"
        unmapped.append("%s:%d: policy=%s has no Caffe equivalent; lr_policy \"fixed\" is used"
                        % (net.path, net.options["policy"].line, policy))
        mapped_keys.add("policy")
    if net.has("policy") and "policy" not in mapped_keys:
        used("policy", 'lr_policy: "%s"' % sp.lr_policy)
    if net.has("power") and (burn_in or policy == "poly"):
        used("power", ("burn_in_power" if burn_in else "") +
             (" and " if burn_in and policy == "poly" else "") +
             ("power" if policy == "poly" else ""))
    hue = net.get_float("hue", 0.0)
    saturation = net.get_float("saturation", 1.0)
    exposure = net.get_float("exposure", 1.0)
    if hue:
        tp.hue = hue
    if saturation != 1:
        tp.saturation = saturation
    if exposure != 1:
        tp.exposure = exposure
    for key in ("hue", "saturation", "exposure"):
        used(key, "transform_param %s" % key)
    for opt in net.options.values():
        if opt.key in _NET_INPUT_KEYS or opt.key in mapped_keys:
            continue
        unmapped.append("%s:%d: %s=%s" % (net.path, opt.line, opt.key, opt.value))
        if opt.key not in _NET_KNOWN_KEYS:
            warn("%s:%d: [net]: unknown key %s=%s is ignored (Darknet ignores keys it does "
                 "not read, too)" % (net.path, opt.line, opt.key, opt.value))
    comments.append("Caffe solver converted from %s by pycaffe-lite darknet2caffe." % net.path)
    comments.append("")
    comments.append("Mapped [net] settings:")
    comments.extend("  " + m for m in mapped)
    if tp.ListFields():
        comments.append("The training data layer takes Darknet's colour augmentation as:")
        comments.append("  transform_param { %s }"
                        % text_format.MessageToString(tp, as_one_line=True))
    comments.append("Darknet's update divides the summed gradient by batch; Caffe's solvers "
                    "take")
    comments.append("the gradient of the mean loss, so base_lr carries over as it is when "
                    "the loss")
    comments.append("is normalised per image.")
    comments.append("")
    if unmapped:
        comments.append("[net] settings with no equivalent (not converted):")
        comments.extend("  " + u for u in unmapped)
    else:
        comments.append("Every [net] setting has an equivalent.")
    if net_path:
        comments.append("")
        comments.append("net: the converted (deploy) net; for training, replace it with a net "
                        "that has")
        comments.append("a data layer (batch_size %d) and a loss." % mini)
    return sp, tp, comments


# ---- entry points -------------------------------------------------------------------------
def _as_cfg(cfg):
    if isinstance(cfg, DarknetCfg):
        return cfg
    if isinstance(cfg, (str, os.PathLike)) and os.path.exists(cfg):
        return read_cfg(cfg)
    if isinstance(cfg, str) and "[" in cfg and "\n" in cfg:
        return parse_cfg(cfg)
    raise DarknetError("file not found", os.fspath(cfg))


def convert(cfg, weights=None, batch_size=1, bn_variant="pjreddie", net_path=None):
    """Convert a Darknet model.

    ``cfg``: a ``.cfg`` path, its text or a :class:`~pycaffe_lite.darknet.cfg.DarknetCfg`;
    ``weights``: a ``.weights`` path, bytes, a
    :class:`~pycaffe_lite.darknet.weights.DarknetWeights` or None (structure only);
    ``batch_size``: the first dimension of the net's input; ``bn_variant``: ``"pjreddie"``
    (Darknet's ``sqrt(var) + 1e-6``, the default) or ``"alexeyab"`` (``sqrt(var + 1e-5)``,
    AlexeyAB's fork); ``net_path``: the prototxt path the solver's ``net`` should name.
    Returns a :class:`Conversion`.
    """
    cfg = _as_cfg(cfg)
    if isinstance(weights, (bytes, bytearray)):
        weights = DarknetWeights(bytes(weights))
    elif weights is not None and not isinstance(weights, DarknetWeights):
        weights = read_weights(weights)
    conv = _Converter(cfg, batch_size, bn_variant)
    result = conv.run(weights)
    result.solver_param, result.transform_param, result.solver_comments = \
        solver_from_cfg(cfg, net_path)
    for note in result.notes:
        log.debug(note)
    return result


def darknet2caffe(cfg, weights=None, prototxt=None, caffemodel=None, solver=None,
                  batch_size=1, bn_variant="pjreddie"):
    """Convert ``cfg`` (+ ``weights``) and write ``prototxt``, ``caffemodel`` (needs weights)
    and ``solver`` (each optional). Returns the :class:`Conversion`."""
    if caffemodel is not None and weights is None:
        raise DarknetError("a .caffemodel needs the Darknet .weights to convert", caffemodel)
    net_path = None
    if solver is not None and prototxt is not None:
        net_path = os.path.relpath(os.path.abspath(prototxt),
                                   os.path.dirname(os.path.abspath(solver)))
    result = convert(cfg, weights, batch_size=batch_size, bn_variant=bn_variant,
                     net_path=net_path)
    if prototxt is not None:
        protoio.write_text(result.net_param, prototxt)
    if caffemodel is not None:
        protoio.write_binary(result.weights_param, caffemodel)
    if solver is not None:
        protoio.atomic_write(solver, result.solver_text().encode("utf-8"))
    return result


__all__ = ["ACTIVATIONS", "BN_VARIANTS", "Conversion", "convert", "darknet2caffe",
           "solver_from_cfg"]
