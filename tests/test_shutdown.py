"""Nets, solvers and their loading threads shut down cleanly: at close(), when dropped, and at
interpreter exit, in real processes (a crash at exit is only seen at exit)."""

import concurrent.futures
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import lmdb
import numpy as np
import pytest
from PIL import Image

import pycaffe_lite as caffe
from pycaffe_lite import lifecycle
from pycaffe_lite.data import db as dbmod
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2
from helpers.process import as_at_a_terminal

h5py = pytest.importorskip("h5py", reason="h5py is a test dependency (and the hdf5 extra)")

# Runs of each configuration with each ending: 5 x 5 x 12 = 300 real processes, most of their time
# Python's start and the import; a crash at exit of one run in a few dozen still shows.
REPEATS = 12
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---- the data every configuration reads ------------------------------------------------------
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("shutdown"))


def make_data(base):
    """An LMDB of 600 MNIST-sized records, 24 PNG images with a list, an HDF5 file and list."""
    rng = np.random.default_rng(0)
    env = lmdb.open(str(base / "lmdb"), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(600):
            img = rng.integers(0, 256, (1, 28, 28), dtype=np.uint8)
            d = caffe_pb2.Datum(channels=1, height=28, width=28, data=img.tobytes(),
                                label=i % 10)
            txn.put(b"%08d" % i, d.SerializeToString())
    env.close()
    lines = []
    for i in range(24):
        path = base / ("img%02d.png" % i)
        Image.fromarray(rng.integers(0, 256, (20, 20, 3), dtype=np.uint8)).save(path)
        lines.append("%s %d" % (path, i % 10))
    (base / "images.txt").write_text("\n".join(lines) + "\n")
    with h5py.File(base / "part.h5", "w") as f:
        f["data"] = rng.random((40, 1, 28, 28)).astype(np.float32)
        f["label"] = (np.arange(40) % 10).astype(np.float32)
    (base / "h5.txt").write_text(str(base / "part.h5") + "\n")
    return base


def _net_text(data_layer):
    return textwrap.dedent('''\
        name: "shutdown"
        %s
        layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
                inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
        ''') % data_layer


def _lmdb_layer(base, batch=64, phase=None):
    rule = "include { phase: %s }" % phase if phase else ""
    return ('layer { name: "mnist" type: "Data" top: "data" top: "label" %s '
            'data_param { source: "%s" batch_size: %d backend: LMDB } '
            'transform_param { scale: 0.00390625 } }' % (rule, base / "lmdb", batch))


def _write_configs(base):
    """Prototxts for each configuration; returns {config: python code building it}."""
    (base / "lmdb.prototxt").write_text(_net_text(_lmdb_layer(base)))
    (base / "image.prototxt").write_text(_net_text(
        'layer { name: "images" type: "ImageData" top: "data" top: "label" '
        'image_data_param { source: "%s" batch_size: 8 shuffle: true new_height: 28 '
        'new_width: 28 is_color: false } }' % (base / "images.txt")))
    (base / "hdf5.prototxt").write_text(_net_text(
        'layer { name: "h5" type: "HDF5Data" top: "data" top: "label" '
        'hdf5_data_param { source: "%s" batch_size: 8 } }' % (base / "h5.txt")))
    (base / "train_test.prototxt").write_text(_net_text(
        _lmdb_layer(base, 64, "TRAIN") + "\n" + _lmdb_layer(base, 100, "TEST")))
    (base / "solver.prototxt").write_text(
        'net: "%s"\ntest_iter: 2\ntest_interval: 2\nbase_lr: 0.01\nlr_policy: "fixed"\n'
        'max_iter: 1000000\ndisplay: 0\nsnapshot_after_train: false\nrandom_seed: 1\n'
        % (base / "train_test.prototxt"))
    return {
        "one_net": 'net = caffe.Net(r"%s", caffe.TRAIN)\nrun = net.forward'
                   % (base / "lmdb.prototxt"),
        "train_and_test_net": 'net = caffe.Net(r"%s", caffe.TRAIN)\n'
                              'test = caffe.Net(r"%s", caffe.TEST)\n'
                              'def run():\n    net.forward()\n    test.forward()'
                              % (base / "train_test.prototxt", base / "train_test.prototxt"),
        "image_data": 'net = caffe.Net(r"%s", caffe.TRAIN)\nrun = net.forward'
                      % (base / "image.prototxt"),
        "hdf5_data": 'net = caffe.Net(r"%s", caffe.TRAIN)\nrun = net.forward'
                     % (base / "hdf5.prototxt"),
        "solver": 'solver = caffe.SGDSolver(r"%s")\nrun = lambda: solver.step(2)'
                  % (base / "solver.prototxt"),
    }


# What each script does after building, and the exit status it must end with. An uncaught
# KeyboardInterrupt ends CPython by SIGINT (its documented behaviour since 3.8, whatever the
# library): that is the expected status; any other signal (SIGSEGV, SIGABRT) is a failure.
ENDINGS = {
    "build": ("", 0),
    "forward": ("run()", 0),
    "exception": ("run()\nraise RuntimeError('the script failed')", 1),
    "interrupt": ("run()\nprint('READY', flush=True)\nwhile True:\n    run()", -signal.SIGINT),
    "interrupt_caught": ("run()\ntry:\n    print('READY', flush=True)\n    while True:\n"
                         "        run()\nexcept KeyboardInterrupt:\n    sys.exit(130)", 130),
}


def _script(build, ending):
    return "import sys\nimport pycaffe_lite as caffe\n%s\n%s\n" % (build, ENDINGS[ending][0])


def _run(path, interrupt):
    """Run one script to its end; for the interrupt endings, SIGINT once it printed READY."""
    proc = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONFAULTHANDLER="1"),
                            preexec_fn=as_at_a_terminal)
    if interrupt:
        line = proc.stdout.readline()  # blocks until the script is inside its forward loop
        if line.strip() == "READY":
            proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=300)  # a guard against a hang only
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return "hang", err
    return proc.returncode, err


FATAL = ("Fatal Python error", "Segmentation fault", "Exception ignored", "closing layer",
         "Aborted")


@pytest.mark.slow
@pytest.mark.parametrize("ending", list(ENDINGS))
def test_scripts_exit_with_their_own_status(data, tmp_path, ending):
    """Each configuration with this ending, REPEATS times: the status is the script's own, never a
    crash, and nothing is reported about closing."""
    configs = _write_configs(data)
    expected = ENDINGS[ending][1]
    jobs = []
    for name, build in configs.items():
        path = tmp_path / ("%s.py" % name)
        path.write_text(_script(build, ending))
        jobs += [(name, path)] * REPEATS
    interrupt = ending.startswith("interrupt")
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda job: (job[0],) + _run(job[1], interrupt), jobs))
    counts = {}
    for name, status, _ in results:
        counts.setdefault(name, {}).setdefault(status, 0)
        counts[name][status] += 1
    print("exit statuses (%s): %s" % (ending, counts))
    assert counts == {name: {expected: REPEATS} for name in configs}, counts
    for name, _, err in results:
        for word in FATAL:
            assert word not in err, (name, err[-2000:])
        if expected == 0:
            assert "Traceback" not in err, (name, err[-2000:])
        if ending == "exception":
            assert "RuntimeError: the script failed" in err, (name, err[-2000:])
        if ending == "interrupt":
            assert "KeyboardInterrupt" in err, (name, err[-2000:])


# ---- in one process ----------------------------------------------------------------------
def _open_fds():
    return len(os.listdir("/proc/self/fd"))


def _wait_for(condition, what, guard=60.0):
    """Poll ``condition`` until it holds; ``guard`` only bounds a hang."""
    end = time.monotonic() + guard
    while not condition():
        if time.monotonic() > end:
            pytest.fail("still waiting for %s" % what)
        time.sleep(0.01)


@pytest.fixture(autouse=True)
def _collect_earlier_nets():
    """Nets of earlier tests held only by reference cycles (a stored exception's frames)
    are collected first, so that counts taken here are this test's alone."""
    gc.collect()


def _handles_under(folder):
    """The open database environments of this test's files (other tests' nets may still be
    held by a stored traceback until the cycle collector runs)."""
    gc.collect()
    return [key for key in dbmod._handles if key[1].startswith(str(folder))]


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc to count files")
def test_dropping_100_nets_leaves_no_thread_or_file_behind(data):
    configs = _write_configs(data)
    del configs
    net = caffe.Net(str(data / "train_test.prototxt"), caffe.TRAIN)
    net.forward()
    net.close()
    del net
    threads, fds, still_open = threading.active_count(), _open_fds(), lifecycle.open_count()
    for i in range(100):
        net = caffe.Net(str(data / "train_test.prototxt"), caffe.TRAIN if i % 2 else caffe.TEST)
        assert threading.active_count() > threads  # its loading threads run
        if i % 3:
            net.forward()
        del net
    _wait_for(lambda: threading.active_count() == threads, "the loading threads to end")
    assert _open_fds() == fds
    assert lifecycle.open_count() == still_open
    assert not _handles_under(data)


def test_close_stops_threads_then_closes_the_database_and_twice_is_harmless(data):
    before = threading.active_count()
    with caffe.Net(str(data / "lmdb.prototxt"), caffe.TRAIN) as net:
        layer = net.layers[0]
        threads = layer._prefetcher.worker_threads
        assert threads and all(t.is_alive() for t in threads)
        net.forward()
        cursor = layer.cursor
    assert not any(t.is_alive() for t in threads)  # joined by close(), not later
    assert threading.active_count() == before
    assert cursor.closed and layer.db.env is None and not _handles_under(data)
    net.close()  # again: nothing happens
    with pytest.raises(CaffeError, match="layer 'mnist'.*closed"):
        net.forward()
    with pytest.raises(CaffeError, match="closed"):
        cursor.next()  # never reaches lmdb


def test_a_database_shared_by_two_nets_is_closed_by_its_last_user(data):
    path = str(data / "train_test.prototxt")
    train = caffe.Net(path, caffe.TRAIN)
    test = caffe.Net(path, caffe.TEST)
    assert len(_handles_under(data)) == 1  # one LMDB environment for both
    train.forward()
    train.close()
    assert len(_handles_under(data)) == 1
    labels = test.forward()  # the test net still reads
    assert "loss" in labels
    assert test.blobs["label"].data.shape == (100,)
    test.close()
    assert not _handles_under(data)


def test_solver_close_closes_its_nets(data):
    _write_configs(data)
    before = threading.active_count()
    with caffe.SGDSolver(str(data / "solver.prototxt")) as solver:
        solver.step(2)
        nets = [solver.net] + list(solver.test_nets)
    assert threading.active_count() == before
    for net in nets:
        with pytest.raises(CaffeError, match="closed"):
            net.forward()
    solver.close()


def test_a_failed_setup_releases_what_it_opened(data, tmp_path):
    bad = tmp_path / "bad.prototxt"
    # the database opens, then the first record turns out smaller than the crop
    bad.write_text(_lmdb_layer(data).replace("scale: 0.00390625", "crop_size: 40"))
    before = threading.active_count()
    with pytest.raises(CaffeError, match="40"):
        caffe.Net(str(bad), caffe.TRAIN)
    assert threading.active_count() == before
    assert not _handles_under(data)


def test_resources_release_newest_first_once_even_when_a_step_fails():
    class Owner:
        pass

    owner, order = Owner(), []
    res = lifecycle.Resources(owner, "test resources")
    res.push(lambda: order.append("opened first"))
    res.push(lambda: 1 / 0)
    res.push(lambda: order.append("opened last"))
    with pytest.raises(CaffeError, match="closing test resources: ZeroDivisionError"):
        res.release(raise_errors=True)
    assert order == ["opened last", "opened first"]
    res.release()
    assert order == ["opened last", "opened first"]
    with pytest.raises(CaffeError, match="closed"):
        res.push(lambda: None)
    owner2, order2 = Owner(), []
    lifecycle.Resources(owner2, "collected").push(lambda: order2.append("released"))
    del owner2  # garbage collection takes the same path
    assert order2 == ["released"]


# ---- a finalizer in a loading thread while the exit joins that thread ---------------------
# The shape of a data layer: the layer's Resources close its prefetcher, whose threads call the
# layer through weak references. The loading thread holds the layer's last reference while it
# fills a batch; the main thread is at exit, inside release_all, joining that thread. Events
# force the interleaving: the batch is finished only once the main thread is inside the
# prefetcher's release (its newest step rings `joining`), so the layer's finalizer runs in the
# loading thread, asks for the prefetcher's release and must not wait for the main thread.
FINALIZER_IN_A_JOINED_THREAD = textwrap.dedent('''\
    import threading
    import weakref

    from pycaffe_lite import lifecycle
    from pycaffe_lite.blob import Blob
    from pycaffe_lite.data.prefetch import Prefetcher

    filling, joining = threading.Event(), threading.Event()
    finalized_in = []


    def weak_call(method):
        ref = weakref.WeakMethod(method)
        return lambda *args: ref()(*args)


    class Layer:
        def __init__(self):
            self.resources = lifecycle.Resources(self, "the layer")
            self.prefetcher = Prefetcher(weak_call(self.plan), weak_call(self.fill),
                                         lambda: [Blob((2,))], count=1, threads=1)
            self.resources.push(self.prefetcher.close)
            self.resources.push(lambda: finalized_in.append(threading.current_thread().name))
            self.prefetcher.resources.push(joining.set)  # the newest step: runs first
            self.prefetcher.start()

        def plan(self):
            return None, {}

        def fill(self, plan, blobs):
            filling.set()
            joining.wait()  # until the main thread is inside the prefetcher's release


    layer = Layer()
    worker = layer.prefetcher.worker_threads[0]
    filling.wait()
    del layer  # the loading thread now holds the layer's last reference
    lifecycle.release_all()  # what the interpreter runs at exit
    print("released; the layer was finalized in %s; the worker is alive: %s"
          % (finalized_in, worker.is_alive()), flush=True)
    ''')


def test_a_finalizer_in_the_thread_being_joined_never_waits_for_the_joining_thread(tmp_path):
    script = tmp_path / "finalizer_in_joined_thread.py"
    script.write_text(FINALIZER_IN_A_JOINED_THREAD)
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env=dict(os.environ, PYTHONFAULTHANDLER="1"))
    try:
        out, err = proc.communicate(timeout=120)  # a guard against the deadlock only
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail("release_all and the loading thread's finalizer deadlocked: %s" % err[-2000:])
    assert proc.returncode == 0, err[-2000:]
    # the loading thread's finalizer hands the layer's release to a thread of its own (the
    # loading thread may hold a lock that the threads it would join wait for); release_all
    # runs it itself where it gets there first
    assert any(("released; the layer was finalized in ['%s']; the worker is alive: False"
                % where) in out for where in ("pycaffe-lite release of the layer",
                                              "MainThread")), (out, err[-2000:])
    for word in FATAL:
        assert word not in err, err[-2000:]


def test_a_second_release_waits_for_the_first_unless_it_runs_in_a_finalizer():
    """A plain second caller returns only once the steps have run; a finalizer's (and
    everything it releases) returns at once, whoever runs the steps."""
    class Owner:
        pass

    inside, go, order = threading.Event(), threading.Event(), []
    owner = Owner()
    res = lifecycle.Resources(owner, "slow")
    res.push(lambda: order.append("step done"))
    res.push(lambda: (inside.set(), go.wait()))
    first = threading.Thread(target=res.release, daemon=True)
    first.start()
    inside.wait()
    holder = [Owner()]
    late = lifecycle.Resources(holder[0], "releases 'slow' when collected")
    late.push(res.release)
    # the owner's last reference goes in `dropping`, which runs the finalizer: it asks for
    # 'slow', in progress in `first`, and must return at once
    dropping = threading.Thread(target=holder.clear, daemon=True)
    second_done = threading.Event()
    second = threading.Thread(target=lambda: (res.release(), second_done.set()), daemon=True)
    try:
        dropping.start()
        dropping.join(timeout=60)  # a guard against the wait only
        assert not dropping.is_alive(), "a finalizer waited for another thread's release"
        assert late.closed and order == []
        second.start()
        assert not second_done.wait(0.2)  # a plain caller still waits for `first`
    finally:
        go.set()
    first.join()
    second.join()
    assert order == ["step done"] and second_done.is_set()


@pytest.mark.slow
def test_failing_trains_at_a_short_switch_interval_all_exit(mnist_lmdbs, lenet_dir, tmp_path):
    """`train --weights missing.caffemodel` fails while its loading threads run; at a 5 ms
    switch interval a finalizer in a loading thread used to deadlock with the exit (about
    one run in fifty). Every run must end, with the error line and status 1."""
    train_lmdb, test_lmdb = mnist_lmdbs
    text = open(os.path.join(lenet_dir, "lenet_train_test.prototxt")).read()
    text = text.replace("models/lenet/mnist_train_lmdb", str(train_lmdb))
    text = text.replace("models/lenet/mnist_test_lmdb", str(test_lmdb))
    (tmp_path / "net.prototxt").write_text(text)
    solver = open(os.path.join(lenet_dir, "lenet_solver.prototxt")).read()
    solver = solver.replace("models/lenet/lenet_train_test.prototxt",
                            str(tmp_path / "net.prototxt"))
    solver = solver.replace('"models/lenet/lenet"', '"%s"' % (tmp_path / "lenet"))
    (tmp_path / "solver.prototxt").write_text(solver)
    wrapper = ("import sys; sys.setswitchinterval(5e-3); from pycaffe_lite.cli import main; "
               "sys.exit(main(sys.argv[1:]))")
    command = [sys.executable, "-c", wrapper, "train", "--solver",
               str(tmp_path / "solver.prototxt"), "--weights", str(tmp_path / "missing.caffemodel")]

    def one(_):
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=str(tmp_path),
                                env=dict(os.environ, PYTHONFAULTHANDLER="1"))
        try:
            _, err = proc.communicate(timeout=300)  # a guard against a hang only
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack
            _, err = proc.communicate()
            return "hang", err
        return proc.returncode, err

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        results = list(pool.map(one, range(60)))
    statuses = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    assert statuses == {1: 60}, (statuses, [err[-3000:] for s, err in results if s != 1][:1])
    for _, err in results:
        assert "missing.caffemodel" in err.splitlines()[-1], err[-2000:]
        for word in FATAL:
            assert word not in err, err[-2000:]
