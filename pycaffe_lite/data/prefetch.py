"""Background batch loading for the data layers.

A :class:`Prefetcher` keeps ``count`` batches loading ahead of the consumer in daemon
threads. Each batch is a list of Blobs allocated once and reused: the consumer's top blobs
adopt a batch's storage (``Blob.share_data``), so handing a batch over copies nothing.

The producer (a data layer) provides two functions:

- ``plan()``: the *sequential* part, run under a lock in batch order: advance the read
  position, pick the records, draw the batch's random seed. Returns ``(plan, state_after)``
  where ``state_after`` is a picklable snapshot of the position and random state *after* this
  batch;
- ``fill(plan, blobs)``: the expensive part (decode, transform), run by any worker thread,
  writing the batch into ``blobs``.

Batches are delivered in plan order whatever the number of threads, so results do not depend
on the thread count. The state after the last delivered batch is what a snapshot must record
to resume exactly (:attr:`Prefetcher.state`). An exception raised by ``plan`` or ``fill``
stops loading; :meth:`next` raises it (with its message) when the consumer reaches that batch,
and every later call raises it again.

The threads stop, and are joined, when the prefetcher is closed or collected or the interpreter
exits, whichever comes first (:mod:`pycaffe_lite.lifecycle`); a prefetcher's owner closes it
before closing what ``plan`` and ``fill`` read.
"""

import os
import threading
import weakref

from ..lifecycle import Resources, stop_and_join, worker_thread


class PrefetchError(Exception):
    """Wraps an exception raised in a loading thread (``__cause__`` is the original)."""


class _Batch:
    __slots__ = ("blobs", "seq", "state", "error")

    def __init__(self, blobs):
        self.blobs = blobs
        self.seq = -1
        self.state = None
        self.error = None


class _Shared:
    """State shared between the consumer and the worker threads (no reference back to the
    prefetcher, so that an unused prefetcher can be collected and its threads end).

    The consumer runs in the main thread, where a KeyboardInterrupt can land between any two
    bytecodes. So it takes ``lock`` only as a C-level ``with`` block (never through
    Condition's Python ``__enter__``/``__exit__``, between whose call and the lock's own an
    interrupt would leave the lock held), never waits on ``cond`` (whose ``wait`` releases and
    retakes the lock in Python code), and waits for batches on ``bell``, a plain lock that the
    workers release after each batch. The workers, which receive no signals, wait on ``cond``.
    """

    def __init__(self):
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.bell = threading.Lock()
        self.bell.acquire()  # held: no news for the consumer
        self.plan_lock = threading.Lock()
        self.free = []
        self.done = {}
        self.next_seq = 0
        self.stop = False
        self.failed = False
        self.threads = []

    def ring(self):
        """Tell the consumer that a batch (or an error) is ready."""
        try:
            self.bell.release()
        except RuntimeError:
            pass  # already rung, not yet heard

    def shutdown(self):
        # Nothing of ours holds the lock while it closes: if the closing thread holds it, an
        # interrupt cut a `with` block short, and the workers would wait for it for ever.
        owned = getattr(self.lock, "_is_owned", None)
        while owned is not None and owned():
            self.lock.release()
        with self.lock:
            self.stop = True
            self.cond.notify_all()


def _worker(shared, ref):
    while True:
        with shared.lock:
            while not shared.stop and not shared.failed and not shared.free:
                shared.cond.wait()
            if shared.stop or shared.failed:
                return
            batch = shared.free.pop()
        owner = ref()
        if owner is None:
            return
        error = None
        with shared.plan_lock:
            if shared.stop or shared.failed:
                with shared.lock:
                    shared.free.append(batch)
                return
            seq = shared.next_seq
            shared.next_seq += 1
            try:
                plan, state = owner.plan_fn()
            except BaseException as exc:  # delivered to the consumer in order
                error, plan, state = exc, None, None
        if error is None:
            try:
                owner.fill_fn(plan, batch.blobs)
                if owner.after_fill is not None:
                    owner.after_fill(batch.blobs)
            except BaseException as exc:
                error = exc
        del owner, plan
        with shared.lock:
            batch.seq, batch.state, batch.error = seq, state, error
            shared.done[seq] = batch
            if error is not None:
                shared.failed = True
            shared.cond.notify_all()
        shared.ring()
        if error is not None:
            return


class Prefetcher:
    """Loads batches ahead in ``threads`` daemon threads, keeping up to ``count`` ready.

    ``make_blobs()`` creates the blobs of one batch. ``count = 0`` loads synchronously in
    :meth:`next` (no thread). ``initial_state`` is the state before the first batch.
    ``after_fill(blobs)`` runs in the loading thread after each fill (the data layers copy the
    batch to the GPU there).
    """

    def __init__(self, plan_fn, fill_fn, make_blobs, count=4, threads=1, name="data",
                 initial_state=None, after_fill=None):
        self.plan_fn = plan_fn
        self.fill_fn = fill_fn
        self.after_fill = after_fill
        self.count = max(0, int(count))
        self.threads = max(1, int(threads))
        self.name = name
        self.state = initial_state
        self._make_blobs = make_blobs
        self._shared = _Shared()
        self._current = None
        self._next_consume = 0
        self._error = None
        self._pid = None  # the process whose threads load the batches, once started
        n = self.count + 1 if self.count else 1
        self._all = [_Batch(make_blobs()) for _ in range(n)]
        self._shared.free = list(reversed(self._all))
        self.resources = Resources(self, "the %s loading threads" % name)
        self.resources.push(stop_and_join(self._shared.threads, self._shared.shutdown))

    # ---- control -------------------------------------------------------------------------
    def start(self):
        """Start the threads (no-op in synchronous mode or when running)."""
        self._check_open()
        threads = self._shared.threads
        if self.count == 0 or threads:
            return
        ref = weakref.ref(self)
        self._pid = os.getpid()
        for i in range(min(self.threads, self.count)):
            t = worker_thread(_worker, (self._shared, ref),
                              "pycaffe-lite prefetch %s #%d" % (self.name, i))
            threads.append(t)
            t.start()

    @property
    def running(self):
        return any(t.is_alive() for t in self._shared.threads)

    @property
    def worker_threads(self):
        """The loading threads now running (a tuple)."""
        return tuple(self._shared.threads)

    @property
    def closed(self):
        return self.resources.closed

    def _check_open(self):
        if self.resources.closed:
            raise PrefetchError("the %s prefetcher is closed" % self.name)

    def stop(self):
        """Stop the threads and drop every batch loaded but not delivered; the next batch
        after :meth:`start` is planned from the current producer state."""
        shared = self._shared
        with shared.lock:
            shared.stop = True
            shared.cond.notify_all()
        for t in shared.threads:
            t.join()
        del shared.threads[:]
        with shared.lock:
            shared.free = [b for b in self._all if b is not self._current]
            shared.done.clear()
            shared.next_seq = 0
            shared.stop = False
            shared.failed = False
        self._next_consume = 0
        self._error = None

    def close(self):
        """Stop and join the threads; the prefetcher cannot be used afterwards. Closing
        twice does nothing."""
        self.resources.release()

    def restart(self, state):
        """Stop, take ``state`` as the state before the next batch, start again (the caller
        has already moved the producer to that state)."""
        self.stop()
        self.state = state
        self.start()

    # ---- consuming -----------------------------------------------------------------------
    def next(self):
        """The blobs of the next batch (the previously returned batch goes back to loading).

        Raises :class:`PrefetchError` (whose ``__cause__`` is the original exception) when
        loading that batch failed.
        """
        if self._error is not None:
            raise self._error
        self._check_open()
        shared = self._shared
        if self.count == 0:
            return self._next_sync()
        if self._pid is not None and self._pid != os.getpid():
            self._error = PrefetchError(
                "the %s loading threads run in process %d, and this process (%d) is a fork of "
                "it: a fork copies no thread, and the source they read must not be used "
                "across a fork; build the net in this process (or start it with "
                "multiprocessing's 'spawn' or 'forkserver' method)"
                % (self.name, self._pid, os.getpid()))
            raise self._error
        with shared.lock:
            current, self._current = self._current, None
            if current is not None:
                shared.free.append(current)
                shared.cond.notify_all()
        seq = self._next_consume
        while True:
            with shared.lock:
                batch = shared.done.pop(seq, None)
            if batch is not None:
                break
            if not self.running:
                self._error = PrefetchError("the %s loading threads stopped without producing "
                                            "batch %d" % (self.name, seq))
                raise self._error
            shared.bell.acquire(timeout=1.0)  # rung after every batch; the timeout notices
            # threads that ended without one
        self._next_consume += 1
        if batch.error is not None:
            self._error = _wrap(batch.error)
            with shared.lock:
                shared.free.append(batch)
            raise self._error
        self._current = batch
        self.state = batch.state
        return batch.blobs

    def _next_sync(self):
        batch = self._all[0]
        try:
            plan, state = self.plan_fn()
            self.fill_fn(plan, batch.blobs)
            if self.after_fill is not None:
                self.after_fill(batch.blobs)
        except Exception as exc:
            self._error = _wrap(exc)
            raise self._error
        self._current = batch
        self.state = state
        return batch.blobs


def _wrap(exc):
    err = PrefetchError(str(exc) or type(exc).__name__)
    err.original = exc
    err.__cause__ = exc
    return err
