"""CUDA graphs: a TEST net's forward on the GPU, captured once and replayed.

Run layer by layer from Python, a forward costs tens of microseconds of host time per layer
(ResNet-50 at batch 1: about 20 ms on the host for 2 ms of GPU work). Captured into a CUDA
graph, the whole forward is one launch. In GPU mode, for a net whose every layer runs on the
device alone (:data:`CAPTURABLE`: no data layer, no loss, no host code, no random draws at
TEST), a forward over all layers of a TEST net

1. runs eagerly the first time for a set of input shapes (CUDA kernels are compiled, cuDNN's
   plans chosen, the layers' buffers allocated);
2. is captured the second time (:func:`pycaffe_lite.backend.capture_graph`: nothing runs while
   capturing; temporaries come from a memory pool the graph keeps), then replayed;
3. is replayed from then on while the input shapes stay the same: the inputs are brought to
   the device first (a host write into an input blob is uploaded into the buffer the graph
   reads), and every top is marked as current on the device, so reading it from Python copies
   the new values down.

A replayed forward computes exactly what the eager one does (the same kernels on the same
buffers). Another input shape starts again at 1. A capture that fails (a layer synchronised
with the host, say) is logged once and the net runs eagerly from then on. Partial forwards
(``start``/``end``), nets with hooks, TRAIN nets and CPU mode always run eagerly (a solver
captures its training iterations whole: :mod:`pycaffe_lite.solvers.train_graph`).

Off: ``caffe.set_cuda_graph(False)``, ``--cuda_graph off`` on train, test and time, or
``PYCAFFE_LITE_CUDA_GRAPH=0``.
"""

import logging
import os

from . import backend
from .proto import caffe_pb2

log = logging.getLogger("pycaffe_lite")

_settings = {"enabled": os.environ.get("PYCAFFE_LITE_CUDA_GRAPH", "1") != "0"}

# Layer types whose TEST forward reads and writes device arrays only, draws no random numbers
# and keeps no per-call host state.
CAPTURABLE = frozenset([
    "Input", "Convolution", "Deconvolution", "DepthwiseConvolution", "ConvolutionDepthwise",
    "BatchNorm", "Scale", "Bias", "ReLU", "PReLU", "ELU", "Sigmoid", "TanH", "AbsVal", "Power",
    "Exp", "Log", "Clip", "ReLU6", "Swish", "Eltwise", "Concat", "Slice", "Split", "Pooling",
    "InnerProduct", "Softmax", "LRN", "Dropout", "Flatten", "Reshape", "Silence",
])


def set_enabled(flag):
    """Capture and replay TEST forwards on the GPU (True, the default) or always run them
    layer by layer (False). Returns the old value."""
    old = _settings["enabled"]
    _settings["enabled"] = bool(flag)
    return old


def enabled():
    return _settings["enabled"]


class _Graphs:
    """A net's capture state: the input shapes last seen, the captured graph for them."""

    __slots__ = ("warm_key", "key", "graph", "written", "refused", "replays", "layers")

    def __init__(self):
        self.warm_key = self.key = self.graph = self.layers = None
        self.written = []
        self.refused = ""
        self.replays = 0


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
    if any(net._hooks.values()):
        return "the net has hooks"
    if getattr(net, "int8_layers", None):
        return "Intel Caffe's int8 layers compute on the host"
    state = _state(net)
    if state.refused:
        return state.refused
    if state.layers is None:  # the layers and their losses are the net's for good
        state.layers = _layers_why_not(net)
    return state.layers


def _layers_why_not(net):
    for rec in net.records:
        if rec.layer.type not in CAPTURABLE:
            return "layer '%s' (%s) runs host code" % (rec.name, rec.layer.type)
        if any(rec.layer.loss(i) for i in range(len(rec.tops))):
            return "layer '%s' has a loss" % rec.name
    return ""


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
    key = tuple((name, net.blobs[name].shape) for name in net.inputs)
    if state.key == key:
        return _replay(net, state)
    if state.warm_key != key:
        state.warm_key, state.key, state.graph = key, None, None
        return eager(start, end)
    _to_device(net)
    try:
        graph = backend.capture_graph(lambda: eager(start, end))
    except Exception as exc:  # whatever the layer or the driver raised: run eagerly
        state.refused = "its capture failed (%s: %s)" % (type(exc).__name__, exc)
        log.warning("Net '%s': the CUDA graph capture of its forward failed (%s: %s); it "
                    "runs layer by layer", net.name, type(exc).__name__, exc)
        return eager(start, end)
    state.key, state.graph = key, graph
    state.written = [top for rec in net.records if rec.layer.type != "Input"
                     for top in rec.tops]
    return _replay(net, state)


def _to_device(net):
    """Every blob and parameter current on the device, so that the capture records no upload
    (a host read of a top, for one, leaves its host copy the newer)."""
    for blob in net._blobs:
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
    state.graph.launch()
    state.replays += 1
    return 0.0
