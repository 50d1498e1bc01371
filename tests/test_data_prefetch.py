"""The Prefetcher: ordered delivery from several threads, errors, stop/restart, cleanup."""

import threading
import time

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.data.prefetch import PrefetchError, Prefetcher


class Counter:
    """A producer whose batch k holds k everywhere; fill takes longer for even batches so
    that threads finish out of order."""

    def __init__(self, fail_plan_at=None, fail_fill_at=None):
        self.next = 0
        self.fail_plan_at = fail_plan_at
        self.fail_fill_at = fail_fill_at
        self.filled_by = set()

    def plan(self):
        k = self.next
        if k == self.fail_plan_at:
            raise ValueError("plan %d broke" % k)
        self.next += 1
        return k, {"next": self.next}

    def fill(self, k, blobs):
        self.filled_by.add(threading.current_thread().name)
        if k == self.fail_fill_at:
            raise RuntimeError("record %d is corrupt" % k)
        time.sleep(0.02 if k % 2 == 0 else 0.001)
        blobs[0].data[...] = k


def _make(prod, count=3, threads=3):
    return Prefetcher(prod.plan, prod.fill, lambda: [Blob((2, 3), np.float32)], count=count,
                      threads=threads, name="test", initial_state={"next": 0})


def test_batches_arrive_in_order_from_several_threads():
    prod = Counter()
    pf = _make(prod)
    pf.start()
    assert pf.state == {"next": 0}
    got = []
    for _ in range(12):
        blobs = pf.next()
        got.append(float(blobs[0].data[0, 0]))
        assert pf.state == {"next": len(got)}  # the state after the delivered batch
    assert got == list(range(12))
    assert len(prod.filled_by) >= 2
    pf.close()
    assert not pf.running


def test_batches_reuse_preallocated_storage():
    pf = _make(Counter(), count=2, threads=1)
    pf.start()
    arrays = {id(pf.next()[0]) for _ in range(10)}
    assert len(arrays) <= 3  # count + 1 batches, recycled
    pf.close()


@pytest.mark.parametrize("where", ["plan", "fill"])
def test_an_error_reaches_the_consumer_in_order_with_its_message(where):
    prod = Counter(**{"fail_%s_at" % where: 4})
    pf = _make(prod)
    pf.start()
    for k in range(4):
        assert pf.next()[0].data[0, 0] == k
    message = "plan 4 broke" if where == "plan" else "record 4 is corrupt"
    with pytest.raises(PrefetchError, match=message) as info:
        pf.next()
    assert isinstance(info.value.__cause__, ValueError if where == "plan" else RuntimeError)
    with pytest.raises(PrefetchError, match=message):
        pf.next()  # sticky
    for t in pf.worker_threads:  # they stop after the failure
        t.join(600)  # a guard against a hang only
    assert not pf.running
    pf.close()


def test_stop_drops_loaded_batches_and_restart_continues_from_the_producer():
    prod = Counter()
    pf = _make(prod)
    pf.start()
    assert pf.next()[0].data[0, 0] == 0
    while prod.next <= 2:  # the threads run ahead of the consumer
        time.sleep(0.001)
    pf.stop()
    assert prod.next > 2
    prod.next = 1  # rewind the producer to the state after batch 0
    pf.restart({"next": 1})
    assert [float(pf.next()[0].data[0, 0]) for _ in range(3)] == [1, 2, 3]
    pf.close()


def test_synchronous_mode_loads_in_next():
    prod = Counter(fail_fill_at=2)
    pf = _make(prod, count=0)
    pf.start()
    assert not pf.running
    assert pf.next()[0].data[0, 0] == 0 and prod.next == 1
    assert pf.next()[0].data[0, 0] == 1
    with pytest.raises(PrefetchError, match="record 2 is corrupt"):
        pf.next()


def test_threads_end_when_the_prefetcher_is_dropped():
    pf = _make(Counter(), count=2, threads=2)
    pf.start()
    threads = pf.worker_threads
    assert len(threads) == 2 and all(t.is_alive() for t in threads)
    pf.next()
    del pf  # the last reference: the finalizer stops the threads (a thread busy filling a
    # batch holds the prefetcher until it finishes, and then runs the finalizer itself)
    for t in threads:
        t.join(60)  # a guard against a hang, not a speed assumption
        assert not t.is_alive()


def test_close_ends_the_threads_after_an_interrupt_left_the_lock_held():
    # A KeyboardInterrupt that lands between taking the lock and entering a `with` block
    # leaves the consumer's thread holding it; the workers then wait for it, and closing must
    # still stop and join them rather than wait for ever.
    pf = _make(Counter(), count=2, threads=2)
    pf.start()
    assert pf.next()[0].data[0, 0] == 0
    threads = pf.worker_threads
    pf._shared.lock.acquire()
    pf._shared.lock.acquire()  # twice: an RLock taken by two cut-short blocks
    pf.close()
    assert not any(t.is_alive() for t in threads)
    with pytest.raises(PrefetchError, match="closed"):
        pf.next()


def test_the_consumer_waits_for_a_slow_batch_on_the_bell():
    gate = threading.Event()

    class Slow(Counter):
        def fill(self, k, blobs):
            if k == 1:
                gate.wait()
            blobs[0].data[...] = k

    pf = _make(Slow(), count=1, threads=1)
    pf.start()
    assert pf.next()[0].data[0, 0] == 0
    got = []
    consumer = threading.Thread(target=lambda: got.append(pf.next()[0].data[0, 0]))
    consumer.start()
    gate.set()  # batch 1 arrives whenever the consumer has started waiting (or before)
    consumer.join(60)  # a guard against a hang only
    assert got == [1]
    pf.close()
