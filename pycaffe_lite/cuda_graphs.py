"""CUDA graphs: a TEST net's forward on the GPU, captured once and replayed.

Run layer by layer from Python, a forward costs tens of microseconds of host time per layer
(ResNet-50 at batch 1: about 20 ms on the host for 2 ms of GPU work). Captured into a CUDA
graph, the whole forward is one launch. In GPU mode, for a net whose layers run on the device
alone (:data:`CAPTURABLE`: no host code, no per-call host state; the losses of
:data:`LOSSES`), after its data layers (the leading layers without bottoms that read files or
queues: they run eagerly, each copying its batch into a device buffer of its own), a forward
over all layers of a TEST net

1. runs eagerly the first time for a set of shapes (CUDA kernels are compiled, cuDNN's plans
   chosen, the layers' buffers allocated);
2. is captured the second time (:func:`pycaffe_lite.backend.capture_graph`: nothing runs while
   capturing; temporaries come from a memory pool the graph keeps), then replayed;
3. is replayed from then on while the shapes stay the same: the data layers run, the inputs
   are brought to the device (a host write into an input blob or a param is uploaded into the
   buffer the graph reads; a param whose buffer was replaced, or a net folded again, starts
   again at 1), the graph is launched, and every top it writes (and every param it writes:
   BatchNorm's running sums without ``use_global_stats``) is marked as current on the
   device, so reading it from Python copies the new values down. A net with a loss (or a
   check that reads the device, see :func:`pycaffe_lite.layer.deferred_checks`) reads one
   value after the launch: the loss, NaN where a check failed (which then runs again on the
   host and raises its own error).

A replayed forward computes exactly what the eager one does (the same kernels on the same
buffers). Another shape starts again at 1. A capture that fails (a layer synchronised with the
host, say) is logged once and the net runs eagerly from then on. A float16 net
(:mod:`pycaffe_lite.net_types`) is captured with its conversions at the type boundaries (the
net's own hooks, writing converted copies of their own in place). Partial forwards
(``start``/``end``), nets with hooks of one's own, TRAIN nets and CPU mode always run
eagerly (a solver captures its training iterations whole:
:mod:`pycaffe_lite.solvers.train_graph`).

Off: ``caffe.set_cuda_graph(False)``, ``--cuda_graph off`` on train, test and time, or
``PYCAFFE_LITE_CUDA_GRAPH=0``.
"""

import logging
import math

from . import backend, net_types
from .layer import deferred_checks
from .proto import caffe_pb2
from .syncedmem import upload_host_writes
from .switches import flag as flag_value, switch

log = logging.getLogger("pycaffe_lite")

_settings = {"enabled": switch("PYCAFFE_LITE_CUDA_GRAPH")}

# Layer types whose TEST forward reads and writes device arrays only, draws no random numbers
# and keeps no per-call host state. What they compute from shapes and params alone (PriorBox's
# boxes, Interp's taps) is made at reshape when a shape changes and kept on the device; a
# check that reads device values (Embed's indices, Upsample's mask) is deferred inside a
# capture (layer.defer_check). Left out: the data layers (they run before a graph), Python
# layers, and those that decide on the host from device values (DetectionOutput's and
# Proposal's NMS, SegAccuracy's confusion counts, MultiBoxLoss's matching, ...).
CAPTURABLE = frozenset([
    "Input", "Convolution", "Deconvolution", "DepthwiseConvolution", "ConvolutionDepthwise",
    "BatchNorm", "Scale", "Bias", "ReLU", "PReLU", "ELU", "Sigmoid", "TanH", "AbsVal", "Power",
    "Exp", "Log", "Clip", "ReLU6", "Swish", "Eltwise", "Concat", "Slice", "Split", "Pooling",
    "InnerProduct", "Softmax", "LRN", "Dropout", "Flatten", "Reshape", "Silence",
    # the forks' and importers' layers (PSPNet, DeepLab, SegNet, FCN, SSD, YOLO, ...)
    "BN", "Interp", "Permute", "Normalize", "PriorBox", "Reduction", "Parameter", "Crop",
    "Upsample", "Reorg", "Axpy", "ShuffleChannel", "Tile", "Threshold", "BNLL", "MVN",
    "Embed", "ArgMax",
])

#: loss layers whose forward stays on the device (their label checks defer, their loss is a
#: device scalar inside a capture; SigmoidCrossEntropyLoss's VALID count too)
LOSSES = frozenset(["SoftmaxWithLoss", "EuclideanLoss", "Accuracy", "SigmoidCrossEntropyLoss",
                    "SmoothL1Loss"])


def first_captured(net, capturable):
    """The index of the first layer a graph of ``net`` holds: the layers before it, without
    bottoms and not in ``capturable``, are its data layers, which run eagerly."""
    records = net.records
    first = 0
    while first < len(records) and not records[first].bottoms and \
            records[first].layer.type not in capturable:
        first += 1
    return first


def input_shapes(net, first):
    """The shapes a graph of ``net`` is captured for: its inputs' and its data layers' tops'
    (the layers before ``first``); every other shape follows from them."""
    return tuple(net.blobs[name].shape for name in net.inputs) + \
        tuple(top.shape for rec in net.records[:first] for top in rec.tops)


def layers_why_not(net, first, capturable):
    """Why the layers from ``first`` on cannot be captured ("" when they can)."""
    for rec in net.records[first:]:
        kind = rec.layer.type
        if kind not in capturable:
            return ("layer '%s' (%s) is not of a type known to run on the device alone"
                    " (cuda_graphs.CAPTURABLE)" % (rec.name, kind))
    return ""


def set_enabled(flag):
    """Capture and replay TEST forwards on the GPU (True, the default) or always run them
    layer by layer (False). Returns the old value."""
    old = _settings["enabled"]
    _settings["enabled"] = flag_value(flag, "set_cuda_graph")
    return old


def enabled():
    return _settings["enabled"]


class _Graphs:
    """A net's capture state: the input shapes last seen, the captured graph for them."""

    __slots__ = ("warm_key", "key", "graph", "written", "params_written", "params", "folding",
                 "refused", "replays", "layers", "first", "result", "rechecks")

    def __init__(self):
        self.warm_key = self.key = self.graph = self.layers = self.result = None
        self.written = []
        self.params_written = []  # params' SyncedArrays the captured forward writes
        self.params = []  # [(a param, its SyncedArray, the device array the graph reads)]
        self.folding = None  # the net's folding the graph was captured with
        self.rechecks = []
        self.refused = ""
        self.replays = self.first = 0


def why_not(net, start, end):
    """Why this forward runs eagerly ("" when it may be captured)."""
    if not _settings["enabled"]:
        return "CUDA graphs are off"
    if backend.mode() != backend.GPU:
        return "CPU mode"
    if net.phase != caffe_pb2.TEST:
        return "a TRAIN net"
    if start != 0 or end != len(net.records) - 1:
        return "a partial forward"
    if net_types.user_hooks(net):
        return "the net has hooks"
    if getattr(net, "int8_layers", None):
        return "Intel Caffe's int8 layers compute on the host"
    state = _state(net)
    if state.refused:
        return state.refused
    if state.layers is None:  # the layers are the net's for good
        state.first = first_captured(net, CAPTURABLE)
        state.layers = layers_why_not(net, state.first, CAPTURABLE | LOSSES)
    return state.layers


def _state(net):
    state = getattr(net, "_cuda_graphs", None)
    if state is None:
        state = net._cuda_graphs = _Graphs()
    return state


def forward(net, start, end, eager):
    """``eager(start, end)`` (the layer-by-layer forward), or its captured graph's replay."""
    if why_not(net, start, end):
        return eager(start, end)
    state = _state(net)
    first = state.first
    loss = eager(0, first - 1) if first else 0.0  # the data layers
    for rec in net.records[:first]:  # their batches up before the graph reads them
        for top in rec.tops:
            top.read_data()
    key = input_shapes(net, first)
    if state.key == key and _params_current(net, state):
        return loss + _replay(net, state)
    if state.warm_key != key:
        state.warm_key, state.key, state.graph = key, None, None
        return loss + eager(first, end)
    _to_device(net)
    params = [(blob, blob.synced_data, blob.synced_data._gpu)
              for blobs in net.params.values() for blob in blobs]
    versions = [synced.version for _, synced, _ in params]
    try:
        graph = backend.capture_graph(lambda: _captured(net, state, eager, first, end))
    except Exception as exc:  # whatever the layer or the driver raised: run eagerly
        state.refused = "its capture failed (%s: %s)" % (type(exc).__name__, exc)
        log.warning("Net '%s': the CUDA graph capture of its forward failed (%s: %s); it "
                    "runs layer by layer", net.name, type(exc).__name__, exc)
        return loss + eager(first, end)
    state.key, state.graph = key, graph
    state.written = [top for rec in net.records[first:] if rec.layer.type != "Input"
                     for top in rec.tops] + _copies(net)
    # the params the forward writes (BatchNorm's running sums without use_global_stats)
    state.params_written = [synced for (_, synced, _), v in zip(params, versions)
                            if synced.version != v]
    state.params, state.folding = params, net.folding
    return loss + _replay(net, state)


def _params_current(net, state):
    """Whether the graph still reads the params where they are: each param value written on
    the host since (net surgery, ``copy_from``) goes up into the buffer the graph reads. A
    param whose storage or device buffer was replaced (``share_with``, a reshape) or a net
    folded again (``copy_from`` on a folded net, ``fold()``, ``unfold()``: the folded copies
    are new) drops the graph: this forward runs eagerly, the next one captures again. False
    then."""
    if net.folding is not state.folding or any(
            blob.synced_data is not synced or synced._gpu is not device
            for blob, synced, device in state.params):
        state.key = state.warm_key = state.graph = state.folding = None
        state.params = []
        return False
    upload_host_writes(synced for _, synced, _ in state.params)
    return True


def _captured(net, state, eager, first, end):
    """The captured work: the forward from ``first``, its loss and checks kept on the device
    (``state.result``: the loss, NaN where a check failed; None with neither)."""
    with deferred_checks() as checks:
        loss = eager(first, end)
    state.rechecks = checks.recheck
    if isinstance(loss, float) and not checks.flags:
        state.result = None
        return
    xp = backend.xp()
    if isinstance(loss, float):  # checks but no loss: a zero made on the device
        loss = xp.zeros((), dtype="float64")
    failed = xp.zeros((), dtype=bool)
    for flag in checks.flags:
        failed = failed | flag
    state.result = xp.where(failed, float("nan"), loss)


def _copies(net):
    """A float16 net's converted bottoms (:mod:`pycaffe_lite.net_types`: written in place by
    its own hooks at each forward, replay included)."""
    types = net_types.of(net)
    return types.copies() if types is not None else []


def _to_device(net):
    """Every blob and parameter current on the device, so that the capture records no upload
    (a host read of a top, for one, leaves its host copy the newer)."""
    for blob in list(net._blobs) + _copies(net):
        blob.read_data()
    for blobs in net.params.values():
        for blob in blobs:
            blob.read_data()


def _replay(net, state):
    for name in net.inputs:
        net.blobs[name].read_data()
    # the replay writes every top on the device, whatever its host copy holds (as an eager
    # forward overwrites it): the device copies are the current ones
    for blob in state.written:
        blob.device_written()
    for synced in state.params_written:
        synced.device_written()
    state.graph.launch()
    state.replays += 1
    return read_loss(state.result, state.rechecks)


def read_loss(result, rechecks):
    """The one value read after a launch: ``result`` (the loss, NaN where a deferred check
    failed; None when there is nothing to read: 0). A non-finite value runs the host
    ``rechecks``, which raise their checks' own errors where they failed."""
    if result is None:
        return 0.0
    loss = float(result)
    if not math.isfinite(loss):
        for recheck in rechecks:
            recheck()
    return loss
