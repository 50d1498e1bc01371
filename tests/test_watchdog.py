"""The collective timeout's parts, without MPI: which ranks count as silent and the message that
names them; and its last step before ``MPI_Abort``, which waits until the launcher has read the
lines that say why the job ends (the launcher acts on the abort at once and would otherwise drop
them). Real pipes; the clocks are the test's, so nothing waits on time. The whole path with real
processes: tests/test_collective_timeout.py and tests/test_multi_host.py."""

import os

import pytest
from helpers.fake_mpi import FakeComm, OneThreadMPI

from pycaffe_lite.parallel.watchdog import Watchdog, _unread_bytes, wait_until_output_read


class FakeTime:
    """A clock that moves only when the waiter sleeps; ``on_sleep(n)`` runs at the n-th sleep."""

    def __init__(self, on_sleep=None):
        self.now = 100.0
        self.sleeps = 0
        self.on_sleep = on_sleep

    def clock(self):
        return self.now

    def sleep(self, seconds):
        self.sleeps += 1
        self.now += seconds
        if self.on_sleep is not None:
            self.on_sleep(self.sleeps)


def test_unread_bytes_counts_what_the_reader_has_not_taken(tmp_path):
    r, w = os.pipe()
    try:
        assert _unread_bytes(w) == 0
        os.write(w, b"collective timeout\n")
        assert _unread_bytes(w) == 19
        os.read(r, 7)
        assert _unread_bytes(w) == 12
    finally:
        os.close(r)
        os.close(w)
    with open(tmp_path / "log.txt", "w") as f:
        assert _unread_bytes(f.fileno()) is None  # a file: nothing to wait for
    assert _unread_bytes(10 ** 6) is None  # not open


def test_the_wait_ends_when_the_reader_has_read_everything():
    r, w = os.pipe()
    try:
        os.write(w, b"E1125 collective timeout: rank 0 (h1, pid 7) ...\n")
        taken = []

        def reader_reads_at_third_sleep(n):
            if n == 3:
                taken.append(os.read(r, 4096))

        fake = FakeTime(reader_reads_at_third_sleep)
        wait_until_output_read(fds=(w,), limit=2.0, poll=0.01, clock=fake.clock,
                               sleep=fake.sleep)
        assert fake.sleeps == 3 and taken[0].startswith(b"E1125 collective timeout")
    finally:
        os.close(r)
        os.close(w)


def test_a_reader_that_never_reads_is_waited_for_at_most_the_limit():
    r, w = os.pipe()
    r2, w2 = os.pipe()
    try:
        os.write(w, b"never read\n")
        os.write(w2, b"never read either\n")
        fake = FakeTime()
        wait_until_output_read(fds=(w, w2), limit=0.5, poll=0.01, clock=fake.clock,
                               sleep=fake.sleep)
        # the limit holds for both descriptors together, not for each
        assert 0.5 <= fake.now - 100.0 < 0.5 + 0.01 + 1e-9
        assert fake.sleeps == 50
    finally:
        for fd in (r, w, r2, w2):
            os.close(fd)


def test_nothing_written_means_no_wait():
    r, w = os.pipe()
    try:
        fake = FakeTime()
        wait_until_output_read(fds=(w,), clock=fake.clock, sleep=fake.sleep)
        assert fake.sleeps == 0
    finally:
        os.close(r)
        os.close(w)


# ---- naming the ranks that stopped answering -------------------------------------------------
@pytest.fixture
def watchdog():
    made = []

    def make(timeout, rank=0, size=4):
        # two ranks a host: h1 runs ranks 0 and 1, ...
        dog = Watchdog(OneThreadMPI, FakeComm(rank, size, lambda r: "h%d" % (r // 2 + 1),
                                              1000), timeout)
        made.append(dog)
        return dog
    yield make
    for dog in made:
        dog.close()


@pytest.mark.parametrize("timeout,period,slack", [(4, 0.4, 1.0), (3, 0.3, 0.75),
                                                   (0.5, 0.1, 0.125), (1800, 10.0, 1.0)])
def test_a_rank_is_silent_after_three_periods_and_the_slack(watchdog, timeout, period, slack):
    dog = watchdog(timeout)
    assert dog.period == pytest.approx(period)
    limit = 3 * period + slack
    assert limit < timeout  # a rank frozen for the whole wait is always named
    t = 50.0
    dog.last_heard = {1: t, 2: t - limit * 0.999, 3: t - limit * 1.001}
    assert dog.silent_ranks(now=t) == [3]
    assert dog.silent_ranks(now=t + limit * 1.01) == [1, 2, 3]


def test_the_message_names_the_stalled_collective_and_the_silent_ranks(watchdog):
    dog = watchdog(4, rank=0, size=3)
    dog.arm("an allreduce of 492 bytes (iteration 21)")
    deadline, what, started = dog._armed
    now = started + 4.5
    dog.last_heard = {1: now - 0.5, 2: now - 3.0}  # rank 1 answers, rank 2 is silent
    dog._hb = object()  # as if heartbeats ran: the silent ranks are named
    try:
        text = dog.message((deadline, what, started), now)
    finally:
        dog._hb = None
    assert text == ("collective timeout: rank 0 (h1, pid 1000) waited 4.5 s "
                    "(--collective_timeout 4) for an allreduce of 492 bytes (iteration 21), "
                    "collective #1 of this rank; stopped answering: rank 2 (h2, pid 1002), "
                    "not heard from for 3.0 s")
    dog.last_heard = {1: now - 0.5, 2: now - 0.5}
    dog._hb = object()
    try:
        text = dog.message((deadline, what, started), now)
    finally:
        dog._hb = None
    assert text.endswith("; every rank still answers heartbeats (a rank is in another "
                         "collective, or one is slower than the timeout)")


def test_without_heartbeats_the_message_says_it_cannot_tell(watchdog):
    dog = watchdog(4, rank=1, size=2)
    dog.arm("a barrier")
    text = dog.message(dog._armed, dog._armed[2] + 4.0)
    assert text.startswith("collective timeout: rank 1 (h1, pid 1001) waited 4.0 s")
    assert "cannot tell which rank stopped answering" in text
