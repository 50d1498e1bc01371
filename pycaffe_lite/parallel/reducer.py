"""Data-parallel gradient averaging: buckets in one contiguous buffer, reduced layer by layer.

:class:`DataParallel` is a solver callback (``on_start``, ``on_gradients_ready``) and a Net
``after_backward`` hook, as Caffe's ``NCCL`` class is:

- the learnable parameters are laid out, in the order the backward pass finishes them (the
  last layer's first), in one contiguous buffer cut into buckets of about ``bucket_bytes``
  (whole parameters; a parameter larger than that is a bucket of its own). The buffer is
  allocated once and reused every iteration; a bucket is one collective;
- with ``layer_wise_reduce`` (the SolverParameter field, default true) a bucket's reduction
  starts as soon as the backward pass has produced all of its gradients — when the lowest layer
  that uses one of its parameters (shared parameters included) has run its backward — and
  overlaps the rest of the backward pass; otherwise every bucket is reduced after the
  backward pass, in ``on_gradients_ready``;
- ``on_gradients_ready`` waits for the reductions and writes the mean over the ranks back into
  the parameters' diffs, before the solver normalises, regularises, clips and updates;
- with ``iter_size`` > 1 only the last forward/backward pass of an iteration reduces (the diffs
  accumulate locally until then);
- ``bcast()`` gives every rank rank 0's weights (fillers, ``--weights`` or a snapshot).

Stop and snapshot requests (SIGINT, SIGHUP) are agreed on at the same point of every
iteration, so all ranks stop or snapshot together and none waits forever in a collective.
"""

import logging

import numpy as np

from .. import backend, net_types
from ..errors import CaffeError
from ..signals import SolverAction
from .. import ranks
from .consistency import check_same_training, share_data_streams

log = logging.getLogger("pycaffe_lite")

#: PyTorch DDP's default is 25 MiB; a smaller bucket starts the first reduction earlier
DEFAULT_BUCKET_BYTES = 4 << 20

#: data layers that, as in Caffe, read their source in full on every rank
_SAME_RECORDS_ON_EVERY_RANK = ("ImageData", "WindowData", "MemoryData")

_ACTION_CODES = {SolverAction.NONE: 0, SolverAction.SNAPSHOT: 1, SolverAction.STOP: 2}
_ACTIONS = {code: action for action, code in _ACTION_CODES.items()}


class _Bucket:
    __slots__ = ("params", "start", "stop", "ready_layer", "handle")

    def __init__(self, params, start, stop, ready_layer):
        self.params = params            # [(learnable index, offset, count)]
        self.start, self.stop = start, stop
        self.ready_layer = ready_layer  # the bucket is complete once this layer's backward ran
        self.handle = None


def _ready_layers(net):
    """For each learnable param, the lowest layer index whose backward adds to its diff."""
    ready = [len(net.records)] * len(net.learnable_params)
    for pid, (layer_id, _) in enumerate(net.param_layer_indices):
        j = net.learnable_param_ids[pid]
        ready[j] = min(ready[j], layer_id)
    return ready


class DataParallel:
    """Average the gradients of ``solver``'s train net over the ranks of ``comm``.

    ``solver``: a pycaffe-lite solver; ``comm``: a communicator from
    :mod:`pycaffe_lite.parallel.comm` (default: :func:`pycaffe_lite.parallel.init`'s);
    ``layer_wise``: overlap the reductions with the backward pass (default: the solver's
    ``layer_wise_reduce``); ``actions``: a function giving this rank's stop/snapshot request
    (e.g. a SignalHandler's ``get_action``), agreed on with the other ranks each iteration.

    Construct it on every rank after the solver (and after restoring or loading weights), then
    call :meth:`attach` (or, as pycaffe's ``train.py`` does, ``bcast()``,
    ``solver.add_callback(obj)`` and ``solver.net.after_backward(obj)``)."""

    def __init__(self, solver, comm, bucket_bytes=DEFAULT_BUCKET_BYTES, layer_wise=None,
                 actions=None):
        self.solver = solver
        self.comm = comm
        self.net = net = solver.net
        self.size = comm.size
        if layer_wise is None:
            layer_wise = bool(solver.param.layer_wise_reduce)
        self.layer_wise = layer_wise
        self.iter_size = int(solver.param.iter_size)
        self._actions = actions
        self._agreed = SolverAction.NONE
        params = net.learnable_params
        self.params = params
        dtype = _buffer_dtype(params)
        ready = _ready_layers(net)
        order = sorted(range(len(params)), key=lambda j: (-ready[j], j))
        self.buckets = []
        members, offset, start = [], 0, 0
        for j in order:
            count = params[j].count
            if members and (offset + count - start) * dtype.itemsize > bucket_bytes:
                self.buckets.append(_Bucket(members, start, offset, ready[members[-1][0]]))
                members, start = [], offset
            members.append((j, offset, count))
            offset += count
        if members:
            self.buckets.append(_Bucket(members, start, offset, ready[members[-1][0]]))
        xp = backend.device_module() if comm.on_device else np
        self.buffer = xp.zeros(max(offset, 1), dtype)
        self.total = offset
        self._next = 0      # the next bucket to start in this pass
        self._pass = 0      # forward/backward passes of this iteration so far
        self.attached = False

    # -- pycaffe's interface -----------------------------------------------------------------
    def attach(self):
        """Broadcast rank 0's weights and register with the solver (and its net's
        ``after_backward`` hook when reducing layer-wise)."""
        self.bcast()
        self.solver.add_callback(self)
        if self.layer_wise:
            self.net.after_backward(self)
        if self._actions is not None:
            self.solver.set_action_function(self._agreed_action)
        if self.size > 1 and ranks.root_solver():
            for name, layer in zip(self.net.layer_names, self.net.layers):
                if layer.type in _SAME_RECORDS_ON_EVERY_RANK:
                    log.warning("layer '%s' (%s) gives every rank the same records, as in "
                                "Caffe: only Data and HDF5Data layers share their records out "
                                "by rank (record i to rank i mod %d)", name, layer.type,
                                self.size)
        self.attached = True
        return self

    def bcast(self):
        """Give every rank rank 0's learnable parameters (a float16 param's float32 master
        weights where it has them, and the float16 weights rounded from those). First every
        rank checks that all train the same model (:mod:`.consistency`): a rank with another
        net, solver or iteration stops the job here with an error naming it; then the TRAIN
        Data and HDF5Data layers take rank 0's place in their data stream."""
        if self.size == 1:
            return
        check_same_training(self.solver, self.comm)
        share_data_streams(self.solver, self.comm)
        if not self.total:
            return
        buf = self.buffer
        with net_types.master_weights(self.net):
            params = self.net.learnable_params
            for bucket in self.buckets:
                for j, off, count in bucket.params:
                    buf[off:off + count] = self._read(params[j], "data").ravel()
            self.comm.bcast(buf[:self.total], 0)
            for bucket in self.buckets:
                for j, off, count in bucket.params:
                    dst = self._write(params[j], "data")
                    dst[...] = buf[off:off + count].reshape(dst.shape)

    def on_start(self):
        self._next = 0
        self._pass = 0
        note = getattr(self.comm, "note", None)
        if note is not None:
            note("iteration %d" % self.solver.iter)

    def __call__(self, layer_index):
        """The Net's after_backward hook: start every bucket the backward pass has finished."""
        if self._pass == self.iter_size - 1:
            buckets = self.buckets
            while self._next < len(buckets) and buckets[self._next].ready_layer >= layer_index:
                self._start(buckets[self._next])
                self._next += 1
            for bucket in buckets[:self._next]:
                if bucket.handle is not None:
                    bucket.handle.test()  # lets MPI progress the reductions already started
        if layer_index == 0:
            self._pass += 1

    def on_gradients_ready(self):
        while self._next < len(self.buckets):
            self._start(self.buckets[self._next])
            self._next += 1
        scale = 1.0 / self.size
        buf = self.buffer
        for bucket in self.buckets:
            bucket.handle.wait()
            bucket.handle = None
            if self.size == 1:  # nothing was reduced: the gradients stay as they are
                continue
            # the mean in the buffer's type, then stored in each diff's own
            mean = buf[bucket.start:bucket.stop]
            mean *= buf.dtype.type(scale)
            for j, off, count in bucket.params:
                dst = self._write(self.params[j], "diff")
                dst[...] = buf[off:off + count].reshape(dst.shape)
        self._next = 0
        self._pass = 0
        if self._actions is not None:
            local = _ACTION_CODES.get(self._actions(), 0)
            self._agreed = _ACTIONS[self.comm.agree(local)]

    # -- helpers -----------------------------------------------------------------------------
    def _start(self, bucket):
        if self.size == 1:
            bucket.handle = _NoOp
            return
        buf = self.buffer
        for j, off, count in bucket.params:
            buf[off:off + count] = self._read(self.params[j], "diff").ravel()
        bucket.handle = self.comm.start_allreduce(buf[bucket.start:bucket.stop])

    def _read(self, blob, what):
        if self.comm.on_device:
            return blob.read_data() if what == "data" else blob.read_diff()
        return blob.cpu_data() if what == "data" else blob.cpu_diff()

    def _write(self, blob, what):
        if self.comm.on_device:
            return blob.write_data() if what == "data" else blob.write_diff()
        return blob.data if what == "data" else blob.diff

    def _agreed_action(self):
        """The solver's action function: the request all ranks agreed on this iteration
        (once); a request made since waits for the next iteration's agreement."""
        action, self._agreed = self._agreed, SolverAction.NONE
        return action

    def describe(self):
        nbytes = self.total * self.buffer.dtype.itemsize
        return ("%d learnable params, %.2f MiB in %d bucket(s), %s, %s"
                % (len(self.params), nbytes / 2.0 ** 20, len(self.buckets), self.comm.name,
                   "layer-wise" if self.layer_wise else "after the backward pass"))


def _buffer_dtype(params):
    """The element type the gradients are reduced in: the params' own, float32 where some
    are float16 (NVCaffe's float16 layers: NCCL and MPI add float32, and a sum over many ranks
    keeps its digits); a net of float32 and float64 params is refused."""
    dtypes = {np.dtype(p.read_data().dtype) for p in params} - {np.dtype(np.float16)}
    if len(dtypes) > 1:
        raise CaffeError("data-parallel training needs one dtype for every learnable "
                         "param (float16 aside), the net has %s"
                         % sorted(str(d) for d in dtypes))
    return dtypes.pop() if dtypes else np.dtype(np.float32)


class _NoOpHandle:
    def test(self):
        return True

    def wait(self):
        pass


_NoOp = _NoOpHandle()


class NCCL(DataParallel):
    """pycaffe's ``caffe.NCCL(solver, uid)``: the gradients of one process per GPU, averaged
    with NCCL, device to device. ``uid`` comes from ``NCCL.new_uid()`` on one process and is
    handed to the others; ``caffe.set_solver_count`` / ``set_solver_rank`` say how many
    processes and which one this is. Then, as pycaffe's ``train.py`` does::

        nccl = caffe.NCCL(solver, uid)
        nccl.bcast()
        solver.add_callback(nccl)
        if solver.param.layer_wise_reduce:
            solver.net.after_backward(nccl)
    """

    def __init__(self, solver, uid, bucket_bytes=DEFAULT_BUCKET_BYTES):
        from .comm import NCCLComm
        if backend.mode() != backend.GPU:
            raise CaffeError("caffe.NCCL reduces gradients between GPUs: call "
                             "caffe.set_mode_gpu() (and set_device) first; on CPUs use "
                             "pycaffe_lite.parallel.init() (MPI)")
        comm = NCCLComm(uid, ranks.solver_rank(), ranks.solver_count())
        super().__init__(solver, comm, bucket_bytes)

    @staticmethod
    def new_uid():
        from .comm import NCCLComm
        return NCCLComm.new_uid()
