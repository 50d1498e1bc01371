"""Training curves for TensorBoard: event files written from a Solver's hooks.

::

    import pycaffe_lite as caffe
    from pycaffe_lite import tensorboard

    solver = caffe.get_solver("solver.prototxt")
    tensorboard.attach(solver, "runs/lenet", histograms=100)
    solver.solve()
    solver.close()      # closes the event file too

Tags (the iteration is the step):

- ``train/loss``: Caffe's smoothed loss (``average_loss``) at every display iteration, the
  value of the ``Iteration N, loss = x`` line; ``train/lr``: that iteration's learning rate;
- ``train/<blob>``: each output of the train net at display iterations (``train/<blob>/<i>``
  for an output of several values; an output named ``loss`` or ``lr`` is left to the tags
  above: with ``average_loss: 1`` and one loss it is ``train/loss``'s value);
- ``test/<blob>``: each output of the test net after every test (the means Caffe logs, or the
  mAP of a detection test); with several test nets ``test<k>/<blob>``, k from 0;
- with ``histograms=N``: ``weights/<layer>/<i>`` and ``gradients/<layer>/<i>`` (the gradient
  accumulated over ``iter_size`` before normalisation, after data-parallel averaging) every N
  iterations.

Only the root solver (rank 0 under MPI) writes. The files are written by TensorBoard's own
event writer (the ``tensorboard`` extra, or ``pip install tensorboard``).
"""

import os
import time

import numpy as np

from .errors import CaffeError, install_hint
from . import ranks

_INSTALL = install_hint("tensorboard", "tensorboard")


def load_writer():
    """TensorBoard's writer and protos, imported on first use."""
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2
        from tensorboard.plugins.histogram import summary_v2 as histogram
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError as exc:
        raise CaffeError("TensorBoard logging needs the tensorboard package, which cannot be "
                         "imported (%s): %s" % (exc, _INSTALL)) from None
    return EventFileWriter, event_pb2, summary_pb2, histogram


def _tags(prefix, named_values, reserved=()):
    """``[(tag, value)]`` for ``[(name, value)]``: ``prefix/name``, or ``prefix/name/i`` for a
    name that comes with several values."""
    counts = {}
    for name, _ in named_values:
        counts[name] = counts.get(name, 0) + 1
    seen = {}
    out = []
    for name, value in named_values:
        if name in reserved:
            continue
        if counts[name] == 1:
            out.append(("%s/%s" % (prefix, name), value))
        else:
            out.append(("%s/%s/%d" % (prefix, name, seen.get(name, 0)), value))
            seen[name] = seen.get(name, 0) + 1
    return out


class TensorBoardLogger:
    """Writes a Solver's curves into ``logdir`` (see the module's notes); made by
    :func:`attach`."""

    def __init__(self, solver, logdir, histograms=0):
        if histograms < 0:
            raise CaffeError("histograms (--tensorboard_histograms) must be >= 0, got %d"
                             % histograms)
        writer_cls, self._event_pb2, self._summary_pb2, self._histogram = load_writer()
        self.logdir = os.fspath(logdir)
        self.histograms = int(histograms)
        try:
            self._writer = writer_cls(self.logdir)
        except OSError as exc:
            raise CaffeError("cannot write TensorBoard event files in %s: %s"
                             % (self.logdir, exc.strerror or exc)) from None
        self._solver = solver
        self._closed = False

    # -- writing ---------------------------------------------------------------------------
    def _add(self, values, step):
        summary = self._summary_pb2.Summary()
        for value in values:
            summary.value.add().CopyFrom(value)
        event = self._event_pb2.Event(step=int(step), wall_time=time.time(), summary=summary)
        self._writer.add_event(event)

    def add_scalars(self, tagged, step):
        """Write ``[(tag, number)]`` at ``step``."""
        values = [self._summary_pb2.Summary.Value(tag=tag, simple_value=float(v))
                  for tag, v in tagged]
        if values:
            self._add(values, step)
            self._writer.flush()

    def add_histograms(self, tagged, step):
        """Write ``[(tag, array)]`` as histograms at ``step``."""
        values = []
        for tag, array in tagged:
            pb = self._histogram.histogram_pb(tag, np.asarray(array, np.float64).ravel())
            values.extend(pb.value)
        if values:
            self._add(values, step)
            self._writer.flush()

    # -- the solver's hooks ----------------------------------------------------------------
    def on_display(self, solver, final):
        tagged = [("train/loss", solver.smoothed_loss)]
        if not final:
            tagged.append(("train/lr", solver.lr))
            outputs = [(name, v) for name in solver.net.outputs
                       for v in np.asarray(solver.net.blobs[name].data, np.float64).ravel()]
            tagged += _tags("train", outputs, reserved=("loss", "lr"))
        self.add_scalars(tagged, solver.iter)

    def on_test(self, solver, test_net_id):
        prefix = "test" if len(solver.test_nets) == 1 else "test%d" % test_net_id
        self.add_scalars(_tags(prefix, solver.test_scores[test_net_id]), solver.iter)

    def on_start(self):
        pass

    def on_gradients_ready(self):
        solver = self._solver
        if self._closed or not self.histograms or solver.iter % self.histograms:
            return
        net = solver.net
        layer_names = net.layer_names
        weights, gradients = [], []
        for net_pid, (layer_id, pid) in enumerate(net.param_layer_indices):
            if net.param_owners[net_pid] != -1:
                continue  # a shared blob is written once, under its owner
            blob = net.records[layer_id].layer.blobs[pid]
            name = "%s/%d" % (layer_names[layer_id], pid)
            weights.append(("weights/" + name, blob.data))
            gradients.append(("gradients/" + name, blob.diff))
        self.add_histograms(weights + gradients, solver.iter)

    def on_close(self, solver=None):
        self.close()

    def close(self):
        """Flush and close the event file (closing twice does nothing)."""
        if not self._closed:
            self._closed = True
            self._writer.close()


def attach(solver, logdir, histograms=0):
    """Log ``solver``'s training to TensorBoard event files in ``logdir``: returns the
    :class:`TensorBoardLogger` (closed with the solver), or None on ranks other than 0."""
    if not ranks.root_solver():
        return None
    logger = TensorBoardLogger(solver, logdir, histograms)
    solver.add_listener(logger)
    solver.add_callback(logger)
    return logger
