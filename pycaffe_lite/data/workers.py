"""An ordered map over worker threads for the dataset tools, safe to interrupt.

``concurrent.futures`` hands results over through Python-level conditions; a
KeyboardInterrupt that lands inside one in the main thread can leave its lock held, and the
pool's shutdown then waits for ever. Here the main thread talks to the workers through
``queue.SimpleQueue`` only (C-level, nothing left held by an interrupt): Ctrl-C during a
conversion stops the workers after their current item, joins them and goes on as the
interrupt it is.

>>> with ThreadMap(load, 4) as workers:
...     for result in workers.map(items):   # in the order of items
...         ...
"""

import queue

from ..lifecycle import worker_thread


def _work(fn, tasks, results):
    while True:
        task = tasks.get()
        if task is None:
            return
        generation, index, item = task
        try:
            results.put((generation, index, True, fn(item)))
        except BaseException as exc:  # handed to the caller, raised there
            results.put((generation, index, False, exc))


class ThreadMap:
    """``fn`` over items in ``workers`` threads; results (or the first exception, raised in
    the caller) in the order of the items."""

    def __init__(self, fn, workers, name="pycaffe-lite worker"):
        self._tasks = queue.SimpleQueue()
        self._results = queue.SimpleQueue()
        self._generation = 0
        self._threads = []
        for i in range(max(1, int(workers))):
            t = worker_thread(_work, (fn, self._tasks, self._results), "%s #%d" % (name, i))
            self._threads.append(t)
            t.start()

    def map(self, items):
        """Yield ``fn(item)`` for each item, in order."""
        items = list(items)
        self._generation += 1
        generation = self._generation
        for index, item in enumerate(items):
            self._tasks.put((generation, index, item))
        ready = {}
        for index in range(len(items)):
            while index not in ready:
                gen, done, ok, value = self._results.get()
                if gen == generation:  # results of an abandoned earlier map are dropped
                    ready[done] = (ok, value)
            ok, value = ready.pop(index)
            if not ok:
                raise value
            yield value

    def close(self):
        """Drop the items not started, let each thread finish its current one, join them."""
        while True:
            try:
                self._tasks.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._tasks.put(None)
        for t in self._threads:
            t.join()
        del self._threads[:]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
