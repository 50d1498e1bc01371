"""kill -9 during snapshots: the earlier snapshots stay valid, and resuming from the last one
continues to exactly the weights of an uninterrupted run.

Training runs are forked by a helper process (``helpers/snapshot_kill_child.py``) and killed with
SIGKILL. Aimed kills wait until a given snapshot file is partly written (the writer is slowed
to 4 KiB chunks, so a kill lands inside it) and kill after a random fraction of its bytes;
blind kills (both formats, normal speed) land at random points after a run's k-th
snapshot. After each kill every
snapshot file left must parse, the newest ``.solverstate`` must refer to complete weights, and
a resume from it must end with the weights of the uninterrupted run, bit for bit.
"""

import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from pycaffe_lite import cli
from pycaffe_lite.proto import protoio
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver

HERE = os.path.dirname(os.path.abspath(__file__))
MAX_ITER = 6
AIMED_KILLS = 24
BLIND_KILLS = 12
BLIND_MAX_ITER = 12

NET = """
name: "killme"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 8 dim: 256 } shape { dim: 8 dim: 64 }
                           data_filler { type: "gaussian" } } }
layer { name: "drop" type: "Dropout" bottom: "x" top: "x" dropout_param { dropout_ratio: 0.2 } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 64 weight_filler { type: "gaussian" std: 0.05 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
"""

SOLVER = """
net: "net.prototxt"
type: "Adam"
base_lr: 0.001
lr_policy: "step" stepsize: 3 gamma: 0.5
max_iter: %(max_iter)d
snapshot: 1
snapshot_prefix: "snaps/run"
snapshot_format: %(fmt)s
snapshot_after_train: false
random_seed: 7
"""


def project(folder, fmt="BINARYPROTO", max_iter=MAX_ITER):
    (folder / "snaps").mkdir(parents=True, exist_ok=True)
    (folder / "net.prototxt").write_text(NET)
    (folder / "solver.prototxt").write_text(SOLVER % dict(max_iter=max_iter, fmt=fmt))
    return folder


def final_weights(solver):
    return [b.data.copy() for b in solver.net.learnable_params]


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """{max_iter: the weights of an uninterrupted run} (the same for both snapshot formats)."""
    out = {}
    for max_iter in (MAX_ITER, BLIND_MAX_ITER):
        folder = project(tmp_path_factory.mktemp("reference"), max_iter=max_iter)
        cwd = os.getcwd()
        os.chdir(folder)
        try:
            solver = get_solver("solver.prototxt")
            solver.solve()
        finally:
            os.chdir(cwd)
        out[max_iter] = final_weights(solver)
    return out


@pytest.fixture(scope="module")
def reference(references):
    return references[MAX_ITER]


class Forker:
    """The helper process that forks the training runs."""

    def __init__(self, log_path):
        self.log = open(log_path, "w")
        child = os.path.join(HERE, "helpers", "snapshot_kill_child.py")
        self.proc = subprocess.Popen([sys.executable, child],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, bufsize=1)

    def start(self, folder, slow):
        self.proc.stdin.write("%s %d\n" % (folder, int(slow)))
        self.proc.stdin.flush()
        tag, pid = self.proc.stdout.readline().split()
        assert tag == "pid"
        return int(pid)

    def wait(self):
        tag, code = self.proc.stdout.readline().split()
        assert tag == "exit"
        return int(code)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=600)
        self.log.close()


@pytest.fixture(scope="module")
def forker(tmp_path_factory):
    f = Forker(tmp_path_factory.mktemp("forker") / "stderr.txt")
    yield f
    f.close()


def wait_for(predicate, timeout=600.0):
    """Poll ``predicate`` until it holds (``timeout`` only guards against a hang)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.0003)


def size_of(path):
    """The size of a file that may not exist (yet, or any more)."""
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return -1


def snapshots(folder):
    """{iteration: (weights path or None, state path or None)} of the visible snapshot files,
    and the hidden temporary files."""
    found, hidden = {}, []
    for name in os.listdir(folder / "snaps"):
        if name.startswith("."):
            hidden.append(name)
            continue
        stem, ext = name.split(".", 1)
        n = int(stem.rsplit("_", 1)[1])
        weights, state = found.get(n, (None, None))
        if ext.startswith("caffemodel"):
            weights = folder / "snaps" / name
        else:
            state = folder / "snaps" / name
        found[n] = (weights, state)
    return found, hidden


def check_files_and_resume(folder, reference, fmt):
    """Every snapshot file left parses; the newest state refers to complete weights; resuming
    from it gives the reference weights. Returns the iteration resumed from."""
    found, _ = snapshots(folder)
    for n, (weights, state) in found.items():
        if weights is not None:
            check_weights(weights, fmt)
        if state is not None:
            assert weights is not None, "a state without its weights (iteration %d)" % n
            check_state(state, fmt)
    states = [n for n, (_, state) in found.items() if state is not None]
    last = max(states) if states else None
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        solver = get_solver("solver.prototxt")
        if last is not None:
            solver.restore(str(found[last][1]))
            assert solver.iter == last
        solver.solve()
    finally:
        os.chdir(cwd)
    for got, want in zip(final_weights(solver), reference):
        np.testing.assert_array_equal(got, want)
    return last


def check_weights(path, fmt):
    if fmt == "HDF5":
        import h5py
        with h5py.File(path, "r") as f:
            assert f["data/ip/0"].shape == (64, 256) and f["data/ip/1"].shape == (64,)
        return
    model = protoio.read_binary(str(path), caffe_pb2.NetParameter())
    ip = [lp for lp in model.layer if lp.name == "ip"][0]
    assert len(ip.blobs[0].data) == 64 * 256 and len(ip.blobs[1].data) == 64


def check_state(path, fmt):
    if fmt == "HDF5":
        import h5py
        with h5py.File(path, "r") as f:
            assert sorted(f["history"]) == [str(i) for i in range(4)]
        return
    state = protoio.read_binary(str(path), caffe_pb2.SolverState())
    assert len(state.history) == 4 and state.HasField("resume_state")
    assert os.path.basename(state.learned_net) == os.path.basename(path).replace(
        ".solverstate", ".caffemodel")


@pytest.mark.slow
def test_kill_inside_snapshot_writes(tmp_path, forker, reference):
    rng = random.Random(20240611)
    inside = 0
    for run in range(AIMED_KILLS):
        folder = project(tmp_path / ("run%d" % run))
        k = rng.randint(2, MAX_ITER)
        kind = rng.choice(["caffemodel", "solverstate"])
        fraction = rng.uniform(0.0, 0.9)
        pid = forker.start(folder, slow=True)
        full_size = (folder / "snaps" / ("run_iter_1.%s" % kind))
        tmp = folder / "snaps" / (".run_iter_%d.%s.tmp%d" % (k, kind, pid))
        wait_for(full_size.exists)
        size = full_size.stat().st_size
        wait_for(lambda: size_of(tmp) >= fraction * size)
        os.kill(pid, signal.SIGKILL)
        assert forker.wait() == -signal.SIGKILL
        if tmp.exists():  # the kill landed inside the write of that file
            inside += 1
            assert not (folder / "snaps" / ("run_iter_%d.%s" % (k, kind))).exists()
        last = check_files_and_resume(folder, reference, "BINARYPROTO")
        if tmp.exists():
            assert last == k - 1
        # the resumed run wrote iteration k again, and cleared the killed writer's leftovers
        assert snapshots(folder)[1] == []
    print("aimed kills: %d, inside a write: %d" % (AIMED_KILLS, inside))
    assert inside >= AIMED_KILLS - 2


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["HDF5", "BINARYPROTO"])
def test_kill_at_random_times(tmp_path, forker, references, fmt):
    """Kills at points taken from each run's own progress: once snapshot k (random) is
    complete, after a random delay of up to the time that run took from snapshot k - 1 to k.
    At least three iterations are left then, so the kill lands while it trains (or writes a
    snapshot), whatever the machine's speed."""
    rng = random.Random(fmt)
    suffix = ".solverstate.h5" if fmt == "HDF5" else ".solverstate"
    killed = 0
    for run in range(BLIND_KILLS // 2):
        folder = project(tmp_path / ("run%d" % run), fmt, BLIND_MAX_ITER)
        k = rng.randint(2, BLIND_MAX_ITER - 3)
        pid = forker.start(folder, slow=False)
        previous = folder / "snaps" / ("run_iter_%d%s" % (k - 1, suffix))
        wait_for(previous.exists)
        seen_previous = time.monotonic()
        wait_for((folder / "snaps" / ("run_iter_%d%s" % (k, suffix))).exists)
        iteration = time.monotonic() - seen_previous
        time.sleep(rng.uniform(0.0, iteration))
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it had finished
        code = forker.wait()
        assert code in (-signal.SIGKILL, 0)
        killed += code == -signal.SIGKILL
        last = check_files_and_resume(folder, references[BLIND_MAX_ITER], fmt)
        assert last is not None and last >= k
        print("%s: snapshot %d seen, killed %s, resumed from %s" % (fmt, k, code, last))
    assert killed >= BLIND_KILLS // 2 - 1


def test_cli_resumes_a_killed_run_from_its_last_snapshot(tmp_path, monkeypatch, reference):
    """``pycaffe-lite train`` killed while writing a snapshot; ``--snapshot`` with the newest
    state then finishes with the weights of the uninterrupted run."""
    folder = project(tmp_path)
    slow = ("import sys; sys.path.insert(0, %r); from helpers import snapshot_kill_child as c; "
            "from pycaffe_lite import cli; from pycaffe_lite.proto import protoio; "
            "protoio.open = c.slow_open; "
            "sys.exit(cli.main(['train', '--solver', 'solver.prototxt']))" % HERE)
    proc = subprocess.Popen([sys.executable, "-c", slow], cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tmp = folder / "snaps" / (".run_iter_4.solverstate.tmp%d" % proc.pid)
    wait_for(lambda: size_of(tmp) > 20000, timeout=600)
    proc.kill()
    assert proc.wait() == -signal.SIGKILL
    assert tmp.exists()
    found, _ = snapshots(folder)
    assert sorted(found) == [1, 2, 3, 4] and found[4][1] is None
    monkeypatch.chdir(folder)
    assert cli.main(["train", "--solver", "solver.prototxt",
                     "--snapshot", "snaps/run_iter_3.solverstate"]) == 0
    model = protoio.read_binary("snaps/run_iter_%d.caffemodel" % MAX_ITER,
                                caffe_pb2.NetParameter())
    ip = [lp for lp in model.layer if lp.name == "ip"][0]
    np.testing.assert_array_equal(np.array(ip.blobs[0].data, np.float32),
                                  reference[0].ravel())
    assert not tmp.exists()
