"""NVCaffe's ``test_and_snapshot_last_epochs: N``: tests, and snapshots named with the test
scores, in the last epochs of a ``step()``, as the fork's ``Solver::Step`` schedules them.

With ``E`` the epochs the step runs (``iters * iter_size * batch / records``) and ``e`` those
before the current iteration (``it * iter_size * batch / records``, computed at the end of
each iteration, so 0 before the first one ends), and ``r`` starting at ``N - 1``::

    at the top of an iteration:  due when  E > 0 and e + r >= E
                                 or        E = 0 and it is the step's last one and r > 0
                                 (then r -= 1, the test nets run, as for test_interval)
    after it (the iteration counted, its regular snapshot written):
                                 due and some test gave a score: a snapshot named
                                 <prefix>_iter_<it>_score0_<s0>_score1_<s1>....caffemodel
                                 (the scores of every test net's outputs, in order, written
                                 as C++'s stream writes a float: 6 significant digits)

``records`` is the fewest records of the train net's Data and ImageData layers (the layers
whose readers report an epoch's size in the fork), ``batch`` the first such layer's batch size
(the fork's ``batch_per_solver``). The fork learns ``records`` when its prefetching reader first
reaches the end of the data, here it is known from the start: in a step of less than about
``N`` epochs the fork's first tests can come later than here. Without such a layer ``E`` stays
0, and, as in the fork, only ``N >= 2`` tests and snapshots once, at the last iteration.
"""

from . import intel
from . import snapshot as snapshot_io

#: the layer types whose records count an epoch (the fork's DataReader and ImageDataLayer)
EPOCH_LAYERS = ("Data", "ImageData")


def _epoch_size(net):
    """(records, batch) of the train net's data, or (0, 0) where no layer counts an epoch."""
    records, batch = 0, 0
    for layer in net.layers:
        if layer.type not in EPOCH_LAYERS:
            continue
        count = getattr(layer, "source_records", lambda: None)()
        if not count:
            continue
        records = count if not records else min(records, count)
        if not batch:
            batch = int(layer.batch_size)
    return records, batch


class Schedule:
    """The last epochs' tests of one ``step(iters)``."""

    def __init__(self, solver, iters):
        param = solver.param
        self.solver = solver
        self.enabled = param.test_and_snapshot_last_epochs > 0
        self.remaining = param.test_and_snapshot_last_epochs - 1
        self.iters = int(iters)
        self.records, self.batch = _epoch_size(solver.net) if self.enabled else (0, 0)
        self.epochs = self.passed = 0.0
        self.now = False  # whether the current iteration tests for the last epochs

    def test_due(self, stop_iter):
        """At the top of an iteration: whether the test nets run now (the last epochs', or
        ``test_interval``'s)."""
        solver = self.solver
        it, param = solver.iter, solver.param
        self.now = False
        if self.enabled and ((self.epochs > 0 and self.passed + self.remaining >= self.epochs)
                             or (self.epochs == 0 and it + 1 == stop_iter
                                 and self.remaining > 0)):
            self.remaining -= 1
            self.now = True
        return self.now or (intel.test_due(param, it) and
                            (it > 0 or param.test_initialization))

    def after_iteration(self):
        """After the iteration (``solver.iter`` already counts it) and its regular snapshot:
        the epochs so far, and the snapshot with the scores where the iteration tested."""
        solver = self.solver
        if self.records:
            per = solver.param.iter_size * self.batch / self.records
            self.epochs = self.iters * per
            self.passed = (solver.iter - 1) * per
        if not self.now:
            return
        scores = [value for means in solver.test_scores for _, value in means]
        if scores:
            snapshot_io.take(solver, scores)

