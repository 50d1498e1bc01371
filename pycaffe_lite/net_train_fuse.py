"""BatchNorm -> Scale -> ReLU (and, on the GPU, Eltwise SUM -> ReLU) run as one forward and
one backward; Convolution -> ReLU as one forward.

ResNet's blocks compute ``conv -> BatchNorm -> Scale -> ReLU`` all on the convolution's top,
in place. Layer by layer that is some ten passes over the blob forward and as many backward
(the statistics, the normalised copy, the scale's saved input, the ReLU's mask); the compiled
kernels of :mod:`pycaffe_lite.ops.cpu` (``bn_train_forward``, ``bn_train_backward``) do the
forward in three passes and the backward in two, per channel, on the kernel threads.

A chain is a BatchNorm layer (Caffe's own: no NVCaffe or Intel Caffe scale, bias or ReLU of
its own; a bottom with a channel axis), in place or not, then optionally, in the next layers
and in place on BatchNorm's top, a Scale with one bottom and a per-channel scale (``axis:
1``, with or without bias), then optionally a ReLU with ``negative_slope: 0``. No layer of it
has a loss weight. Both batch statistics (training) and global statistics (a fixed affine
map) are taken.

What a user sees stays Caffe's: ``net.layers``, ``net.params`` and ``net.blobs`` are not
changed; after a forward BatchNorm's top holds the ReLU's output, BatchNorm's three
statistics blobs are updated with Caffe's moving average, and each layer keeps what its own
backward needs (so any backward may run layer by layer after a fused forward); after a
backward BatchNorm's bottom diff is its gradient, its top's diff (not in place) the Scale's
bottom gradient, and the Scale's parameter diffs have the gradient added (they accumulate,
for ``iter_size`` > 1). Values are the layers' to float rounding: the per-channel sums are
taken in double, in another order than NumPy's.

Convolution -> ReLU chains: a Convolution and the ReLU in place on its top right after it
(VGG's, GoogLeNet's and AlexNet's layers): the forward is the convolution's with the ReLU in its
output pass (the pass that adds the bias), one pass less over the top; the backward is the
layers' own. On every device: on host arrays the values are the layers' bit for bit.

Eltwise SUM chains: an Eltwise SUM (distinct bottoms, its top none of them) and the ReLU in
place on its top that follows it, if one does. On device arrays their forward is one pass (the
weighted sum and the ReLU) and their backward one pass (the ReLU's gradient left in the top's
diff, as the in-place ReLU leaves it, and each bottom's diff ``coeff * dz``); on host arrays the
layers run on their own.

In GPU mode both kinds run :mod:`pycaffe_lite.ops.train_fused`: the CUDA kernels of
:mod:`pycaffe_lite.ops.gpu.fused` on CuPy arrays (BatchNorm -> Scale -> ReLU in three launches
forward and three backward with batch statistics), the same math as generic array code on a
simulated device or with the kernels off. Neither reads a device value on the host, so a step
stays capturable in a CUDA graph; the per-channel sums are taken in double in a fixed order.

NVCaffe float16 nets (:mod:`net_types`) are fused too. A chain's layers store one type (a
layer in place on a blob takes the blob's type; a member that read a converted copy would end
the chain); the Scale's params are then of that type and BatchNorm's statistics float32, which
:mod:`pycaffe_lite.ops.train_fused` takes as they are. The net's own hooks (the conversions at
type boundaries and the loss scaling, see :func:`net_types.user_hooks`) run at each layer
index around the fused forward and backward as around the layers': a converted copy that
BatchNorm or an Eltwise reads is written before the fused forward (which runs at the first
layer's index), and its gradient converted back after the fused backward (which runs at the
last layer's index, so before the first layer's ``after_backward``).

Layers run on their own: with ``debug_info``, with a hook of one's own registered on the net,
for a forward or backward whose first or last layer lies inside a chain (``start=``/``end=``),
without the compiled kernels on host arrays, in a TEST net that is folded (:mod:`net_fold`),
and everywhere when the environment variable ``PYCAFFE_LITE_TRAIN_FUSE`` is 0/false/no/off
when the net is built. The backward is fused where every layer of the chain computes its
bottom's gradient (the usual case); otherwise only the forward is.
"""


import numpy as np

from . import net_types
from .backend import get_array_module
from .ops import cpu as cpu_kernels
from .ops import train_fused
from .proto import caffe_pb2
from .switches import switch

ENV_VAR = "PYCAFFE_LITE_TRAIN_FUSE"


def enabled_by_default():
    """False when the environment variable ``PYCAFFE_LITE_TRAIN_FUSE`` is 0/false/no/off."""
    return switch(ENV_VAR)


def _skip_forward(bottom, top):
    return 0.0


def _skip_backward(top, propagate_down, bottom):
    return None


class Chain:
    """One fused chain: its layer indices (BatchNorm first) and the buffer of the normalised
    values its forward keeps for the backward."""

    def __init__(self, net, indices):
        self.indices = indices
        self.records = [net.records[i] for i in indices]
        layers = [rec.layer for rec in self.records]
        self.bn = layers[0]
        self.scale = next((layer for layer in layers if layer.type == "Scale"), None)
        self.relu = any(layer.type == "ReLU" for layer in layers)
        # BatchNorm's bottom and top: the same blob, or BatchNorm writes a new one that the
        # Scale and ReLU then compute in place
        self.bottom, self.top = self.records[0].bottoms[0], self.records[0].tops[0]
        self.xnorm = None
        self.work = train_fused.Workspace()  # the device path's buffers
        # The fused backward computes every bottom diff of the chain: it runs where Caffe's
        # layers would all compute theirs.
        self.backward_fused = all(rec.need_backward and rec.bottom_need_backward[0]
                                  for rec in self.records)

    def _affine(self):
        scale = self.scale
        if scale is None:
            return None, None
        gamma = scale.blobs[0].read_data()
        beta = None if scale.bias_index is None else scale.blobs[scale.bias_index].read_data()
        return gamma, beta

    def _by_layer_forward(self):
        return sum(rec.layer.Forward(rec.bottoms, rec.tops) for rec in self.records)

    def forward(self, bottom, top):
        """The whole chain's forward (called in place of BatchNorm's)."""
        for rec in self.records:
            rec.layer.reshape(rec.bottoms, rec.tops)
        bn = self.bn
        x = self.bottom.read_data()
        gamma, beta = self._affine()
        if x.size and not isinstance(x, np.ndarray):
            return self._forward_device(x, gamma, beta)
        if x.size == 0 or not cpu_kernels.supported(x, gamma, beta):
            return self._by_layer_forward()
        shape = (bn.num, bn.channels, bn.spatial)
        if self.xnorm is None or self.xnorm.shape != shape or self.xnorm.dtype != x.dtype:
            self.xnorm = np.empty(shape, x.dtype)
        if bn.use_global_stats:
            mean, var = (np.ascontiguousarray(a, x.dtype) for a in bn.global_stats())
        else:
            mean, var = np.empty(bn.channels, x.dtype), np.empty(bn.channels, x.dtype)
        std = np.empty(bn.channels, x.dtype)
        y = self.top.write_data()
        cpu_kernels.bn_train_forward(x.reshape(shape), y.reshape(shape), self.xnorm, mean, var,
                                     std, gamma, beta, bn.eps, bn.use_global_stats, self.relu)
        if not bn.use_global_stats:
            bn.update_running(mean, var)
        # what each layer's own backward reads
        bn.x_norm, bn.std = self.xnorm, std
        if self.scale is not None:
            self.scale._temp = self.xnorm.reshape(x.shape)
        return 0.0

    def _forward_device(self, x, gamma, beta):
        """GPU mode: :func:`ops.train_fused.bn_forward` (CUDA kernels, or the generic code)."""
        bn = self.bn
        shape = (bn.num, bn.channels, bn.spatial)
        xhat = self.work.get("xhat", x, shape)
        y = self.top.write_data().reshape(shape)
        running = [b.read_data() if bn.use_global_stats else b.write_data()
                   for b in bn.blobs[:3]]
        std = train_fused.bn_forward(x.reshape(shape), y, xhat, gamma, beta, running,
                                     bn.use_global_stats, bn.eps, bn.moving_average_fraction,
                                     self.relu, self.work)
        bn.x_norm, bn.std = xhat, std
        if self.scale is not None:
            self.scale._temp = xhat.reshape(x.shape)
        return 0.0

    def _by_layer_backward(self):
        for rec in reversed(self.records):
            if rec.need_backward:
                rec.layer.Backward(rec.tops, rec.bottom_need_backward, rec.bottoms)

    def backward(self, top, propagate_down, bottom):
        """The whole chain's backward (called in place of its last layer's)."""
        if not all(rec.need_backward and rec.bottom_need_backward[0] for rec in self.records):
            return self._by_layer_backward()  # changed since the net was built
        bn, scale = self.bn, self.scale
        gamma, _ = self._affine()
        dgamma = dbeta = None
        if scale is not None and scale.param_propagate_down[0]:
            dgamma = scale.blobs[0].write_diff()
        if scale is not None and scale.bias_index is not None and \
                scale.param_propagate_down[scale.bias_index]:
            dbeta = scale.blobs[scale.bias_index].write_diff()
        dy, y = self.top.read_diff(), self.top.read_data()
        xnorm, std = getattr(bn, "x_norm", None), getattr(bn, "std", None)
        shape = (bn.num, bn.channels, bn.spatial)
        on_host = isinstance(dy, np.ndarray)
        if dy.size == 0 or xnorm is None or xnorm.shape != shape or \
                get_array_module(xnorm) is not get_array_module(dy) or \
                (on_host and not cpu_kernels.supported(dy, y, xnorm, std, gamma, dgamma,
                                                       dbeta)):
            return self._by_layer_backward()
        # Not in place, the top's diff is left as the Scale's (or the ReLU's) backward leaves
        # it in place: dz * gamma (dz)
        keep = self.top is not self.bottom and len(self.records) > 1
        if keep:
            dy = self.top.write_diff()
        dx = self.bottom.write_diff()
        if not on_host:
            return train_fused.bn_backward(dy.reshape(shape), y.reshape(shape), xnorm, std,
                                           gamma, dgamma, dbeta, dx.reshape(shape),
                                           dy.reshape(shape) if keep else None,
                                           bn.use_global_stats, self.relu, self.work)
        cpu_kernels.bn_train_backward(dy.reshape(shape), xnorm, y.reshape(shape), std, gamma,
                                      dgamma, dbeta, dx.reshape(shape), bn.use_global_stats,
                                      self.relu, keep)


class SumChain:
    """An Eltwise SUM and the ReLU in place on its top, if one follows: one forward and one
    backward on device arrays (the layers' own on host arrays)."""

    def __init__(self, net, indices):
        self.indices = indices
        self.records = [net.records[i] for i in indices]
        self.eltwise = self.records[0].layer
        self.relu = len(indices) > 1
        self.backward_fused = self._fusable()

    def _fusable(self):
        recs = self.records
        return all(rec.need_backward for rec in recs) and \
            (not self.relu or recs[1].bottom_need_backward[0])

    def forward(self, bottom, top):
        rec = self.records[0]
        xs = [b.read_data() for b in rec.bottoms]
        if xs[0].size == 0 or isinstance(xs[0], np.ndarray):
            return sum(r.layer.Forward(r.bottoms, r.tops) for r in self.records)
        for r in self.records:
            r.layer.reshape(r.bottoms, r.tops)
        train_fused.sum_forward(xs, self.eltwise.coeffs, rec.tops[0].write_data(), self.relu)
        return 0.0

    def backward(self, top, propagate_down, bottom):
        rec = self.records[0]
        y = rec.tops[0].read_data()
        if not self._fusable() or y.size == 0 or isinstance(y, np.ndarray):
            for r in reversed(self.records):
                if r.need_backward:
                    r.layer.Backward(r.tops, r.bottom_need_backward, r.bottoms)
            return
        # the in-place ReLU's backward leaves its gradient in the top's diff
        dy = rec.tops[0].write_diff() if self.relu else rec.tops[0].read_diff()
        dxs = [b.write_diff() if need else None
               for b, need in zip(rec.bottoms, rec.bottom_need_backward)]
        train_fused.sum_backward(dy, y, self.eltwise.coeffs, dxs, self.relu)


class ConvChain:
    """A Convolution and the ReLU in place on its top that follows it: one forward, the ReLU
    applied in the convolution's output pass (with its bias: cuDNN's fused graph or its bias
    pass on the GPU, the compiled bias pass on the CPU), as a folded TEST net runs it. The
    backward is the layers' own (the ReLU's reads the top, which holds the same values)."""

    backward_fused = False

    def __init__(self, net, indices):
        self.indices = indices
        self.records = [net.records[i] for i in indices]

    def forward(self, bottom, top):
        conv, relu = self.records
        conv.layer.reshape(conv.bottoms, conv.tops)
        relu.layer.reshape(relu.bottoms, relu.tops)
        conv.layer.forward(conv.bottoms, conv.tops, relu=True)
        return 0.0


class TrainFusion:
    """The chains of a net (``net._train_fuse``: ``chains`` BatchNorm's, ``sums`` Eltwise's,
    ``convs`` Convolution -> ReLU) and the forwards and backwards that replace their
    layers'."""

    def __init__(self, chains, sums=(), convs=()):
        self.chains, self.sums, self.convs = chains, list(sums), list(convs)
        self.forward_map, self.backward_map, self.inside = {}, {}, {}
        for chain in list(chains) + self.sums + self.convs:
            first, last = chain.indices[0], chain.indices[-1]
            for i in chain.indices:
                self.inside[i] = (first, last)
                self.forward_map[i] = _skip_forward
                if chain.backward_fused:
                    self.backward_map[i] = _skip_backward
            self.forward_map[first] = chain.forward
            if chain.backward_fused:
                self.backward_map[last] = chain.backward

    def cuts(self, lo, hi):
        """Whether the layers ``lo`` .. ``hi`` hold part of a chain but not all of it."""
        first = self.inside.get(lo)
        last = self.inside.get(hi)
        return bool((first and first[0] != lo) or (last and last[1] != hi))


def _plain(rec, blob_id):
    """One bottom and one top, both ``blob_id`` (in place: the layer reads the blob itself,
    not a copy converted to another type), and no loss weight."""
    return rec.bottom_ids == [blob_id] and rec.top_ids == [blob_id] and \
        rec.bottoms[0] is rec.tops[0] and not rec.layer.loss(0)


def _starts_chain(rec):
    layer = rec.layer
    if layer.type != "BatchNorm" or len(rec.bottom_ids) != 1 or len(rec.top_ids) != 1 or \
            "Forward" in vars(layer):  # another engine replaced it (net_int8_bn's fold)
        return False
    sub_batches = layer.layer_param.batch_norm_param.stats_batch_size and \
        not layer.use_global_stats  # Intel Caffe's statistics per sub-batch: by layer
    return (not layer.loss(0) and rec.bottoms[0].num_axes >= 2 and not sub_batches
            and not (layer.affine_blobs or layer.relu or layer.scale_bias))


def _links(rec, blob_id, channels):
    layer = rec.layer
    if not _plain(rec, blob_id) or "Forward" in vars(layer):
        return False
    if layer.type == "Scale":
        p = layer.layer_param.scale_param
        return (len(layer.blobs) >= 1 and layer.blobs[0].shape == (channels,)
                and (layer.bias_index is None
                     or layer.blobs[layer.bias_index].shape == (channels,))
                and rec.bottoms[0].canonical_axis_index(p.axis) == 1)
    return layer.type == "ReLU" and layer.negative_slope == 0


def find_chains(net):
    """The chains of ``net``, in layer order (lists of layer indices)."""
    found, records, i = [], net.records, 0
    while i < len(records):
        if not _starts_chain(records[i]):
            i += 1
            continue
        blob_id, channels = records[i].top_ids[0], records[i].layer.channels
        indices, wanted = [i], ["Scale", "ReLU"]
        j = i + 1
        while j < len(records) and records[j].layer.type in wanted and \
                _links(records[j], blob_id, channels):
            wanted = wanted[wanted.index(records[j].layer.type) + 1:]
            indices.append(j)
            j += 1
        found.append(indices)
        i = j
    return found


def find_sums(net):
    """The Eltwise SUM chains of ``net``: an Eltwise SUM (distinct bottoms, its top none of
    them, no loss weight), with the ReLU (``negative_slope: 0``) in place on its top that
    follows it, if one does; none whose ``Forward`` another engine replaced (:mod:`net_int8`'s
    fused sums)."""
    found, records = [], net.records
    for i, rec in enumerate(records):
        layer = rec.layer
        if layer.type != "Eltwise" or layer.op != caffe_pb2.EltwiseParameter.SUM or \
                "Forward" in vars(layer) or \
                len(rec.top_ids) != 1 or rec.top_ids[0] in rec.bottom_ids or \
                len(set(rec.bottom_ids)) != len(rec.bottom_ids) or layer.loss(0):
            continue
        indices = [i]
        if i + 1 < len(records) and records[i + 1].layer.type == "ReLU" and \
                "Forward" not in vars(records[i + 1].layer) and \
                _links(records[i + 1], rec.top_ids[0], None):
            indices.append(i + 1)
        found.append(indices)
    return found


def _forward_takes_relu(layer):
    """Whether ``layer``'s ``forward`` is one that takes ``relu=True`` (its class says so with
    ``takes_relu``; a subclass with a forward of its own does not inherit the promise)."""
    for cls in type(layer).__mro__:
        if "forward" in vars(cls):
            return bool(vars(cls).get("takes_relu", False))
    return False


def find_conv_relus(net):
    """The Convolution -> ReLU chains of ``net``: a Convolution (one bottom, one top, no loss
    weight; a layer class whose forward takes ``relu=True``, its ``Forward`` not replaced by
    an engine of its own, as :mod:`net_int8`'s) and the ReLU (``negative_slope: 0``) in place
    on its top right after it."""
    found, records = [], net.records
    for i, rec in enumerate(records[:-1]):
        layer = rec.layer
        if layer.type != "Convolution" or not _forward_takes_relu(layer) or \
                "Forward" in vars(layer) or len(rec.bottom_ids) != 1 or \
                len(rec.top_ids) != 1 or layer.loss(0):
            continue
        nxt = records[i + 1]
        if nxt.layer.type == "ReLU" and _links(nxt, rec.top_ids[0], None):
            found.append([i, i + 1])
    return found


def attach(net, enabled=None):
    """Find ``net``'s chains and keep them on it (``net._train_fuse``; None without any, or
    with fusion off)."""
    net._train_fuse = None
    if not (enabled_by_default() if enabled is None else enabled):
        return
    chains = [Chain(net, indices) for indices in find_chains(net)]
    sums = [SumChain(net, indices) for indices in find_sums(net)]
    convs = [ConvChain(net, indices) for indices in find_conv_relus(net)]
    if chains or sums or convs:
        net._train_fuse = TrainFusion(chains, sums, convs)


def _active(net):
    """The net's chains, unless ``debug_info`` or a hook of one's own keeps the layers on
    their own (the net's type conversions and loss scaling are not one's own: they run around
    the fused layers as around the layers themselves)."""
    fusion = getattr(net, "_train_fuse", None)
    if fusion is None or net.debug_info or net_types.user_hooks(net):
        return None
    return fusion


def forwards(net, start, end):
    """{layer index: forward} replacing the layers' own for a forward of ``start`` .. ``end``
    (empty where the layers run on their own)."""
    fusion = _active(net)
    if fusion is None or fusion.cuts(start, end):
        return {}
    return fusion.forward_map


def backwards(net, start, end):
    """{layer index: backward} for a backward from ``start`` down to ``end``."""
    fusion = _active(net)
    if fusion is None or fusion.cuts(end, start):
        return {}
    return fusion.backward_map
