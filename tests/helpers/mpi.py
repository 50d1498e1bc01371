"""Helpers for the data-parallel tests: small projects, mpiexec runs, waiting for log lines."""

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading

import numpy as np

from pycaffe_lite.proto import protoio
from pycaffe_lite.data import db as dbmod
from pycaffe_lite.data.datum import array_to_datum
from pycaffe_lite.proto import caffe_pb2

#: a guard against a hang only: every wait below ends as soon as its event happens
GUARD_S = 120


def mpiexec():
    """mpiexec next to this Python (the ``mpi`` extra installs it there), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.isfile(here):
        return here
    return shutil.which("mpiexec")


def mpi_available():
    try:
        import mpi4py  # noqa: F401
    except ImportError:
        return False
    return mpiexec() is not None


def make_lmdb(path, n=24, shape=(1, 4, 4), classes=3, seed=0):
    """An LMDB of ``n`` float records (key order = record order) with labels 0..classes-1."""
    rng = np.random.default_rng(seed)
    with dbmod.open_db(str(path), "lmdb", dbmod.NEW) as db:
        txn = db.transaction()
        for i in range(n):
            datum = array_to_datum(rng.normal(size=shape).astype(np.float32), int(i % classes))
            txn.put(b"%08d" % i, datum.SerializeToString())
        txn.commit()
    return path


TINY_NET = """
name: "tiny"
layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TRAIN }
        data_param { source: "%(source)s" batch_size: %(batch)d backend: LMDB } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param { num_output: 6 weight_filler { type: "gaussian" std: 0.3 }
                              bias_filler { type: "constant" value: 0.1 } } }
layer { name: "relu" type: "ReLU" bottom: "ip1" top: "ip1" }
%(extra_layers)s
layer { name: "ip2" type: "InnerProduct" bottom: "%(ip2_bottom)s" top: "ip2"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""

TINY_SOLVER = """
net: "%(net)s"
base_lr: 0.1
lr_policy: "fixed"
momentum: 0.9
weight_decay: 0.001
display: %(display)d
max_iter: %(max_iter)d
snapshot: %(snapshot)d
snapshot_prefix: "%(prefix)s"
random_seed: 7
solver_mode: CPU
"""


def tiny_project(folder, source, batch=2, max_iter=20, snapshot=10, display=5, name="solver",
                 extra_layers="", ip2_bottom="ip1"):
    folder.mkdir(parents=True, exist_ok=True)
    net = folder / (name + "_net.prototxt")
    net.write_text(TINY_NET % dict(source=source, batch=batch, extra_layers=extra_layers,
                                   ip2_bottom=ip2_bottom))
    (folder / "snaps").mkdir(exist_ok=True)
    solver = folder / (name + ".prototxt")
    solver.write_text(TINY_SOLVER % dict(net=net, display=display, max_iter=max_iter,
                                         snapshot=snapshot, prefix=folder / "snaps" / name))
    return solver


RANK1_LAYER = '''
import threading

import pycaffe_lite as caffe


class OnRank1(caffe.Layer):
    """The identity, except in rank 1's 30th forward pass."""

    def setup(self, bottom, top):
        self.calls = 0

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        self.calls += 1
        if caffe.solver_rank() == 1 and self.calls == 30:
            %(action)s
        top[0].data[...] = bottom[0].data

    def backward(self, top, propagate_down, bottom):
        bottom[0].diff[...] = top[0].diff
'''


def rank1_layer(folder, action):
    """A Python layer (after ip1) whose 30th forward pass on rank 1 runs ``action`` (one line
    of code): (tiny_project's extra_layers, ip2_bottom, the environment that finds it)."""
    (folder / "rank1_layer.py").write_text(RANK1_LAYER % dict(action=action))
    extra = ('layer { name: "py" type: "Python" bottom: "ip1" top: "py" '
             'python_param { module: "rank1_layer" layer: "OnRank1" } }')
    env = {"PYTHONPATH": str(folder) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return extra, "py", env


def read_weights(path):
    """{layer name: [param arrays]} of a .caffemodel."""
    model = protoio.read_binary(str(path), caffe_pb2.NetParameter())
    return {lp.name: [np.array(b.data, np.float64) for b in lp.blobs]
            for lp in model.layer if lp.blobs}


def max_relative_difference(a, b):
    """max over params of max|a - b| / max|b| (the scale of each param)."""
    assert a.keys() == b.keys()
    worst = 0.0
    for name in a:
        assert len(a[name]) == len(b[name])
        for x, y in zip(a[name], b[name]):
            assert x.shape == y.shape
            worst = max(worst, float(np.max(np.abs(x - y)) / max(np.max(np.abs(y)), 1e-12)))
    return worst


def run_ranks(n, args, cwd, env=None, timeout=GUARD_S):
    """``mpiexec -n n python -m pycaffe_lite.cli args...``: (exit code, output)."""
    command = [mpiexec(), "-n", str(n), sys.executable, "-m", "pycaffe_lite.cli"] + list(args)
    proc = subprocess.run(command, cwd=str(cwd), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=_env(env))
    return proc.returncode, proc.stdout


def run_single(args, cwd, env=None, timeout=GUARD_S):
    command = [sys.executable, "-m", "pycaffe_lite.cli"] + list(args)
    proc = subprocess.run(command, cwd=str(cwd), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=timeout,
                          env=_env(env))
    return proc.returncode, proc.stdout


def _env(extra):
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("OPENBLAS_NUM_THREADS", "1")
    for key in [k for k in env if k.startswith(("PMI_", "OMPI_COMM_WORLD", "PMIX_"))]:
        del env[key]
    env.update(extra or {})
    return env


class Job:
    """A running mpiexec job whose output is read line by line as it comes (``command``: a
    whole command line in place of ``mpiexec -n n pycaffe-lite args...``)."""

    def __init__(self, n, args, cwd, env=None, command=None):
        if command is None:
            command = [mpiexec(), "-n", str(n), sys.executable, "-m", "pycaffe_lite.cli"] + \
                list(args)
        # a session of its own, as a terminal's job: Ctrl-C is a SIGINT to the whole group
        self.proc = subprocess.Popen(command, cwd=str(cwd), stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, env=_env(env),
                                     start_new_session=True)
        self.lines = []
        self._queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text, timeout=GUARD_S):
        """Read until a line containing ``text``; returns it (fails on exit or the guard)."""
        while True:
            try:
                line = self._queue.get(timeout=timeout)
            except queue.Empty:
                raise AssertionError("no line with %r within %d s; output so far:\n%s"
                                     % (text, timeout, "".join(self.lines[-40:]))) from None
            if line is None:
                raise AssertionError("the job ended before printing %r; output:\n%s"
                                     % (text, "".join(self.lines[-40:])))
            self.lines.append(line)
            if text in line:
                return line

    def finish(self, timeout=GUARD_S):
        """Wait for the job to end; (exit code, whole output)."""
        rc = self.proc.wait(timeout=timeout)
        self._reader.join(timeout)
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                break
            if line is not None:
                self.lines.append(line)
        return rc, "".join(self.lines)

    def ctrl_c(self):
        """SIGINT to the launcher and every process of its group, as Ctrl-C in a terminal."""
        os.killpg(self.proc.pid, signal.SIGINT)

    def kill(self):
        """End whatever is left of the job (its process group)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
