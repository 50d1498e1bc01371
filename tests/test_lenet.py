"""The LeNet example on the bundled 4,000/1,000 MNIST subset, end to end.

- the full standard solver (2000 iterations, inv policy, SGD with momentum) reaches the test
  accuracy of the reference Caffe run (0.968) within 0.008, and resuming from a snapshot
  continues bit for bit (weights, random state and the Data layers' positions);
- ``pycaffe-lite train --solver models/lenet/lenet_solver.prototxt`` and
  ``models/lenet/train_lenet.sh`` work on a fresh copy (no LMDBs yet) from another directory.
"""

import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from pycaffe_lite.proto import protoio
from pycaffe_lite.solvers import SGDSolver

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "models", "lenet")


def _lenet_solver_param(tmp_path, lmdbs, **changes):
    train_db, test_db = lmdbs
    net = protoio.read_net_param(os.path.join(LENET, "lenet_train_test.prototxt"))
    for layer in net.layer:
        if layer.type == "Data":
            phase = layer.include[0].phase
            layer.data_param.source = str(train_db if phase == 0 else test_db)
    param = protoio.read_solver_param(os.path.join(LENET, "lenet_solver.prototxt"))
    param.ClearField("net")
    param.net_param.CopyFrom(net)
    param.snapshot_prefix = str(tmp_path / "lenet")
    for key, value in changes.items():
        setattr(param, key, value)
    return param


def test_lenet_solver_is_caffes_standard_one():
    param = protoio.read_solver_param(os.path.join(LENET, "lenet_solver.prototxt"))
    assert (param.base_lr, param.momentum, param.lr_policy, param.max_iter,
            param.test_interval, list(param.test_iter), param.solver_mode) == \
        (pytest.approx(0.01), pytest.approx(0.9), "inv", 2000, 500, [10], 0)
    assert param.weight_decay == pytest.approx(0.0005)
    assert (param.gamma, param.power) == (pytest.approx(0.0001), pytest.approx(0.75))
    net = protoio.read_net_param(os.path.join(LENET, "lenet_train_test.prototxt"))
    batch = {lp.include[0].phase: lp.data_param.batch_size for lp in net.layer
             if lp.type == "Data"}
    assert batch == {0: 64, 1: 100}


@pytest.mark.slow
def test_lenet_trains_to_reference_accuracy_and_resumes_exactly(tmp_path, mnist_lmdbs):
    param = _lenet_solver_param(tmp_path, mnist_lmdbs, random_seed=1, snapshot=1500)
    solver = SGDSolver(param)
    at_1600 = {}

    def on_start():
        if solver.iter == 1600:
            at_1600.update((i, p.data.copy()) for i, p in enumerate(solver.net.learnable_params))

    solver.add_callback(on_start, lambda: None)
    start = time.perf_counter()
    solver.solve()
    elapsed = time.perf_counter() - start
    scores = dict(solver.test_scores[0])
    print("LeNet 2000 iterations: accuracy %.4f, loss %.4f, %.1f s (%.1f ms/iter)"
          % (scores["accuracy"], scores["loss"], elapsed, 1000 * elapsed / 2000))
    assert solver.iter == 2000
    assert scores["accuracy"] >= 0.96
    assert scores["loss"] < 0.2
    assert (tmp_path / "lenet_iter_1500.solverstate").exists()
    assert (tmp_path / "lenet_iter_2000.caffemodel").exists()

    resumed = SGDSolver(param)
    resumed.restore(str(tmp_path / "lenet_iter_1500.solverstate"))
    resumed.step(100)
    assert resumed.iter == 1600
    for i, p in enumerate(resumed.net.learnable_params):
        np.testing.assert_array_equal(p.data, at_1600[i])


def _fresh_copy(tmp_path, max_iter):
    """models/lenet as a fresh clone has it (no LMDBs), with a shortened solver."""
    repo = tmp_path / "repo"
    lenet = repo / "models" / "lenet"
    shutil.copytree(os.path.join(LENET, "mnist5k"), lenet / "mnist5k")
    for name in ("lenet_train_test.prototxt", "train_lenet.sh"):
        shutil.copy(os.path.join(LENET, name), lenet / name)
    text = open(os.path.join(LENET, "lenet_solver.prototxt")).read()
    text = text.replace("max_iter: 2000", "max_iter: %d" % max_iter)
    text = text.replace("test_interval: 500", "test_interval: %d" % max_iter)
    text = text.replace("test_iter: 10", "test_iter: 2")
    (lenet / "lenet_solver.prototxt").write_text(text)
    return repo


def _check_run(repo, out, max_iter):
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lenet = repo / "models" / "lenet"
    assert (lenet / "mnist_train_lmdb").is_dir() and (lenet / "mnist_test_lmdb").is_dir()
    assert (lenet / ("lenet_iter_%d.caffemodel" % max_iter)).exists()
    log = out.stdout + out.stderr
    assert "Iteration %d, Testing net (#0)" % max_iter in log
    accuracy = float(log.split("Test net output #0: accuracy = ")[-1].split()[0])
    assert accuracy > 0.5  # 40 iterations already learn most digits


@pytest.mark.slow
def test_train_command_prepares_the_data_of_a_fresh_clone(tmp_path):
    repo = _fresh_copy(tmp_path, 40)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = subprocess.run([sys.executable, "-m", "pycaffe_lite.cli", "train", "--solver",
                          str(repo / "models" / "lenet" / "lenet_solver.prototxt")],
                         cwd=elsewhere, capture_output=True, text=True, timeout=1800)
    _check_run(repo, out, 40)
    assert "models/lenet/mnist_train_lmdb is missing: converting" in out.stderr


@pytest.mark.slow
def test_train_lenet_sh_from_any_directory(tmp_path):
    repo = _fresh_copy(tmp_path, 40)
    env = dict(os.environ, PYTHON=sys.executable)
    out = subprocess.run(["sh", str(repo / "models" / "lenet" / "train_lenet.sh")],
                         cwd=str(tmp_path), capture_output=True, text=True, timeout=1800,
                         env=env)
    _check_run(repo, out, 40)
    assert "Creating models/lenet/mnist_train_lmdb" in out.stdout
