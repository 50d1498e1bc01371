"""The channel-blocked inference path of a folded TEST net on the CPU.

When a TEST net built with weights is folded (:mod:`net_fold`) and the compiled kernels offer
a blocked layout (:func:`pycaffe_lite.ops.cpu.blocked.block_size`: 16 channels per block on
AVX-512, 8 on AVX2 + FMA), its convolutions, pooling, ReLU, Eltwise and Concat layers run on
activations kept in that layout from one layer to the next: ``(N, ceil(C / B), H, W, B)``,
the B channels of a block side by side for each pixel. The convolutions run direct kernels on
weights packed once, with the folded BatchNorm/Scale, the bias and the ReLU applied as each
output is written; a Concat whose inputs are all written by such layers is never copied: the
layers write into their part of the Concat's buffer. Other layers (InnerProduct, LRN,
Softmax, ...) run as before on NCHW.

What a user sees does not change: a blob whose value lives in the blocked layout converts to
NCHW when it is read (``blob.data``, ``cpu_data``, ``net.forward()``'s outputs, any layer that
reads it), through its SyncedArray's blocked side (:mod:`syncedmem`), and once read it is
written through after each forward (an array a script keeps follows the net); writing into a blob
(``blob.data[...] = ...``) makes the blocked copy stale, and the next blocked layer converts
the new value. Weights are packed when the net is folded; a convolution whose weights were
asked for writing since (``net.params[name][0].data``) packs them again before each forward
from then on, so net surgery is always seen.

The path runs in CPU mode only (in GPU mode every step runs the layer's own forward), for
float32 nets, on 2-D convolutions the kernels take (one group; depthwise; groups of whole
blocks), MAX and AVE pooling with one top, ReLU, Eltwise, channel Concat and test-time
Dropout. It is off with
``PYCAFFE_LITE_BLOCKED=0`` (read when a net is folded) or :func:`set_enabled`.
"""


import numpy as np

from . import backend
from .ops import cpu as cpu_kernels
from .ops.cpu import blocked as kernels
from .layers.common.eltwise_layer import combine
from .ops.relu import bias_relu
from .proto import caffe_pb2
from .switches import flag as flag_value, switch

ENV_VAR = "PYCAFFE_LITE_BLOCKED"
CONVOLUTIONS = ("Convolution", "ConvolutionDepthwise", "DepthwiseConvolution")
# A convolution of at most this many input channels whose input is not already blocked (the
# first layer of a net: 3 channels) reads NCHW directly instead of padding to a block.
STEM_CHANNELS = 4
# Convolutions whose NCHW path runs Winograd's transforms with these tiles stay on NCHW: F(4x4,
# 3x3) multiplies 4x less than a direct kernel (VGG-16's wide maps), which pays for the two
# layout conversions around the layer.
WINOGRAD_STAYS = {4}
_Eltwise = caffe_pb2.EltwiseParameter
_Pool = caffe_pb2.PoolingParameter
_enabled = [None]  # None: PYCAFFE_LITE_BLOCKED decides, when a net is folded


def set_enabled(flag):
    """Run folded TEST nets built from now on in the blocked layout (True, the default where the
    kernels offer one) or not (False); None: as ``PYCAFFE_LITE_BLOCKED`` says. Returns the
    previous setting."""
    old = _enabled[0]
    _enabled[0] = flag_value(flag, "net_blocked.set_enabled", allow_none=True)
    return old


def enabled():
    """Whether nets folded now take the blocked layout where the kernels offer one."""
    if _enabled[0] is not None:
        return _enabled[0]
    return switch(ENV_VAR)


def block_size():
    """The channels per block this process would use (None: the path is off or unavailable)."""
    return kernels.block_size() if enabled() else None


class Side:
    """A blob's value in the blocked layout: ``array`` (N, Cb, H, W, B), possibly a view into a
    Concat's buffer, holding ``channels`` real channels."""

    __slots__ = ("array", "channels")

    def __init__(self, array, channels):
        self.array = array
        self.channels = channels

    def unblock(self, flat):
        """Write the value in NCHW order into the front of the flat host array ``flat``."""
        n, _, h, w, _ = self.array.shape
        out = flat[: n * self.channels * h * w].reshape(n, self.channels, h, w)
        kernels.from_blocked(self.array, self.channels, out=out)


def _where(a):
    """What a bound kernel call depends on in array ``a``: its address and layout."""
    return None if a is None else (a.__array_interface__["data"][0], a.shape, a.strides)


def _shape(blob, B):
    n, c, h, w = blob.shape
    return (n, -(-c // B), h, w, B)


def _own(side, blob, B):
    """``side`` where it can hold ``blob``'s value (its shape, its channels, contiguous), else
    a new Side for it."""
    shape = _shape(blob, B)
    if side is None or side.array.shape != shape or side.channels != blob.shape[1] or \
            not side.array.flags.c_contiguous:
        side = Side(np.empty(shape, np.float32), blob.shape[1])
    return side


# ---- the steps --------------------------------------------------------------------------
class Step:
    """One layer's forward in the blocked layout (installed in ``net._fused``); in GPU mode,
    or for blobs that are not 4-D float32, the layer's own forward runs (``ran_blocked``
    says which ran last)."""

    ran_blocked = False

    def __init__(self, plan, index, original):
        self.plan, self.index, self.original = plan, index, original
        self.layer = plan.net.records[index].layer
        self._reshaped = None

    def __call__(self, bottom, top):
        if backend.mode() != backend.CPU or any(
                b.num_axes != 4 or b.synced_data.dtype != np.float32 for b in bottom):
            self.ran_blocked = False
            return self.original(bottom, top)
        self.run(bottom, top)
        self.ran_blocked = True
        return 0.0

    def reshape(self, bottom, top, layer=None):
        """The layer's own reshape (or ``layer``'s), when a bottom's shape changed since the
        last call."""
        key = tuple(b.shape for b in bottom)
        if key != self._reshaped or any(t.count == 0 for t in top):
            (layer or self.layer).reshape(bottom, top)
            self._reshaped = key

    def input(self, blob, contiguous=False):
        """The blob's value in the blocked layout, converted from NCHW when the blocked copy
        is not current (the conversion is kept on the blob's SyncedArray); ``contiguous``: a
        C-contiguous array (a copy of a Concat buffer's part)."""
        sa, B = blob.synced_data, self.plan.B
        side = sa.blocked
        if sa.blocked_current and side.array.shape == _shape(blob, B) and \
                side.channels == blob.shape[1]:
            if contiguous and not side.array.flags.c_contiguous:
                return np.ascontiguousarray(side.array)
            return side.array
        side = _own(side, blob, B)
        kernels.to_blocked(np.ascontiguousarray(blob.cpu_data()), B, out=side.array)
        sa.blocked, sa.blocked_current = side, True  # the host copy stays current too
        return side.array

    def output(self, blob):
        """The Side to write the blob's new value into (the blob's own, reallocated when its
        shape changed; a view into a Concat's buffer for the Concat's inputs)."""
        view = self.plan.views.get(id(blob))
        if view is not None:
            return view.side(blob)
        return _own(blob.synced_data.blocked, blob, self.plan.B)

    def same_or_output(self, bottom, top):
        """The Side to write ``top`` into: ``bottom``'s own (after :meth:`input`) when the
        layer runs in place, else :meth:`output`'s."""
        if top.synced_data is bottom.synced_data:
            return bottom.synced_data.blocked
        return self.output(top)


class ConvStep(Step):
    """A convolution (with what net_fold folded into it): direct kernel, packed weights."""

    def __init__(self, plan, index, original, runner, out, relu, input_blocked):
        super().__init__(plan, index, original)
        self.runner, self.out, self.relu = runner, out, relu
        self.input_blocked = input_blocked
        self.live = False
        self.sum = None  # (Eltwise layer, its bottoms, its top, the other bottom): see below
        self._call = (None, None)  # (what it was bound to, the bound kernel call)
        self.pack()

    def _sources(self):
        blobs = self.runner.blobs
        return [blobs[k].synced_data for k in range(len(blobs))]

    def pack(self):
        r = self.runner
        bias = r.blobs[1].cpu_data() if r.bias_term else None
        self.packed = kernels.pack_conv(r.blobs[0].cpu_data(), bias, r.group, self.plan.B,
                                        input_blocked=self.input_blocked)
        self.versions = [(sa, sa.version) for sa in self._sources()]

    def run(self, bottom, top):
        r = self.runner
        if self.live or any(sa is not s or sa.version != v
                            for (sa, v), s in zip(self.versions, self._sources())):
            self.pack()  # written since packing (net surgery): pack before every forward now
            self.live = True
        self.reshape(bottom, [self.out], r)
        if self.input_blocked:
            x = self.input(bottom[0], contiguous=True)
        else:
            x = np.ascontiguousarray(bottom[0].cpu_data())
        if self.sum is None:
            out, residual = self.out, None
        else:  # the residual Eltwise SUM (and its ReLU) in the store: its top gets conv + other
            layer, sum_bottom, out, other = self.sum
            if out.shape[:1] + out.shape[2:] != self.out.shape[:1] + self.out.shape[2:]:
                layer.reshape(sum_bottom, [out])
            residual = self.input(other, contiguous=True)
        side = self.output(out)
        key = (self.packed, _where(x), _where(side.array), _where(residual))
        if key != self._call[0]:
            self._call = (key, kernels.conv_call(self.packed, x, side.array, tuple(r.pad),
                                                 tuple(r.stride), tuple(r.dilation),
                                                 self.relu, residual))
        self._call[1]()
        out.synced_data.blocked_written(side)


class PoolStep(Step):
    _call = (None, None)

    def run(self, bottom, top):
        self.reshape(bottom, top)
        layer = self.layer
        x = self.input(bottom[0], contiguous=True)
        side = self.output(top[0])
        key = (_where(x), _where(side.array), tuple(layer.kernel))
        if key != self._call[0]:
            self._call = (key, kernels.pool_call(
                x, side.array, "max" if layer.pool == _Pool.MAX else "ave",
                tuple(layer.kernel), tuple(layer.pad), tuple(layer.stride)))
        self._call[1]()
        top[0].synced_data.blocked_written(side)


class ReluStep(Step):
    def run(self, bottom, top):
        self.reshape(bottom, top)
        x, side = self.input(bottom[0]), self.same_or_output(bottom[0], top[0])
        slope = self.layer.negative_slope
        if slope == 0:
            bias_relu(x, side.array)
        else:
            side.array[...] = np.where(x > 0, x, x * np.float32(slope))
        top[0].synced_data.blocked_written(side)


class DropoutStep(Step):
    """Dropout at test time: the identity, or a multiplication by ``1 - dropout_ratio`` where
    ``scale_train`` is false."""

    def run(self, bottom, top):
        self.reshape(bottom, top)
        x, side = self.input(bottom[0]), self.same_or_output(bottom[0], top[0])
        if not self.layer.scale_train:
            np.multiply(x, np.float32(1.0 - self.layer.ratio), out=side.array)
        elif side.array is not x:
            side.array[...] = x
        top[0].synced_data.blocked_written(side)


class EltwiseStep(Step):
    """Eltwise on the blocked arrays, in the layer's order of operations; ``relu``: the ReLU
    that follows in place, applied here (its own step then does nothing)."""

    relu = False

    def run(self, bottom, top):
        self.reshape(bottom, top)
        layer = self.layer
        xs = [self.input(b) for b in bottom]
        side = self.output(top[0])
        y = side.array
        if any(np.shares_memory(y, x) for x in xs):
            y = np.empty_like(y)
        c = layer.coeffs
        if layer.op == _Eltwise.SUM and len(xs) == 2 and c[0] == 1 and c[1] == 1 and \
                cpu_kernels.supported(xs[0], xs[1], y):
            cpu_kernels.add_relu(xs[0], xs[1], y, self.relu)
        else:
            combine(layer.op, c, xs, y, np)
            if self.relu:
                bias_relu(y, y)
        if y is not side.array:
            side.array[...] = y
        top[0].synced_data.blocked_written(side)


class Absorbed:
    """Layers whose work another step does (a ReLU after an Eltwise; an Eltwise in a
    convolution's store); ``absorbed``: their indices, as net_fold's chains list theirs, so
    that a forward that stops between them runs every layer on its own. ``step`` is the step
    that does their work when it runs blocked; when it ran its layer's own forward instead
    (GPU mode; blobs that are not 4-D float32), each of ``originals`` (layer index -> its
    forward) runs in its layer's place: :meth:`forward` is that place's entry."""

    def __init__(self, producer, absorbed, step, originals):
        self.producer, self.absorbed = producer, list(absorbed)
        self.step, self.originals = step, dict(originals)

    def forward(self, index):
        """The forward of absorbed layer ``index`` (for ``net._fused``)."""
        original = self.originals[index]

        def run(bottom, top):
            if self.step.ran_blocked:
                return 0.0
            return original(bottom, top)
        return run


class ConcatBuffer:
    """A channel Concat's blocked buffer, whose parts its inputs' layers write."""

    def __init__(self, plan, channels, offsets):
        self.plan, self.channels, self.offsets = plan, channels, offsets  # offsets: blob id -> cb0
        self.whole = None
        self.parts = {}

    def ensure(self, n, h, w):
        B = self.plan.B
        shape = (n, -(-self.channels // B), h, w, B)
        if self.whole is None or self.whole.array.shape != shape:
            self.whole = Side(np.empty(shape, np.float32), self.channels)
            self.parts = {}
        return self.whole

    def side(self, blob):
        """The view Side of input ``blob`` (allocating the buffer for its shape)."""
        n, c, h, w = blob.shape
        whole = self.ensure(n, h, w)
        part = self.parts.get(id(blob))
        if part is None or part.channels != c:
            cb0 = self.offsets[id(blob)]
            part = Side(whole.array[:, cb0: cb0 + c // self.plan.B], c)
            self.parts[id(blob)] = part
        return part


class ConcatStep(Step):
    def __init__(self, plan, index, original, buffer, inputs):
        super().__init__(plan, index, original)
        self.buffer, self.inputs = buffer, inputs  # the blobs its inputs' layers write

    def run(self, bottom, top):
        self.reshape(bottom, top)
        n, _, h, w = top[0].shape
        whole = self.buffer.ensure(n, h, w)
        for b in self.inputs:
            part = self.buffer.side(b)
            sa = b.synced_data
            if sa.blocked is part and sa.blocked_current:
                continue  # written in place by its layer
            part.array[...] = self.input(b)
        top[0].synced_data.blocked_written(whole)


# ---- the plan ---------------------------------------------------------------------------
class Plan:
    """Which layers of a folded net run blocked (``steps``: layer index -> Step) and the views
    of the Concat buffers (``views``: id of an input blob -> its ConcatBuffer)."""

    def __init__(self, net, B):
        self.net, self.B = net, B
        self.steps, self.views = {}, {}
        self.pairs = []  # Absorbed: a producer index and the layers whose work it does
        self.dropped = {}  # blob name -> the layer that now computes past it (not kept)


def _conv_ok(layer, rec):
    # (a convolution in place on its bottom runs as the layer: its steps write a new store)
    return (layer.type in CONVOLUTIONS and len(rec.bottom_ids) == 1 and len(rec.top_ids) == 1
            and rec.top_ids[0] != rec.bottom_ids[0]
            and not rec.need_backward and not layer.loss(0)
            and getattr(layer, "channel_axis", None) == 1
            and getattr(layer, "num_spatial_axes", None) == 2 and rec.bottoms[0].num_axes == 4)


def install(net, chains, keep_intermediates=True):
    """Put the blocked steps of ``net`` (folded: ``chains`` from net_fold) into
    ``net._fused``; returns the Plan, or None when the path is off or unavailable. Without
    ``keep_intermediates``, a residual Eltwise SUM also runs in the store of the convolution
    that computes one of its inputs (that input's blob is then not computed)."""
    B = block_size()
    if B is None or net.dtype != np.float32:
        return None
    plan = Plan(net, B)
    chain_of = {c.producer: c for c in chains}
    absorbed = {i for c in chains for i in c.absorbed}  # and the ReLUs an Eltwise takes
    same = {}      # blob id -> the blob id whose storage it shares (a Split's tops)
    blocked = set()  # blob ids whose value a blocked step writes
    writer = {}    # blob id -> (layer index, step) of the blocked step that writes it

    def root(bid):
        while bid in same:
            bid = same[bid]
        return bid

    for i, rec in enumerate(net.records):
        if i in absorbed:
            continue
        layer, original = rec.layer, net._fused.get(i, rec.layer.Forward)
        roots = [root(b) for b in rec.bottom_ids]
        step, out_id = None, None
        if layer.type == "Split" and len(rec.bottom_ids) == 1:
            for t in rec.top_ids:
                same[t] = rec.bottom_ids[0]
            continue
        if _conv_ok(layer, rec) and getattr(getattr(layer, "plan", None), "winograd_tile",
                                            0) not in WINOGRAD_STAYS:
            chain = chain_of.get(i)
            runner = chain.fused if chain is not None and chain.fused is not None else layer
            out_id = (net.records[chain.absorbed[-1]].top_ids[0] if chain is not None
                      else rec.top_ids[0])
            out = net._blobs[out_id]
            input_blocked = (roots[0] in blocked or layer.channels > STEM_CHANNELS
                             or layer.group != 1)
            try:
                step = ConvStep(plan, i, original, runner, out,
                                chain is not None and chain.relu, input_blocked)
            except ValueError:
                step = None
        elif all(r in blocked for r in roots) and roots and len(rec.top_ids) == 1 \
                and not rec.need_backward and not layer.loss(0):
            # (a pooling in place on its bottom runs as the layer: its kernel writes a new store)
            if layer.type == "Pooling" and layer.pool in (_Pool.MAX, _Pool.AVE) and \
                    root(rec.top_ids[0]) != roots[0]:
                step = PoolStep(plan, i, original)
            elif layer.type == "ReLU":
                step = ReluStep(plan, i, original)
            elif layer.type == "Dropout" and not layer._train():
                step = DropoutStep(plan, i, original)
            elif layer.type == "Eltwise":
                step = EltwiseStep(plan, i, original)
            elif layer.type == "Concat" and len(roots) > 1:
                step = _concat_step(net, plan, i, original, rec, roots, writer)
            out_id = rec.top_ids[0] if step is not None else None
        if step is None:
            for t in rec.top_ids:
                blocked.discard(root(t))
            continue
        plan.steps[i] = step
        net._fused[i] = step
        blocked.add(root(out_id))
        writer[root(out_id)] = (i, step)
        if isinstance(step, EltwiseStep) and _relu_follows(net, i, rec.top_ids[0], absorbed):
            step.relu = True
            relu = net._fused.get(i + 1, net.records[i + 1].layer.Forward)
            pair = Absorbed(i, [i + 1], step, {i + 1: relu})
            plan.pairs.append(pair)
            net._fused[i + 1] = pair.forward(i + 1)
            absorbed.add(i + 1)
    if not keep_intermediates:
        for j, step in list(plan.steps.items()):
            if isinstance(step, EltwiseStep):
                _into_convolution(net, plan, j, step, chain_of, writer, root)
    return plan


def _into_convolution(net, plan, j, step, chain_of, writer, root):
    """Run Eltwise ``j`` (SUM of two, coefficients 1) in the store of the convolution that
    computes one of its inputs just before it (nothing else reads that input; the other input
    was written before that convolution ran)."""
    rec = net.records[j]
    if rec.layer.op != _Eltwise.SUM or len(rec.bottom_ids) != 2 or \
            any(c != 1 for c in rec.layer.coeffs):
        return
    for k in (1, 0):
        found = writer.get(root(rec.bottom_ids[k]))
        other = writer.get(root(rec.bottom_ids[1 - k]))
        if found is None or other is None or not isinstance(found[1], ConvStep):
            continue
        i, conv = found
        chain = chain_of.get(i)
        last = chain.absorbed[-1] if chain is not None else i
        out_id = root(rec.bottom_ids[k])
        inside = set(chain.absorbed if chain is not None else []) | {j}
        readers = [n for n, r in enumerate(net.records)
                   if n not in inside and out_id in r.bottom_ids]
        if (last + 1 != j or other[0] >= i or conv.relu or conv.sum is not None or readers
                or net._blob_names[out_id] in net.outputs or id(conv.out) in plan.views):
            continue
        conv.sum = (rec.layer, rec.bottoms, rec.tops[0], rec.bottoms[1 - k])
        conv.relu = step.relu
        del plan.steps[j]
        tail = [j]  # the Eltwise and the ReLU it took
        originals = {j: step.original}
        for pair in [p for p in plan.pairs if p.producer == j]:
            tail += pair.absorbed
            originals.update(pair.originals)
            plan.pairs.remove(pair)
        pair = Absorbed(i, (chain.absorbed if chain is not None else []) + tail, conv,
                        originals)
        plan.pairs.append(pair)
        for n in tail:
            net._fused[n] = pair.forward(n)
        plan.dropped[net._blob_names[out_id]] = rec.layer.name
        return


def _relu_follows(net, i, blob_id, absorbed):
    """Whether layer ``i + 1`` is a plain ReLU in place on ``blob_id``, the only reader of the
    value layer ``i`` writes there."""
    if i + 1 >= len(net.records) or i + 1 in absorbed:
        return False
    rec = net.records[i + 1]
    return (rec.layer.type == "ReLU" and rec.layer.negative_slope == 0
            and rec.bottom_ids == [blob_id] and rec.top_ids == [blob_id]
            and not rec.need_backward and not rec.layer.loss(0))


def _concat_step(net, plan, i, original, rec, roots, writer):
    """A Concat on channels whose inputs are each written by one convolution or pooling step
    into its part of the Concat's buffer (channel counts in whole blocks); None otherwise."""
    layer = rec.layer
    layer.reshape(rec.bottoms, rec.tops)
    if layer.axis != 1 or len(set(roots)) != len(roots):
        return None
    offsets, cb = {}, 0
    for bid, r in zip(rec.bottom_ids, roots):
        blob = net._blobs[r]
        found = writer.get(r)
        if (blob.shape[1] % plan.B or found is None
                or not isinstance(found[1], (ConvStep, PoolStep)) or id(blob) in plan.views):
            return None
        offsets[id(blob)] = cb
        cb += blob.shape[1] // plan.B
    buffer = ConcatBuffer(plan, cb * plan.B, offsets)
    for r in roots:
        plan.views[id(net._blobs[r])] = buffer
    return ConcatStep(plan, i, original, buffer, [net._blobs[r] for r in roots])
