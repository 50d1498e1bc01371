"""The Layer contract: setup / reshape / forward / backward over Blobs.

Built-in layers and user ``type: "Python"`` layers share one contract, with pycaffe's hook
names. A layer overrides:

- ``setup(bottom, top)``: read its parameters, create ``self.blobs`` (learnable params);
- ``reshape(bottom, top)``: shape the tops (and buffers) from the bottoms;
- ``forward(bottom, top)``: write the tops' data in place;
- ``backward(top, propagate_down, bottom)``: *overwrite* the bottoms' diffs where
  ``propagate_down[i]`` and *accumulate* into the params' diffs where
  ``self.param_propagate_down[i]`` (the solver zeroes them, which is what makes ``iter_size``
  work).

The framework calls the fixed template methods ``SetUp``, ``Forward`` and ``Backward``: blob
counts are declared as class attributes and checked in ``SetUp``; ``Forward`` reshapes, runs
``forward`` and returns the weighted loss of the tops (a top's loss weight is stored in its
diff, as in Caffe).

Which blob accessors a layer uses (:class:`~pycaffe_lite.blob.Blob` documents each):

- A device-generic layer (the default) reads through ``read_data()`` / ``read_diff()`` and
  writes through ``write_data()`` / ``write_diff()``: arrays of the current mode (NumPy on
  the CPU, CuPy on the GPU), with array code for both (``backend.get_array_module``). It
  reads its bottoms, params and tops' diffs, and writes its tops, bottoms' diffs and params'
  diffs (and its params, in ``setup``), only through these.
- A host-only layer, whose work runs in NumPy on the host (data layers; the SSD layers that
  match boxes and suppress non-maxima), declares ``host_only = True`` and uses the host face
  only: ``cpu_data()`` / ``cpu_diff()`` to read, ``data`` / ``diff`` to write. In GPU mode the
  blobs move between host and device as the layers around it need.

Python layers written for pycaffe (``bottom[0].data``) are host-only in effect and work
unchanged. ``tests/test_blob_access.py`` holds the built-in layers to this rule.

Inside :func:`deferred_checks` (a training iteration captured into a CUDA graph), ``Forward``
returns its loss as a device scalar instead of reading it, and a check that would read a
device value to decide (:func:`defer_check`, e.g. the labels' range) records a device flag and
a host re-check instead: the caller reads both after the work has run.
"""

import contextlib
import threading

import numpy as np

from .blob import Blob
from .errors import LayerError
from .proto import caffe_pb2


_deferred = threading.local()


class DeferredChecks:
    """What a forward inside :func:`deferred_checks` left to read afterwards: ``flags`` (0-d
    device booleans, True where a check failed) and, for each, the host re-check that raises
    the check's own error."""

    def __init__(self):
        self.flags = []
        self.recheck = []


@contextlib.contextmanager
def deferred_checks():
    """Forwards of this thread keep their losses on the device and defer their device-reading
    checks (see the module's text); yields the :class:`DeferredChecks`."""
    checks = DeferredChecks()
    _deferred.checks = checks
    try:
        yield checks
    finally:
        _deferred.checks = None


def defer_check(failed, recheck):
    """Inside :func:`deferred_checks`: keep the device boolean ``failed`` and the callable
    ``recheck`` (which raises the error when it finds the failure on the host) and return True;
    elsewhere return False (the caller checks at once)."""
    checks = getattr(_deferred, "checks", None)
    if checks is None:
        return False
    checks.flags.append(failed)
    checks.recheck.append(recheck)
    return True


class BlobVec(list):
    """A layer's learnable blobs (pycaffe's ``layer.blobs``)."""

    def __init__(self, dtype=np.float32, blobs=()):
        super().__init__(blobs)
        self.dtype = np.dtype(dtype)

    def add_blob(self, *shape):
        blob = Blob(shape, self.dtype)
        self.append(blob)
        return blob


class Phase(int):
    """A phase, TRAIN (0) or TEST (1): an int whose ``str()`` is its name, as pycaffe's
    ``caffe.TRAIN`` / ``caffe.TEST`` (Boost.Python enum values) and py-faster-rcnn's
    ``self.phase`` print; that fork's layers look their settings up by ``str(self.phase)``."""

    __slots__ = ()

    def __str__(self):
        return {0: "TRAIN", 1: "TEST"}.get(int(self)) or int.__repr__(self)


TRAIN = Phase(caffe_pb2.TRAIN)
TEST = Phase(caffe_pb2.TEST)
_UNSET = object()


class Layer:
    """Base class of every layer (built-in or Python)."""

    type = None
    # Declared blob counts (-1: no constraint), as Caffe's ExactNumBottomBlobs & co.
    exact_num_bottom_blobs = -1
    min_num_bottom_blobs = -1
    max_num_bottom_blobs = -1
    exact_num_top_blobs = -1
    min_num_top_blobs = -1
    max_num_top_blobs = -1
    equal_num_bottom_top_blobs = False
    # Create anonymous tops up to the minimum count when the prototxt names fewer.
    auto_top_blobs = False
    # Loss layers weigh their first top by 1 unless the prototxt says otherwise.
    is_loss = False
    # The forward draws random numbers (in some phase): two layers of the same parameters and
    # inputs may give different outputs (the test harness then skips its output comparison).
    draws_random = False
    # The layer works on host arrays (cpu_data()/cpu_diff() to read, data/diff to write) in
    # every mode, instead of the current mode's (read_*()/write_*()): see the module docstring.
    host_only = False

    def __init__(self, layer_param=None, dtype=np.float32):
        param = caffe_pb2.LayerParameter()
        if layer_param is not None:
            param.CopyFrom(layer_param)
        self.layer_param = param
        self.dtype = np.dtype(dtype)
        if param.type:
            self.type = param.type
        self.blobs = BlobVec(self.dtype)
        for i, bp in enumerate(param.blobs):
            try:
                self.blobs.add_blob().from_proto(bp)
            except ValueError as exc:
                raise self.error("cannot read parameter blob %d: %s" % (i, exc)) from None
        self.param_propagate_down = []
        self._loss = []

    # ---- identity ------------------------------------------------------------------------
    @property
    def name(self):
        return self.layer_param.name

    @property
    def phase(self):
        own = self.__dict__.get("_own_phase", _UNSET)
        return Phase(self.layer_param.phase) if own is _UNSET else own

    @phase.setter
    def phase(self, value):
        # pycaffe's phase is a plain attribute: Python layers often keep a phase of their own
        # in it (``self.phase = params['phase']`` in setup); the net's is layer_param.phase
        self.__dict__["_own_phase"] = value

    def error(self, message):
        """A LayerError naming this layer."""
        return LayerError(message, self.name, self.type)

    # ---- hooks for subclasses ------------------------------------------------------------
    def setup(self, bottom, top):
        """Read parameters and create learnable blobs (Caffe's LayerSetUp)."""

    def reshape(self, bottom, top):
        raise self.error("%s defines no reshape()" % type(self).__name__)

    def forward(self, bottom, top):
        raise self.error("%s defines no forward()" % type(self).__name__)

    def backward(self, top, propagate_down, bottom):
        """Default: this layer does not propagate gradients (fine if nothing needs them)."""
        if any(propagate_down):
            raise self.error("this layer cannot backpropagate to its bottoms; set "
                             "propagate_down: false for them")

    def allow_force_backward(self, bottom_index):
        return True

    # ---- template methods ----------------------------------------------------------------
    def SetUp(self, bottom, top):
        self.check_blob_counts(bottom, top)
        self.setup(bottom, top)
        self.reshape(bottom, top)
        self.set_loss_weights(top)
        while len(self.param_propagate_down) < len(self.blobs):
            self.param_propagate_down.append(True)

    def Forward(self, bottom, top):
        self.reshape(bottom, top)
        self.forward(bottom, top)
        loss = 0.0
        on_device = getattr(_deferred, "checks", None) is not None
        for i, blob in enumerate(top):
            w = self.loss(i)
            if w:
                diff = blob.write_diff()
                diff[...] = w
                total = blob.read_data().sum()
                # on the device: the same float64 product as the host's float(total) * w
                loss = loss + (total.astype(np.float64) * w if on_device else float(total) * w)
        return loss

    def Backward(self, top, propagate_down, bottom):
        self.backward(top, list(propagate_down), bottom)

    # ---- blob counts and losses ----------------------------------------------------------
    def check_blob_counts(self, bottom, top):
        nb, nt = len(bottom), len(top)

        def check(n, exact, lo, hi, what):
            if exact >= 0 and n != exact:
                raise self.error("takes exactly %d %s blob%s, got %d"
                                 % (exact, what, "" if exact == 1 else "s", n))
            if lo >= 0 and n < lo:
                raise self.error("takes at least %d %s blob(s), got %d" % (lo, what, n))
            if hi >= 0 and n > hi:
                raise self.error("takes at most %d %s blob(s), got %d" % (hi, what, n))

        check(nb, self.exact_num_bottom_blobs, self.min_num_bottom_blobs,
              self.max_num_bottom_blobs, "bottom")
        check(nt, self.exact_num_top_blobs, self.min_num_top_blobs,
              self.max_num_top_blobs, "top")
        if self.equal_num_bottom_top_blobs and nb != nt:
            raise self.error("needs as many tops as bottoms, got %d bottoms and %d tops"
                             % (nb, nt))

    def needed_num_top_blobs(self):
        return max(self.min_num_top_blobs, self.exact_num_top_blobs)

    def loss(self, top_index):
        return self._loss[top_index] if top_index < len(self._loss) else 0.0

    def set_loss(self, top_index, value):
        while len(self._loss) <= top_index:
            self._loss.append(0.0)
        self._loss[top_index] = float(value)

    def set_loss_weights(self, top):
        weights = list(self.layer_param.loss_weight)
        if not weights and self.is_loss and top:
            # Caffe's loss layers default to weight 1 on their first top; extra tops (e.g.
            # SoftmaxWithLoss's probabilities) default to 0 rather than being an error.
            weights = [1.0] + [0.0] * (len(top) - 1)
        if not weights:
            return
        if len(weights) != len(top):
            raise self.error("loss_weight must be unspecified or given once per top "
                             "(%d tops, %d loss_weight values)" % (len(top), len(weights)))
        for i, (blob, w) in enumerate(zip(top, weights)):
            self.set_loss(i, w)
            if w:
                blob.write_diff()[...] = w

    def set_param_propagate_down(self, index, value):
        while len(self.param_propagate_down) <= index:
            self.param_propagate_down.append(True)
        self.param_propagate_down[index] = bool(value)

    # ---- serialisation -------------------------------------------------------------------
    def to_proto(self, write_diff=False, proto=None):
        """The layer's LayerParameter with its blobs (and their diffs with ``write_diff``),
        written into ``proto`` when given (a net's own layer entry, so that the weights are
        not copied a second time), which is returned."""
        param = caffe_pb2.LayerParameter() if proto is None else proto
        param.CopyFrom(self.layer_param)
        del param.blobs[:]
        for blob in self.blobs:
            blob.to_proto(param.blobs.add(), write_diff)
        return param

    def __repr__(self):
        return "<%s layer '%s'>" % (self.type, self.name)


class LossLayer(Layer):
    """Base of loss layers: two bottoms (prediction, target) whose first dimensions agree,
    and a scalar top (made by the Net where the layer names none, as Caffe's AutoTopBlobs:
    an anonymous blob that counts in the net's loss but is no output)."""

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1
    is_loss = True
    auto_top_blobs = True

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1

    def reshape(self, bottom, top):
        if bottom[0].shape[:1] != bottom[1].shape[:1]:
            raise self.error("the two bottoms must have the same first dimension, got %s and %s"
                             % (bottom[0].shape, bottom[1].shape))
        top[0].reshape(())


class NeuronLayer(Layer):
    """Base of element-wise layers: one bottom, one top of the same shape (may be in place)."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape)
