"""Bases of the data layers: random generators, resumable state, prefetching."""

import functools
import logging
import os
import weakref

import numpy as np

from ... import backend
from ...blob import Blob
from ...data.datum import DataError
from ...data.prefetch import PrefetchError, Prefetcher
from ...errors import CaffeError, LayerError
from ...layer import Layer
from ...lifecycle import Resources
from ...ops.cpu import usable_cpus

log = logging.getLogger("pycaffe_lite")

THREADS_ENV = "PYCAFFE_LITE_DATA_THREADS"


def layer_rng():
    """A layer's own Generator, seeded from the framework's generator: reproducible when
    ``set_random_seed`` was called (the solver's ``random_seed``), random otherwise."""
    return np.random.default_rng(int(backend.rng().integers(0, 2 ** 63)))


def default_threads(heavy):
    """Loading threads: $PYCAFFE_LITE_DATA_THREADS, else 2 for decoding work (JPEG/PNG
    records, image files) where the process may use several CPUs (its affinity mask, as
    ``taskset`` sets it, and its cgroup's quota), 1 for raw records."""
    env = os.environ.get(THREADS_ENV)
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n < 1:
            raise CaffeError("%s must be a positive integer, got %r" % (THREADS_ENV, env))
        return n
    return min(2, usable_cpus()) if heavy else 1


def check_source(field, param, what):
    """The checks every data layer makes of its ``source`` and ``batch_size``: ``field`` names
    the parameter message ("image_data_param"), ``what`` what its source names ("the list
    file to read")."""
    if not param.source:
        raise DataError("%s.source is empty: name %s" % (field, what))
    if param.batch_size <= 0:
        raise DataError("%s.batch_size must be positive (got %d)" % (field, param.batch_size))


def check_pairs(field, param, pairs):
    """Each pair of size fields (``("new_height", "new_width")``) is set both or neither."""
    for a, b in pairs:
        if (getattr(param, a) > 0) != (getattr(param, b) > 0):
            raise DataError("%s: %s and %s must be set together (got %d and %d)"
                            % (field, a, b, getattr(param, a), getattr(param, b)))


class BaseDataLayer(Layer):
    """A layer with no bottoms that produces data. Backward does nothing.

    Layers that have a read position or random state expose ``get_state()`` (a picklable
    dict describing the next batch the net will receive) and ``set_state(state)``, so that a
    snapshot taken after N iterations resumes with exactly the batches an uninterrupted run
    would have seen.
    """

    host_only = True  # batches are made in host memory (and copied to the device in GPU mode)
    exact_num_bottom_blobs = 0

    def reshape(self, bottom, top):
        pass  # the tops are shaped at setup and by forward

    def backward(self, top, propagate_down, bottom):
        pass

    def get_state(self):
        return {"type": self.type}

    def source_records(self):
        """How many records one pass over the source holds, or None where it is unknown
        (the batches wrap around to the first record after the last)."""
        return None

    def set_state(self, state):
        self._check_state(state)

    def _check_state(self, state):
        if not isinstance(state, dict) or state.get("type") != self.type:
            raise self.error("cannot restore a data state of %s into a %s layer"
                             % (state.get("type") if isinstance(state, dict) else
                                type(state).__name__, self.type))

    @property
    def resources(self):
        """The layer's :class:`~pycaffe_lite.lifecycle.Resources`: what it opened or
        started, released newest first by :meth:`close`, by garbage collection or at exit."""
        res = self.__dict__.get("_resources")
        if res is None:
            res = self._resources = Resources(self, "layer '%s' (%s)" % (self.name, self.type))
        return res

    @property
    def closed(self):
        res = self.__dict__.get("_resources")
        return res is not None and res.closed

    def close(self):
        """Stop the layer's loading threads, then close the files and databases they read.
        The layer cannot be used afterwards; closing twice does nothing."""
        res = self.__dict__.get("_resources")
        if res is not None:
            res.release(raise_errors=True)

    def check_open(self):
        if self.closed:
            raise self.error("the layer is closed (its net or solver was closed): build a new "
                             "net to read data again")


class BasePrefetchingDataLayer(BaseDataLayer):
    """A data layer whose batches are loaded ahead by background threads (Caffe's
    BasePrefetchingDataLayer). The tops adopt each batch's storage: nothing is copied.

    Subclasses implement:

    - ``data_setup(top)``: open the source, set the position; return the top shapes;
    - ``plan_batch()``: advance the position by one batch and return the work for it
      (sequential, in batch order);
    - ``fill_batch(plan, blobs)``: decode and transform into the batch's blobs (any thread);
    - ``read_state()`` / ``write_state(state)``: position and random state as a dict;
    - ``prefetch_count`` and ``prefetch_threads`` (attributes set by ``data_setup``).
    """

    min_num_top_blobs = 1
    max_num_top_blobs = 2

    prefetch_count = 4
    prefetch_threads = 1

    def setup(self, bottom, top):
        self.output_labels = len(top) > 1
        self._top_buffers = {}  # GPU mode: top index -> the Blob each batch is copied into
        # GPU mode: id(batch blobs) -> the event after their copy into the tops, which the
        # loading thread waits for before it uploads the next batch into the same buffers
        self._copied = {}
        self.rng = layer_rng()
        try:
            shapes = self.data_setup(top)
        except BaseException as exc:
            self.resources.release()  # what data_setup opened before it failed
            if isinstance(exc, CaffeError) and not isinstance(exc, LayerError):
                raise self.error(str(exc)) from None
            raise
        shapes = [tuple(int(d) for d in s) for s in shapes[:len(top)]]
        for t, s in zip(top, shapes):
            t.reshape(s)
        dtype = self.dtype
        pinned = backend.mode() == backend.GPU

        def make_blobs():
            blobs = [Blob(s, dtype) for s in shapes]
            if pinned:  # GPU mode: page-locked host buffers, uploaded asynchronously
                for b in blobs:
                    b.pin_host()
            return blobs

        # The prefetcher calls the layer through weak references, so that a dropped layer is
        # collected at once (and its threads stopped) rather than by the cycle collector.
        self._prefetcher = Prefetcher(
            _weak_call(self._plan), _weak_call(self._fill), make_blobs,
            count=self.prefetch_count, threads=self.prefetch_threads,
            name="%s '%s'" % (self.type, self.name), initial_state=self.read_state(),
            after_fill=functools.partial(self._upload, self._copied))
        self.resources.push(self._prefetcher.close)
        self._prefetcher.start()

    def _plan(self):
        plan = self.plan_batch()
        return plan, self.read_state()

    def _fill(self, plan, blobs):
        self.fill_batch(plan, blobs)

    @staticmethod
    def _upload(copied, blobs):
        """In the loading thread: in GPU mode, copy the batch to the device (on a stream of
        that thread, from pinned memory), so forward finds it there. The host does not wait
        for the device between forwards (a net without a loss reads nothing back): the copy
        of these buffers' last batch into the tops may still be queued, and goes first."""
        if backend.mode() == backend.GPU:
            backend.wait_event(copied.pop(id(blobs), None))
            backend.upload([b.synced_data for b in blobs])

    def forward(self, bottom, top):
        self.check_open()
        try:
            blobs = self._prefetcher.next()
        except PrefetchError as exc:
            original = getattr(exc, "original", exc)
            if isinstance(original, CaffeError):
                message = str(original)
            else:
                message = "loading a batch failed: %s: %s" % (type(original).__name__,
                                                            original)
            raise self.error(message) from original
        gpu = backend.mode() == backend.GPU
        for j, (t, b) in enumerate(zip(top, blobs)):
            t.reshape(b.shape)
            if gpu:  # copied into a buffer of the layer's own: what a captured CUDA graph reads
                t.share_data(self._top_buffer(j, b))
                t.copy_data(b)
            else:
                t.share_data(b)
        if gpu:
            self._copied[id(blobs)] = backend.record_event()

    def _top_buffer(self, j, batch):
        """Top ``j``'s own storage in GPU mode, shaped like ``batch`` (kept across batches)."""
        buf = self._top_buffers.get(j)
        if buf is None or buf.dtype != batch.dtype:
            buf = self._top_buffers[j] = Blob(batch.shape, batch.dtype)
        buf.reshape(batch.shape)
        return buf

    def get_state(self):
        state = dict(self._prefetcher.state)
        state["type"] = self.type
        return state

    def set_state(self, state):
        self._check_state(state)
        self.check_open()
        self._prefetcher.stop()
        try:
            self.write_state(state)
        except CaffeError as exc:
            raise self.error("cannot restore the data state: %s" % exc) from None
        self._prefetcher.restart(self.read_state())

    # -- helpers for subclasses ------------------------------------------------------------
    def _rng_state(self):
        return self.rng.bit_generator.state

    def _batch_seed(self, needed):
        """One draw of the layer generator per batch seeds that batch's own generator."""
        return int(self.rng.integers(0, 2 ** 63)) if needed else None

    @staticmethod
    def _batch_rng(seed):
        return np.random.default_rng(seed) if seed is not None else None


def _weak_call(method):
    """``method`` called through a weak reference to its object."""
    ref = weakref.WeakMethod(method)
    name = method.__name__

    def call(*args):
        fn = ref()
        if fn is None:
            raise CaffeError("the data layer was closed before %s ran" % name)
        return fn(*args)
    return call
