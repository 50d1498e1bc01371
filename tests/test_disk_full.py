"""A disk that fills up during training: a clear error naming the last complete snapshot,
which stays intact, and from which training resumes to the uninterrupted result.

In-process, the writes of :func:`pycaffe_lite.proto.protoio.atomic_write` go through a simulated
disk that fails with ENOSPC once its free space is used up. In a subprocess, a real file size
limit (RLIMIT_FSIZE, the kernel failing write() with EFBIG) is set after the first snapshot,
for both snapshot formats and through ``pycaffe-lite train``.
"""

import errno
import os
import subprocess
import sys

import numpy as np
import pytest

from pycaffe_lite.proto import protoio
from pycaffe_lite.errors import SnapshotError
from pycaffe_lite.solvers import get_solver

NET = """
name: "full"
layer { name: "data" type: "DummyData" top: "x" top: "y"
        dummy_data_param { shape { dim: 8 dim: 64 } shape { dim: 8 dim: 16 }
                           data_filler { type: "gaussian" } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "z"
        inner_product_param { num_output: 16 weight_filler { type: "gaussian" std: 0.05 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "y" top: "loss" }
"""

SOLVER = """
net: "net.prototxt"
base_lr: 0.01
momentum: 0.9
lr_policy: "fixed"
display: 1
max_iter: 6
snapshot: 2
snapshot_prefix: "snaps/run"
snapshot_format: %s
random_seed: 3
"""


def project(folder, fmt="BINARYPROTO"):
    (folder / "snaps").mkdir(parents=True, exist_ok=True)
    (folder / "net.prototxt").write_text(NET)
    (folder / "solver.prototxt").write_text(SOLVER % fmt)
    return folder


def weights(solver):
    return [b.data.copy() for b in solver.net.learnable_params]


def contents(folder):
    return {name: (folder / "snaps" / name).read_bytes()
            for name in os.listdir(folder / "snaps")}


class Disk:
    """Files opened for writing by protoio share ``free`` bytes (unlimited while None); a
    write beyond them fails as a full disk does, after writing what fits."""

    def __init__(self):
        self.free = None

    def open(self, path, mode="r", *args, **kwargs):
        f = open(path, mode, *args, **kwargs)
        return _Limited(f, self) if "w" in mode else f


class _Limited:
    def __init__(self, f, disk):
        self._f, self._disk = f, disk

    def write(self, data):
        disk = self._disk
        if disk.free is not None and len(data) > disk.free:
            self._f.write(data[:disk.free])
            disk.free = 0
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if disk.free is not None:
            disk.free -= len(data)
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


@pytest.fixture
def uninterrupted(tmp_path_factory, monkeypatch):
    folder = project(tmp_path_factory.mktemp("straight"))
    monkeypatch.chdir(folder)
    solver = get_solver("solver.prototxt")
    solver.solve()
    return weights(solver)


@pytest.mark.parametrize("fails_in", ["weights", "state"])
def test_a_full_disk_stops_training_with_the_last_snapshot_intact(tmp_path, monkeypatch,
                                                                  uninterrupted, fails_in):
    folder = project(tmp_path)
    monkeypatch.chdir(folder)
    disk = Disk()
    monkeypatch.setattr(protoio, "open", disk.open, raising=False)
    solver = get_solver("solver.prototxt")
    solver.step(2)
    before = contents(folder)
    assert sorted(before) == ["run_iter_2.caffemodel", "run_iter_2.solverstate"]
    # room for a part of the next weights file, or for all of it and a part of the state
    model_size = len(before["run_iter_2.caffemodel"])
    disk.free = model_size // 3 if fails_in == "weights" else model_size + 100
    with pytest.raises(SnapshotError) as info:
        solver.step(4)
    msg = str(info.value)
    assert solver.iter == 4
    failed = "snaps/run_iter_4.%s" % ("caffemodel" if fails_in == "weights" else "solverstate")
    assert msg.startswith("Iteration 4: the snapshot could not be written: %s: cannot write "
                          "file: no space left for it (No space left on device" % failed)
    assert "The last complete snapshot, snaps/run_iter_2.solverstate, is intact: once this " \
           "is fixed, resume from it with --snapshot snaps/run_iter_2.solverstate" in msg
    after = contents(folder)
    for name, data in before.items():
        assert after[name] == data
    expected = set(before) | ({"run_iter_4.caffemodel"} if fails_in == "state" else set())
    assert set(after) == expected  # and no temporary file left behind
    if fails_in == "state":  # the weights of iteration 4 were completed before the state
        protoio.read_binary("snaps/run_iter_4.caffemodel", protoio.caffe_pb2.NetParameter())

    disk.free = None  # space freed: resume from the last snapshot
    resumed = get_solver("solver.prototxt")
    resumed.solve("snaps/run_iter_2.solverstate")
    for got, want in zip(weights(resumed), uninterrupted):
        np.testing.assert_array_equal(got, want)


LIMITED = """
import resource, signal, sys
from pycaffe_lite import cli
from pycaffe_lite.solvers import solver as solver_module

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # write() then fails with EFBIG
real = solver_module.Solver.snapshot

def snapshot(self):
    out = real(self)
    # from now on no file may grow beyond 2000 bytes: the "disk" is full
    resource.setrlimit(resource.RLIMIT_FSIZE, (2000, resource.RLIM_INFINITY))
    return out

solver_module.Solver.snapshot = snapshot
sys.exit(cli.main(["train", "--solver", "solver.prototxt"]))
"""


@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
def test_a_real_write_failure_through_the_cli(tmp_path, fmt):
    """The kernel refuses the writes (RLIMIT_FSIZE); ``pycaffe-lite train`` exits 1 with one
    line naming the last complete snapshot, which reads back unchanged."""
    folder = project(tmp_path, fmt)
    result = subprocess.run([sys.executable, "-c", LIMITED], cwd=folder, capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    lines = [x for x in result.stderr.splitlines() if x.startswith("pycaffe-lite train: error")]
    assert len(lines) == 1
    ext = ".h5" if fmt == "HDF5" else ""
    assert lines[0].startswith("pycaffe-lite train: error: Iteration 4: the snapshot could not "
                               "be written: snaps/run_iter_4.caffemodel%s: cannot write " % ext)
    assert "no space left for it (File too large" in lines[0]
    assert "The last complete snapshot, snaps/run_iter_2.solverstate%s, is intact" % ext \
        in lines[0]
    names = sorted(os.listdir(folder / "snaps"))
    assert names == ["run_iter_2.caffemodel" + ext, "run_iter_2.solverstate" + ext]
    solver = get_solver(str(folder / "solver.prototxt"))
    solver.restore(str(folder / "snaps" / ("run_iter_2.solverstate" + ext)))
    assert solver.iter == 2
