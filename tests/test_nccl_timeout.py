"""The collective timeout of NCCL's waits (:class:`DeviceWatch`, :class:`NCCLComm`), on any
machine: CuPy's events, streams and NCCL communicator are fakes (tests/helpers/fake_nccl.py) whose
collectives complete when the test says so. A collective that completes returns without an
abort; one that never completes stops NCCL (``abort()``) and ends with an error naming the
collective, the rank and the timeout; timeout 0 waits without a deadline; a wait sleeps between
its looks (never spins). Whole processes: tests/test_collective_timeout.py; a real GPU:
tests/test_parallel_gpu.py."""

import contextlib
import logging
import os
import socket
import threading

import numpy as np
import pytest

from helpers import fake_nccl
from helpers.fake_nccl import FakeDeviceArray, FakeEvent, FakeStream
from helpers.fake_mpi import FakeComm, OneThreadMPI

from pycaffe_lite import backend
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.parallel import watchdog as wd
from pycaffe_lite.parallel.comm import NCCLComm
from pycaffe_lite.parallel.watchdog import CollectiveTimeoutError, DeviceWatch

#: a guard against a hang only: every wait below ends as soon as its event happens
GUARD_S = 60


class RecordingComm:
    """A device communicator whose ``abort()`` records the call."""

    def __init__(self):
        self.aborted = threading.Event()
        self.aborts = 0

    def abort(self):
        self.aborts += 1
        self.aborted.set()


class SignallingEvent(FakeEvent):
    """A fake event that also tells the test when the waiter has looked at it once."""

    def __init__(self, stream):
        super().__init__()
        self.looked = threading.Event()
        self.record(stream)

    @property
    def done(self):
        result = FakeEvent.done.fget(self)
        self.looked.set()  # after the look: the first one sees the collective in flight
        return result


def pending_stream():
    stream = FakeStream()
    stream.released.clear()
    return stream


class FakeTime:
    """A clock that moves only when the waiter sleeps; ``sleeps`` lists what it asked for. A
    waiter that reads it more than ``max_reads`` times (one that spins without sleeping, whose
    clock never moves) fails instead of hanging."""

    def __init__(self, max_reads=1000000):
        self.now = 1000.0
        self.sleeps = []
        self.reads = 0
        self.max_reads = max_reads

    def clock(self):
        self.reads += 1
        if self.reads > self.max_reads:
            raise AssertionError("the waiter read the clock %d times" % self.reads)
        return self.now

    def sleep(self, seconds):
        self.sleeps.append(seconds)
        self.now += seconds


def in_thread(fn):
    """Run ``fn`` in a thread; the result (or the exception) lands in ``box``."""
    box = {}

    def run():
        try:
            box["result"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            box["error"] = exc
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, box


# ---- DeviceWatch -------------------------------------------------------------------------------
def test_a_collective_that_completes_returns_without_abort():
    comm = RecordingComm()
    watch = DeviceWatch(comm, rank=1, timeout=60)
    stream = pending_stream()
    event = SignallingEvent(stream)
    thread, box = in_thread(lambda: watch.wait(event, "an NCCL allreduce of 64 bytes"))
    assert event.looked.wait(GUARD_S)   # the waiter is polling: the collective is in flight
    stream.released.set()               # the collective completes
    thread.join(GUARD_S)
    assert not thread.is_alive() and box == {"result": None}
    assert comm.aborts == 0 and watch.fired is None and watch.count == 1
    assert event.syncs == 0 and event.looks == watch.polls >= 2


def test_a_complete_collective_is_seen_at_the_first_look_without_sleeping():
    fake = FakeTime()
    watch = DeviceWatch(RecordingComm(), 0, 5, clock=fake.clock, sleep=fake.sleep)
    event = FakeEvent()
    event.record(FakeStream())  # released from the start
    watch.wait(event, "an NCCL broadcast of 8 bytes from rank 0")
    assert watch.polls == 1 and fake.sleeps == []


def test_a_collective_that_never_completes_aborts_nccl_and_names_it(caplog):
    comm = RecordingComm()
    watch = DeviceWatch(comm, rank=3, timeout=0.2)
    event = FakeEvent()
    event.record(pending_stream())  # a peer that never joins: never released
    with caplog.at_level(logging.ERROR, logger="pycaffe_lite"):
        with pytest.raises(CollectiveTimeoutError) as info:
            watch.wait(event, "an NCCL allreduce of 4096 bytes (iteration 7)")
    assert isinstance(info.value, CaffeError)
    text = str(info.value)
    assert text.startswith("collective timeout: rank 3 (%s, pid %d) waited "
                           % (socket.gethostname(), os.getpid()))
    assert ("(--collective_timeout 0.2) for an NCCL allreduce of 4096 bytes (iteration 7), "
            "NCCL collective #1 of this rank; cannot tell which rank stopped answering") in text
    assert comm.aborts == 1 and watch.fired == text
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and logged[0].endswith(text + "; aborting NCCL"), logged
    assert event.syncs == 0 and event.looks >= 2


def test_timeout_zero_waits_without_a_deadline_and_never_aborts():
    clock_calls = []

    def clock():
        clock_calls.append(1)
        return 0.0
    comm = RecordingComm()
    watch = DeviceWatch(comm, 0, 0, clock=clock)
    stream = pending_stream()
    entered = threading.Event()

    class Blocking(FakeEvent):
        def synchronize(self):
            entered.set()
            super().synchronize()
    event = Blocking()
    event.record(stream)
    thread, box = in_thread(lambda: watch.wait(event, "an NCCL allreduce of 64 bytes"))
    assert entered.wait(GUARD_S)       # blocked in the stream's own wait
    assert thread.is_alive() and comm.aborts == 0
    stream.released.set()
    thread.join(GUARD_S)
    assert not thread.is_alive() and box == {"result": None}
    assert comm.aborts == 0 and watch.fired is None
    assert clock_calls == [] and watch.polls == 0  # no deadline was ever computed


@pytest.mark.parametrize("value", [-1.0, float("nan")])
def test_a_negative_timeout_is_refused(value):
    with pytest.raises(CaffeError, match="collective timeout takes seconds >= 0"):
        DeviceWatch(RecordingComm(), 0, value)


def backoff_sleeps(timeout):
    """The sleeps a wait that never completes asks for, from the back-off's definition: the
    first POLL_FIRST_S, each next POLL_GROWTH times longer up to POLL_MAX_S, the last cut at
    the deadline."""
    sleeps, pause, left = [], wd.POLL_FIRST_S, timeout
    while left > 1e-12:
        sleeps.append(min(pause, left))
        left -= sleeps[-1]
        pause = min(pause * wd.POLL_GROWTH, wd.POLL_MAX_S)
    return sleeps


@pytest.mark.parametrize("timeout", [0.2, 30.0])
def test_the_waiter_sleeps_between_looks_and_never_spins(timeout):
    fake = FakeTime()
    comm = RecordingComm()
    watch = DeviceWatch(comm, 0, timeout, clock=fake.clock, sleep=fake.sleep)
    event = FakeEvent()
    event.record(pending_stream())
    with pytest.raises(CollectiveTimeoutError):
        watch.wait(event, "an NCCL allreduce of 64 bytes")
    expected = backoff_sleeps(timeout)
    assert len(fake.sleeps) == len(expected)
    assert fake.sleeps[:-1] == pytest.approx(expected[:-1], rel=1e-6, abs=1e-9)
    # the last sleep is what is left to the deadline: the sums' rounding, over 10^5 sleeps
    assert fake.sleeps[-1] == pytest.approx(expected[-1], abs=1e-6)
    # one look per sleep and one at the deadline
    assert watch.polls == event.looks == len(expected) + 1
    # at most 1 / POLL_MAX_S looks a second once the back-off has grown, whatever the wait
    ramp = sum(1 for s in expected if s < wd.POLL_MAX_S)
    assert watch.polls <= ramp + timeout / wd.POLL_MAX_S + 2
    assert comm.aborts == 1


def test_a_completion_is_seen_at_the_next_look():
    fake = FakeTime()
    stream = pending_stream()

    class CompletesAtTheTenthLook(FakeEvent):
        @property
        def done(self):
            if self.looks == 9:
                stream.released.set()
            return FakeEvent.done.fget(self)
    event = CompletesAtTheTenthLook()
    event.record(stream)
    watch = DeviceWatch(RecordingComm(), 0, 5, clock=fake.clock, sleep=fake.sleep)
    watch.wait(event, "an NCCL allreduce of 64 bytes")
    assert watch.polls == 10 and len(fake.sleeps) == 9
    assert fake.sleeps == pytest.approx(backoff_sleeps(5)[:9])


class FakeWatchdog:
    """The job's MPI watchdog as DeviceWatch uses it: the message with the silent ranks, and
    the end of the job (which never returns: here it raises SystemExit)."""

    timeout = 0.2

    def __init__(self):
        self.ended = []

    def stall_message(self, what, waited, count, now):
        return "stalled: %s; %s" % (what, count)

    def end_job(self, text, first=None):
        first()
        self.ended.append(text)
        raise SystemExit(1)


def test_with_an_mpi_watchdog_the_job_ends_through_it_after_nccl_stops():
    comm, dog, fake = RecordingComm(), FakeWatchdog(), FakeTime()
    watch = DeviceWatch(comm, 0, 0.2, watchdog=dog, clock=fake.clock, sleep=fake.sleep)
    event = FakeEvent()
    event.record(pending_stream())
    with pytest.raises(SystemExit):
        watch.wait(event, "an NCCL broadcast of 8 bytes from rank 0")
    assert comm.aborts == 1
    assert dog.ended == ["stalled: an NCCL broadcast of 8 bytes from rank 0; NCCL collective "
                         "#1 of this rank"]


def test_the_message_names_the_ranks_the_watchdog_has_not_heard_from():
    dog = wd.Watchdog(OneThreadMPI, FakeComm(0, 3), 4)
    try:
        watch = DeviceWatch(RecordingComm(), 0, 4, watchdog=dog)
        watch.count = 12
        now = 500.0
        dog.last_heard = {1: now - 0.2, 2: now - 3.5}
        dog._hb = object()  # as if heartbeats ran
        try:
            text = watch.message("an NCCL allreduce of 4096 bytes (iteration 7)", 4.25, now)
        finally:
            dog._hb = None
    finally:
        dog.close()
    assert text == ("collective timeout: rank 0 (h1, pid 2000) waited 4.2 s "
                    "(--collective_timeout 4) for an NCCL allreduce of 4096 bytes "
                    "(iteration 7), NCCL collective #12 of this rank; stopped answering: "
                    "rank 2 (h3, pid 2002), not heard from for 3.5 s")


# ---- NCCLComm ----------------------------------------------------------------------------------
@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setattr(backend, "nccl", lambda: fake_nccl.nccl)
    monkeypatch.setattr(backend, "device_module", lambda: fake_nccl.cupy)
    monkeypatch.setitem(fake_nccl.STATE, "hang", False)
    return fake_nccl.STATE


def buffer(n=1024, dtype=np.float32):
    return FakeDeviceArray(np.zeros(n, dtype))


OPERATIONS = {
    "allreduce": (lambda comm: comm.allreduce(buffer()), "an NCCL allreduce of 4096 bytes"),
    "bcast": (lambda comm: comm.bcast(buffer(), 1),
              "an NCCL broadcast of 4096 bytes from rank 1"),
    "agree": (lambda comm: comm.agree(2), "an NCCL max for the ranks' agreement on stop and "
              "snapshot requests"),
}


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_every_nccl_wait_is_watched(fakes, op):
    run, what = OPERATIONS[op]
    fakes["hang"] = True  # the communicator's stream never finishes: a hung peer
    comm = NCCLComm(b"uid", rank=1, size=2)
    assert comm.watch.timeout == 0  # no timeout until one is set
    comm.set_timeout(0.2)
    comm.note("iteration 3")
    with pytest.raises(CollectiveTimeoutError) as info:
        run(comm)
    assert comm.comm.aborted == 1
    assert comm.comm.calls[-1][0] == ("bcast" if op == "bcast" else "allReduce")
    assert ("waited" in str(info.value) and "(--collective_timeout 0.2) for %s (iteration 3), "
            "NCCL collective #1 of this rank" % what in str(info.value))
    assert str(info.value).startswith("collective timeout: rank 1 ")


@pytest.mark.parametrize("op", sorted(OPERATIONS))
def test_nccl_collectives_that_complete_are_not_aborted(fakes, op):
    run, _ = OPERATIONS[op]
    comm = NCCLComm(b"uid", rank=0, size=2)
    comm.set_timeout(60)
    result = run(comm)
    if op == "agree":
        assert result == 2  # the fake does not reduce: this rank's own code comes back
    assert comm.comm.aborted == 0 and comm.watch.count == 1 and comm.watch.polls == 1
    # the collective waited for the current stream (where its input was written)
    assert comm.stream.waited_on


def test_a_started_allreduce_is_tested_and_waited_through_its_own_event(fakes):
    fakes["hang"] = True
    comm = NCCLComm(b"uid", rank=0, size=2)
    comm.set_timeout(60)
    handle = comm.start_allreduce(buffer())
    assert handle.test() is False
    thread, box = in_thread(handle.wait)
    comm.stream.released.set()  # the collective completes
    thread.join(GUARD_S)
    assert not thread.is_alive() and box == {"result": None}
    assert handle.test() is True and comm.comm.aborted == 0
    # a collective seen complete by a test is counted by its wait all the same
    second = comm.start_allreduce(buffer())
    assert second.test() is True
    second.wait()
    second.wait()
    assert comm.watch.count == 2 and comm.comm.aborted == 0


def test_timeout_zero_turns_the_watch_off(fakes):
    comm = NCCLComm(b"uid", rank=0, size=2)
    comm.set_timeout(5)
    comm.set_timeout(0)
    assert comm.watch.timeout == 0
    comm.allreduce(buffer())
    assert comm.watch.polls == 0 and comm.comm.aborted == 0


class FakeMPI:
    """An MPIComm as NCCLComm uses it: its watchdog, its timeout, its watched waits and its
    agreement."""

    def __init__(self, watchdog):
        self.watchdog = watchdog
        self.notes, self.timeouts, self.watched_waits = [], [], []

    @contextlib.contextmanager
    def watched(self, what):
        self.watched_waits.append(what)
        yield

    def note(self, activity):
        self.notes.append(activity)

    def set_timeout(self, seconds):
        self.timeouts.append(seconds)

    def agree(self, code):
        return code + 100


def test_an_nccl_comm_takes_the_timeout_of_its_mpi_comm(fakes):
    dog = FakeWatchdog()
    mpi = FakeMPI(dog)
    comm = NCCLComm(b"uid", rank=0, size=2, mpi=mpi)
    assert comm.watch.timeout == 0.2 and comm.watch.watchdog is dog
    assert mpi.watched_waits == ["NCCL's set-up of 2 ranks (ncclCommInitRank)"]
    comm.note("iteration 9")
    assert mpi.notes == ["iteration 9"]
    assert comm.agree(1) == 101  # through MPI, watched by its own watchdog
    comm.set_timeout(7)
    assert mpi.timeouts == [7] and comm.watch.timeout == 7
    with pytest.raises(CaffeError, match="collective timeout takes seconds >= 0"):
        comm.set_timeout(-3)
    assert mpi.timeouts == [7] and comm.watch.timeout == 7  # refused before anything changed
    comm.close()
    assert mpi.timeouts == [7, 0] and comm.watch.timeout == 0
