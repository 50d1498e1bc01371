"""Inference-time folding of a TEST net built with weights.

When a TEST-phase :class:`~pycaffe_lite.net.Net` is built with weights
(``Net(prototxt, weights, TEST)``), a Convolution (or ConvolutionDepthwise,
DepthwiseConvolution) or InnerProduct layer followed directly by

    [BatchNorm (global statistics)] [Scale (one bottom, per channel, with or without bias)]
    [ReLU (negative_slope 0)]

runs as one layer: BatchNorm's ``(x - mean) / sqrt(var + eps)`` and Scale's ``gamma x + beta``
are per-channel affine maps, so they fold into the producer's weights and bias
(``W' = a W``, ``b' = a b + c`` with ``a`` and ``c`` per output channel), and the ReLU runs on
the producer's output as soon as it is written. The absorbed layers do nothing at run time.

What the user sees (the rule, also in the README):

- ``net.layers``, ``net.layer_names``, ``net.params`` are Caffe's: every layer, with its
  original (unfolded) blobs. The folded copies are private to the rewrite.
- ``net.blobs`` holds, after ``forward()``, what Caffe would show (to float rounding) for every
  blob, and lists every blob. By default only links computed in place are folded (ResNet's
  ``conv -> bn -> scale -> relu`` all on one blob, CaffeNet's in-place ReLUs): Caffe too shows
  only the last value there. ``keep_intermediates=False`` also folds chains that are not in
  place (``conv1 -> bn1 -> scale1``); their intermediate blobs are then not computed, take no
  memory and leave ``net.blobs`` (reading one raises :class:`FoldedBlobError`).
- ``forward(start=..., end=...)`` that starts or ends inside a folded chain runs every layer
  of that call on its own, so the blobs hold Caffe's values at that point.
- Weight safety: the blobs that were folded (the producer's weights and bias, BatchNorm's
  statistics, Scale's blobs) are read-only on the host, and ``blob.data`` gives them as a
  :class:`~pycaffe_lite.frozen.FrozenArray`: net surgery through it (``data[...] = w``, in-place
  operators, ``.flat``) first unfolds the net (one warning), so the edit is used, as on Caffe's
  nets, and no folded copy goes stale; ``net.unfold()`` does the same by hand, ``net.fold()``
  folds the current values. ``copy_from`` and
  ``load_hdf5`` on a folded net unfold, load and fold again; ``share_with`` unfolds for good.
- Layers outside the chains that offer an ``inference_forward`` run it (MAX pooling without
  recording its window choices, which only a backward reads).
- Nothing is folded in a TRAIN net, in a net with ``force_backward``, or where any layer of the
  chain needs backward, has a loss weight or a second top; nor when the intermediate value is read
  by any other layer; nor in a net whose convolutions run in int8 (Intel Caffe's
  ``quantization_param``, :mod:`net_int8`). ``Net(..., fold=False)`` or the environment
  variable ``PYCAFFE_LITE_FOLD=0`` turns folding off.
"""

import collections
import contextlib
import functools
import logging
import weakref

import numpy as np

from . import backend, net_blocked
from .errors import NetError
from .layers import create_layer
from .net_train_fuse import find_sums
from .ops import train_fused
from .ops.relu import bias_relu
from .proto import caffe_pb2
from .switches import switch

log = logging.getLogger("pycaffe_lite")

ENV_VAR = "PYCAFFE_LITE_FOLD"
PRODUCERS = ("Convolution", "ConvolutionDepthwise", "DepthwiseConvolution", "InnerProduct")
_ORDER = {"BatchNorm": 0, "Scale": 1, "ReLU": 2}


def enabled_by_default():
    """False when the environment variable ``PYCAFFE_LITE_FOLD`` is 0/false/no/off."""
    return switch(ENV_VAR)


class FoldedBlobError(NetError, KeyError):
    """A blob that folding did not compute (a NetError and a KeyError, so ``in`` and ``get``
    behave as for any absent blob)."""

    __str__ = NetError.__str__


class BlobDict(collections.OrderedDict):
    """``net.blobs``: names the folded-away blobs when one of them is asked for."""

    def __init__(self, items=(), folded=None):
        super().__init__(items)
        self.folded = dict(folded or {})

    def __missing__(self, name):
        holder = self.folded.get(name)
        if holder is None:
            raise KeyError(name)
        raise FoldedBlobError(
            "blob '%s' is an intermediate of the chain folded into layer '%s' at inference and "
            "is not computed; build the net with keep_intermediates=True (the default) or "
            "fold=False, or "
            "call net.unfold()" % (name, holder))


class Chain:
    """A producer (layer index) and the layers folded into it."""

    def __init__(self, producer, absorbed, net):
        self.producer = producer
        self.absorbed = absorbed
        self.types = [net.records[i].layer.type for i in absorbed]
        self.relu = "ReLU" in self.types
        self.affine = any(t != "ReLU" for t in self.types)
        last = absorbed[-1]
        self.final = net.records[last].tops[0]
        self.intermediates = sorted(
            {net._blob_names[t] for i in [producer] + absorbed[:-1] for t in net.records[i].top_ids}
            - {net._blob_names[net.records[last].top_ids[0]]})
        self.fused = None  # the producer with folded blobs (when BatchNorm/Scale fold)
        self.frozen = []   # the blobs made read-only


class Folding:
    """The state of a folded net (``net.folding``)."""

    def __init__(self, chains, keep_intermediates):
        self.chains = chains
        self.keep_intermediates = keep_intermediates
        self.blocked = None  # the channel-blocked steps (net_blocked.Plan), when they run
        self.inside = {}  # layer index -> (chain, position): 0 producer, k absorbed
        for c in chains:
            self.inside[c.producer] = (c, 0)
            for k, i in enumerate(c.absorbed, 1):
                self.inside[i] = (c, k)

    def cuts(self, start, end):
        """Whether a forward from ``start`` to ``end`` (layer indices) begins or ends inside a
        chain (such a forward runs every layer on its own, as Caffe would)."""
        first, last = self.inside.get(start), self.inside.get(end)
        return bool((first and first[1] > 0) or (last and last[1] < len(last[0].absorbed)))


@contextlib.contextmanager
def unfused(net):
    """Run the body with every layer on its own (the folded copies are not used)."""
    fused, net._fused = net._fused, {}
    try:
        yield
    finally:
        net._fused = fused


# ---- finding the chains ------------------------------------------------------------------
def _readers(net, blob_id, after):
    """The layers after index ``after`` that read the value blob ``blob_id`` holds then (up to
    and including the first one that overwrites it in place)."""
    found = []
    for i in range(after + 1, len(net.records)):
        rec = net.records[i]
        if blob_id in rec.bottom_ids:
            found.append(i)
            if blob_id in rec.top_ids:
                break
        elif blob_id in rec.top_ids:
            break
    return found


def _plain(net, i):
    """A layer that may take part in a chain: one bottom, one top, no backward, no loss."""
    rec = net.records[i]
    return (len(rec.bottom_ids) == 1 and len(rec.top_ids) == 1
            and not rec.need_backward and not rec.layer.loss(0))


def _foldable(net, i, channels):
    layer = net.records[i].layer
    if layer.type == "BatchNorm":
        return layer.use_global_stats and layer.channels == channels and not layer.relu
    if layer.type == "Scale":
        p = layer.layer_param.scale_param
        return (len(layer.blobs) >= 1 and layer.blobs[0].shape == (channels,)
                and net.records[i].bottoms[0].canonical_axis_index(p.axis) == 1)
    if layer.type == "ReLU":
        return layer.negative_slope == 0
    return False


def _producer_channels(net, i):
    """The output channels of a producer whose channel axis is 1, else None."""
    layer = net.records[i].layer
    if layer.type not in PRODUCERS or not _plain(net, i):
        return None
    top = net.records[i].tops[0]
    if layer.type == "InnerProduct":
        return layer.num_output if top.num_axes == 2 else None
    return layer.num_output if layer.channel_axis == 1 else None


def find_chains(net, keep_intermediates=True):
    chains = []
    for i in range(len(net.records)):
        channels = _producer_channels(net, i)
        if channels is None:
            continue
        absorbed, stage, last = [], 0, i
        while True:
            cur = net.records[last].top_ids[0]
            readers = _readers(net, cur, last)
            if len(readers) != 1:
                break
            j = readers[0]
            kind = _ORDER.get(net.records[j].layer.type)
            if kind is None or kind < stage or not _plain(net, j) or \
                    not _foldable(net, j, channels):
                break
            in_place = net.records[j].top_ids[0] == cur
            if keep_intermediates and not in_place:
                break
            absorbed.append(j)
            stage, last = kind + 1, j
            if kind == _ORDER["ReLU"]:
                break
        if absorbed:
            chains.append(Chain(i, absorbed, net))
    return chains


# ---- the folded weights ------------------------------------------------------------------
def _affine(net, chain):
    """Per-channel ``a``, ``c`` (float64) with ``chain(x) = a * x + c`` before the ReLU."""
    channels = _producer_channels(net, chain.producer)
    a, c = np.ones(channels), np.zeros(channels)
    for i in chain.absorbed:
        layer = net.records[i].layer
        if layer.type == "BatchNorm":
            s = float(layer.blobs[2].cpu_data()[0])
            factor = 0.0 if s == 0 else 1.0 / s
            mean = layer.blobs[0].cpu_data().astype(np.float64) * factor
            var = layer.blobs[1].cpu_data().astype(np.float64) * factor
            inv = 1.0 / np.sqrt(var + layer.eps)
            a, c = a * inv, (c - mean) * inv
            if layer.affine_blobs:  # NVCaffe's or Intel Caffe's scale (and bias) blobs
                gamma = layer.blobs[3].cpu_data().astype(np.float64)
                a, c = a * gamma, c * gamma
            if layer.affine_blobs > 1:
                c = c + layer.blobs[4].cpu_data().astype(np.float64)
        elif layer.type == "Scale":
            gamma = layer.blobs[0].cpu_data().astype(np.float64)
            a, c = a * gamma, c * gamma
            if layer.bias_index is not None:
                c = c + layer.blobs[layer.bias_index].cpu_data().astype(np.float64)
    return a, c


def _fused_layer(net, chain):
    """A copy of the producer with its weights and bias folded."""
    producer = net.records[chain.producer].layer
    a, c = _affine(net, chain)
    w = producer.blobs[0].cpu_data().astype(np.float64)
    if producer.type == "InnerProduct" and producer.transpose:
        w = w * a[None, :]
    else:
        w = w * a.reshape((-1,) + (1,) * (w.ndim - 1))
    b = c.copy()
    if producer.bias_term:
        b += a * producer.blobs[1].cpu_data().astype(np.float64)
    lp = caffe_pb2.LayerParameter()
    lp.CopyFrom(producer.layer_param)
    del lp.blobs[:]
    del lp.param[:]
    if lp.type == "InnerProduct":
        lp.inner_product_param.bias_term = True
    else:
        lp.convolution_param.bias_term = True
    fused = create_layer(lp, dtype=net.dtype)
    fused.blobs.add_blob(*w.shape).data[...] = w
    fused.blobs.add_blob(*b.shape).data[...] = b
    fused.SetUp(net.records[chain.producer].bottoms, [chain.final])
    for pid in range(len(fused.blobs)):
        fused.set_param_propagate_down(pid, False)
    return fused


def _set_writable(blobs, writable, net=None):
    """Make the folded ``blobs`` read-only on the host, their first write through
    ``blob.data`` unfolding ``net`` (see :mod:`pycaffe_lite.frozen`); or writable again."""
    hook = None if writable else functools.partial(_written, weakref.ref(net))
    for blob in blobs:
        blob._data.cpu().flags.writeable = writable
        blob.on_write = hook


def _written(net_ref, blob):
    """A folded blob is written (net surgery, as on Caffe's nets): the net runs every layer
    on its own from now on, with the new values."""
    net = net_ref()
    if net is None or net.folding is None:
        blob.on_write = None
        blob._data.cpu().flags.writeable = True
        return
    owner = next(("'%s' param %d" % (rec.name, k) for rec in net.records
                  for k, b in enumerate(rec.layer.blobs) if b is blob), "a param")
    log.warning("Net '%s': %s is written while the net is folded for inference; it runs "
                "layer by layer from now on (net.fold() folds the new values)", net.name, owner)
    unfold(net)


def _relu_after(forward):
    def run(bottom, top):
        loss = forward(bottom, top)
        for t in top:
            y = t.write_data()
            bias_relu(y, y)
        return loss
    return run


def _with_relu(layer):
    """A convolution's Forward with the ReLU applied in its output pass (bias and ReLU in
    one pass over the output; a chain's layers have no loss weight)."""
    def run(bottom, top):
        layer.reshape(bottom, top)
        layer.forward(bottom, top, relu=True)
        return 0.0
    return run


def _skip(bottom, top):
    return 0.0


# ---- folding and unfolding ---------------------------------------------------------------
def fold(net, keep_intermediates=True):
    """Fold ``net`` (a TEST net) in place; returns the chains folded. Folding a folded net
    unfolds it first, so the current weights are used."""
    unfold(net)
    if net.phase != caffe_pb2.TEST or net.param.force_backward or getattr(net, "int8_layers", 0):
        return []  # int8 convolutions (net_int8) run on their own
    chains = find_chains(net, keep_intermediates)
    folded_names = {}
    for chain in chains:
        producer = net.records[chain.producer].layer
        final = chain.final
        if chain.affine:
            chain.fused = _fused_layer(net, chain)
            runner = chain.fused
            chain.frozen = list(producer.blobs) + [
                b for i in chain.absorbed for b in net.records[i].layer.blobs]
            _set_writable(chain.frozen, False, net)
        else:
            runner = producer
        if chain.relu and getattr(runner, "takes_relu", False):
            forward = _with_relu(runner)  # the ReLU in the convolution's output pass
        elif chain.relu:
            forward = _relu_after(runner.Forward)
        else:
            forward = runner.Forward
        net._fused[chain.producer] = (lambda fwd, out: lambda bottom, top: fwd(bottom, [out]))(
            forward, final)
        for i in chain.absorbed:
            net._fused[i] = _skip
        for name in chain.intermediates:
            folded_names[name] = producer.name
    lean = _inference_forwards(net)
    net._fused.update(lean)
    blocked = net_blocked.install(net, chains, keep_intermediates)
    if blocked is not None:
        folded_names.update(blocked.dropped)
    if folded_names:
        net.blobs = BlobDict(((n, b) for n, b in net.blobs.items() if n not in folded_names),
                             folded_names)
    # an Eltwise that a blocked convolution computes in its store stays in that pair (its
    # layers run on their own in GPU mode); a blocked Eltwise and its ReLU become a DeviceSum
    taken = {i for pair in (blocked.pairs if blocked is not None else ())
             if net.records[pair.producer].layer.type != "Eltwise"
             for i in [pair.producer] + pair.absorbed}
    sums = [DeviceSum(net, indices) for indices in find_sums(net)
            if not taken & set(indices)]
    if chains or lean or sums or blocked is not None and blocked.steps:
        net.folding = Folding(chains, keep_intermediates)
        net.folding.blocked = blocked
        for pair in (blocked.pairs if blocked is not None else []) + sums:
            for k, i in enumerate([pair.producer] + pair.absorbed):
                net.folding.inside[i] = (pair, k)
    return chains


class DeviceSum:
    """An Eltwise SUM of a folded net and the ReLU in place on its top, if one follows: in
    GPU mode one pass (:func:`ops.train_fused.sum_forward`, the weighted sum and the ReLU),
    in CPU mode what ran before (the blocked steps, or the layers)."""

    def __init__(self, net, indices):
        self.producer, self.absorbed = indices[0], indices[1:]
        self.records = [net.records[i] for i in indices]
        self.host = [net._fused.get(i, net.records[i].layer.Forward) for i in indices]
        net._fused[self.producer] = self.forward
        for k, i in enumerate(self.absorbed, 1):
            net._fused[i] = self._absorbed(self.host[k])

    @staticmethod
    def _absorbed(host):
        """The ReLU's entry: nothing in GPU mode (:meth:`forward` applied it), ``host``
        otherwise."""
        def run(bottom, top):
            return 0.0 if backend.mode() == backend.GPU else host(bottom, top)
        return run

    def forward(self, bottom, top):
        if backend.mode() != backend.GPU:
            return self.host[0](bottom, top)
        rec = self.records[0]
        xs = [b.read_data() for b in rec.bottoms]
        if xs[0].size == 0:  # the layers (the ReLU's entry does nothing in GPU mode)
            return sum(r.layer.Forward(r.bottoms, r.tops) for r in self.records)
        for r in self.records:
            r.layer.reshape(r.bottoms, r.tops)
        train_fused.sum_forward(xs, rec.layer.coeffs, rec.tops[0].write_data(),
                                bool(self.absorbed))
        return 0.0


def _inference_forwards(net):
    """{layer index: its ``inference_forward``} for the layers outside the chains that offer
    one (a forward that leaves nothing for a backward: MAX pooling without its window
    choices), have no loss weight and whose backward the net never runs."""
    return {i: rec.layer.inference_forward for i, rec in enumerate(net.records)
            if i not in net._fused and hasattr(rec.layer, "inference_forward")
            and not rec.need_backward
            and not any(rec.layer.loss(k) for k in range(len(rec.tops)))}


@contextlib.contextmanager
def refolding(net):
    """Run the body on the unfolded net, then fold it again as it was (``copy_from``)."""
    folding = net.folding
    unfold(net)
    try:
        yield
    finally:
        if folding is not None:
            fold(net, folding.keep_intermediates)


def unfold(net):
    """Undo :func:`fold`: every layer runs on its own again, the blobs are writable and every
    blob is listed in ``net.blobs``. Does nothing on a net that is not folded."""
    folding = net.folding
    if folding is None:
        return
    for chain in folding.chains:
        _set_writable(chain.frozen, True)
    net._fused.clear()
    net.folding = None
    net.blobs = collections.OrderedDict(
        (n, net._blobs[i]) for i, n in enumerate(net._blob_names) if n != "(automatic)")
