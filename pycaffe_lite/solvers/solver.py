"""The training loop shared by every solver: nets, testing, display, snapshots, callbacks.

:class:`Solver` follows Caffe's ``Solver``: it builds the train net and the test nets from the
SolverParameter (``net``/``net_param``/``train_net``/``train_net_param``/``test_net``/
``test_net_param`` with ``train_state``/``test_state``), runs ``step(n)`` (clear the diffs, test
when due (:mod:`.last_epochs`), ``iter_size`` forward/backward passes, display, callbacks,
``apply_update()``, snapshot when due or asked), and writes and restores snapshots in Caffe's
formats. The update rule (``apply_update``) and its state (``history``): :mod:`.sgd` and kin.

pycaffe's surface: ``solver.net``, ``solver.test_nets``, ``solver.iter``, ``solver.max_iter``,
``solver.param``, ``step(n)``, ``solve(resume_file=None)``, ``restore(path)``, ``snapshot()``,
``apply_update()``, ``add_callback(on_start, on_gradients_ready)``, ``share_weights(net)``,
``solver.lr`` (the rules'); ``add_listener(obj)`` for loggers (:mod:`pycaffe_lite.tensorboard`).
"""

import logging
import math
import os

import numpy as np
from google.protobuf import text_format

from .. import backend, health, net_memory, ranks
from ..errors import CaffeError
from ..net import LAYER_FAILURES, Net
from ..proto import caffe_pb2, protoio
from ..signals import SolverAction
from . import debug_info, intel, last_epochs, mixed, paths, train_graph
from . import snapshot as snapshot_io
from .debug_info import fmt as _fmt
from .detection_test import test_detection
from .lr_policy import get_policy, learning_rate

log = logging.getLogger("pycaffe_lite")

_SP = caffe_pb2.SolverParameter


def build_net(net_param):
    """A Net from a NetParameter whose ``state`` is already complete (phase, level, stages).

    ``Net(...)`` takes the phase, level and stages as arguments; a solver merges them from
    several places first (Caffe's rules), so it builds the net from the finished parameter."""
    return Net.from_param(net_param)


class _Callback:
    def __init__(self, on_start, on_gradients_ready):
        self.on_start = on_start
        self.on_gradients_ready = on_gradients_ready


class Solver:
    """Base of the solvers; construct a subclass (or use :func:`get_solver`)."""

    type = None
    #: names of the per-parameter state lists, in the order ``history`` stores them
    state_names = ("history",)
    #: a NaN or Inf loss or gradient stops training with a NumericError naming the first
    #: layer and blob that produced it (False: log that error once and go on, as Caffe does)
    stop_on_nonfinite = True

    def __init__(self, source, base_dir=None, source_path=None):
        """``source``: a solver prototxt path, prototxt text or a SolverParameter.
        ``base_dir``: where relative paths fall back to (default: the solver file's folder).
        ``source_path``: the file a SolverParameter ``source`` was read from, if any (names
        the default snapshot_prefix and the errors)."""
        self.param = protoio.read_solver_param(source)
        if source_path is None and isinstance(source, (str, os.PathLike)) and \
                os.path.isfile(source):
            source_path = source
        if source_path is not None:
            self.source = os.fspath(source_path)
            if base_dir is None:
                base_dir = os.path.dirname(os.path.abspath(self.source))
        else:
            self.source = None
        self.base_dir = base_dir
        self.search_dirs = paths.search_dirs(base_dir)
        self.where = self.source or "solver parameters"
        param = self.param
        if self.type is not None and param.HasField("type") and param.type != self.type:
            log.warning("%s says type: \"%s\" but a %s was built (get_solver() follows the "
                        "file)", self.where, param.type, type(self).__name__)
        log.info("Initializing solver from parameters: \n%s",
                 text_format.MessageToString(param))
        if param.average_loss < 1:
            raise CaffeError("%s: average_loss should be >= 1 (got %d)"
                             % (self.where, param.average_loss))
        if param.iter_size < 1:
            raise CaffeError("%s: iter_size should be >= 1 (got %d)"
                             % (self.where, param.iter_size))
        if not param.base_lr >= 0:
            raise CaffeError("%s: base_lr must be >= 0 (got %g): a negative learning rate "
                             "climbs the loss instead of descending it"
                             % (self.where, param.base_lr))
        self.policy = get_policy(param, self.where)
        self._init_snapshot_prefix()
        mixed.check(param, self.where)
        if param.random_seed >= 0:
            # as Caffe: each data-parallel rank draws its own random numbers
            backend.set_random_seed(param.random_seed + ranks.solver_rank())
        self._init_train_net()
        self._init_test_nets()
        snapshot_io.load_weights(self, param.weights)  # the files of its weights: fields
        log.info("Solver scaffolding done.")
        self.iter = 0
        self.current_step = 0
        self.smoothed_loss = 0.0
        self._losses = []
        self.callbacks = []
        self.listeners = []
        self._action_function = None
        self.requested_early_exit = False
        self.progress = None
        self.test_scores = [[] for _ in self.test_nets]
        self._output_cache = {}
        self.history = []
        self._state_xp = None
        self.last_snapshot = None       # the newest complete .solverstate written or restored
        self._debug_culprit = None      # first non-finite value seen by a debug_info pass
        self._nonfinite_reported = False
        self._diagnosed = set()
        self.train_graph = None
        self.sanity_check()
        self.presolve()

    # -- construction --------------------------------------------------------------------
    def sanity_check(self):
        """Subclasses refuse settings their rule cannot use (Caffe's constructor checks)."""

    def presolve(self):
        """Allocate the update state (subclasses)."""

    def _init_snapshot_prefix(self):
        param = self.param
        if self.source is not None:
            if not param.HasField("snapshot_prefix"):
                param.snapshot_prefix = os.path.splitext(self.source)[0]
                log.info("snapshot_prefix was not specified and is set to %s",
                         param.snapshot_prefix)
            else:
                # Caffe: a prefix naming a folder (here: in the working directory or next to
                # the solver) means <folder>/<solver name>
                folder = paths.find(param.snapshot_prefix, self.search_dirs[:1], isdir=True)
                if folder is not None:
                    stem = os.path.splitext(os.path.basename(self.source))[0]
                    param.snapshot_prefix = os.path.join(param.snapshot_prefix, stem)
                    log.info("snapshot_prefix is a directory and is set to %s",
                             param.snapshot_prefix)
        prefix = param.snapshot_prefix
        self.snapshot_prefix = paths.resolve_prefix(prefix, self.search_dirs)
        if self.snapshot_prefix not in (None, prefix):
            log.info("snapshot_prefix '%s' resolved to %s", prefix, self.snapshot_prefix)
        if self.snapshot_prefix is None:
            if param.snapshot > 0:
                raise paths.prefix_error(prefix, self.search_dirs, self.where)
            if param.snapshot_after_train:
                log.warning("%s", paths.prefix_error(prefix, self.search_dirs, self.where))
        elif param.snapshot > 0 and ranks.root_solver():  # the rank that writes them
            paths.check_writable(self.snapshot_prefix, self.where)

    def _read_net_file(self, path, field):
        resolved = paths.resolve_file(path, self.search_dirs, field, self.where)
        net_param = protoio.read_net_param(resolved)
        return net_param, os.path.dirname(os.path.abspath(resolved))

    def _inline_net(self, message):
        return protoio.read_net_param(message), None

    def _finish_net_param(self, net_param, net_dir, phase, extra_state):
        state = caffe_pb2.NetState()
        state.phase = phase
        state.MergeFrom(net_param.state)
        if extra_state is not None:
            state.MergeFrom(extra_state)
        net_param.state.CopyFrom(state)
        intel.apply_engine(self.param, net_param)
        paths.resolve_sources(net_param, [d for d in (net_dir, self.base_dir) if d])
        return net_param

    def _init_train_net(self):
        param = self.param
        fields = ("net", "net_param", "train_net", "train_net_param")
        given = [f for f in fields if param.HasField(f)]
        if not given:
            raise CaffeError("%s: the solver must specify a train net using one of these "
                             "fields: %s" % (self.where, ", ".join(fields)))
        if len(given) > 1:
            raise CaffeError("%s: the solver must not contain more than one of these fields "
                             "specifying a train net: %s (it has %s)"
                             % (self.where, ", ".join(fields), ", ".join(given)))
        field = given[0]
        if field == "train_net_param":
            log.info("Creating training net specified in train_net_param.")
            net_param, net_dir = self._inline_net(param.train_net_param)
        elif field == "train_net":
            log.info("Creating training net from train_net file: %s", param.train_net)
            net_param, net_dir = self._read_net_file(param.train_net, "train_net")
        elif field == "net_param":
            log.info("Creating training net specified in net_param.")
            net_param, net_dir = self._inline_net(param.net_param)
        else:
            log.info("Creating training net from net file: %s", param.net)
            net_param, net_dir = self._read_net_file(param.net, "net")
        self._finish_net_param(net_param, net_dir, caffe_pb2.TRAIN, param.train_state)
        self.net = build_net(net_param)
        # activation diffs share buffers where their backward ranges allow; debug_info reads all
        net_memory.attach(self.net, False if param.debug_info else None)

    def _init_test_nets(self):
        param = self.param
        generic = param.HasField("net_param") + param.HasField("net")
        n_given = len(param.test_net_param) + len(param.test_net)
        n_iter = len(param.test_iter)
        if generic:
            if n_iter < n_given:
                raise CaffeError("%s: test_iter must be specified for each test network (%d "
                                 "test nets, %d test_iter values)" % (self.where, n_given, n_iter))
        elif n_iter != n_given:
            raise CaffeError("%s: test_iter must be specified for each test network (%d test "
                             "nets, %d test_iter values)" % (self.where, n_given, n_iter))
        n_instances = n_given + (n_iter - n_given)
        if len(param.test_state) and len(param.test_state) != n_instances:
            raise CaffeError("%s: test_state must be unspecified or specified once per test net "
                             "(%d test nets, %d test_state values)"
                             % (self.where, n_instances, len(param.test_state)))
        if n_instances and param.test_interval <= 0:
            raise CaffeError("%s: %d test net(s) (test_iter) but test_interval is %d; set "
                             "test_interval: N (iterations between tests) or remove test_iter"
                             % (self.where, n_instances, param.test_interval))
        sources = []
        for net_param in param.test_net_param:
            sources.append(("test_net_param",) + self._inline_net(net_param))
        for path in param.test_net:
            sources.append(("test_net file: " + path,) + self._read_net_file(path, "test_net"))
        remaining = n_iter - len(sources)
        for _ in range(remaining):
            if param.HasField("net_param"):
                sources.append(("net_param",) + self._inline_net(param.net_param))
            else:
                sources.append(("net file: " + param.net,) + self._read_net_file(param.net, "net"))
        self.test_nets = []
        for i, (what, net_param, net_dir) in enumerate(sources):
            extra = param.test_state[i] if len(param.test_state) else None
            self._finish_net_param(net_param, net_dir, caffe_pb2.TEST, extra)
            log.info("Creating test net (#%d) specified by %s", i, what)
            net = build_net(net_param)
            net.share_with(self.net)
            self.test_nets.append(net)

    # -- pycaffe surface -----------------------------------------------------------------
    @property
    def max_iter(self):
        return self.param.max_iter

    def add_callback(self, on_start, on_gradients_ready=None):
        """Call ``on_start()`` before each iteration's forward/backward passes and
        ``on_gradients_ready()`` before its update (pycaffe's ``add_callback``). An object with
        ``on_start``/``on_gradients_ready`` methods may be passed alone."""
        if on_gradients_ready is None and hasattr(on_start, "on_gradients_ready"):
            on_start, on_gradients_ready = on_start.on_start, on_start.on_gradients_ready
        if not callable(on_start) or not callable(on_gradients_ready):
            raise CaffeError("add_callback(on_start, on_gradients_ready) needs two callables")
        self.callbacks.append(_Callback(on_start, on_gradients_ready))

    def add_listener(self, listener):
        """Call ``listener.on_display(solver, final)`` after each display iteration's update
        and at the final display (smoothed_loss, lr and the train outputs are current),
        ``on_test(solver, test_net_id)`` after each complete test_all() test (test_scores),
        ``on_close(solver)`` when the solver closes; each method is optional."""
        self.listeners.append(listener)

    def _notify(self, event, *args):
        for listener in self.listeners:
            method = getattr(listener, event, None)
            if method is not None:
                method(self, *args)

    def set_action_function(self, function):
        """``function()`` is asked between iterations for a SolverAction (stop, snapshot)."""
        self._action_function = function

    def share_weights(self, net):
        """Make ``net`` use this solver's trained weights, layer by layer name."""
        net.share_with(self.net)

    def get_requested_action(self):
        if self._action_function is not None:
            return self._action_function()
        return SolverAction.NONE

    def get_learning_rate(self):
        return learning_rate(self.param, self.iter, self, self.policy)

    def apply_update(self):
        raise NotImplementedError("%s defines no apply_update()" % type(self).__name__)

    @property
    def state(self):
        """The update state by name: {name: [array per learnable param]}."""
        n = len(self.net.learnable_params)
        return {name: self.history[k * n:(k + 1) * n] for k, name in enumerate(self.state_names)}

    # -- lifetime ------------------------------------------------------------------------
    def close(self):
        """Close the train net and the test nets (their loading threads stop, then their
        databases and files close) and take the progress bar off the log handlers. Closing
        twice does nothing; also ``with SGDSolver(...) as solver:``."""
        if self.progress is not None:
            self.progress.close()
            self.progress = None
        self._notify("on_close")
        self.listeners = []
        for net in [self.net] + list(self.test_nets):
            net.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    # -- the loop ------------------------------------------------------------------------
    def step(self, iters):
        """Run ``iters`` iterations (or fewer if a stop is requested)."""
        param = self.param
        start_iter = self.iter
        stop_iter = self.iter + int(iters)
        average_loss = param.average_loss
        self._losses = []
        self.smoothed_loss = 0.0
        self.requested_early_exit = False
        if self.progress is not None:
            self.progress.start(self.iter)
        last = last_epochs.Schedule(self, iters)  # (and test_interval's tests)
        while self.iter < stop_iter:
            if last.test_due(stop_iter):
                self.test_all()
                if self.requested_early_exit:
                    break
            for cb in self.callbacks:
                cb.on_start()
            display = bool(param.display) and self.iter % param.display == 0
            debug = display and param.debug_info
            graph = None if display else train_graph.of(self)
            loss = graph.iteration() if graph is not None else None
            if loss is not None:  # a captured iteration: forward, backward and the update
                if not math.isfinite(loss):
                    self._nonfinite(loss, False)
                self._update_smoothed_loss(loss, start_iter, average_loss)
            else:
                self._eager_iteration(display, debug, start_iter, average_loss)
            if display:
                self._notify("on_display", False)
            self.iter += 1
            if self.progress is not None:
                self.progress.update(self.iter, self.smoothed_loss)
            request = self.get_requested_action()
            if (param.snapshot and self.iter % param.snapshot == 0) or \
                    request == SolverAction.SNAPSHOT:
                self.snapshot()
            last.after_iteration()
            if request == SolverAction.STOP:
                self.requested_early_exit = True
                break

    def _eager_iteration(self, display, debug, start_iter, average_loss):
        """One iteration layer by layer: ``iter_size`` forward/backward passes, the checks,
        the display, the callbacks, the update."""
        param = self.param
        self.net.clear_param_diffs()
        loss = 0.0
        self._debug_culprit = None
        for _ in range(param.iter_size):
            loss += self._forward_backward(debug)
        loss /= param.iter_size
        # the loss is checked every iteration (free), the gradients at display (one read)
        if not math.isfinite(loss) or (display and not health.gradients_finite(self.net)):
            self._nonfinite(loss, debug)
        self._update_smoothed_loss(loss, start_iter, average_loss)
        if display:
            log.info("Iteration %d, loss = %s", self.iter, _fmt(self.smoothed_loss))
            self._log_outputs(self.net, "Train", None, None)
            self._diagnose(self.net)
        for cb in self.callbacks:
            cb.on_gradients_ready()
        mixed.apply_update(self)  # float16 params: on their float32 masters
        if debug:
            debug_info.update(self.net)

    def solve(self, resume_file=None):
        """Train to ``max_iter`` (resuming from ``resume_file`` if given), snapshot after
        training as asked, and run the final display and test."""
        param = self.param
        log.info("Solving %s", self.net.name)
        log.info("Learning Rate Policy: %s", param.lr_policy)
        self.requested_early_exit = False
        if resume_file:
            log.info("Restoring previous solver status from %s", resume_file)
            self.restore(resume_file)
        snapshot_io.check_final(self)  # the last snapshot's folder, before any training
        start_iter = self.iter
        self.step(param.max_iter - self.iter)
        if param.snapshot_after_train and \
                (not param.snapshot or self.iter % param.snapshot != 0):
            self.snapshot()
        if self.requested_early_exit:
            log.info("Optimization stopped early.")
            return
        if param.display and self.iter % param.display == 0:
            loss = self.net.forward_from_to()
            self._update_smoothed_loss(loss, start_iter, param.average_loss)
            log.info("Iteration %d, loss = %s", self.iter, _fmt(self.smoothed_loss))
            self._notify("on_display", True)
        if intel.test_due(param, self.iter):  # Intel Caffe's test_offset shifts the tests
            self.test_all()
        log.info("Optimization Done.")

    # -- numeric health --------------------------------------------------------------------
    def _nonfinite(self, loss, debug):
        """The loss or the gradients of this iteration are not finite: name the first layer
        and blob that produced NaN or Inf, and stop (or, with ``stop_on_nonfinite`` False, log
        it once and go on)."""
        if self._nonfinite_reported:
            return
        culprit = self._debug_culprit if debug else None
        if culprit is None:
            try:
                culprit = health.locate(self.net)
            except (CaffeError,) + LAYER_FAILURES as exc:
                log.warning("Could not run the net again to find the first non-finite value: "
                            "%s", exc)
        error = health.nonfinite_error(self.iter, loss, culprit, self.last_snapshot)
        if self.stop_on_nonfinite:
            raise error
        self._nonfinite_reported = True
        log.error("%s", error)

    def _diagnose(self, net):
        """Warn (once per layer) about finite values that tell of a diverged net."""
        for name, message in health.diagnose(net):
            key = (id(net), name)
            if key in self._diagnosed:
                continue
            self._diagnosed.add(key)
            log.warning("Iteration %d, layer '%s': %s. %s.", self.iter, name, message,
                        health.USUAL_CAUSES)

    def _update_smoothed_loss(self, loss, start_iter, average_loss):
        losses = self._losses
        if len(losses) < average_loss:
            losses.append(loss)
            size = len(losses)
            self.smoothed_loss = (self.smoothed_loss * (size - 1) + loss) / size
        else:
            idx = (self.iter - start_iter) % average_loss
            self.smoothed_loss += (loss - losses[idx]) / average_loss
            losses[idx] = loss

    # -- outputs and testing -------------------------------------------------------------
    def _outputs(self, net):
        """[(name, blob, loss weight)] of ``net``'s output blobs (cached)."""
        key = id(net)
        cached = self._output_cache.get(key)
        if cached is None:
            weights = net.blob_loss_weights
            cached = [(name, net.blobs[name], weights[name]) for name in net.outputs]
            self._output_cache[key] = cached
        return cached

    def _log_outputs(self, net, what, values, divisor):
        index = 0
        for j, (name, blob, weight) in enumerate(self._outputs(net)):
            vals = blob.data.ravel() if values is None else values[j]
            for v in vals:
                v = np.float32(v)
                if divisor is not None:
                    v = np.float32(v / np.float32(divisor))
                msg = "    %s net output #%d: %s = %s" % (what, index, name, _fmt(v))
                if weight:
                    msg += " (* %s = %s loss)" % (_fmt(weight), _fmt(np.float32(weight * v)))
                log.info("%s", msg)
                index += 1

    def test_all(self):
        if not ranks.root_solver():
            return  # rank 0 tests, over the whole test set
        for test_net_id in range(len(self.test_nets)):
            if self.requested_early_exit:
                break
            self.test(test_net_id)
            if not self.requested_early_exit:
                self._notify("on_test", test_net_id)

    def _requests_stop_testing(self):
        """Between test iterations: act on every pending request (snapshot, stop); whether
        testing must stop."""
        request = self.get_requested_action()
        while request != SolverAction.NONE:
            if request == SolverAction.SNAPSHOT:
                self.snapshot()
            elif request == SolverAction.STOP:
                self.requested_early_exit = True
            request = self.get_requested_action()
        return self.requested_early_exit

    def test(self, test_net_id=0):
        """Run test net ``test_net_id`` for its test_iter batches; log and keep the means
        (the mean average precision with the SSD fork's ``eval_type: "detection"``)."""
        if self.param.eval_type != "classification":
            return test_detection(self, test_net_id)
        param = self.param
        log.info("Iteration %d, Testing net (#%d)", self.iter, test_net_id)
        net = self.test_nets[test_net_id]
        net.share_with(self.net)
        outputs = self._outputs(net)
        n_iter = param.test_iter[test_net_id]
        if n_iter <= 0:  # as Caffe: no test batch, no output line (test_scores stay [])
            return
        scores = None
        loss = 0.0
        for _ in range(n_iter):
            if self._requests_stop_testing():
                break
            if param.debug_info:
                iter_loss = debug_info.forward(net, self._debug_check)
            else:
                iter_loss = net.forward_from_to()
            if param.test_compute_loss:
                loss += iter_loss
            if scores is None:
                scores = [blob.read_data().ravel().copy() for _, blob, _ in outputs]
            else:
                for s, (_, blob, _) in zip(scores, outputs):
                    s += blob.read_data().ravel()
        if self.requested_early_exit:
            log.info("Test interrupted.")
            return
        self._diagnose(net)
        if param.test_compute_loss:
            loss /= n_iter
            log.info("Test loss: %s", _fmt(loss))
        scores = [backend.to_host(s) for s in scores or []]
        means = []
        for (name, _, _), s in zip(outputs, scores):
            for v in s:
                means.append((name, float(np.float32(v / np.float32(n_iter)))))
        self.test_scores[test_net_id] = means
        self._log_outputs(net, "Test", scores, n_iter)

    # -- debug info (Caffe's Net debug_info lines) ----------------------------------------
    def _debug_check(self, net, culprit, what):
        """With debug_info: log and remember the first non-finite value of the train net's
        pass (the per-layer check the debug lines need anyway)."""
        if culprit is None or net is not self.net or self._debug_culprit is not None:
            return
        self._debug_culprit = culprit
        log.warning("    [%s] Iteration %d, first non-finite value: %s", what, self.iter,
                    culprit.describe())

    def _forward_backward(self, debug):
        if not debug:
            return self.net.forward_backward()
        loss = debug_info.forward(self.net, self._debug_check)
        debug_info.backward(self.net, self._debug_check)
        return loss

    # -- snapshots (written and read by pycaffe_lite.solvers.snapshot) ---------------------
    def snapshot_filename(self, extension):
        return "%s_iter_%d%s" % (self._prefix(), self.iter, extension)

    def _prefix(self):
        if self.snapshot_prefix is None:
            raise paths.prefix_error(self.param.snapshot_prefix, self.search_dirs, self.where)
        return self.snapshot_prefix

    def snapshot(self):
        """Write ``<prefix>_iter_N.caffemodel`` (``.caffemodel.h5``) and the solver state
        ``.solverstate`` (``.solverstate.h5``); returns the weights file name.

        Each file is written to a temporary file and renamed, weights first: a crash or a full
        disk at any point leaves every earlier snapshot complete, and a ``.solverstate`` never
        refers to a missing or partial weights file. A failure raises a SnapshotError naming
        the last complete snapshot. In data-parallel training only rank 0 writes (the
        others return None)."""
        return snapshot_io.take(self)

    def snapshot_solver_state(self, model_filename):
        """Write the solver state that refers to ``model_filename``; its file name."""
        return snapshot_io.write_state(self, model_filename)

    def restore(self, state_file):
        """Continue from a ``.solverstate`` (binary, or HDF5 ``.h5``) written by a solver of the
        same type, here or by Caffe: iteration, weights, lr schedule step and history (and,
        for pycaffe-lite states, the random generator and the data layers' positions)."""
        state_file = os.fspath(state_file)
        snapshot_io.restore(self, state_file)
        self.last_snapshot = state_file
