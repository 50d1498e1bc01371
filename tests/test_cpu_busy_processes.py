"""The CPU engine seen from outside, in real processes (docs/performance.md, "Threads" and "On
a busy machine"): the thread budget that the environment, ``taskset`` and OpenBLAS's own
variables leave, and two training processes sharing the cores with the results each gets
alone."""

import hashlib
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THREAD_VARIABLES = ("PYCAFFE_LITE_CPU_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "GOTO_NUM_THREADS", "OPENBLAS_CORETYPE")
HANG = 300  # seconds: a hang detector only


def _env(**settings):
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env["PYTHONPATH"] = ROOT
    env.update(settings)
    return env


# The thread budget as the process settled it, and the count NumPy's OpenBLAS reports.
BUDGET = r"""
import ctypes
import pycaffe_lite
from pycaffe_lite.ops import cpu
from pycaffe_lite.ops.cpu import _threads
n = cpu.threads()
functions = _threads._blas_functions()
print("BUDGET", n, functions[1]() if functions else "none")
"""


def _budget(**settings):
    proc = subprocess.run([sys.executable, "-c", BUDGET], capture_output=True, text=True,
                          env=_env(**settings), timeout=HANG)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = [s for s in proc.stdout.splitlines() if s.startswith("BUDGET")][-1].split()
    if line[2] == "none":
        pytest.skip("NumPy's BLAS here is not an OpenBLAS whose threads can be read")
    return int(line[1]), int(line[2]), proc.stderr


@pytest.mark.parametrize("name", ["OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS"])
@pytest.mark.parametrize("value", ["abc", "0", "-1", "2x"])
def test_a_nonsense_openblas_count_is_named_and_openblas_gets_the_budget(name, value):
    """OpenBLAS itself ignores such a value (its atoi reads 0 or less, or a count we would not
    read the same way) and starts a thread per CPU; the kernels' budget of 1 must still reach
    it, with a warning naming the variable, instead of the value passing for a choice."""
    kernels, blas, stderr = _budget(PYCAFFE_LITE_CPU_THREADS="1", **{name: value})
    assert (kernels, blas) == (1, 1)
    assert "%s=%r is not a positive whole number of threads" % (name, value) in stderr


def test_a_real_openblas_count_is_left_as_set():
    kernels, blas, stderr = _budget(PYCAFFE_LITE_CPU_THREADS="1", OPENBLAS_NUM_THREADS="2")
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    assert kernels == 1 and blas == min(2, cpus)  # OpenBLAS caps its count at the CPUs
    assert "OPENBLAS_NUM_THREADS" not in stderr


# ---- training: any thread count, pinned, two processes at once ----------------------------------
NET = """
layer { name: "data" type: "DummyData" top: "x" top: "y"
  dummy_data_param { shape { dim: 8 dim: 8 dim: 24 dim: 24 } shape { dim: 8 dim: 10 }
    data_filler { type: "gaussian" std: 1 } data_filler { type: "gaussian" std: 1 } } }
layer { name: "c1" type: "Convolution" bottom: "x" top: "c1"
  convolution_param { num_output: 32 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
layer { name: "r1" type: "ReLU" bottom: "c1" top: "c1" }
layer { name: "p1" type: "Pooling" bottom: "c1" top: "p1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "c2" type: "Convolution" bottom: "p1" top: "c2"
  convolution_param { num_output: 32 kernel_size: 3 pad: 1 group: 2
                      weight_filler { type: "xavier" } } }
layer { name: "ip" type: "InnerProduct" bottom: "c2" top: "ip"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "y" top: "loss" }
"""
SOLVER = """net: "net.prototxt"
base_lr: 0.00005 momentum: 0.9 weight_decay: 0.0005 lr_policy: "fixed"
max_iter: 100 display: 0 random_seed: 7 snapshot_after_train: false
"""
ITERATIONS = 20

# Builds the solver, says "ready" and waits for a line on stdin (the start signal: both
# processes then train at once), trains, and prints its thread budget and its weights' bytes.
TRAIN = r"""
import sys
import numpy as np
import pycaffe_lite as caffe
from pycaffe_lite.ops import cpu

solver = caffe.get_solver(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
solver.step(int(sys.argv[2]))
np.save(sys.argv[3], np.concatenate([p.data.ravel() for ps in solver.net.params.values()
                                     for p in ps]))
print("threads", cpu.threads(), flush=True)
"""


@pytest.fixture
def solver_file(tmp_path):
    (tmp_path / "net.prototxt").write_text(NET)
    (tmp_path / "solver.prototxt").write_text(SOLVER)
    return tmp_path / "solver.prototxt"


def _start(solver, out, prefix=(), **settings):
    return subprocess.Popen(
        list(prefix) + [sys.executable, "-c", TRAIN, str(solver), str(ITERATIONS), str(out)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=_env(**settings), cwd=str(solver.parent))


def _run_together(processes):
    """Wait until every process has built its solver, start them all at once, and return each
    one's thread budget."""
    for proc in processes:
        line = proc.stdout.readline()
        assert line.strip() == "ready", proc.communicate(timeout=HANG)[1][-2000:]
    for proc in processes:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    budgets = []
    for proc in processes:
        out, err = proc.communicate(timeout=HANG)
        assert proc.returncode == 0, err[-2000:]
        budgets.append(int(out.split()[-1]))
    return budgets


def _weights(path):
    import numpy as np

    data = np.load(path)
    return hashlib.sha1(data.tobytes()).hexdigest(), data


@pytest.mark.slow
def test_training_gives_the_same_weights_on_any_thread_setting_and_two_at_once(
        solver_file, tmp_path):
    """performance.md: the kernels' results do not depend on the thread count, and training
    on another count agrees to float rounding (OpenBLAS's weight-gradient products may sum in
    another order); a process pinned to one CPU, or whose settings are nonsense (ignored with
    a warning), trains as the others do. Two processes training at once on the same cores
    (each with the machine's budget, or 64 threads each) end at the very weights that the same
    setting reaches alone."""
    import numpy as np

    def alone(name, **settings):
        out = tmp_path / (name + ".npy")
        budgets = _run_together([_start(solver_file, out, **settings)])
        return budgets[0], _weights(out)

    budget, (_, reference) = alone("one", PYCAFFE_LITE_CPU_THREADS="1")
    assert budget == 1 and np.isfinite(reference).all()
    assert np.abs(reference).max() > 0.01  # the weights moved from zero-mean fillers

    runs = {"two": (2, dict(PYCAFFE_LITE_CPU_THREADS="2")),
            "omp3": (3, dict(OMP_NUM_THREADS="3")),
            "nonsense": (None, dict(PYCAFFE_LITE_CPU_THREADS="abc", OMP_NUM_THREADS="-1",
                                    OPENBLAS_NUM_THREADS="0"))}
    for name, (expected, settings) in runs.items():
        budget, (_, data) = alone(name, **settings)
        assert expected is None or budget == expected
        np.testing.assert_allclose(data, reference, rtol=1e-4, atol=1e-6, err_msg=name)
    if hasattr(os, "sched_getaffinity") and len(os.sched_getaffinity(0)) >= 2:
        cpu = sorted(os.sched_getaffinity(0))[0]
        out = tmp_path / "pinned.npy"
        pinned = _start(solver_file, out, prefix=(
            sys.executable, "-c", "import os, sys; os.sched_setaffinity(0, {%d}); "
            "os.execv(sys.executable, sys.argv[1:])" % cpu))
        assert _run_together([pinned]) == [1]  # the budget follows the affinity
        np.testing.assert_allclose(np.load(out), reference, rtol=1e-4, atol=1e-6)

    for threads in (None, "64"):
        settings = {} if threads is None else {"PYCAFFE_LITE_CPU_THREADS": threads}
        budget, (expected, _) = alone("alone-%s" % threads, **settings)
        outs = [tmp_path / ("together-%s-%d.npy" % (threads, i)) for i in range(2)]
        budgets = _run_together([_start(solver_file, out, **settings) for out in outs])
        assert budgets == [budget, budget]
        assert threads is None or budget == 64
        assert [_weights(out)[0] for out in outs] == [expected, expected], threads


def _cpu_cgroup_v1():
    """The cgroup v1 cpu hierarchy's mount where this process may make a child group in it,
    else None (no v1 hierarchy, or no permission: most machines)."""
    import uuid

    root = os.path.join("/sys/fs/cgroup", "cpu")
    if not os.path.isfile(os.path.join(root, "cpu.cfs_quota_us")):
        return None
    probe = os.path.join(root, "pycaffe-lite-probe-%s" % uuid.uuid4().hex[:8])
    try:
        os.mkdir(probe)
    except OSError:
        return None
    os.rmdir(probe)
    return root


@pytest.mark.parametrize("quota, cpus", [(100000, 1), (150000, 2)])
def test_a_real_cgroup_quota_bounds_the_budget(tmp_path, quota, cpus):
    """A CPU quota that the affinity mask does not show (a container's --cpus): a process
    placed in a cgroup with `quota / period` CPUs settles on that many threads, rounded up,
    and OpenBLAS on the same, with no setting. Where no cgroup can be made, the parsing is
    held to cgroup files by tests/test_ops_cpu_threads.py."""
    import uuid

    root = _cpu_cgroup_v1()
    if root is None:
        pytest.skip("no writable cgroup v1 cpu hierarchy here")
    if not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs a process that may use 2 CPUs or more")
    group = os.path.join(root, "pycaffe-lite-test-%s" % uuid.uuid4().hex[:8])
    os.mkdir(group)
    try:
        with open(os.path.join(group, "cpu.cfs_period_us"), "w") as f:
            f.write("100000")
        with open(os.path.join(group, "cpu.cfs_quota_us"), "w") as f:
            f.write(str(quota))

        def enter():
            with open(os.path.join(group, "cgroup.procs"), "w") as f:
                f.write(str(os.getpid()))

        proc = subprocess.run([sys.executable, "-c", BUDGET], capture_output=True, text=True,
                              env=_env(), timeout=HANG, preexec_fn=enter)
        assert proc.returncode == 0, proc.stderr[-2000:]
        line = [s for s in proc.stdout.splitlines() if s.startswith("BUDGET")][-1].split()
        assert int(line[1]) == cpus
        assert line[2] in ("none", str(cpus))
    finally:
        os.rmdir(group)


@pytest.mark.parametrize("name", ["PYCAFFE_LITE_CPU_THREADS", "OMP_NUM_THREADS"])
def test_openblas_gets_at_most_the_cpus(name):
    """A budget over the CPUs (64 on a 2-CPU process) runs that many kernel threads, as asked,
    but OpenBLAS gets at most the CPUs, as it caps its own variables: with 64 of its threads
    in fixed parts on 2 cores, a LeNet step with PYCAFFE_LITE_GEMM_SPLIT=0 took 2.8 s instead
    of 32 ms."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    kernels, blas, _ = _budget(**{name: "64"})
    assert kernels == 64
    assert blas == min(64, cpus)
