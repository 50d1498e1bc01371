"""Darknet ``.cfg`` (+ ``.weights``) to a Caffe net (+ parameters), and ``[net]`` to a solver.

:func:`convert` builds a NetParameter (an ``Input`` layer, then one or more Caffe layers per
Darknet layer) and, given the weights, the parameter blobs of those layers; the table of what
becomes what is in ``docs/darknet.md``. :func:`solver_from_cfg` maps the
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

from ..proto import protoio
from ..proto import caffe_pb2
from .cfg import INT_MAX, DarknetCfg, DarknetError, parse_cfg, read_cfg, warn
from .combine import CombiningSections
from .pools import PoolingSections
from .sections import ACTIVATIONS, SectionConverters, _Out
from .solver import solver_from_cfg
from .weights import DarknetWeights, read_weights

log = logging.getLogger("pycaffe_lite")

# How Darknet normalises with its rolling statistics at inference:
#   pjreddie: (x - mean) / (sqrt(var) + 1e-6)   (blas.c, normalize_cpu)
#   alexeyab: (x - mean) / sqrt(var + 1e-5)     (AlexeyAB's fork, YOLOv4)
BN_VARIANTS = ("pjreddie", "alexeyab")
# What a standalone [batchnorm] section stores in the .weights file (parser.c,
# load_batchnorm_weights / save_batchnorm_weights).
BN_LAYOUTS = {
    "pjreddie": "pjreddie's layout (scales, rolling mean, rolling variance)",
    "alexeyab": "AlexeyAB's layout (biases, scales, rolling mean, rolling variance)",
}
PJREDDIE_EPS = 1e-12  # with the variance adjusted, see _Converter.bn_blobs
ALEXEYAB_EPS = 1e-5

# Keys every layer section may carry that matter for training only (Darknet reads them in
# parse_network_cfg): accepted, and listed as notes.
COMMON_TRAINING_KEYS = {"stopbackward", "dont_update", "burnin_update", "onlyforward", "clip",
                        "train_only_bn", "dontsave", "smooth", "learning_rate"}
# Keys that change what is read from the .weights file: refused unless 0.
COMMON_REFUSED_KEYS = ("dontload", "dontloadscales", "numload")

TRAINING_KEYS = {
    "convolutional": {"angle", "assisted_excitation", "dot"},
    "maxpool": set(),
    "local_avgpool": set(),
    "avgpool": set(),
    "dropout": {"dropblock", "dropblock_size_rel", "dropblock_size_abs"},
    "connected": set(),
    "softmax": {"noloss"},
    "route": {"stream", "wait_stream"},
    "shortcut": {"weights_normalization", "weights_normalizion"},
    "upsample": set(),
    "batchnorm": set(),
    "activation": set(),
    "cost": {"type", "scale", "ratio", "noobj", "thresh"},
    "yolo": {"jitter", "random", "max", "counters_per_class", "label_smooth_eps", "max_delta",
             "iou_normalizer", "obj_normalizer", "cls_normalizer", "delta_normalizer",
             "iou_loss", "iou_thresh_kind", "beta_nms", "nms_kind", "focal_loss",
             "iou_thresh", "map", "resize", "objectness_smooth", "track_history_size",
             "sim_thresh", "dets_for_track", "dets_for_show", "track_ciou_norm",
             "embedding_layer", "show_details"},
    "reorg": set(),
    "reorg3d": set(),
    "scale_channels": set(),
    "sam": set(),
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


class _Converter(CombiningSections, PoolingSections, SectionConverters):
    """Builds the Caffe net section by section (the converters are in :mod:`.sections`,
    :mod:`.combine` and :mod:`.pools`)."""

    HANDLERS = dict(SectionConverters.HANDLERS, **CombiningSections.HANDLERS,
                    **PoolingSections.HANDLERS)

    def __init__(self, cfg, batch_size, bn_variant):
        if bn_variant not in BN_VARIANTS:
            raise DarknetError("unknown batch-norm variant %r; expected one of %s"
                               % (bn_variant, ", ".join(BN_VARIANTS)))
        self.cfg = cfg
        self.batch_size = int(batch_size)
        if not 1 <= self.batch_size <= INT_MAX:
            raise DarknetError("batch_size must be in 1..%d, got %d" % (INT_MAX,
                                                                         self.batch_size))
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

    def activation(self, sec, name, blob, key="activation", default="linear", top=None):
        """The layers of the activation ``key`` on ``blob``, in place or (``top``) into a new
        blob, the first layer then named ``top``; returns the output blob."""
        act = sec.get_str(key, default)
        if act not in ACTIVATIONS:
            raise sec.error("activation=%s cannot be converted; supported: %s"
                            % (act, ", ".join(sorted(ACTIVATIONS))), key)
        spec = ACTIVATIONS[act] or ()
        for k in range(0, len(spec), 2):
            layer_name = top if top and not k else "%s_%s%s" % (name, act, k // 2 or "")
            lp = self.layer(layer_name, spec[k], [blob], [top or blob])
            blob = top or blob
            if spec[k + 1]:
                spec[k + 1](lp)
        return blob

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

    def same_form(self, name, outs):
        """``outs`` with the flat (2-axis) ones reshaped to ``(N, C, 1, 1)`` where they are
        mixed with 4-axis blobs: Darknet's [connected] output is ``C x 1 x 1`` like an
        [avgpool]'s, and [route], [shortcut] and [sam] combine the two."""
        if all(o.flat for o in outs) or not any(o.flat for o in outs):
            return list(outs)
        shaped = []
        for k, o in enumerate(outs):
            if o.flat:
                blob = "%s_input%d" % (name, k)
                lp = self.layer("%s_reshape%d" % (name, k), "Reshape", [o.blob], [blob])
                lp.reshape_param.shape.dim.extend([0, -1, 1, 1])
                o = _Out(blob, o.c, 1, 1)
            shaped.append(o)
        return shaped

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

    def run(self, weights):
        if weights is not None:
            self.transpose_connected = weights.transpose
        if not self.cfg.layers:
            raise self.cfg.net.error("the .cfg has no layers after [net]")
        prev = self.check_size(self.cfg.net, self.input(), "input")
        for sec in self.cfg.layers:
            handler = self.HANDLERS.get(sec.name)
            if handler is None:
                raise sec.error("[%s] sections cannot be converted; supported: %s"
                                % (sec.header, ", ".join(sorted(self.HANDLERS))))
            for key in COMMON_REFUSED_KEYS:
                self.refuse(sec, key)
            prev = self.check_size(sec, handler(self, sec, prev, sec.index))
            self.outs.append(prev)
            self.result.blob_of_layer[sec.index] = prev.blob
            self.check_unread(sec, TRAINING_KEYS[sec.name] | COMMON_TRAINING_KEYS)
        if not self.result.outputs:
            self.result.outputs.append(self.outs[-1].blob)
        self.result.net_param = self.net
        if weights is not None:
            self.load(weights)
        return self.result

    @staticmethod
    def check_size(sec, out, what="output"):
        """``out``, after checking that its size fits Darknet's ``int`` (``l.outputs``, and
        the Caffe shapes and fields built from it)."""
        if out.size > INT_MAX:
            raise sec.error("the %s, %dx%dx%d, has %d values per image; Darknet's layer sizes "
                            "are C ints (at most %d)" % (what, out.c, out.h, out.w, out.size,
                                                        INT_MAX))
        return out

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
        bn = [sec.where() for sec in self.cfg.layers if sec.name == "batchnorm"]
        if bn:
            other = "alexeyab" if self.bn_variant == "pjreddie" else "pjreddie"
            weights.hint = ("; [batchnorm] at %s is read in %s; for %s use --bn-variant %s "
                            "(bn_variant=%r)" % (", ".join(bn), BN_LAYOUTS[self.bn_variant],
                                                 BN_LAYOUTS[other], other, other))
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
    AlexeyAB's fork), which also picks the layout of ``[batchnorm]`` parameters
    (:data:`BN_LAYOUTS`); ``net_path``: the prototxt path the solver's ``net`` should name.
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
    outputs = []  # written together: a failure leaves none of them
    if prototxt is not None:
        outputs.append((prototxt, protoio.text_bytes(result.net_param), "the prototxt"))
    if caffemodel is not None:
        outputs.append((caffemodel, protoio.binary_bytes(result.weights_param),
                        "the caffemodel"))
    if solver is not None:
        outputs.append((solver, result.solver_text().encode("utf-8"), "the solver"))
    protoio.atomic_write_all(outputs)
    return result


__all__ = ["ACTIVATIONS", "BN_VARIANTS", "Conversion", "convert", "darknet2caffe",
           "solver_from_cfg"]
