"""The collective timeout: a rank that waits too long in a collective ends the whole job.

On a cluster the usual failure is not a crash but a hang: a link goes down or a node freezes,
and every other rank waits in its allreduce forever. :class:`Watchdog` guards every blocking
wait of an :class:`~pycaffe_lite.parallel.comm.MPIComm`:

- the rank's main thread *arms* the watchdog (a deadline ``timeout`` seconds away) before it
  waits for a collective and *disarms* it after; a thread of the watchdog's own sleeps on an
  event between short checks (it never spins a core) and, when an armed deadline passes, logs
  which collective stalled and which ranks stopped answering, waits (at most 2 s) until the
  launcher has read that message, then calls ``MPI_Abort`` so that the launcher ends every
  process of the job;
- to name the ranks that stopped answering, the watchdog threads exchange heartbeats (a tiny
  message to every other rank every ``period`` seconds, on a communicator of their own): a rank
  whose heartbeats stopped arriving is frozen, dead, or behind a cut link. Heartbeats need
  ``MPI_THREAD_MULTIPLE`` (mpi4py asks for it); without it the error names the stalled
  collective only.

NCCL's collectives run on a CUDA stream, and a hung peer keeps the stream from ever finishing.
:class:`DeviceWatch` guards the waits of an :class:`~pycaffe_lite.parallel.comm.NCCLComm` with the
same timeout: the waiting thread itself looks at a CUDA event recorded after the collective, with
sleeps that grow from :data:`POLL_FIRST_S` to :data:`POLL_MAX_S` (a wait never spins a core, and
a collective that completes is seen at most one sleep late), until the event has completed or
the deadline has passed. Then it logs the stalled collective (with the silent ranks, where the
job's MPI watchdog exchanges heartbeats), stops the NCCL kernels (``ncclCommAbort``) and ends
the job through ``MPI_Abort`` when the ranks were started through MPI, or raises
:class:`CollectiveTimeoutError` when they were not.

A job whose rank 0 tests or snapshots for a long time makes the others wait in their next
collective meanwhile: the timeout must be longer than that (the default is 30 minutes).
"""

import fcntl
import logging
import os
import socket
import stat
import struct
import sys
import termios
import threading
import time

import numpy as np

from ..errors import CaffeError

log = logging.getLogger("pycaffe_lite")

#: the default of ``pycaffe-lite train --collective_timeout`` (seconds; 0 turns it off)
DEFAULT_TIMEOUT_S = 1800.0
_HEARTBEAT_TAG = 29029
#: seconds a rank may be late with its heartbeats, beyond three periods, before it counts as
#: silent (a quarter of the timeout where that is less): a busy machine delays a thread's
#: wake-up by that much, a frozen rank stays silent for the whole timeout
SILENCE_SLACK_S = 1.0
#: a watched wait for a device collective looks at its event first after POLL_FIRST_S, then
#: POLL_GROWTH times later each time, at most POLL_MAX_S apart
POLL_FIRST_S = 50e-6
POLL_GROWTH = 1.5
POLL_MAX_S = 2e-4


class CollectiveTimeoutError(CaffeError):
    """A collective that did not complete within the collective timeout, on a rank that cannot
    end the job through MPI (its ranks were not started through MPI): names the collective,
    the rank and the timeout."""


def heartbeat_period(timeout):
    """Seconds between heartbeats: a tenth of the timeout, within 0.1 .. 10 s."""
    return min(max(timeout / 10.0, 0.1), 10.0)


def flush_logs():
    """Flush the log handlers and the standard streams (a closed one is passed over): what a
    rank says before it aborts the job."""
    for handler in logging.getLogger().handlers + log.handlers:
        try:
            handler.flush()
        except Exception:  # a closed stream must not stop the abort
            pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _unread_bytes(fd):
    """Bytes written to the pipe ``fd`` that its reader has not read yet; None where ``fd`` is
    not a pipe (a terminal, a file) or cannot be asked."""
    try:
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return None
        count = bytearray(struct.calcsize("i"))
        fcntl.ioctl(fd, termios.FIONREAD, count)
    except OSError:
        return None
    return struct.unpack("i", bytes(count))[0]


def wait_until_output_read(fds=(1, 2), limit=2.0, poll=0.01, clock=time.monotonic,
                           sleep=time.sleep):
    """Wait, at most ``limit`` seconds, until the reader of this process's stdout and stderr
    pipes (MPI's launcher, which forwards a rank's output to ``mpiexec``) has read what was
    written to them (``fds``: the descriptors to wait for). ``MPI_Abort`` races the output:
    the launcher acts on the abort at once and may end the job before it has forwarded the
    lines written just before, the very lines that say why the job ends."""
    deadline = clock() + limit
    for fd in fds:
        while True:
            unread = _unread_bytes(fd)
            if not unread or clock() >= deadline:
                break
            sleep(poll)


class Watchdog:
    """Watch the blocking collectives of one rank of ``comm`` (an mpi4py communicator).

    Collective to create (it gathers every rank's host and pid), and to :meth:`close`.
    ``abort``: what ends the job (default ``comm.Abort(1)``)."""

    def __init__(self, MPI, comm, timeout, abort=None):
        self.timeout = float(timeout)
        self.period = heartbeat_period(self.timeout)
        self.rank, self.size = comm.Get_rank(), comm.Get_size()
        self._clock = time.monotonic
        self._abort = abort or (lambda: comm.Abort(1))
        self.where = comm.allgather((socket.gethostname(), os.getpid()))
        self._lock = threading.Lock()
        self._armed = None            # (deadline, what, started) while a wait is armed
        self._count = 0               # collectives waited for so far
        self._wake = threading.Event()
        self._stop = False
        self.fired = None
        now = self._clock()
        self.last_heard = {r: now for r in range(self.size) if r != self.rank}
        self._hb = None
        if self.size > 1 and MPI.Query_thread() >= MPI.THREAD_MULTIPLE:
            self._hb = comm.Dup()
            self._hb_out = np.ones(1, np.int64)  # never written: sends may share it
            self._hb_in = {r: np.zeros(1, np.int64) for r in self.last_heard}
            self._recvs = {r: self._hb.Irecv(self._hb_in[r], r, _HEARTBEAT_TAG)
                           for r in self.last_heard}
            self._sends = {}
        self._thread = threading.Thread(target=self._run, name="collective-watchdog",
                                        daemon=True)
        self._thread.start()

    def describe_rank(self, rank):
        host, pid = self.where[rank]
        return "rank %d (%s, pid %d)" % (rank, host, pid)

    # -- the main thread's side --------------------------------------------------------------
    def arm(self, what):
        with self._lock:
            self._count += 1
            now = self._clock()
            self._armed = (now + self.timeout, what, now)

    def disarm(self):
        with self._lock:
            self._armed = None

    def close(self):
        """Stop the thread and retire the heartbeat requests. Collective (every rank, at the
        job's end): no rank stops listening before every rank has stopped sending, so a rank
        still writing its last snapshot never sends to one that has left."""
        self._stop = True
        self._wake.set()
        self._thread.join()
        if self._hb is not None:
            for req in self._sends.values():
                req.Wait()
            self._hb.Barrier()
            for req in self._recvs.values():
                req.Cancel()
                req.Wait()
            self._recvs, self._sends = {}, {}

    # -- the watchdog thread -----------------------------------------------------------------
    def _run(self):
        while not self._stop:
            self._wake.wait(self.period)
            self._wake.clear()
            if self._stop:
                return
            self._heartbeat()
            with self._lock:
                armed = self._armed
            if armed is not None and self._clock() >= armed[0]:
                self._fire(armed)
                return

    def _heartbeat(self):
        if self._hb is None:
            return
        now = self._clock()
        for r, req in self._recvs.items():
            if req.Test():
                self.last_heard[r] = now
                self._recvs[r] = self._hb.Irecv(self._hb_in[r], r, _HEARTBEAT_TAG)
        for r in self.last_heard:
            pending = self._sends.get(r)
            if pending is None or pending.Test():  # never pile up sends to a silent rank
                self._sends[r] = self._hb.Isend(self._hb_out, r, _HEARTBEAT_TAG)

    def silent_ranks(self, now=None):
        """The other ranks not heard from for more than three heartbeat periods and a slack
        (:data:`SILENCE_SLACK_S`, at most a quarter of the timeout)."""
        now = self._clock() if now is None else now
        limit = 3 * self.period + min(SILENCE_SLACK_S, self.timeout / 4.0)
        return sorted(r for r, t in self.last_heard.items() if now - t > limit)

    def message(self, armed, now):
        deadline, what, started = armed
        return self.stall_message(what, now - started, "collective #%d of this rank"
                                  % self._count, now)

    def stall_message(self, what, waited, count, now):
        """What a rank that waited ``waited`` seconds for ``what`` (``count``: which of its
        collectives) says: the collective, and the ranks that stopped answering."""
        text = ("collective timeout: %s waited %.1f s (--collective_timeout %g) for %s, %s"
                % (self.describe_rank(self.rank), waited, self.timeout, what, count))
        if self._hb is None:
            return text + "; cannot tell which rank stopped answering (no heartbeats: MPI " \
                "without MPI_THREAD_MULTIPLE)"
        silent = self.silent_ranks(now)
        if silent:
            return text + "; stopped answering: " + ", ".join(
                "%s, not heard from for %.1f s" % (self.describe_rank(r),
                                                   now - self.last_heard[r]) for r in silent)
        return text + "; every rank still answers heartbeats (a rank is in another " \
            "collective, or one is slower than the timeout)"

    def _fire(self, armed):
        self.end_job(self.message(armed, self._clock()))

    def end_job(self, text, first=None):
        """Log ``text``, run ``first`` (what must stop before the job ends: the NCCL kernels),
        then end the job through ``MPI_Abort`` and this process with it. Never returns."""
        self.fired = text
        log.error("%s; aborting the job", text)
        flush_logs()
        if first is not None:
            try:
                first()
            except Exception as exc:  # noqa: BLE001 - the job must end all the same
                log.error("stopping the device's collectives failed (%s: %s)",
                          type(exc).__name__, exc)
                flush_logs()
        wait_until_output_read()
        self._abort()
        # MPI_Abort told the launcher (which ends every process it can reach) and, called from
        # a thread, may return: this rank ends itself all the same
        time.sleep(1.0)
        os._exit(1)


class DeviceWatch:
    """The collective timeout of a device communicator's waits (NCCL through CuPy).

    ``comm``: the device communicator, ``abort()`` stops its collectives (CuPy's
    ``NcclCommunicator.abort``: ``ncclCommAbort``); ``rank``: this rank; ``timeout``: seconds
    (0: wait without a limit); ``watchdog``: the job's MPI :class:`Watchdog`, where the ranks
    were started through MPI: its heartbeats name the ranks that stopped answering and the job
    ends through it (``MPI_Abort``). Without it an expired wait raises
    :class:`CollectiveTimeoutError`. ``clock`` and ``sleep`` are the time the waits read and
    pass (a test's own clock makes them independent of the machine's speed)."""

    def __init__(self, comm, rank, timeout, watchdog=None, clock=time.monotonic,
                 sleep=time.sleep):
        timeout = float(timeout or 0.0)
        if not timeout >= 0:
            raise CaffeError("the collective timeout takes seconds >= 0 (0: no timeout), got "
                             "%g" % timeout)
        self.comm = comm
        self.rank = int(rank)
        self.timeout = timeout
        self.watchdog = watchdog
        self._clock = clock
        self._sleep = sleep
        self.count = 0     # collectives waited for so far
        self.polls = 0     # looks at an event's completion so far
        self.fired = None

    def wait(self, event, what):
        """Wait until ``event`` (a CUDA event recorded after the collective: ``done``,
        ``synchronize()``) has completed; ``what``: the collective, for the message. With a
        timeout, the job ends when the event has not completed ``timeout`` seconds on."""
        self.count += 1
        if not self.timeout:
            event.synchronize()
            return
        start = self._clock()
        deadline = start + self.timeout
        pause = POLL_FIRST_S
        while True:
            self.polls += 1
            if event.done:
                return
            now = self._clock()
            if now >= deadline:
                self._expire(what, now - start, now)
            self._sleep(min(pause, deadline - now))
            pause = min(pause * POLL_GROWTH, POLL_MAX_S)

    def message(self, what, waited, now):
        count = "NCCL collective #%d of this rank" % self.count
        if self.watchdog is not None:
            return self.watchdog.stall_message(what, waited, count, now)
        return ("collective timeout: rank %d (%s, pid %d) waited %.1f s (--collective_timeout "
                "%g) for %s, %s; cannot tell which rank stopped answering (no heartbeats: the "
                "ranks were not started through MPI)"
                % (self.rank, socket.gethostname(), os.getpid(), waited, self.timeout, what,
                   count))

    def _expire(self, what, waited, now):
        text = self.fired = self.message(what, waited, now)
        if self.watchdog is not None:
            self.watchdog.end_job(text, first=self.comm.abort)  # never returns
        log.error("%s; aborting NCCL", text)
        flush_logs()
        try:
            self.comm.abort()
        except Exception as exc:  # noqa: BLE001 - the timeout is the error to report
            log.error("aborting NCCL failed (%s: %s)", type(exc).__name__, exc)
        raise CollectiveTimeoutError(text)
