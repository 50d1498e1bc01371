"""The compiled kernels' threads: a call's range is split over :func:`threads` threads, the
calling thread taking the first part (ctypes releases the GIL during a kernel call).

The calling thread talks to the workers only through C-level objects (a SimpleQueue, plain
locks), never a Python Condition: a KeyboardInterrupt in the calling thread can then never
leave behind a lock that a worker waits for, and a call unwinds only after its parts in other
threads have finished writing into its arrays.
"""

import os
import threading

_state = {"pool": None, "threads": None}
_lock = threading.Lock()

# A thread is worth starting for about this many elements of work (handing a range to a
# worker and waiting for it cost some tens of microseconds).
MIN_ELEMENTS_PER_THREAD = 1 << 15


def threads():
    """How many threads the kernels use: ``PYCAFFE_LITE_CPU_THREADS``, else
    ``OMP_NUM_THREADS``, else the number of CPUs this process may run on."""
    n = _state["threads"]
    if n is None:
        value = os.environ.get("PYCAFFE_LITE_CPU_THREADS") or os.environ.get("OMP_NUM_THREADS")
        try:
            n = int(value) if value else len(os.sched_getaffinity(0))
        except (ValueError, AttributeError):
            n = os.cpu_count() or 1
        n = _state["threads"] = max(1, n)
    return n


class Job:
    """One call's ranges in flight: the last part to finish releases ``finished``."""

    __slots__ = ("lock", "left", "finished", "error")

    def __init__(self, parts):
        self.lock = threading.Lock()
        self.left = parts
        self.finished = threading.Lock()
        self.finished.acquire()
        self.error = None
        if parts == 0:
            self.finished.release()

    def done(self, parts=1, error=None):
        with self.lock:
            if error is not None and self.error is None:
                self.error = error
            self.left -= parts
            last = self.left == 0
        if last:
            self.finished.release()

    def wait(self):
        """Wait for every part, through interrupts: the parts write into arrays the caller
        owns, so the caller unwinds only once they are done (then the interrupt goes on)."""
        interrupted = None
        while True:
            try:
                self.finished.acquire()
                break
            except BaseException as exc:  # KeyboardInterrupt, or another signal's exception
                interrupted = exc
        if interrupted is not None:
            raise interrupted
        if self.error is not None:
            raise self.error


def _work(tasks):
    while True:
        task = tasks.get()
        if task is None:
            return
        job, fn, args, start, stop = task
        try:
            fn(*args, start, stop)
        except BaseException as exc:
            job.done(error=exc)
        else:
            job.done()


class Pool:
    """The kernels' worker threads. The calling thread talks to them only through C-level
    objects (a SimpleQueue, plain locks), never a Python Condition: a KeyboardInterrupt in
    the calling thread can then never leave behind a lock that a worker waits for. The
    threads end, joined, when the pool is closed: at interpreter exit before atexit handlers
    (:mod:`pycaffe_lite.lifecycle`), or when a larger pool replaces it."""

    def __init__(self, size):
        import queue

        from ...lifecycle import Resources, stop_and_join, worker_thread
        self.size = size
        self.tasks = queue.SimpleQueue()
        self.threads = []
        self.resources = Resources(self, "the C kernels' threads")
        self.resources.push(stop_and_join(self.threads, self._stop))
        for i in range(size):
            t = worker_thread(_work, (self.tasks,), "pycaffe-lite-kernel #%d" % i)
            self.threads.append(t)
            t.start()

    def _stop(self):
        for _ in self.threads:
            self.tasks.put(None)

    @property
    def closed(self):
        return self.resources.closed

    def run(self, job, fn, args, start, stop):
        if self.resources.closed:
            raise RuntimeError("the kernel threads are closed")
        self.tasks.put((job, fn, args, start, stop))


def pool(size):
    pool = _state["pool"]
    if pool is None or pool.closed or pool.size < size:
        with _lock:
            pool = _state["pool"]
            if pool is None or pool.closed or pool.size < size:
                if pool is not None:
                    pool.resources.release()
                pool = _state["pool"] = Pool(size)
    return pool


def split(fn, total, args, grain=1):
    """Run ``fn(*args, start, stop)`` over ``[0, total)`` split into contiguous ranges, one
    per thread (the calling thread takes the first). ``grain``: the least work worth a
    thread, in units of ``total``."""
    n = min(threads(), total // max(1, grain))
    if n <= 1:
        fn(*args, 0, total)
        return
    bounds = [total * i // n for i in range(n + 1)]
    job = Job(n - 1)
    handed = 1  # parts 1 .. handed - 1 are with the threads
    try:
        try:
            workers = pool(n - 1)
            for i in range(1, n):
                workers.run(job, fn, args, bounds[i], bounds[i + 1])
                handed = i + 1
        except RuntimeError:
            # the interpreter is exiting (the threads are closed): the rest in this thread
            job.done(n - handed)
            fn(*args, bounds[handed], total)
        except BaseException:
            job.done(n - handed)  # not handed: nobody will count them down
            raise
        fn(*args, bounds[0], bounds[1])
    finally:
        job.wait()


def grain(elements_per_unit):
    """Units of work per thread so that each thread moves at least the minimum."""
    return max(1, MIN_ELEMENTS_PER_THREAD // max(1, int(elements_per_unit)))
