"""``pycaffe-lite train / test / time``: Caffe's flags and spellings, resume and fine-tuning,
the GPU fallback, signals, and log lines that Caffe's parsers read."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pycaffe_lite import backend, cli
from pycaffe_lite.proto import protoio
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.signals import SignalHandler, SolverAction
from pycaffe_lite.tools_log import parse_log

NET = """
name: "dummy"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 8 dim: 3 } shape { dim: 8 dim: 2 }
                           data_filler { type: "gaussian" } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
"""

SOLVER = """
net: "net.prototxt"
base_lr: 0.01
lr_policy: "fixed"
momentum: 0.9
display: 10
max_iter: %(max_iter)d
test_iter: 2
test_interval: 10
snapshot: %(snapshot)d
snapshot_prefix: "snaps/run"
random_seed: 1
%(extra)s
"""


def make_project(folder, max_iter=30, snapshot=20, extra="solver_mode: CPU"):
    (folder / "snaps").mkdir(parents=True, exist_ok=True)
    (folder / "net.prototxt").write_text(NET)
    (folder / "solver.prototxt").write_text(SOLVER % dict(max_iter=max_iter, snapshot=snapshot,
                                                          extra=extra))
    return folder / "solver.prototxt"


def weights_of(path):
    model = protoio.read_binary(str(path), caffe_pb2.NetParameter())
    ip = [lp for lp in model.layer if lp.name == "ip"][0]
    return np.array(ip.blobs[0].data)


@pytest.fixture
def project(tmp_path, monkeypatch):
    make_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_train_with_single_dash_flags(project, caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    assert cli.main(["train", "-solver", "solver.prototxt"]) == 0
    files = sorted(os.listdir(project / "snaps"))
    assert files == ["run_iter_20.caffemodel", "run_iter_20.solverstate",
                     "run_iter_30.caffemodel", "run_iter_30.solverstate"]
    text = caplog.text
    for line in ("Use CPU.", "Starting Optimization", "Iteration 10, loss = ",
                 "Iteration 10, lr = 0.01", "Iteration 10, Testing net (#0)",
                 "    Test net output #0: loss = ", "Optimization Done.",
                 "Snapshotting to binary proto file snaps/run_iter_20.caffemodel"):
        assert line in text
    assert "ms/iter, tests and snapshots included), peak memory" in text


def test_resume_from_snapshot_matches_uninterrupted(project):
    assert cli.main(["train", "--solver=solver.prototxt"]) == 0
    straight = weights_of(project / "snaps" / "run_iter_30.caffemodel")
    os.remove(project / "snaps" / "run_iter_30.caffemodel")
    assert cli.main(["train", "--solver", "solver.prototxt",
                     "-snapshot", "snaps/run_iter_20.solverstate"]) == 0
    resumed = weights_of(project / "snaps" / "run_iter_30.caffemodel")
    np.testing.assert_array_equal(resumed, straight)


def test_finetune_from_weights(project, caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    assert cli.main(["train", "--solver", "solver.prototxt"]) == 0
    start = project / "snaps" / "run_iter_30.caffemodel"
    os.rename(start, project / "start.caffemodel")
    (project / "solver.prototxt").write_text(
        SOLVER % dict(max_iter=1, snapshot=0, extra="base_lr: 0 solver_mode: CPU"))
    assert cli.main(["train", "--solver", "solver.prototxt",
                     "--weights", "start.caffemodel"]) == 0
    assert "Finetuning from start.caffemodel" in caplog.text
    np.testing.assert_array_equal(weights_of(project / "snaps" / "run_iter_1.caffemodel"),
                                  weights_of(project / "start.caffemodel"))


def _write_ip_weights(path, weight, bias):
    """A .caffemodel holding only layer ip's two blobs, built field by field."""
    model = caffe_pb2.NetParameter()
    layer = model.layer.add(name="ip", type="InnerProduct")
    for values in (weight, bias):
        blob = layer.blobs.add()
        blob.shape.dim.extend(values.shape)
        blob.data.extend(values.ravel().tolist())
    path.write_bytes(model.SerializeToString())


def _solver_with_weights(project, weights):
    (project / "solver.prototxt").write_text(
        SOLVER % dict(max_iter=1, snapshot=0, extra="base_lr: 0 solver_mode: CPU\n" +
                      "".join('weights: "%s"\n' % w for w in weights)))


def test_solver_weights_fields_fine_tune_the_train_and_test_nets(project, caplog):
    """Caffe's SolverParameter.weights: each field one file or a ',' list (names trimmed),
    loaded in order into the train net and every test net when the solver is built."""
    from pycaffe_lite.solvers import get_solver

    caplog.set_level("INFO", "pycaffe_lite")
    first = np.arange(6, dtype=np.float32).reshape(2, 3)
    second = -first - 0.5
    _write_ip_weights(project / "a.caffemodel", first, np.array([1, 2], np.float32))
    _write_ip_weights(project / "b.caffemodel", second, np.array([3, 4], np.float32))
    _solver_with_weights(project, ["a.caffemodel", "a.caffemodel, b.caffemodel"])
    solver = get_solver(str(project / "solver.prototxt"))
    for net in [solver.net] + solver.test_nets:
        np.testing.assert_array_equal(net.params["ip"][0].data, second)
        np.testing.assert_array_equal(net.params["ip"][1].data, [3, 4])
    assert caplog.text.count("Finetuning from a.caffemodel") == 2
    solver.close()
    # the command line: the solver's fields alone, base_lr 0 keeps them to the snapshot
    assert cli.main(["train", "--solver", "solver.prototxt"]) == 0
    np.testing.assert_array_equal(weights_of(project / "snaps" / "run_iter_1.caffemodel"),
                                  second.ravel())


def test_weights_flag_replaces_and_snapshot_ignores_the_solver_weights(project, capsys):
    first = np.full((2, 3), 7, np.float32)
    _write_ip_weights(project / "a.caffemodel", first, np.zeros(2, np.float32))
    _solver_with_weights(project, ["missing.caffemodel"])
    assert cli.main(["train", "--solver", "solver.prototxt"]) == 1
    assert "weights file 'missing.caffemodel' not found" in capsys.readouterr().err
    assert cli.main(["train", "--solver", "solver.prototxt", "--weights", "a.caffemodel"]) == 0
    np.testing.assert_array_equal(weights_of(project / "snaps" / "run_iter_1.caffemodel"),
                                  first.ravel())
    # resuming: the state's weights, the missing file of the weights field never opened
    assert cli.main(["train", "--solver", "solver.prototxt",
                     "--snapshot", "snaps/run_iter_1.solverstate"]) == 0
    np.testing.assert_array_equal(weights_of(project / "snaps" / "run_iter_1.caffemodel"),
                                  first.ravel())


def test_snapshot_and_weights_together_is_an_error(project, capsys):
    assert cli.main(["train", "--solver", "solver.prototxt", "--weights", "a",
                     "--snapshot", "b"]) == 1
    assert "not both" in capsys.readouterr().err


def test_missing_solver_flag_is_an_error(project, capsys):
    assert cli.main(["train"]) == 1
    assert "need a solver definition" in capsys.readouterr().err


def _no_gpu(monkeypatch):
    def refuse():
        raise backend.GPUUnavailableError("no CUDA device (test)")

    monkeypatch.setattr(backend, "set_mode_gpu", refuse)


def test_solver_mode_gpu_falls_back_to_cpu_with_a_warning(project, monkeypatch, caplog):
    _no_gpu(monkeypatch)
    make_project(project, max_iter=2, snapshot=0, extra="solver_mode: GPU")
    caplog.set_level("INFO", "pycaffe_lite")
    assert cli.main(["train", "--solver", "solver.prototxt"]) == 0
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "training on the CPU instead" in warnings[0].getMessage()
    assert backend.mode() == backend.CPU


def test_a_solver_without_solver_mode_trains_on_the_cpu(project, monkeypatch, caplog):
    """caffe train reads solver_mode only where the file sets it (has_solver_mode): the
    field's default (GPU) asks for nothing, so there is no GPU attempt and no warning."""
    tried = []
    monkeypatch.setattr(backend, "set_mode_gpu", lambda: tried.append(True))
    make_project(project, max_iter=2, snapshot=0, extra="")
    caplog.set_level("INFO", "pycaffe_lite")
    assert cli.main(["train", "--solver", "solver.prototxt"]) == 0
    assert not tried and backend.mode() == backend.CPU
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    assert "Use CPU." in caplog.text


def test_explicit_gpu_without_a_gpu_is_an_error(project, monkeypatch, capsys):
    _no_gpu(monkeypatch)
    assert cli.main(["train", "--solver", "solver.prototxt", "-gpu", "0"]) == 1
    assert "no CUDA device (test)" in capsys.readouterr().err


def test_level_and_stage_flags_reach_the_train_net(project, caplog):
    (project / "net.prototxt").write_text(NET + """
layer { name: "deep_only" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "l2"
        include { min_level: 2 stage: "deep" } }
""")
    caplog.set_level("INFO", "pycaffe_lite")
    assert cli.main(["train", "--solver", "solver.prototxt", "--level", "2",
                     "--stage", "deep,x"]) == 0
    # outputs in name order, as Caffe lists them: l2 before loss
    assert "Train net output #0: l2 = " in caplog.text
    assert "Train net output #1: loss = " in caplog.text
    assert cli.main(["train", "--solver", "solver.prototxt", "--stage", "deep"]) == 0
    assert caplog.text.count("Train net output #0: l2") == 3  # only the first run had it


def test_test_command_scores_a_model(project, caplog):
    assert cli.main(["train", "--solver", "solver.prototxt"]) == 0
    caplog.set_level("INFO", "pycaffe_lite")
    caplog.clear()
    parser = cli.build_parser()
    args = parser.parse_args(cli.normalise_flags(
        ["test", "-model", "net.prototxt", "-weights", "snaps/run_iter_30.caffemodel",
         "-iterations", "4"]))
    assert args.run(args) == 0
    batch = [float(r.getMessage().split(" = ")[1]) for r in caplog.records
             if r.getMessage().startswith("Batch ")]
    assert len(batch) == 4
    mean = np.float32(np.sum(np.float32(batch)) / 4)
    assert args.results["loss"] == [pytest.approx(float(mean), rel=1e-5)]
    assert "Loss: " in caplog.text
    assert "loss = %g (* 1 = %g loss)" % (args.results["loss"][0], args.results["loss"][0]) \
        in caplog.text


def test_test_command_needs_weights(project, capsys):
    assert cli.main(["test", "--model", "net.prototxt"]) == 1
    assert "need model weights" in capsys.readouterr().err


def test_time_command_reports_every_layer(project, caplog):
    caplog.set_level("INFO", "pycaffe_lite")
    args = cli.build_parser().parse_args(["time", "--model", "net.prototxt",
                                          "--iterations", "3"])
    assert args.run(args) == 0
    text = caplog.text
    for name in ("data", "ip", "loss"):
        assert "%10s\tforward: " % name in text and "%10s\tbackward: " % name in text
    assert text.count("forward-backward time: ") == 3
    for line in ("Average Forward pass: ", "Average Backward pass: ",
                 "Average Forward-Backward: ", "Total Time: ", "*** Benchmark ends ***"):
        assert line in text
    t = args.timings
    assert len(t["forward"]) == 3 and all(v >= 0 for v in t["forward"] + t["backward"])
    assert sum(t["forward"]) <= t["total_ms"]


def test_bad_phase_is_reported(project, capsys):
    assert cli.main(["time", "--model", "net.prototxt", "--phase", "VAL"]) == 1
    assert 'must be "TRAIN" or "TEST"' in capsys.readouterr().err


def test_signal_handler_maps_signals_to_actions():
    # what was installed before (the default handler, or SIG_IGN where the test process
    # was started in the background by a shell) is what must be back afterwards
    previous = signal.getsignal(signal.SIGINT)
    handler = SignalHandler("snapshot", "stop")
    with handler:
        assert handler.get_action() == SolverAction.NONE
        os.kill(os.getpid(), signal.SIGINT)
        assert handler.get_action() == SolverAction.SNAPSHOT
        assert handler.get_action() == SolverAction.NONE
        os.kill(os.getpid(), signal.SIGHUP)
        assert handler.get_action() == SolverAction.STOP
    assert signal.getsignal(signal.SIGINT) is previous


def test_sighup_and_sigint_pending_together_snapshot_then_stop(project):
    """Caffe's CheckForSignals answers SIGHUP before SIGINT: with both pending, the snapshot
    SIGHUP asked for is written, and SIGINT stops at the next check (one iteration later)."""
    from pycaffe_lite.solvers import get_solver

    make_project(project, max_iter=100, snapshot=0,
                 extra="solver_mode: CPU snapshot_after_train: false test_initialization: false")
    solver = get_solver("solver.prototxt")
    with SignalHandler() as handler:  # stop on SIGINT, snapshot on SIGHUP (the defaults)
        solver.set_action_function(handler.get_action)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGHUP)
        solver.solve()
    solver.close()
    assert solver.iter == 2
    assert sorted(os.listdir(project / "snaps")) == ["run_iter_1.caffemodel",
                                                     "run_iter_1.solverstate"]


def _start_training(project, *flags):
    make_project(project, max_iter=10 ** 7, snapshot=0, extra="display: 0 solver_mode: CPU")
    log = open(project / "train.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "pycaffe_lite.cli", "train", "-solver",
                             "solver.prototxt", *flags], cwd=project, stdout=log,
                            stderr=subprocess.STDOUT)
    return proc, log


def _wait_for(path, text, proc, timeout=600, after=0):
    """Wait until ``text`` appears in ``path`` after offset ``after``; returns the offset just
    past it. Fails if the process ends first (``timeout`` only guards against a hang)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = path.read_text().find(text, after)
        if found >= 0:
            return found + len(text)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError("'%s' not seen in %s:\n%s" % (text, path, path.read_text()))


def test_sigint_snapshots_and_stops(project):
    proc, log = _start_training(project)
    try:
        _wait_for(project / "train.log", "Iteration 20, Testing net", proc)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=600) == 0
    finally:
        proc.kill()
        log.close()
    text = (project / "train.log").read_text()
    assert "Optimization stopped early." in text
    snaps = sorted(os.listdir(project / "snaps"))
    assert len(snaps) == 2 and snaps[0].endswith(".caffemodel")
    assert snaps[1].endswith(".solverstate")


def test_sighup_snapshots_and_continues(project):
    proc, log = _start_training(project)
    try:
        _wait_for(project / "train.log", "Iteration 10, Testing net", proc)
        proc.send_signal(signal.SIGHUP)
        snapped = _wait_for(project / "train.log", "Snapshotting solver state", proc)
        # still training: a later iteration is logged after the snapshot
        _wait_for(project / "train.log", ", Testing net (#0)", proc, after=snapped)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=600) == 0
    finally:
        proc.kill()
        log.close()
    assert len(os.listdir(project / "snaps")) == 4  # the SIGHUP snapshot and the final one


def test_glog_lines_parse_into_caffe_csv_rows(project):
    """A real training log, written in glog's format, read back by the log parser."""
    out = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli", "train", "--solver",
                          "solver.prototxt"], cwd=project, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    (project / "caffe.INFO").write_text(out.stderr)
    lines = [ln for ln in out.stderr.splitlines() if "Iteration 10, loss" in ln]
    assert len(lines) == 1
    # glog's layout: severity+mmdd, time with microseconds, pid, file:line]
    prefix, message = lines[0].split("] ", 1)
    level_date, clock, pid, where = prefix.split()
    assert level_date[0] == "I" and len(level_date) == 5
    assert len(clock.split(".")[1]) == 6 and pid.isdigit() and ":" in where
    train, test = parse_log(str(project / "caffe.INFO"))
    assert [r["NumIters"] for r in train] == [0, 10, 20]
    assert [r["NumIters"] for r in test] == [0, 10, 20, 30]
    assert list(train[0]) == ["NumIters", "Seconds", "LearningRate", "loss"]
    assert all(r["LearningRate"] == 0.01 for r in train + test)
    assert train[1]["loss"] == float(message.split("loss = ")[1])


class _Terminal:
    """A stream that says it is a terminal and records what is written."""

    def __init__(self):
        self.chunks = []

    def isatty(self):
        return True

    def write(self, text):
        self.chunks.append(text)

    def flush(self):
        pass


def test_progress_bar_on_a_terminal_only():
    import io
    from pycaffe_lite.solvers.progress import ProgressBar
    term = _Terminal()
    assert ProgressBar.wanted(term) and not ProgressBar.wanted(io.StringIO())
    bar = ProgressBar(2000, stream=term)
    bar.start(0)
    line = bar.line(500, loss=0.25, now=bar._t0 + 10.0)
    assert line.startswith("[#######---------------------] 500/2000  25.0% 50.00 it/s")
    assert "ETA 0:30" in line and "loss 0.25" in line
    bar.update(500, 0.25)
    assert term.chunks[-1].startswith("\r\x1b[K[")
    bar.erase()
    assert term.chunks[-1] == "\r\x1b[K"


def test_log_records_erase_the_bar_first(project):
    import logging
    from pycaffe_lite.solvers.progress import ProgressBar
    term = _Terminal()
    handler = logging.StreamHandler(term)
    logger = logging.getLogger("pycaffe_lite")
    logger.addHandler(handler)
    try:
        bar = ProgressBar(10, stream=term).attach()
        bar.update(3)
        logger.warning("Iteration 3, loss = 1")
        i = max(k for k, c in enumerate(term.chunks) if "Iteration 3" in c)
        assert term.chunks[i - 1] == "\r\x1b[K"
        bar.close()
        assert handler.filters == []
    finally:
        logger.removeHandler(handler)
