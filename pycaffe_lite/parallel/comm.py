"""Communicators: what data-parallel training needs from MPI (mpi4py) or NCCL (CuPy).

Every communicator offers the same few operations on contiguous 1-D buffers, in place:
``start_allreduce(buf)`` (a handle with ``test()`` and ``wait()``; the sum over ranks),
``allreduce(buf)``, ``bcast(buf, root)``, ``agree(code)`` (the largest of a small int over
the ranks, for stop and snapshot requests) and ``abort(code)``. ``on_device`` tells whether the
buffers live on the GPU (NCCL) or on the host (MPI). A communicator with a collective timeout
(``set_timeout(seconds)``) has every blocking wait guarded: an MPI one by a
:class:`~pycaffe_lite.parallel.watchdog.Watchdog`, an NCCL one by a
:class:`~pycaffe_lite.parallel.watchdog.DeviceWatch` (and by its MPI communicator's watchdog for
what goes through MPI).

mpi4py is imported only when a communicator is made, so the package works without it; an MPI
built against any implementation (MPICH, Open MPI, Intel MPI) serves.
"""

import contextlib
import logging

import numpy as np

from .. import backend
from ..errors import CaffeError, install_hint
from .. import ranks

log = logging.getLogger("pycaffe_lite")

MPI_EXTRA = install_hint("mpi", "mpi4py mpich") + " (mpi4py and MPICH's mpiexec)"


def import_mpi():
    """mpi4py's ``MPI`` module (initialises MPI), or a CaffeError naming the ``mpi`` extra."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise CaffeError("data-parallel training needs mpi4py, which is not importable (%s): "
                         "%s" % (exc, MPI_EXTRA)) from None
    return MPI


class _Done:
    """The handle of an operation that is already complete."""

    def test(self):
        return True

    def wait(self):
        pass


class LocalComm:
    """One process: every collective is the identity."""

    rank = 0
    size = 1
    on_device = False
    name = "local"

    def start_allreduce(self, buf):
        return _Done()

    def allreduce(self, buf):
        pass

    def bcast(self, buf, root=0):
        pass

    def agree(self, code):
        return int(code)

    def barrier(self):
        pass

    def abort(self, code=1):
        raise SystemExit(code)


class _MPIRequest:
    def __init__(self, request, comm, what):
        self._request = request
        self._comm = comm
        self._what = what
        self._done = False

    def test(self):
        if not self._done:
            self._done = bool(self._request.Test())
        return self._done

    def wait(self):
        if not self._done:
            with self._comm.watched(self._what):
                self._request.Wait()
            self._done = True


class MPIComm:
    """An MPI communicator (``COMM_WORLD`` unless given). Buffers are host NumPy arrays."""

    on_device = False
    name = "MPI"

    def __init__(self, comm=None):
        self.MPI = import_mpi()
        self.comm = self.MPI.COMM_WORLD if comm is None else comm
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        # errors in a collective end the job (with the launcher's abort) instead of hanging
        self.comm.Set_errhandler(self.MPI.ERRORS_ARE_FATAL)
        self.watchdog = None
        self.activity = ""

    def note(self, activity):
        """What the collectives that follow are for (e.g. "iteration 12"), for the timeout's
        message."""
        self.activity = activity

    def set_timeout(self, seconds):
        """Guard every blocking wait with a collective timeout of ``seconds`` (0 or None: no
        timeout). Collective: every rank calls it at the same point."""
        if self.watchdog is not None:
            self.watchdog.close()
            self.watchdog = None
        if seconds and self.size > 1:
            from .watchdog import Watchdog
            self.watchdog = Watchdog(self.MPI, self.comm, seconds)

    def close(self):
        """Stop the watchdog (every rank, at the end of the job)."""
        self.set_timeout(None)

    @contextlib.contextmanager
    def watched(self, what):
        """Guard a blocking wait: the job ends if it lasts longer than the timeout."""
        watchdog = self.watchdog
        if watchdog is None:
            yield
            return
        watchdog.arm(what + (" (%s)" % self.activity if self.activity else ""))
        try:
            yield
        finally:
            watchdog.disarm()

    def start_allreduce(self, buf):
        if self.size == 1:
            return _Done()
        return _MPIRequest(self.comm.Iallreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM),
                           self, "an allreduce of %d bytes" % buf.nbytes)

    def allreduce(self, buf):
        if self.size > 1:
            with self.watched("an allreduce of %d bytes" % buf.nbytes):
                self.comm.Allreduce(self.MPI.IN_PLACE, buf, op=self.MPI.SUM)

    def bcast(self, buf, root=0):
        if self.size > 1:
            with self.watched("a broadcast of %d bytes from rank %d" % (buf.nbytes, root)):
                self.comm.Bcast(buf, root=root)

    def bcast_object(self, obj, root=0):
        with self.watched("a broadcast from rank %d" % root):
            return self.comm.bcast(obj, root=root)

    def allgather_object(self, obj, what="an exchange of descriptions"):
        """Every rank's ``obj`` (a small picklable value), in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        with self.watched(what):
            return self.comm.allgather(obj)

    def agree(self, code):
        if self.size == 1:
            return int(code)
        value = np.array([int(code)], np.int64)
        with self.watched("the ranks' agreement on stop and snapshot requests"):
            self.comm.Allreduce(self.MPI.IN_PLACE, value, op=self.MPI.MAX)
        return int(value[0])

    def barrier(self):
        with self.watched("a barrier"):
            self.comm.Barrier()

    def abort(self, code=1):
        """End the job (``MPI_Abort``) once the launcher has read this rank's last lines."""
        from .watchdog import wait_until_output_read
        wait_until_output_read()
        self.comm.Abort(code)


@contextlib.contextmanager
def _unwatched(what):
    yield


class _EventHandle:
    """A device collective in flight: ``event`` was recorded after it on the NCCL stream. Its
    one wait goes through the watch even when a test saw it complete (the watch counts the
    collectives)."""

    def __init__(self, event, watch, what):
        self._event = event
        self._watch = watch
        self._what = what
        self._done = False
        self._waited = False

    def test(self):
        if not self._done:
            self._done = bool(self._event.done)
        return self._done

    def wait(self):
        if not self._waited:
            self._watch.wait(self._event, self._what)
            self._done = self._waited = True


def _communicator(nccl, size, uid, rank):
    """CuPy's NcclCommunicator for ``uid``: bytes (``new_uid()``), or the tuple of C ``char``
    values CuPy's get_unique_id gives, which CuPy's constructor takes. ``char`` is signed on
    x86 and unsigned on ARM: CuPy refuses a value out of its range (OverflowError) before
    joining the other ranks, so the other reading is tried then."""
    if not isinstance(uid, (bytes, bytearray)):
        return nccl.NcclCommunicator(size, tuple(uid), rank)
    try:
        return nccl.NcclCommunicator(size, tuple(b - 256 if b > 127 else b for b in uid), rank)
    except OverflowError:
        return nccl.NcclCommunicator(size, tuple(uid), rank)


class NCCLComm:
    """NCCL through CuPy: buffers stay on the GPU, reduced device to device on a stream of
    their own (so a reduction overlaps the rest of the backward pass).

    ``uid``: ``NCCLComm.new_uid()`` on rank 0, handed to the other ranks (by MPI, or by the
    caller as in pycaffe's ``train.py``); ``mpi``: an :class:`MPIComm` for ``agree``/``abort``
    (optional); its collective timeout, when it has one, watches this communicator's set-up
    and waits too (:meth:`set_timeout` changes both)."""

    on_device = True
    name = "NCCL"

    def __init__(self, uid, rank=None, size=None, mpi=None):
        from .watchdog import DeviceWatch
        self.nccl = backend.nccl()
        self.rank = ranks.solver_rank() if rank is None else int(rank)
        self.size = ranks.solver_count() if size is None else int(size)
        self.mpi = mpi
        cp = backend.device_module()
        self.cp = cp
        # every rank must join (ncclCommInitRank waits for them all): with an MPI communicator
        # that has a collective timeout, its watchdog watches this wait
        watched = mpi.watched if mpi is not None else _unwatched
        with watched("NCCL's set-up of %d ranks (ncclCommInitRank)" % self.size):
            self.comm = _communicator(self.nccl, self.size, uid, self.rank)
        self.stream = cp.cuda.Stream(non_blocking=True)
        self.activity = ""
        watchdog = getattr(mpi, "watchdog", None)
        self.watch = DeviceWatch(self.comm, self.rank,
                                 watchdog.timeout if watchdog is not None else 0, watchdog)

    @staticmethod
    def new_uid():
        """A new NCCL unique id as ``bytes``, the type of pycaffe's ``NCCL.new_uid()`` (CuPy
        gives a tuple of C ``char`` values)."""
        return bytes(value & 0xFF for value in backend.nccl().get_unique_id())

    def note(self, activity):
        """What the collectives that follow are for (e.g. "iteration 12"), for the timeout's
        message."""
        self.activity = activity
        if self.mpi is not None:
            self.mpi.note(activity)

    def set_timeout(self, seconds):
        """Guard every wait with a collective timeout of ``seconds`` (0 or None: no timeout):
        a collective that has not completed by then stops NCCL (``ncclCommAbort``) and ends the
        job, through ``MPI_Abort`` with an MPI communicator (then collective: every rank calls
        it at the same point), else with a
        :class:`~pycaffe_lite.parallel.watchdog.CollectiveTimeoutError`."""
        from .watchdog import DeviceWatch
        seconds = float(seconds or 0.0)
        if not seconds >= 0:
            raise CaffeError("the collective timeout takes seconds >= 0 (0: no timeout), got "
                             "%g" % seconds)
        if self.mpi is not None:
            self.mpi.set_timeout(seconds)
        watchdog = getattr(self.mpi, "watchdog", None)
        self.watch = DeviceWatch(self.comm, self.rank, seconds, watchdog)

    def close(self):
        """Stop watching (every rank, at the end of the job)."""
        self.set_timeout(None)

    def _what(self, text):
        return text + (" (%s)" % self.activity if self.activity else "")

    def _after(self):
        """A CUDA event recorded after what the NCCL stream has been given so far."""
        event = self.cp.cuda.Event(disable_timing=True)
        event.record(self.stream)
        return event

    def _dtype(self, buf):
        if buf.dtype == np.float32:
            return self.nccl.NCCL_FLOAT32
        if buf.dtype == np.float64:
            return self.nccl.NCCL_FLOAT64
        raise CaffeError("NCCL reduces float32 or float64 buffers, not %s" % buf.dtype)

    def start_allreduce(self, buf):
        # the gradients were written on the current stream: the reduction waits for them
        self.stream.wait_event(self.cp.cuda.get_current_stream().record())
        self.comm.allReduce(buf.data.ptr, buf.data.ptr, buf.size, self._dtype(buf),
                            self.nccl.NCCL_SUM, self.stream.ptr)
        return _EventHandle(self._after(), self.watch,
                            self._what("an NCCL allreduce of %d bytes" % buf.nbytes))

    def allreduce(self, buf):
        self.start_allreduce(buf).wait()

    def bcast(self, buf, root=0):
        self.stream.wait_event(self.cp.cuda.get_current_stream().record())
        self.comm.bcast(buf.data.ptr, buf.size, self._dtype(buf), root, self.stream.ptr)
        self.watch.wait(self._after(), self._what("an NCCL broadcast of %d bytes from rank %d"
                                                  % (buf.nbytes, root)))

    def agree(self, code):
        if self.mpi is not None:
            return self.mpi.agree(code)
        value = self.cp.asarray(np.array([int(code)], np.float64))
        self.stream.wait_event(self.cp.cuda.get_current_stream().record())
        self.comm.allReduce(value.data.ptr, value.data.ptr, 1, self.nccl.NCCL_FLOAT64,
                            self.nccl.NCCL_MAX, self.stream.ptr)
        self.watch.wait(self._after(), self._what("an NCCL max for the ranks' agreement on "
                                                  "stop and snapshot requests"))
        return int(value.get()[0])

    def barrier(self):
        self.agree(0)

    def abort(self, code=1):
        """Stop NCCL's collectives (``ncclCommAbort``), then end the job (``MPI_Abort`` with an
        MPI communicator, else ``SystemExit``)."""
        try:
            self.comm.abort()
        finally:
            if self.mpi is not None:
                self.mpi.abort(code)
        raise SystemExit(code)
