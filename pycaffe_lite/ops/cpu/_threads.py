"""The compiled kernels' threads: a call's range is cut into chunks that the calling thread and
the worker threads claim one at a time from a shared index (ctypes releases the GIL during a
kernel call), and a thread count that follows the CPUs this process may use.

Dynamic claiming is what keeps a busy machine from stalling a layer: when a worker thread is
descheduled (another process has its core), the calling thread claims the chunks that worker
would have run, and the call ends once every chunk is done; the caller waits only for chunks a
worker has already claimed and is running. A range is cut into up to :data:`CHUNKS_PER_THREAD`
chunks per thread, none smaller than the call's grain; every chunk computes the same elements
as the single-threaded call does (the kernels split by channel, plane or element), so results
do not depend on which thread ran which chunk.

The calling thread talks to the workers only through C-level objects (a SimpleQueue, plain
locks), never a Python Condition: a KeyboardInterrupt in the calling thread can then never
leave behind a lock that a worker waits for, and a call unwinds only after the chunks running
in other threads have finished writing into its arrays.

The thread count (:func:`threads`): ``PYCAFFE_LITE_CPU_THREADS``, else ``OMP_NUM_THREADS``,
else the CPUs this process may use: its affinity mask, bounded by the CPU quota of its cgroup
and the cgroups above it (``cpu.max`` of cgroup v2, ``cpu.cfs_quota_us / cpu.cfs_period_us``
of v1), rounded up.
NumPy's OpenBLAS gets the same budget, at most the CPUs (:func:`match_blas`), unless
``OPENBLAS_NUM_THREADS`` or ``GOTO_NUM_THREADS`` chose its own (a positive whole number), so
its threads and the kernels' never ask for more cores than the process has. A forked child
forgets the parent's pool (whose threads it does not have) and starts its own on its first
call that splits.
"""

import logging
import os
import threading

from ...switches import MAX_THREADS, thread_count

_state = {"pool": None, "threads": None, "blas": None}
_lock = threading.Lock()

# A thread is worth starting for about this many elements of work (handing a range to a
# worker and waiting for it cost some tens of microseconds).
MIN_ELEMENTS_PER_THREAD = 1 << 15
# Chunks per thread: enough that a thread missing for a while leaves work the others can take,
# few enough that claiming one (a lock and a ctypes call) stays small beside its work.
CHUNKS_PER_THREAD = 4

CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"


# ---- how many threads ------------------------------------------------------------------------
def quota_cpus(quota, period):
    """CPUs a CFS quota allows (``quota`` microseconds per ``period``), rounded up; None when
    there is no quota (``max`` or a negative value)."""
    quota, period = str(quota).strip(), str(period).strip()
    if quota == "max" or not quota or not period:
        return None
    quota, period = int(quota), int(period)
    if quota <= 0 or period <= 0:
        return None
    return max(1, -(-quota // period))


def _up_to(folder, top):
    """``folder`` and its parents up to ``top`` (included)."""
    top = os.path.normpath(top)
    folder = os.path.normpath(folder)
    while True:
        yield folder
        if folder == top or not folder.startswith(top + os.sep):
            return
        folder = os.path.dirname(folder)


def _quota_in(kind, folder):
    """The quota (CPUs, or None for none) in ``folder``'s files; OSError where it has none."""
    if kind == "v2":
        with open(os.path.join(folder, "cpu.max")) as f:
            words = f.read().split()
        return quota_cpus(*(words + ["", ""])[:2])
    with open(os.path.join(folder, "cpu.cfs_quota_us")) as f:
        quota = f.read()
    with open(os.path.join(folder, "cpu.cfs_period_us")) as f:
        return quota_cpus(quota, f.read())


def cgroup_cpus(root=CGROUP_ROOT, proc_cgroup=PROC_CGROUP):
    """The CPU quota of this process's cgroup as a number of CPUs (rounded up), or None when
    there is none or it cannot be read: the smallest quota of its cgroup and the cgroups above
    it (a parent's quota bounds its children). ``root``: where the cgroup file systems are
    mounted; ``proc_cgroup``: the process's cgroup list (``/proc/self/cgroup``), whose paths
    are looked for under ``root`` (a container sees its own cgroup at the root)."""
    paths = {}
    try:
        with open(proc_cgroup) as f:
            for line in f:
                parts = line.rstrip("\n").split(":", 2)
                if len(parts) == 3:
                    paths[parts[1]] = parts[2].lstrip("/")
    except OSError:
        pass
    chains = []  # (kind, the process's cgroup folder, the hierarchy's top)
    if "" in paths:  # cgroup v2
        chains.append(("v2", os.path.join(root, paths[""]), root))
    for controllers, path in paths.items():
        if "cpu" in controllers.split(","):  # cgroup v1
            for mount in (controllers, "cpu", "cpu,cpuacct"):
                top = os.path.join(root, mount)
                chains.append(("v1", os.path.join(top, path), top))
    chains.append(("v2", root, root))
    for kind, folder, top in chains:
        quotas, found = [], False
        for place in _up_to(folder, top):
            try:
                quota = _quota_in(kind, place)
            except (OSError, ValueError):
                continue
            found = True
            if quota:
                quotas.append(quota)
        if found:
            return min(quotas) if quotas else None
    return None


def usable_cpus():
    """The CPUs this process may use: its affinity mask, bounded by its cgroup's quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    quota = cgroup_cpus()
    return max(1, min(n, quota) if quota else n)


def threads():
    """How many threads the kernels use: ``PYCAFFE_LITE_CPU_THREADS``, else
    ``OMP_NUM_THREADS``, else :func:`usable_cpus`. Read once; NumPy's OpenBLAS is given the
    same number then (:func:`match_blas`)."""
    n = _state["threads"]
    if n is None:
        n = _env_threads("PYCAFFE_LITE_CPU_THREADS") or _env_threads("OMP_NUM_THREADS") \
            or usable_cpus()
        n = _state["threads"] = max(1, n)
        match_blas(n)
    return n


def _env_threads(name):
    """The thread count in the environment variable ``name`` (OpenMP's list form: its first
    value), or None where it is unset; a value that is not a positive whole number, or that
    asks for more than :data:`MAX_THREADS`, is ignored with a warning naming it."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    n = thread_count(name, value) or 0
    if n < 1:
        logging.getLogger("pycaffe_lite").warning(
            "%s=%r is not a positive whole number of threads; it is ignored", name, value)
        return None
    if n > MAX_THREADS:
        logging.getLogger("pycaffe_lite").warning(
            "%s=%r asks for more than %d threads; it is ignored", name, value, MAX_THREADS)
        return None
    return n


# ---- OpenBLAS's share ------------------------------------------------------------------------
_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "openblas_set_num_threads64_",
                 "openblas_set_num_threads")


def _loaded_openblas(maps="/proc/self/maps"):
    """The OpenBLAS shared objects mapped into this process (Linux; empty elsewhere), NumPy's
    first (other packages may bring their own)."""
    found = []
    try:
        with open(maps) as f:
            for line in f:
                path = line.split(None, 5)[-1].strip()
                if "openblas" in os.path.basename(path).lower() and path not in found:
                    found.append(path)
    except OSError:
        pass
    return sorted(found, key=lambda path: "numpy" not in path)


def match_blas(n):
    """Give NumPy's OpenBLAS ``n`` threads (the kernels' budget), at most the CPUs this
    process may use (as OpenBLAS caps the counts of its own variables: its threads split a
    product in fixed parts, and more of them than cores wait on each other), unless the
    environment set its own (``OPENBLAS_NUM_THREADS``, ``GOTO_NUM_THREADS``) or NumPy has not
    loaded it. Returns the number set, or None."""
    if _blas_env_threads() is not None:
        return None
    if not blas_controllable():
        return None
    n = max(1, min(int(n), usable_cpus()))
    _blas_functions()[0](n)
    _state["blas"] = n
    return n


def _blas_env_threads():
    """The count that ``OPENBLAS_NUM_THREADS`` (else ``GOTO_NUM_THREADS``) gives OpenBLAS, or
    None where neither holds one. A value that is not a positive whole number is named in a
    warning and does not count as a choice: OpenBLAS reads it as 0 (or as the digits it
    starts with) and would otherwise run a thread per CPU beside the kernels' budget."""
    for name in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS"):
        value = os.environ.get(name, "").strip()
        if not value:
            continue
        n = thread_count(name, value)
        if n is not None and n >= 1:
            return n
        logging.getLogger("pycaffe_lite").warning(
            "%s=%r is not a positive whole number of threads; it is ignored, and OpenBLAS "
            "gets the kernels' thread count", name, os.environ[name])
    return None


def _blas_functions():
    """NumPy's OpenBLAS thread-count setter and getter (ctypes functions), or None."""
    found = _state.get("blas_functions")
    if found is None:
        import ctypes
        found = ()
        for path in _loaded_openblas():
            try:
                library = ctypes.CDLL(path)
            except OSError:
                continue
            for name in _BLAS_SETTERS:
                setter = getattr(library, name, None)
                getter = getattr(library, name.replace("set_", "get_"), None)
                if setter is not None and getter is not None:
                    setter.argtypes, setter.restype = [ctypes.c_int], None
                    getter.argtypes, getter.restype = [], ctypes.c_int
                    found = (setter, getter)
                    _state["blas_library"] = path
                    break
            if found:
                break
        _state["blas_functions"] = found
    return found or None


class SingleThreadedBlas:
    """A block in which NumPy's OpenBLAS runs each product on the calling thread alone (the
    kernel threads run several at once); entered only when :func:`blas_controllable`."""

    def __enter__(self):
        setter, getter = _blas_functions()
        self.previous = getter()
        if self.previous != 1:
            setter(1)
        return self

    def __exit__(self, *exc):
        if self.previous != 1:
            _blas_functions()[0](self.previous)


def blas_controllable():
    """Whether this process maps an OpenBLAS whose thread count can be set (after NumPy
    loaded it)."""
    import sys
    return "numpy" in sys.modules and _blas_functions() is not None


# ---- the work of one call --------------------------------------------------------------------
class Job:
    """One call's chunks: ``fn(*args, bounds[i], bounds[i + 1])`` for each ``i``, claimed one
    at a time under ``lock``. ``running``: chunks that worker threads are running; once the
    caller is ``waiting`` and no chunk is left to claim, the worker finishing the last running
    chunk releases ``finished``."""

    __slots__ = ("fn", "args", "bounds", "chunks", "next", "running", "waiting", "lock",
                 "finished", "error")

    def __init__(self, fn, args, bounds):
        self.fn, self.args, self.bounds = fn, args, bounds
        self.chunks = len(bounds) - 1
        self.next = 0
        self.running = 0
        self.waiting = False
        self.lock = threading.Lock()
        self.finished = threading.Lock()
        self.finished.acquire()
        self.error = None

    def _claim(self, running):
        """The next chunk's index (counted as running when ``running``), or None."""
        with self.lock:
            i = self.next
            if i >= self.chunks:
                return None
            self.next = i + 1
            if running:
                self.running += 1
            return i

    def work(self):
        """A worker thread's share: claim and run chunks until none is left."""
        while True:
            i = self._claim(True)
            if i is None:
                return
            try:
                self.fn(*self.args, self.bounds[i], self.bounds[i + 1])
            except BaseException as exc:
                error = exc
            else:
                error = None
            with self.lock:
                if error is not None:
                    if self.error is None:
                        self.error = error
                    self.next = self.chunks  # nobody starts another chunk
                self.running -= 1
                last = self.waiting and self.running == 0 and self.next >= self.chunks
            if last:
                self.finished.release()

    def run_here(self):
        """The calling thread's share: claim and run chunks until none is left."""
        while True:
            i = self._claim(False)
            if i is None:
                return
            self.fn(*self.args, self.bounds[i], self.bounds[i + 1])

    def wait(self, cancel):
        """Wait for the chunks the workers are running (after claiming the rest, undone, when
        ``cancel``), through interrupts: they write into arrays the caller owns, so the caller
        unwinds only once they are done (then the interrupt goes on). A worker's error is
        raised here unless the caller is already unwinding from one of its own."""
        interrupted, unwinding = None, cancel
        while True:
            try:
                with self.lock:
                    if cancel:
                        self.next = self.chunks
                    self.waiting = True
                    busy = self.running > 0 and self.next >= self.chunks
                if busy:
                    self.finished.acquire()
                break
            except BaseException as exc:  # KeyboardInterrupt, or another signal's exception
                interrupted, cancel = exc, True
        if interrupted is not None:
            raise interrupted
        if self.error is not None and not unwinding:
            raise self.error


def _work(tasks):
    while True:
        job = tasks.get()
        if job is None:
            return
        job.work()
        del job


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

    def offer(self, job, helpers):
        """Offer ``job`` to ``helpers`` worker threads (each claims chunks when it gets to
        it; one that comes late finds nothing left)."""
        if self.resources.closed:
            raise RuntimeError("the kernel threads are closed")
        for _ in range(min(helpers, self.size)):
            self.tasks.put(job)


def _after_fork_in_child():
    """A forked child runs only the thread that forked: the parent's kernel threads are not
    there to take chunks (every call would run on the calling thread alone, and queue jobs
    that no thread ever takes). Forget that pool and its lock (which another thread may have
    held at the fork); the child's first call that splits starts a pool of its own."""
    global _lock
    _lock = threading.Lock()
    _state["pool"] = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


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
    """Run ``fn(*args, start, stop)`` over ``[0, total)`` cut into contiguous chunks of at
    least ``grain`` units (the least work worth a thread), up to :data:`CHUNKS_PER_THREAD` per
    thread, which the calling thread and :func:`threads` ``- 1`` workers claim as they come."""
    most = total // max(1, grain)
    n = min(threads(), most)
    if n <= 1:
        fn(*args, 0, total)
        return
    chunks = min(most, n * CHUNKS_PER_THREAD)
    job = Job(fn, args, [total * i // chunks for i in range(chunks + 1)])
    failed = True
    try:
        try:
            pool(n - 1).offer(job, n - 1)
        except RuntimeError:
            pass  # the interpreter is exiting (the threads are closed): all in this thread
        job.run_here()
        failed = False
    finally:
        job.wait(cancel=failed)


def grain(elements_per_unit):
    """Units of work per chunk so that each chunk moves at least the minimum."""
    return max(1, MIN_ELEMENTS_PER_THREAD // max(1, int(elements_per_unit)))
