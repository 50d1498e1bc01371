"""One shutdown path for everything that outlives a call: loading threads, database cursors
and environments, open files.

An object that owns such things (a data layer, a prefetcher, an output layer) keeps them in
one :class:`Resources`: a stack of release steps pushed as each thing is acquired. The stack
is unwound once, newest first, by whichever comes first of

- the owner's ``close()`` (and so ``Net.close()``, ``Solver.close()``, ``with`` blocks),
- garbage collection of the owner (``del``, a dropped net),
- interpreter exit, which unwinds every stack still open, newest first, before ``atexit``
  handlers and module teardown run (so before h5py, CuPy or LMDB clean up after themselves).

Because threads are started after the handles they read, their stop-and-join step runs
before the handles close: no loading thread can touch a closed handle. A step refers to the
resources, never to the owner, so the owner can still be collected. Unwinding twice, or from
several threads at once, does the work once; a second caller waits for the first to finish,
unless it is a finalizer or a loading thread (:func:`never_waits`).

No lock of ours is held while a step runs: the steps are taken off the stack under the lock and
run after it is released. A thread being joined by a step can therefore always finish, even
when dropping its last reference to an owner runs that owner's finalizer there: in a loading
or kernel thread, which may hold a lock of its own at that moment (a prefetcher's plan lock),
the finalizer hands the release to a new thread and returns.

A forked child (``multiprocessing``'s fork start method) inherits copies of the parent's
stacks, but not the threads they join, and the locks that those threads held at the fork stay
held for ever: the child forgets them (its exit, a collection or a ``close()`` there releases
nothing of the parent's), and unwinds only what it acquires itself.
"""

import logging
import os
import threading
import weakref

from .errors import CaffeError

log = logging.getLogger("pycaffe_lite")

_open = {}              # id -> Resources not yet released, in creation order
_open_lock = threading.RLock()  # re-entrant: a collection can run a release inside
_exit_hook = []
_local = threading.local()          # .finalizing: how many finalizers this thread is inside
_workers = weakref.WeakSet()        # the threads made by worker_thread


class Resources:
    """The release steps of ``owner``, described as ``what`` in messages."""

    def __init__(self, owner, what):
        self.what = what
        self.pid = os.getpid()          # the process whose threads, handles and files these are
        self.closed = False
        self._steps = []
        self._lock = threading.RLock()  # guards the list and the flag, never held by a step
        self._releaser = None           # the thread running the steps, while it runs them
        self._done = threading.Lock()   # held until the steps have run: a bell for waiters
        self._done.acquire()
        finalizer = weakref.finalize(owner, self._release_collected)
        finalizer.atexit = False  # exit is handled by release_all, before atexit handlers
        with _open_lock:
            _open[id(self)] = self
        _install_exit_hook()

    def push(self, step):
        """Add ``step()`` (no arguments); steps run newest first. Returns ``step``."""
        with self._lock:
            if self.closed:
                raise CaffeError("%s is closed" % self.what)
            self._steps.append(step)
        return step

    def release(self, raise_errors=False):
        """Run every step once, newest first. A step that fails does not stop the others;
        its error is logged, or raised (as a CaffeError, after the other steps ran) when
        ``raise_errors``.

        The steps run outside any lock of ours. A caller that finds another thread running
        them waits for it to finish, except a finalizer (and all it calls) and a thread that
        the release may be joining: those return at once (see :func:`never_waits`). In a
        forked child the steps are the parent's: they are dropped, never run."""
        if self.pid != os.getpid():
            self._steps = []
            return
        with self._lock:
            if self.closed:
                releaser = self._releaser
                steps = None
            else:
                self.closed = True
                self._releaser = threading.current_thread()
                steps, self._steps = self._steps, []
        if steps is None:
            if releaser is not threading.current_thread() and not never_waits():
                with self._done:  # rung when the other thread has run the steps
                    pass
            return
        errors = []
        try:
            while steps:
                step = steps.pop()
                try:
                    step()
                except Exception as exc:
                    errors.append(exc)
        finally:
            with _open_lock:
                _open.pop(id(self), None)
            self._releaser = None
            self._done.release()
        if errors:
            first = errors[0]
            message = "closing %s: %s: %s" % (self.what, type(first).__name__, first)
            if raise_errors:
                raise CaffeError(message) from first
            log.warning("%s", message)

    def _release_collected(self):
        """The finalizer's release: it may run in any thread, a joined one included, so
        neither it nor anything it releases waits for another thread's release.

        In a loading or kernel thread (:func:`worker_thread`) it runs in a thread of its own
        instead: the collection may have struck while that thread held a lock that the
        threads the release joins are waiting for (a prefetcher's plan lock while it plans a
        batch), and joining them there would wait for ever."""
        if threading.current_thread() in _workers:
            t = threading.Thread(target=self._release_collected_here, daemon=True,
                                 name="pycaffe-lite release of %s" % self.what)
            try:
                t.start()
                return
            except RuntimeError:  # no new threads at interpreter shutdown: release here
                pass
        self._release_collected_here()

    def _release_collected_here(self):
        _local.finalizing = getattr(_local, "finalizing", 0) + 1
        try:
            self.release()
        finally:
            _local.finalizing -= 1


def never_waits():
    """True in a thread that must not wait for a release another thread runs: while a
    finalizer runs, and in the threads that the package's releases join (the loading and
    kernel threads, marked by :func:`worker_thread`). The thread that releases may be joining
    them, or may hold a lock they need; it finishes the release alone."""
    return (getattr(_local, "finalizing", 0) > 0
            or threading.current_thread() in _workers)


def worker_thread(target, args=(), name=None):
    """A daemon thread (not started) for a loading or kernel thread that a release step joins:
    it never waits for a release in another thread (:func:`never_waits`)."""
    t = threading.Thread(target=target, args=args, name=name, daemon=True)
    _workers.add(t)
    return t


def release_all():
    """Release every open :class:`Resources`, newest first (run at interpreter exit). One
    that another thread is releasing is waited for, where this thread may wait."""
    seen = set()
    while True:
        with _open_lock:
            newest = next((r for r in reversed(list(_open.values())) if id(r) not in seen),
                          None)
        if newest is None:
            return
        seen.add(id(newest))
        newest.release()


def stop_and_join(threads, stop):
    """A release step: call ``stop()`` (which must wake the threads and make them end), then
    join every thread of ``threads`` (a list, read when the step runs) but the calling one: a
    step can run in one of the threads it stops, when that thread drops the owner's last
    reference."""
    def step():
        stop()
        current = threading.current_thread()
        for t in list(threads):
            if t is not current:
                t.join()
    return step


def open_count():
    """How many :class:`Resources` are not released yet (for tests and leak checks)."""
    with _open_lock:
        return len(_open)


def _after_fork_in_child():
    """The parent's stacks are not this process's to unwind (their threads are not here, and
    a lock one of them held at the fork would be waited for for ever)."""
    global _open_lock
    _open_lock = threading.RLock()
    _open.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _install_exit_hook():
    if _exit_hook:
        return
    with _open_lock:
        if _exit_hook:
            return
        _exit_hook.append(True)
    # threading's own exit hook runs before non-daemon threads are joined and before any
    # atexit handler; the plain atexit hook is the fallback where it does not exist.
    register = getattr(threading, "_register_atexit", None)
    try:
        if register is None:
            raise RuntimeError
        register(release_all)
    except RuntimeError:
        import atexit
        atexit.register(release_all)
