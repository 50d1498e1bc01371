"""Training memory: activation diffs that are never needed at the same time share one buffer.

Caffe keeps a data and a diff array per blob for the whole iteration. The diff of an activation
is needed only inside the backward pass: its consumer's backward writes it, the in-place layers
on the blob read and rewrite it, its producer's backward reads it last; before and after that
it is dead. Going down the layers, a blob's diff is live from the step of the highest layer
that touches the blob to the step of the lowest one (both included: a layer's backward reads
its tops' diffs while it writes its bottoms'). Blobs whose ranges do not overlap can keep their
diffs in one buffer. :func:`make_plan` groups the blobs that already share a diff (a blob and
its in-place layers are one blob; Flatten, Reshape, a one-input Concat and a one-output Slice
share their bottom's diff, as Caffe's do), then hands the groups out largest first, each to the
first buffer whose groups' ranges it does not meet (a greedy interval allocation in bytes).

A group shares only where the result cannot change:

- its diff is first written by a real consumer (the highest layer touching it has it as a
  bottom, not as a top) whose backward runs for it (``need_backward`` and the bottom's
  ``propagate_down``) and overwrites every element of it (:data:`OVERWRITING_TYPES`, checked
  layer by layer): what the buffer held before is never read;
- none of its blobs has a loss weight (the forward writes the weight into the diff), is a net
  input (a script sets its diff), or shares its diff with a parameter (the Parameter layer).

Blobs no backward touches (data layers' tops, whatever ``infer_backward`` prunes) keep the
lazy storage they have: nothing ever allocates their diff. Parameter diffs are never shared.
A fused chain (:mod:`net_train_fuse`: BatchNorm -> Scale -> ReLU, Eltwise SUM -> ReLU) runs
its layers' backward at its last layer, so the groups it touches are live over the whole
chain.

The sharing is real: the blobs of one buffer hold :class:`DiffSlot` objects over one
:class:`~pycaffe_lite.syncedmem.SyncedArray` (host and device alike), fixed for a given set of
shapes (a captured CUDA graph replays fixed pointers); a full backward whose blob shapes
differ from the plan's plans again. A buffer remembers which group wrote it last: a group
takes it over only when the layer that writes its diff first does so (``write_diff``) in a
backward pass that runs that layer (``net.backward_from_to``, which :class:`Sharing` wraps);
reading a diff that another blob has overwritten since (``solver.net.blobs[name].diff``
after a step, or from a hook during the backward pass after the blob's range), or a partial
backward that reads a diff its pass never wrote, raises a
:class:`~pycaffe_lite.errors.CaffeError` naming both blobs and the switch, never returns the
other blob's values.

:func:`attach` also lets an in-place Scale right after Caffe's plain BatchNorm keep
BatchNorm's normalised array for its backward instead of a copy of the same values
(:func:`link_saved_inputs`; the fused chains already do).

Only a Solver's train net shares (and ``pycaffe-lite time`` on a TRAIN net): a ``Net`` built
by a script keeps every diff, as do nets with ``debug_info`` or ``force_backward``.
``PYCAFFE_LITE_SHARE_DIFFS=0`` or ``pycaffe_lite.set_share_diffs(False)`` (before the solver is
built) keeps every diff everywhere; :func:`detach` gives one net its own diffs back.
"""

import weakref

from .errors import CaffeError
from .syncedmem import SyncedArray
from .switches import flag as flag_value, switch

ENV_VAR = "PYCAFFE_LITE_SHARE_DIFFS"
_setting = None  # None: the environment decides

# Layer types whose backward writes every element of each bottom diff it propagates to (never
# +=, never a part): the diff's old contents are never read. Each was checked in its layer's
# backward (and its fused forms); a type not listed keeps its bottoms' diffs to themselves.
OVERWRITING_TYPES = frozenset([
    "AbsVal", "BatchNorm", "Bias", "Concat", "Convolution", "Deconvolution", "Dropout", "ELU",
    "Eltwise", "EuclideanLoss", "InnerProduct", "LRN", "Pooling", "Power", "PReLU", "ReLU",
    "Scale", "Sigmoid", "SigmoidCrossEntropyLoss", "Slice", "Softmax", "SoftmaxWithLoss",
    "Split", "TanH",
])


def enabled_by_default():
    """The setting of :func:`set_enabled`, else False when ``PYCAFFE_LITE_SHARE_DIFFS`` is
    0/false/no/off."""
    if _setting is not None:
        return _setting
    return switch(ENV_VAR)


def set_enabled(flag):
    """Share activation diffs in the train nets built from now on (True, the default) or keep
    every diff (False); None goes back to the environment variable. Returns the old
    setting."""
    global _setting
    old = enabled_by_default()
    _setting = flag_value(flag, "set_share_diffs", allow_none=True)
    return old


# ---- the plan ------------------------------------------------------------------------------
class Group:
    """Blobs of a net that hold one diff already (in place, or sharing it as Flatten's top
    does): their ids, names, size in elements, live range ``[lo, hi]`` in layer indices and
    the layer whose backward writes it first (``writer``)."""

    __slots__ = ("blob_ids", "names", "size", "lo", "hi", "writer", "buffer")

    def __init__(self, blob_ids, names, size, lo, hi, writer):
        self.blob_ids, self.names, self.size = blob_ids, names, size
        self.lo, self.hi, self.writer, self.buffer = lo, hi, writer, None

    def meets(self, other):
        return self.lo <= other.hi and other.lo <= self.hi

    def __repr__(self):
        return "Group(%s, %d elements, layers %d..%d, buffer %s)" % (
            "/".join(self.names), self.size, self.lo, self.hi, self.buffer)


class Plan:
    """Which activation diffs of a net share which buffer: ``groups`` (the shared ones, each
    with its ``buffer`` index), ``buffer_sizes`` (elements), the bytes the shared diffs take
    (``shared_bytes``) and would take each on its own (``unshared_bytes``), and the shapes it
    was made for."""

    def __init__(self, groups, buffer_sizes, itemsize, shapes):
        self.groups, self.buffer_sizes = groups, buffer_sizes
        self.itemsize, self.shapes = itemsize, shapes

    @property
    def shared_bytes(self):
        return sum(self.buffer_sizes) * self.itemsize

    @property
    def unshared_bytes(self):
        return sum(g.size for g in self.groups) * self.itemsize

    def buffer_of(self, name):
        """The buffer index of blob ``name``'s diff, or None when it keeps its own."""
        for g in self.groups:
            if name in g.names:
                return g.buffer
        return None


def _touches(net):
    """{diff storage id: [blob ids], [(layer index, bottom indices, top indices)]}."""
    storage_of = [id(blob.synced_diff) for blob in net._blobs]
    found = {}
    for bid, key in enumerate(storage_of):
        found.setdefault(key, ([], []))[0].append(bid)
    for k, rec in enumerate(net.records):
        touched = {}
        for j, bid in enumerate(rec.bottom_ids):
            touched.setdefault(storage_of[bid], ([], []))[0].append(j)
        for j, tid in enumerate(rec.top_ids):
            touched.setdefault(storage_of[tid], ([], []))[1].append(j)
        for key, (bottoms, tops) in touched.items():
            found[key][1].append((k, bottoms, tops))
    return found


def _shareable(net, blob_ids, touches, excluded):
    if not touches or any(bid in excluded for bid in blob_ids):
        return False
    k, bottoms, tops = touches[-1]  # the highest layer touching the group writes it first
    rec = net.records[k]
    return (not tops and len(bottoms) == 1 and rec.need_backward
            and rec.bottom_need_backward[bottoms[0]]
            and rec.layer.type in OVERWRITING_TYPES)


def _chain_spans(net):
    """(first, last) layer of each fused chain: its backward runs at its last layer."""
    fusion = getattr(net, "_train_fuse", None)
    if fusion is None:
        return []
    chains = list(fusion.chains) + list(getattr(fusion, "sums", ()))
    return [(c.indices[0], c.indices[-1]) for c in chains]


def make_plan(net):
    """The :class:`Plan` for ``net``'s current shapes (computed only; :func:`attach` puts
    it in place)."""
    excluded = set(net._input_ids)
    excluded.update(i for i, w in enumerate(net._blob_loss_weights) if w)
    param_storage = {id(p.synced_diff) for p in net.param_blobs}
    spans = _chain_spans(net)
    groups = []
    for key, (blob_ids, touches) in _touches(net).items():
        if key in param_storage or not _shareable(net, blob_ids, touches, excluded):
            continue
        lo, hi = touches[0][0], touches[-1][0]
        for first, last in spans:  # a fused backward runs at the chain's last layer
            if any(first <= k <= last for k, _, _ in touches):
                lo, hi = min(lo, first), max(hi, last)
        size = max(net._blobs[bid].count for bid in blob_ids)
        groups.append(Group(blob_ids, [net._blob_names[bid] for bid in blob_ids], size,
                            lo, hi, touches[-1][0]))
    groups.sort(key=lambda g: (-g.size, g.lo, g.blob_ids[0]))
    members, sizes = [], []
    for g in groups:
        for b, taken in enumerate(members):
            if not any(g.meets(other) for other in taken):
                break
        else:
            b = len(members)
            members.append([])
            sizes.append(g.size)
        members[b].append(g)
        g.buffer = b
    groups.sort(key=lambda g: g.blob_ids[0])
    return Plan(groups, sizes, net.dtype.itemsize, _shapes(net))


def _shapes(net):
    return tuple(blob.shape for blob in net._blobs)


# ---- the shared storage ----------------------------------------------------------------------
class Buffer:
    """One shared diff array and the slot that wrote (or first read) it last."""

    __slots__ = ("array", "owner", "sharing")

    def __init__(self, size, dtype, sharing):
        self.array, self.owner, self.sharing = SyncedArray(size, dtype), None, sharing


class DiffSlot:
    """A group's diff storage: the :class:`SyncedArray` interface over a shared
    :class:`Buffer`, refusing to show another group's values. The group takes the buffer over
    only by a layer's write (``write()``, as ``Blob.write_diff`` asks) in a backward pass that
    runs its writer layer (``writer``); ``mutable_cpu`` (pycaffe's ``blob.diff``, which scripts
    read) never takes it from another group."""

    __slots__ = ("buffer", "names", "writer")

    def __init__(self, buffer, names, writer):
        self.buffer, self.names, self.writer = buffer, names, writer

    def _take(self, claim=False):
        buf = self.buffer
        owner = buf.owner
        if owner is not self:
            if owner is not None and not (claim and buf.sharing.runs(self.writer)):
                raise reused_error(self.names, owner.names)
            buf.owner = self
        return buf.array

    size = property(lambda self: self.buffer.array.size)
    dtype = property(lambda self: self.buffer.array.dtype)
    head = property(lambda self: self.buffer.array.head)
    version = property(lambda self: self.buffer.array.version)
    storage = property(lambda self: self.buffer.array,
                       doc="The SyncedArray this slot shares.")

    def cpu(self):
        return self._take().cpu()

    def mutable_cpu(self):
        return self._take().mutable_cpu()

    def gpu(self):
        return self._take().gpu()

    def mutable_gpu(self):
        return self._take(True).mutable_gpu()

    def read(self):
        return self._take().read()

    def write(self):
        return self._take(True).write()


def reused_error(names, writer_names):
    quoted = " / ".join("'%s'" % n for n in names)
    return CaffeError(
        "the diff of blob %s is not kept: this training net shares one buffer among activation "
        "diffs that are never needed at the same time, and blob %s has written it since. Read "
        "diffs inside the backward pass (a layer, or net.after_backward), or keep every diff: "
        "set %s=0 or call pycaffe_lite.set_share_diffs(False) before creating the solver"
        % (quoted, " / ".join("'%s'" % n for n in writer_names), ENV_VAR))


class Sharing:
    """A plan put in place on a net (``net._diff_sharing``): the buffers, the blobs' slots, and
    the net's ``backward_from_to`` wrapped so that layers may take buffers over during a
    backward pass (and a full backward on new shapes plans again). It holds the net weakly:
    the net, dropped, is collected at once, as before."""

    def __init__(self, net):
        self._net, self.running, self.plan = weakref.ref(net), None, None
        self._backward = type(net).backward_from_to
        self.install(net)
        net.backward_from_to = self.backward_from_to

    def install(self, net):
        plan = make_plan(net)
        buffers = [Buffer(size, net.dtype, self) for size in plan.buffer_sizes]
        for g in plan.groups:
            slot = DiffSlot(buffers[g.buffer], g.names, g.writer)
            for bid in g.blob_ids:
                net._blobs[bid].set_diff_storage(slot)
        self.plan = plan

    def runs(self, layer):
        """Whether a backward pass running ``layer``'s backward is under way."""
        running = self.running
        return running is not None and running[0] <= layer <= running[1]

    def backward_from_to(self, start=None, end=0):
        net = self._net()
        last = len(net.records) - 1
        start = last if start is None else start
        if start == last and _shapes(net) != self.plan.shapes:
            self.install(net)
        self.running = (end, start)
        try:
            return self._backward(net, start, end)
        finally:
            self.running = None

    def release(self, net):
        """Every blob of the plan gets a diff of its own again (zeros)."""
        del net.backward_from_to
        for g in self.plan.groups:
            own = None
            for bid in g.blob_ids:
                blob = net._blobs[bid]
                if isinstance(blob.synced_diff, DiffSlot):
                    own = own or SyncedArray(blob.synced_diff.size, net.dtype)
                    blob.set_diff_storage(own)
        self.plan = Plan([], [], net.dtype.itemsize, ())


def link_saved_inputs(net):
    """An in-place Scale right after Caffe's plain BatchNorm, on its top, keeps BatchNorm's
    normalised array for its backward instead of a copy of the same values (while the blob
    is not written between them: ``BatchNormLayer.normalized_top``)."""
    for rec, after in zip(net.records, net.records[1:]):
        source = getattr(rec.layer, "normalized_top", None)
        if source is not None and after.layer.type == "Scale" and len(rec.top_ids) == 1 \
                and after.bottom_ids == rec.top_ids and after.top_ids == rec.top_ids:
            after.layer.input_source = source


def attach(net, enabled=None, any_net=False):
    """Share ``net``'s activation diffs (a training net; see the module's text) unless sharing
    is off (``enabled``, else :func:`enabled_by_default`) or the net has ``debug_info`` or
    ``force_backward`` (whose diffs a script reads; ``any_net``: share there too, as ``time``
    does). Returns the :class:`Sharing`, or None."""
    detach(net)
    link_saved_inputs(net)
    if not (enabled_by_default() if enabled is None else enabled):
        return None
    if not any_net and (net.debug_info or net.param.force_backward):
        return None
    net._diff_sharing = Sharing(net)
    return net._diff_sharing


def detach(net):
    """Give every blob of ``net`` its own diff again (a no-op without sharing)."""
    sharing = getattr(net, "_diff_sharing", None)
    if sharing is not None:
        sharing.release(net)
        net._diff_sharing = None


def sharing_of(net):
    """The :class:`Sharing` in place on ``net``, or None."""
    return getattr(net, "_diff_sharing", None)


# ---- what the blobs hold ---------------------------------------------------------------------
def _storage(synced):
    return synced.storage if isinstance(synced, DiffSlot) else synced


def _held(arrays, side):
    seen, total = set(), 0
    for synced in arrays:
        synced = _storage(synced)
        if id(synced) in seen:
            continue
        seen.add(id(synced))
        total += synced.held_bytes()[side]
    return total


def memory_report(net, device=False):
    """Bytes the net's blobs hold now on the host (or the device, ``device=True``), each
    array counted once: ``data`` and ``diff`` of the activation blobs, ``params`` (data and
    diff of the parameter blobs); with sharing in place, ``diff_unshared`` (what the shared
    diffs would take each on its own) and ``diff_shared`` (their buffers)."""
    side = 1 if device else 0
    params = list(net.param_blobs)
    report = {"data": _held([b.synced_data for b in net._blobs], side),
              "diff": _held([b.synced_diff for b in net._blobs], side),
              "params": _held([p.synced_data for p in params] +
                              [p.synced_diff for p in params], side)}
    sharing = sharing_of(net)
    if sharing is not None:
        report["diff_unshared"] = sharing.plan.unshared_bytes
        report["diff_shared"] = sharing.plan.shared_bytes
    return report
