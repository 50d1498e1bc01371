"""NVCaffe's storage and math types on the Net level: float16 layers in GPU mode.

NVCaffe (NVIDIA/caffe 0.17) gives every layer a forward (storage) type and a backward type,
and math types for what it computes inside: ``forward_type``, ``backward_type``,
``forward_math``, ``backward_math`` of a layer, ``default_*`` of the net for the layers that set
none (an unset math type is the storage type). Here, in GPU mode, a net built in float32 runs
its FLOAT16 layers in float16:

- the layer is created with dtype float16: its tops, their diffs and its params' data and diffs
  (BatchNorm's statistics aside: :data:`FLOAT32_PARAMS`) are float16 arrays on the device,
  and its own code computes on them (cuDNN convolutions with float16 input and output on
  tensor cores; CuPy's products of float16 matrices accumulate in float32);
- the math types are resolved as NVCaffe resolves them (the layer's own, else its storage
  type, else the net's default math, else the net's default storage type) and set on the
  layer's parameters: FLOAT accumulates cuDNN's convolutions in float32, FLOAT16 in float16
  (through cuDNN's frontend); the other layers accumulate in float32 either way;
- a layer reads its bottoms in its own type: where the producer of a bottom stored another
  type, the layer gets a converted copy (made before each forward of the layer), and the
  copy's gradient is converted back into the producer's diff after the layer's backward. The
  copies are not in ``net.blobs``, which holds what each producer stored; they are written
  in place, the same arrays each time, by the net's own hooks, which CUDA graphs hold
  (:func:`user_hooks` tells hooks of one's own apart);
- data layers (no bottoms), loss layers (a loss weight on a top, or a loss type), the layer
  types outside :data:`FLOAT16_LAYERS` and a Pooling with a mask top (indices, which float16
  holds exactly only up to 2048) compute in float32, as NVCaffe falls back to float32 for
  layers it has no float16 code for; a note lists them once per net. A layer working in place
  on a blob takes that blob's type (no conversion can sit between the two);
- the diffs of a layer are kept in its forward type (a backward_type that differs is noted);
- ``global_grad_scale``: after each loss layer's backward its bottom gradients (float32) are
  multiplied by the scale, before any conversion to float16, so small gradients keep their
  digits (NVCaffe multiplies the loss weight by it). The solver divides every param gradient by
  the current scale before its update (:mod:`pycaffe_lite.solvers.mixed`); a ``net.backward()``
  of one's own leaves them scaled, as NVCaffe's;
- master weights: a float32 copy of each float16 learnable param (:func:`master_weights`).
  The solver's update runs on it, then the float16 weights are written from it; weights are
  saved from it (``net.save``, snapshots: BVLC's float fields) and loaded into it
  (``copy_from``, resuming), so a float32 ``.caffemodel`` round-trips exactly.

In CPU mode, and in a net built in float64, every type runs in the net's own type, with a note
(:func:`pycaffe_lite.net_graph.apply_fork_options`). The types are decided when the net is
built, from the mode at that time. INT, UINT and BOOL are refused as types of a layer.
"""

import contextlib
import logging

import numpy as np

from . import backend
from .blob import Blob
from .errors import NetError
from .layers import create_layer
from .proto import caffe_pb2

log = logging.getLogger("pycaffe_lite")

FLOAT16 = caffe_pb2.FLOAT16
FLOAT = caffe_pb2.FLOAT
#: the layer types that compute in float16 where their type asks for it (their float16 results
#: are checked against float64 references in tests/test_float16.py); the others run in float32
FLOAT16_LAYERS = frozenset([
    "Convolution", "Deconvolution", "InnerProduct", "Pooling", "ReLU", "Sigmoid", "TanH",
    "Split", "Eltwise", "Concat", "Flatten", "Reshape", "BatchNorm", "Scale", "Bias"])
#: float16 layer types whose params stay float32: BatchNorm's statistics (its running sums
#: reach 1 / (1 - moving_average_fraction) times the variance), as cuDNN's and PyTorch's
FLOAT32_PARAMS = frozenset(["BatchNorm"])
_TYPE_FIELDS = ("forward_type", "backward_type", "forward_math", "backward_math")
_RUNNABLE = (caffe_pb2.DOUBLE, FLOAT, FLOAT16)


def check_types(param):
    """Refuse INT, UINT and BOOL as a net's default types or a layer's types (NetError naming
    the net's field or the layer)."""
    for field in _TYPE_FIELDS:
        value = getattr(param, "default_" + field)
        if value not in _RUNNABLE:
            raise NetError("net %s: default_%s: %s cannot be a storage or math type (use "
                           "FLOAT, FLOAT16 or DOUBLE)"
                           % (param.name or "(unnamed)", field, caffe_pb2.Type.Name(value)))
    for lp in param.layer:
        for field in _TYPE_FIELDS:
            value = getattr(lp, field)
            if value not in _RUNNABLE:
                raise NetError("layer '%s' (type %s): %s: %s cannot be a storage or math type "
                               "(use FLOAT, FLOAT16 or DOUBLE)"
                               % (lp.name, lp.type, field, caffe_pb2.Type.Name(value)))


def _asked(lp, param, field):
    return getattr(lp, field) if lp.HasField(field) else getattr(param, "default_" + field)


def wants_float16(param, dtype):
    """Whether a net of ``param`` built now in ``dtype`` runs float16 layers: GPU mode, a
    float32 net, and some layer's forward type FLOAT16."""
    if backend.mode() != "gpu" or np.dtype(dtype) != np.float32:
        return False
    return any(_asked(lp, param, "forward_type") == FLOAT16 for lp in param.layer)


class Types:
    """The resolved types of one net whose float16 layers run in float16 (``net._types``)."""

    def __init__(self, param):
        self.param = param
        self.dtypes = []          # per layer: the dtype of its tops and params
        self.shadows = {}         # layer index -> [(bottom index, producer blob, copy)]
        self.loss_layers = ()
        self.scale = float(param.global_grad_scale)
        self.base_scale = self.scale
        self.adaptive = bool(param.global_grad_scale_adaptive)
        self.device_scale = None  # the adaptive scale: a float64 0-d device array
        self.masters = None       # learnable index -> float32 Blob (None: a float32 param)
        self.hooks = ()           # the conversions and the loss scaling, as the net's hooks
        self._versions = {}
        self._fallback, self._in_place, self._btype_notes = [], [], []

    # -- construction (Net._init) --------------------------------------------------------------
    def create(self, lp, layer, blob_named):
        """``layer`` (created in float32), or ``lp``'s layer created again in its own dtype;
        ``blob_named(name)`` is the net's blob of that name so far."""
        in_place = next((blob_named(t) for j, t in enumerate(lp.top)
                         if j < len(lp.bottom) and t == lp.bottom[j]), None)
        dtype = self.layer_dtype(lp, layer, in_place)
        if dtype == layer.dtype:
            return layer
        for which in ("forward", "backward"):  # NVCaffe's rule, set on the layer's params
            setattr(lp, which + "_math", self._math(lp, which))
        layer = create_layer(lp, dtype=dtype)
        if lp.type in FLOAT32_PARAMS and not len(layer.blobs):
            layer.blobs.dtype = np.dtype(np.float32)  # the blobs its setup creates
        return layer

    def _math(self, lp, which):
        """A layer's math type as NVCaffe resolves it: its own, else its storage type, else
        the net's default math, else the net's default storage type."""
        for owner, field in ((lp, which + "_math"), (lp, which + "_type"),
                             (self.param, "default_%s_math" % which),
                             (self.param, "default_%s_type" % which)):
            if owner.HasField(field):
                return getattr(owner, field)
        return FLOAT

    def layer_dtype(self, lp, layer, in_place):
        """The dtype layer ``lp`` stores and computes in (appended to :attr:`dtypes`)."""
        ftype = _asked(lp, self.param, "forward_type")
        dtype = np.dtype(np.float16 if ftype == FLOAT16 else np.float32)
        fallback = dtype == np.float16 and (
            not lp.bottom or layer.is_loss or any(lp.loss_weight) or
            lp.type not in FLOAT16_LAYERS or
            (lp.type == "Pooling" and len(lp.top) > 1))  # its mask holds indices
        if in_place is not None:  # no conversion can sit between in-place layers
            if fallback and in_place.dtype == np.float16:
                self._in_place.append("%s (%s)" % (lp.name, lp.type))
            dtype, fallback = in_place.dtype, False
        elif fallback:
            dtype = np.dtype(np.float32)
            self._fallback.append("%s (%s)" % (lp.name, lp.type))
        btype = lp.backward_type if lp.HasField("backward_type") else \
            self.param.default_backward_type
        if (btype == FLOAT16) != (dtype == np.float16) and not fallback and lp.bottom:
            self._btype_notes.append(lp.name)
        self.dtypes.append(dtype)
        return dtype

    def bottom(self, layer_id, j, blob, dtype):
        """The blob layer ``layer_id`` reads as bottom ``j``: ``blob`` itself, or a copy in
        ``dtype`` where ``blob`` holds another type."""
        if blob.dtype == dtype:
            return blob
        copy = Blob(blob.shape, dtype)
        copy.write_data()[...] = blob.read_data()
        self.shadows.setdefault(layer_id, []).append((j, blob, copy))
        return copy

    def attach(self, net):
        """Install the conversions and the loss scaling on ``net`` (built)."""
        self.loss_layers = frozenset(
            i for i, rec in enumerate(net.records)
            if any(rec.layer.loss(j) for j in range(len(rec.tops))))
        self.hooks = (lambda i: self._convert_bottoms(net, i),
                      lambda i: self._convert_diffs(net, i))
        net._hooks["before_forward"].insert(0, self.hooks[0])
        net._hooks["after_backward"].insert(0, self.hooks[1])
        halves = sum(1 for d in self.dtypes if d == np.float16)
        log.info("Net %s: %d of %d layers store and compute in float16 (GPU mode)",
                 net.name or "(unnamed)", halves, len(self.dtypes))
        if self._fallback:
            log.info("Net %s: these layers compute in float32 (data, loss, or no float16 "
                     "code here): %s", net.name or "(unnamed)", ", ".join(self._fallback))
        if self._in_place:
            log.info("Net %s: these layers have no float16 code here but work in place on a "
                     "float16 blob, so compute in float16: %s", net.name or "(unnamed)",
                     ", ".join(self._in_place))
        if self._btype_notes:
            log.info("Net %s: the diffs of %s are kept in their forward type",
                     net.name or "(unnamed)", ", ".join(self._btype_notes))

    # -- forward and backward ------------------------------------------------------------------
    def copies(self):
        """Every converted bottom (a Blob of its own, written in place at each forward: a
        CUDA graph reads and writes the same arrays at each replay)."""
        return [copy for shadows in self.shadows.values() for _, _, copy in shadows]

    def reshape_copies(self, i):
        """Give layer ``i``'s converted bottoms their producers' shapes (``Net.reshape``)."""
        for _, src, copy in self.shadows.get(i, ()):
            if copy.shape != src.shape:
                copy.reshape(src.shape)

    def _convert_bottoms(self, net, i):
        self.reshape_copies(i)
        for _, src, copy in self.shadows.get(i, ()):
            copy.write_data()[...] = src.read_data()

    def _convert_diffs(self, net, i):
        rec = net.records[i]
        if not rec.need_backward:
            return
        if i in self.loss_layers and (self.adaptive or self.scale != 1):
            scale = self.loss_factor()
            for j, bottom in enumerate(rec.bottoms):
                if rec.bottom_need_backward[j]:
                    diff = bottom.write_diff()
                    diff *= scale
        for j, src, copy in self.shadows.get(i, ()):
            if rec.bottom_need_backward[j]:
                src.write_diff()[...] = copy.read_diff()

    # -- master weights ----------------------------------------------------------------------
    def halves(self, net):
        """``[(learnable index, layer index, param index)]`` of the float16 learnable params
        (owners; a sharer follows its owner's storage)."""
        out = []
        for net_pid, owner in enumerate(net.param_owners):
            if owner != -1:
                continue
            k = net.learnable_param_ids[net_pid]
            if net.learnable_params[k].dtype == np.float16:
                out.append((k,) + tuple(net.param_layer_indices[net_pid]))
        return out

    def _master(self, net, k, half):
        masters = self.masters
        master = masters.get(k)
        fresh = master is None or master.shape != half.shape
        if fresh:
            master = masters[k] = Blob(half.shape, np.float32)
        if fresh or self._versions[k] != half.synced_data.version:
            # reached for writing outside the updates (pycaffe's ``blob.data`` also when only
            # read): the master takes the float16 values where they changed
            values = half.read_data()
            if fresh:
                master.write_data()[...] = values
            else:  # on the device, without reading anything back (BatchNorm's statistics
                # move in every forward)
                take_half(master.write_data(), values)
            self._versions[k] = half.synced_data.version
        return master

    def refresh_masters(self, net):
        """Each master takes its float16 param's values where something else wrote them
        since the last update (net surgery, a restored snapshot): what :func:`master_weights`
        does on entering, for an update that does not enter it (a CUDA graph's)."""
        if self.masters is None:
            return
        for k, _, _ in self.halves(net):
            if k in self.masters:
                self._master(net, k, net.learnable_params[k])

    def written(self, net, k, half, master):
        half.write_data()[...] = master.read_data()
        self._versions[k] = half.synced_data.version

    # -- loss scaling ------------------------------------------------------------------------
    def current_scale(self):
        """The scale as a host number (read from the device where it adapts)."""
        if self.adaptive and self.device_scale is not None:
            return float(self.device_scale)
        return self.scale

    def _scale_array(self):
        """The adaptive scale's device array (``global_grad_scale`` at first): each update
        writes the next scale into it, on the device, so nothing is read on the host and a
        CUDA graph reads the scale of the iteration it replays."""
        if self.device_scale is None:
            self.device_scale = backend.xp().asarray(self.base_scale, dtype=np.float64)
        return self.device_scale

    def loss_factor(self):
        """What a loss layer's bottom gradients are multiplied by: the scale in float32 (a
        0-d device array where it adapts)."""
        if self.adaptive:
            return self._scale_array().astype(np.float32)
        return np.float32(self.scale)

    def inverse_factor(self):
        """What the gradients are multiplied by before the update: 1 / scale in float32 (a
        0-d device array where it adapts)."""
        if self.adaptive:
            return (1.0 / self._scale_array()).astype(np.float32)
        return np.float32(1.0 / self.scale)

    def next_scale(self, largest, ok=None):
        """NVCaffe's adaptive scale from the largest magnitude ``largest`` (a float64 0-d
        device array) of the float16 params' (unscaled) gradients of the last update:
        ``global_grad_scale * 4 / largest`` (``global_grad_scale`` where it is 0), written on
        the device; kept where ``ok`` (a 0-d device boolean) is False."""
        if not self.adaptive:
            return
        scale = self._scale_array()
        xp = backend.get_array_module(scale)
        positive = largest > 0
        new = xp.where(positive, self.base_scale * (4.0 / xp.where(positive, largest, 1.0)),
                       self.base_scale)
        if ok is not None:
            new = xp.where(ok, new, scale)
        scale[...] = new


def of(net):
    """The net's :class:`Types`, or None where every layer runs in the net's type."""
    return getattr(net, "_types", None)


def user_hooks(net):
    """Whether ``net`` has hooks besides its own type conversions and loss scaling (which
    work on device arrays only, with the same values each iteration where the scale is
    fixed, so a CUDA graph holds them)."""
    types = of(net)
    own = types.hooks if types is not None else ()
    return any(all(hook is not o for o in own)
               for hooks in net._hooks.values() for hook in hooks)


def take_half(master, values, ok=None):
    """``master`` (float32) takes the float16 ``values`` where they are not its own values
    rounded (written by something else), in place, on the device where they are; with ``ok``
    (a 0-d device boolean) only where it is True."""
    xp = backend.get_array_module(values)
    taken = values != master.astype(np.float16)
    if ok is not None:
        taken &= ok
    master[...] = xp.where(taken, values.astype(np.float32), master)


@contextlib.contextmanager
def master_weights(net, keep=True):
    """Within: each float16 learnable param's place in ``net.learnable_params`` and in its
    layer's ``blobs`` holds its float32 master copy (created from the float16 values the first
    time, and again whenever the float16 data was written by something else); on leaving, the
    float16 params are written from the masters and take their places back. Yields
    ``[(learnable index, float16 blob, master)]``. ``keep=False`` (a TEST net loading or saving
    weights) drops the masters afterwards. Without float16 params nothing changes."""
    types = of(net)
    halves = types.halves(net) if types is not None else []
    if not halves:
        yield []
        return
    if types.masters is None:
        types.masters = {}
    swapped = []
    for k, layer_id, pid in halves:
        half = net.learnable_params[k]
        master = types._master(net, k, half)
        net.learnable_params[k] = master
        net.records[layer_id].layer.blobs[pid] = master
        swapped.append((k, layer_id, pid, half, master))
    try:
        yield [(k, half, master) for k, _, _, half, master in swapped]
    finally:
        for k, layer_id, pid, half, master in swapped:
            net.learnable_params[k] = half
            net.records[layer_id].layer.blobs[pid] = half
            if master.shape != half.shape:
                half.reshape(master.shape)
            types.written(net, k, half, master)
        if not keep:
            types.masters, types._versions = None, {}


def weights_context(net):
    """The context ``Net`` loads and saves weights in (:func:`master_weights`, kept in a
    TRAIN net only)."""
    return master_weights(net, keep=net.phase == caffe_pb2.TRAIN)
