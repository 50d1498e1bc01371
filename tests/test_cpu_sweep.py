"""The CPU engine's threads and knobs in real processes: a child forked after the kernel
threads or a data layer's loading threads ran, the data-thread count and the cuDNN workspace
limit from the environment (read by every `import pycaffe_lite`)."""

import os
import subprocess
import sys

import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError
from helpers.kernel import needs_library
from helpers.mpi import make_lmdb

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HANG = 120  # seconds: only a hang detector, a passing run takes about a second


def run_python(code, **env):
    full = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, timeout=HANG)


# Run child(report) in a forked process and print what it reports (guards bound a hang only).
RUN_CHILD = r"""
ctx = multiprocessing.get_context("fork")
report = ctx.Queue()
p = ctx.Process(target=child, args=(report,))
p.start()
print(report.get(timeout=30))
p.join(30)
if p.exitcode is None:
    p.kill()
"""


FORKED_CHILD = r"""
import multiprocessing, threading
import numpy as np
import pycaffe_lite
from pycaffe_lite.ops import cpu
from pycaffe_lite.ops.cpu import _threads

x = np.linspace(-1, 1, 64 * 96 * 96, dtype=np.float32).reshape(1, 64, 96, 96)
bias = np.linspace(-0.5, 0.5, 64, dtype=np.float32)
y = np.empty_like(x)
cpu.bias_relu(x, y, bias)             # the parent's kernel threads start here
assert _threads._state["pool"] is not None


def child(report):
    out = np.empty_like(x)
    for _ in range(50):
        cpu.bias_relu(x, out, bias)
    worker_ran, waited = threading.Event(), []

    def part(start, stop):
        if threading.current_thread().name.startswith("pycaffe-lite-kernel"):
            worker_ran.set()
        elif not waited:  # the calling thread waits until a kernel thread ran a chunk
            waited.append(worker_ran.wait(30))

    _threads.split(part, 100, ())
    # the queue is first in, first out: a worker that reached this call's job has taken
    # every job before it
    report.put((worker_ran.is_set(), _threads._state["pool"].tasks.qsize(),
                float(np.abs(out - np.maximum(x + bias.reshape(1, -1, 1, 1), 0)).max())))


""" + RUN_CHILD


@needs_library
def test_a_forked_child_runs_the_kernels_on_threads_of_its_own():
    """A fork copies only the thread that forks: the parent's kernel threads are not in the
    child. The child starts its own, so its calls still share their chunks (before, every
    call ran on the calling thread alone and left a job in a queue that no thread read)."""
    done = run_python(FORKED_CHILD, PYCAFFE_LITE_CPU_THREADS="2")
    assert done.returncode == 0, done.stderr
    worker_ran, queued, error = eval(done.stdout.strip().splitlines()[-1])
    assert worker_ran
    assert error == 0.0
    assert queued == 0  # no job left behind


@pytest.fixture
def data_net(tmp_path):
    """A TEST net whose Data layer 'data' reads a small LMDB."""
    source = make_lmdb(tmp_path / "db", n=8)

    def make():
        return ('name: "d" layer { name: "data" type: "Data" top: "data" top: "label" '
                'data_param { source: "%s" batch_size: 2 backend: LMDB } }' % source)
    return make


@pytest.mark.parametrize("value", ["abc", "0", "-1", "1.5"])
def test_a_bad_data_thread_count_is_named_by_the_data_layer(value, monkeypatch, data_net):
    """A count of loading threads that is not a positive whole number stops the data
    layer's setup with an error naming the variable and the layer (0 and -1 ran one thread
    without a word, while "abc" was an error)."""
    monkeypatch.setenv("PYCAFFE_LITE_DATA_THREADS", value)
    with pytest.raises(CaffeError) as info:
        caffe.Net(data_net(), caffe.TEST)
    message = str(info.value)
    assert "PYCAFFE_LITE_DATA_THREADS" in message and repr(value) in message
    assert "'data'" in message


def test_a_good_data_thread_count_is_used(monkeypatch, data_net):
    monkeypatch.setenv("PYCAFFE_LITE_DATA_THREADS", "3")
    net = caffe.Net(data_net(), caffe.TEST)
    try:
        assert net.layers[0].prefetch_threads == 3
    finally:
        net.close()


FORKED_DATA_NET = r"""
import multiprocessing
import pycaffe_lite as caffe

net = caffe.Net(%(proto)r, caffe.TEST)
before = net.forward()["data"].copy()       # the loading threads run, batches load ahead


def child(report):
    try:
        net.forward()
    except Exception as exc:
        report.put("%%s: %%s" %% (type(exc).__name__, exc))
    else:
        report.put("no error")


""" + RUN_CHILD + r"""after = net.forward()["data"]               # the parent's net goes on
print(after.shape == before.shape)
"""


def test_a_forked_child_is_told_that_a_data_layer_does_not_follow_a_fork(data_net, tmp_path):
    """A fork copies no thread and an LMDB environment must not be used across one: a
    forked child's forward of the parent's net stops at the data layer with an error that
    says so, at its first batch (before, it took the batches loaded ahead, then failed with
    'the loading threads stopped without producing batch N')."""
    proto = tmp_path / "net.prototxt"
    proto.write_text(data_net())
    done = run_python(FORKED_DATA_NET % {"proto": str(proto)})
    assert done.returncode == 0, done.stderr
    child, parent_went_on = done.stdout.strip().splitlines()[-2:]
    assert child.startswith("LayerError: layer 'data' (type Data)")
    assert "is a fork of it" in child and "build the net in this process" in child
    assert parent_went_on == "True"


@pytest.mark.parametrize("value,mib,warned", [("abc", 256, True), ("-5", 256, True),
                                              ("1.5", 256, True), ("64", 64, False),
                                              ("0", 0, False)])
def test_a_bad_cudnn_workspace_limit_does_not_stop_the_import(value, mib, warned):
    """The cuDNN module is imported with the package, GPU or not: a workspace limit that is
    not a whole number of MiB stopped `import pycaffe_lite` with a bare ValueError; it is
    ignored with a warning naming the variable."""
    done = run_python("import pycaffe_lite\n"
                      "from pycaffe_lite.ops.gpu import cudnn_graphs\n"
                      "print(cudnn_graphs.WORKSPACE_LIMIT)",
                      PYCAFFE_LITE_CUDNN_WORKSPACE_MB=value)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == mib * 1024 * 1024
    assert ("PYCAFFE_LITE_CUDNN_WORKSPACE_MB=%r" % value in done.stderr) == warned


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2 if hasattr(os, "sched_getaffinity")
                    else True, reason="needs two CPUs to pin a process to one")
def test_a_process_pinned_to_one_cpu_decodes_on_one_loading_thread():
    """The thread counts follow `taskset` (docs/performance.md's knobs): a process pinned to
    one CPU decodes images on one loading thread, as it runs its kernels on one (the data
    layers counted the machine's cores)."""
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})\n"
            "from pycaffe_lite.ops import cpu\n"
            "from pycaffe_lite.layers.data.base_data_layer import default_threads\n"
            "print(cpu.threads(), default_threads(True), default_threads(False))")
    env = {k: "" for k in ("PYCAFFE_LITE_CPU_THREADS", "OMP_NUM_THREADS",
                           "PYCAFFE_LITE_DATA_THREADS")}
    done = run_python(code, **env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1", "1"]


FORKED_CHILD_EXITS = r"""
import multiprocessing, queue
import pycaffe_lite as caffe
from pycaffe_lite.data import db

net = caffe.Net(%(proto)r, caffe.TEST)
net.forward()                               # the loading threads read the database


def child(report):
    fresh = caffe.Net(%(proto)r, caffe.TEST)   # the same source, through a handle of its own
    report.put(fresh.forward()["label"].tolist())
    # the child then exits as multiprocessing's children do, through threading's exit hook


# the moment of the fork as a loading thread in the middle of a read holds the cursor's lock,
# and another thread the lock of the database handles
net.layers[0].cursor._lock.acquire()
db._handles_lock.acquire()
ctx = multiprocessing.get_context("fork")
report = ctx.Queue()
p = ctx.Process(target=child, args=(report,))
p.start()
net.layers[0].cursor._lock.release()
db._handles_lock.release()
try:
    print(report.get(timeout=30))
except queue.Empty:
    print("no batch")
p.join(30)
print(p.exitcode)
if p.exitcode is None:
    p.kill()
net.forward()
net.close()                                 # the parent's own release is untouched
"""


def test_a_forked_child_neither_uses_nor_waits_for_the_parents_handles(data_net, tmp_path):
    """A fork copies no thread, so a lock that a loading thread held at that moment stays
    held in the child for ever. The child's exit released the parent's data layers (joining
    their threads, closing their cursors: waiting on that lock), and a net built in the
    child shared the parent's LMDB handle through a registry whose lock could be held too:
    the child hung. Now the child forgets the parent's resources and opens its own."""
    proto = tmp_path / "net.prototxt"
    proto.write_text(data_net())
    done = run_python(FORKED_CHILD_EXITS % {"proto": str(proto)})
    assert done.returncode == 0, done.stderr
    labels, exitcode = done.stdout.strip().splitlines()[-2:]
    assert labels == "[0.0, 1.0]"  # make_lmdb's records are labelled 0, 1, 2, 0, ...
    assert exitcode == "0"
