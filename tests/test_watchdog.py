"""The collective timeout's last step before ``MPI_Abort``: it waits until the launcher has read
the lines that say why the job ends (the launcher acts on the abort at once and would otherwise
drop them). Real pipes; the clock and the sleep are the test's, so nothing waits on time."""

import os

from pycaffe_lite.parallel.watchdog import _unread_bytes, wait_until_output_read


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
