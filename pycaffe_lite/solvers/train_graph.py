"""Training iterations on the GPU captured into a CUDA graph and replayed.

Run layer by layer from Python, a training iteration costs host time per layer and per
parameter, and the GPU waits for it (ResNet-50: hundreds of launches a pass). When nothing
changes between iterations but the batch and the learning rate, :class:`TrainGraph` runs an
iteration as

1. the data layers (the net's leading layers without bottoms that a graph cannot hold: they
   read files and the prefetch queue) eagerly; each copies its batch into a device buffer of
   its own (:class:`~pycaffe_lite.layers.data.base_data_layer.BaseDataLayer`), the buffer the
   graph reads;
2. the solver's coefficients of this iteration (learning rates, Adam's correction) copied into
   the device table the update kernel reads (:meth:`SGDSolver.device_update_prepare`);
3. one graph launch: clear the param diffs, forward of the other layers, backward, the update
   of every param (``data -= diff`` included);
4. one read: the loss, NaN where a check that a graph cannot make on the host failed (the
   labels' range, see :func:`pycaffe_lite.layer.deferred_checks`). A non-finite value re-runs
   those checks on the host, which raise their own errors; else it goes to the solver's usual
   handling of a non-finite loss. The update of such an iteration changes nothing (the kernel
   reads the verdict on the device), as the eager iteration stops before its update.

With ``iter_size`` > 1 an iteration is three graphs: the first pass (the diffs cleared,
forward, backward), each next pass (the data layers before it, its loss read after it), and,
once the passes' mean loss is known on the host, the update (not launched where the eager
iteration would stop before it).

The first iteration for a set of shapes runs eagerly (kernels compile, cuDNN's plans are
chosen, buffers are allocated), the second is captured and launched, the later ones are
launched. Any buffer the graph uses that moved (a blob grew, a net surgery shared another
blob, a restored solver state) starts again at the first step. A replayed iteration runs the
same kernels on the same buffers as an eager one, so it computes the same values.

A net with NVCaffe's float16 params (:mod:`pycaffe_lite.net_types`) is captured too: its
conversions at the type boundaries (the net's own hooks) write converted copies of their
own, the same arrays at each iteration, and the update does on the device what
:func:`pycaffe_lite.solvers.mixed.apply_update` does layer by layer: the float16 gradients
copied into the float32 masters' diffs, every gradient times ``1 / global_grad_scale`` (a
constant), the update of the masters and the float32 params, the float16 weights rounded
from the masters; none of it changes a weight, a master or the history where the verdict
says no. Between iterations a master takes a value written into its float16 param (net
surgery) before the launch; inside the graph, before the update, each master takes its
param's values where a forward wrote them (PSPNet's BN running averages).

Iterations that display (they read the gradients before the update) or debug, solvers with
callbacks (data-parallel reduction, pycaffe's ``add_callback``), gradient clipping (a host
decision each iteration), NVCaffe's LARC (each param's rate from norms read on the host) and
``weight_decay_policy: "poly"`` (a decay that changes each iteration; one log line says so),
hooks of one's own on the net, and nets with a layer outside :data:`CAPTURABLE` run eagerly;
``caffe.set_cuda_graph(False)``, ``--cuda_graph off`` or ``PYCAFFE_LITE_CUDA_GRAPH=0`` turn
graphs off.
"""

import collections
import logging
import math

from .. import backend, cuda_graphs, net_types
from ..layer import deferred_checks
from ..syncedmem import upload_host_writes
from . import intel, mixed, nvcaffe

log = logging.getLogger("pycaffe_lite")

#: layer types whose TRAIN forward and backward read and write device arrays only and keep
#: no per-call host state (the TEST net's, whose random draws come from the device's counter
#: stream, see backend.random_uniform, and its losses; PSPNet's BN writes its running averages
#: on the device; Embed's and Upsample's backwards use their forwards' checked indices)
CAPTURABLE = cuda_graphs.CAPTURABLE | cuda_graphs.LOSSES


def of(solver):
    """The solver's :class:`TrainGraph` (made on first use) in GPU mode; None on the CPU."""
    if backend.mode() != backend.GPU:
        return None
    if solver.train_graph is None:
        solver.train_graph = TrainGraph(solver)
    return solver.train_graph


#: what a training graph was captured with: ``synced`` (every SyncedArray it reads or writes),
#: ``device`` (their device arrays), the update's ``tables``, the solver's ``history``, and
#: ``written`` (what a launch writes: all but the data layers' tops' data, which a host write
#: must not fetch first)
_Buffers = collections.namedtuple("_Buffers", "synced device tables history written")


class _Part:
    """One captured graph of an iteration and what to read after its launch: ``result`` (a
    0-d device array: the loss, NaN where a check failed; None for the update alone) and the
    checks' host re-checks."""

    __slots__ = ("graph", "result", "rechecks")

    def __init__(self):
        self.graph = self.result = None
        self.rechecks = []


class TrainGraph:
    """The captured iteration of a solver's train net (see the module's text)."""

    def __init__(self, solver):
        self.solver = solver
        self.net = solver.net
        self.types = net_types.of(self.net)  # float16 params: the update on their masters
        self.refused = ""
        self.first = self._first_captured()
        self.parts = self.key = self.warm_key = self.buffers = None
        self.captures = self.replays = 0
        self.told = ""  # the solver option that keeps iterations eager, once logged

    def _first_captured(self):
        """The index of the first layer the graph holds: the layers before it are the data
        layers, which run eagerly."""
        first = cuda_graphs.first_captured(self.net, CAPTURABLE)
        self.refused = cuda_graphs.layers_why_not(self.net, first, CAPTURABLE)
        return first

    def why_not(self):
        """Why the next iteration runs eagerly as a whole ("" when this object runs it)."""
        solver, param = self.solver, self.solver.param
        if not cuda_graphs.enabled():
            return "CUDA graphs are off"
        if backend.mode() != backend.GPU:
            return "CPU mode"
        if self.refused:
            return self.refused
        if param.clip_gradients >= 0:
            return "gradient clipping decides on the host"
        if solver.callbacks:
            return "the solver has callbacks"
        if net_types.user_hooks(self.net):
            return "the net has hooks"
        if getattr(solver, "fused_rule", None) is None:
            return "the solver's rule has no device update"
        reason = nvcaffe.why_eager(param) or intel.why_eager(param)
        if reason and reason != self.told:
            log.info("Net '%s': training iterations run layer by layer, not in a CUDA graph: "
                     "%s", self.net.name, reason)
            self.told = reason
        return reason

    def iteration(self):
        """Run one iteration (``iter_size`` forward/backward passes, the update) and return
        its loss (the passes' mean); None (nothing done) where it must run eagerly as a whole
        (:meth:`why_not`)."""
        if self.why_not():
            return None
        solver = self.solver
        solver._ensure_state_module()
        loss = self._feed()
        rate = solver.get_learning_rate()
        if self.parts is not None and self._key() == self.key:  # replays: the rates only
            solver.device_update_upload(rate)
            return self._replay(loss)
        arrays = solver.device_update_prepare(rate) if self.types is None else \
            mixed.device_update_prepare(solver, rate)
        if arrays is None:
            self.refused = "the update does not run on the device"
            return self._eager(loss, None)
        key = self._key()
        if key != self.warm_key:
            self.warm_key, self.key, self.parts, self.buffers = key, None, None, None
            return self._eager(loss, arrays)
        return self._capture(loss, arrays, key)

    # -- the steps ---------------------------------------------------------------------------
    def _feed(self):
        """The data layers' forward (the batch of the next pass)."""
        return self.net.forward_from_to(0, self.first - 1) if self.first else 0.0

    def _passes(self):
        return self.solver.param.iter_size

    def _mean(self, loss):
        """The passes' mean loss; whether the update may run (as the eager iteration, which
        stops before it when the loss is not finite and the solver stops on that)."""
        loss /= self._passes()
        return loss, math.isfinite(loss) or not self.solver.stop_on_nonfinite

    def _eager(self, loss, arrays):
        """The iteration after its first data layers' forward, layer by layer (a warm-up, or
        a refused capture)."""
        solver, net = self.solver, self.net
        net.clear_param_diffs()
        for k in range(self._passes()):
            if k:
                loss += self._feed()
            loss += net.forward_from_to(self.first, len(net.records) - 1)
            net.backward_from_to()
        loss, update = self._mean(loss)
        if update:
            if arrays is None or self.types is not None:
                mixed.apply_update(solver)  # float16 params: on their masters
            else:
                solver.device_update_run(arrays)
        return loss

    def _update(self, arrays, ok=None):
        """The update's device work (captured): on the masters where the net has float16
        params (:func:`mixed.device_update_run`)."""
        if self.types is None:
            self.solver.device_update_run(arrays, ok)
        else:
            mixed.device_update_run(self.solver, arrays, ok)

    def _pass_work(self, part, clear, arrays=None):
        """The device work of one pass (captured): the diffs cleared on the first, forward
        (checks deferred, the loss kept on the device), backward; with ``arrays`` (one pass an
        iteration) the update too, which changes nothing where a check failed or the loss is
        not finite and the solver stops on that."""
        solver, net, xp = self.solver, self.net, backend.xp()
        if clear:
            net.clear_param_diffs()
        with deferred_checks() as checks:
            loss = net._forward_layers(self.first, len(net.records) - 1)
        net.backward_from_to()
        if isinstance(loss, float):  # no loss layer: a zero made on the device
            loss = xp.zeros((), dtype="float64")
        failed = xp.zeros((), dtype=bool)
        for flag in checks.flags:
            failed = failed | flag
        if arrays is not None:
            ok = ~failed
            if solver.stop_on_nonfinite:
                ok = ok & xp.isfinite(loss)
            self._update(arrays, ok)
        # the one value read after the launch: the loss, NaN where a check failed (the host
        # re-checks then tell a failed check from a non-finite loss)
        part.result = xp.where(failed, float("nan"), loss)
        part.rechecks = checks.recheck

    def _capture_part(self, work):
        """A :class:`_Part` holding ``work(part)`` captured; None (logged, and the solver
        trains layer by layer from then on) where the capture failed."""
        part = _Part()
        self._upload_host_writes()
        try:
            part.graph = backend.capture_graph(lambda: work(part))
        except Exception as exc:  # whatever a layer or the driver raised: train eagerly
            self.refused = "its capture failed (%s: %s)" % (type(exc).__name__, exc)
            log.warning("Net '%s': the CUDA graph capture of a training iteration failed "
                        "(%s: %s); training runs layer by layer", self.net.name,
                        type(exc).__name__, exc)
            return None
        return part

    def _capture(self, loss, arrays, key):
        """Capture the iteration's graphs (one; or, with ``iter_size`` > 1, the first pass,
        the next passes and the update), launching each as it comes."""
        passes = self._passes()
        if passes == 1:
            parts = {"all": self._capture_part(lambda p: self._pass_work(p, True, arrays))}
        else:
            parts = {"first": self._capture_part(lambda p: self._pass_work(p, True)),
                     "next": self._capture_part(lambda p: self._pass_work(p, False)),
                     "update": self._capture_part(lambda p: self._update(arrays))}
        if any(part is None for part in parts.values()):
            return self._eager(loss, arrays)
        self.parts, self.key = parts, key
        self.buffers = self._buffers()
        self.captures += 1
        # the warm-up's temporaries, cached by the default pool, are not needed again: the
        # graphs' own pools hold what the replays use
        backend.free_cached_device_memory()
        return self._replay(loss)

    def _replay(self, loss):
        parts = self.parts
        self.replays += 1
        if "all" in parts:
            return loss + self._launch(parts["all"])
        for k in range(self._passes()):
            if k:
                loss += self._feed()
            loss += self._launch(parts["next" if k else "first"])
        loss, update = self._mean(loss)
        if update:
            self._launch(parts["update"])
        return loss

    def _launch(self, part):
        """Launch one graph; the loss it computed (0 for the update alone)."""
        self._upload_host_writes()
        part.graph.launch()
        for synced in self.buffers.written:
            synced.device_written()
        return cuda_graphs.read_loss(part.result, part.rechecks)

    # -- what the graph depends on ---------------------------------------------------------
    def _synced(self):
        """Every SyncedArray the iteration reads or writes, once: each blob's data and diff
        (a diff shared by liveness, net_memory's slot, as the buffer under it), each param's
        data and diff; with float16 params the converted bottoms and the masters too."""
        net, types = self.net, self.types
        blobs = list(net._blobs) + [b for blobs in net.params.values() for b in blobs]
        if types is not None:
            blobs += types.copies() + list((types.masters or {}).values())
        seen, out = set(), []
        for b in blobs:
            for s in (b.synced_data, b.synced_diff):
                s = getattr(s, "storage", s)
                if id(s) not in seen:
                    seen.add(id(s))
                    out.append(s)
        return out

    def _buffers(self):
        """The :class:`_Buffers` the graphs were captured with."""
        synced = self._synced()
        fed = {id(top.synced_data) for rec in self.net.records[:self.first] for top in rec.tops}
        return _Buffers(synced, [s._gpu for s in synced], self.solver.device_tables,
                        list(self.solver.history), [s for s in synced if id(s) not in fed])

    def _key(self):
        """The shapes the graph is captured for, and the solver's settings its work depends on
        (a script may change them between steps: the passes, the decay and its kind held in
        the update, whether a non-finite loss stops the update); where any of its buffers
        moved, the graph is dropped (this iteration warms up again)."""
        param = self.solver.param
        key = (cuda_graphs.input_shapes(self.net, self.first), param.iter_size,
               param.weight_decay, param.regularization_type, self.solver.stop_on_nonfinite)
        buffers = self.buffers
        if buffers is not None and self.parts is not None:
            synced = self._synced()
            history = self.solver.history
            if buffers.tables is not self.solver.device_tables \
                    or len(synced) != len(buffers.synced) \
                    or len(history) != len(buffers.history) \
                    or any(a is not b for a, b in zip(history, buffers.history)) \
                    or any(a is not b or a._gpu is not g
                           for a, b, g in zip(synced, buffers.synced, buffers.device)):
                # this iteration warms up again, the next one captures again
                self.parts = self.buffers = self.key = self.warm_key = None
        return key

    def _upload_host_writes(self):
        """A value written on the host since the last iteration (net surgery, a restored
        snapshot) goes up before the graph reads it (a graph cannot copy from the host); a
        master takes the value written into its float16 param. Once captured, the graphs'
        SyncedArrays are the ones :meth:`_key` found unmoved this iteration."""
        if self.types is not None:
            self.types.refresh_masters(self.net)
        upload_host_writes(self.buffers.synced if self.parts is not None else self._synced())
