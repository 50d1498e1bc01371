"""The compiled kernels' threads (pycaffe_lite.ops.cpu._threads): chunks claimed as threads
come, so a worker that never runs does not hold up a call; results that do not depend on the
thread count; the thread count from the CPUs the process may use (affinity, cgroup quota)."""

import ctypes
import threading

import numpy as np
import pytest

from pycaffe_lite.ops import cpu
from pycaffe_lite.ops.cpu import _threads as cpu_threads
from pycaffe_lite.ops.cpu import convolution as cpu_conv
from helpers.kernel import kernels, needs_library, switch_reads

HANG = 120  # seconds: only a hang detector, a passing call takes milliseconds


def in_worker():
    return threading.current_thread().name.startswith("pycaffe-lite-kernel")


@pytest.fixture
def one_worker(monkeypatch):
    """Two threads per call, and a fresh pool of exactly one worker thread."""
    old = cpu_threads._state["pool"]
    if old is not None:
        old.resources.release()
    monkeypatch.setitem(cpu_threads._state, "pool", None)
    monkeypatch.setitem(cpu_threads._state, "threads", 2)
    cpu_threads.pool(1)
    yield
    cpu_threads._state["pool"].resources.release()


def test_a_worker_that_never_runs_does_not_stall_the_call(one_worker):
    """The pool's only worker is held inside another call's chunk (as a descheduled thread
    would be): a second call's calling thread claims every chunk itself and returns."""
    entered, release = threading.Event(), threading.Event()

    def blocker(start, stop):
        if in_worker():
            entered.set()
            release.wait()
        else:
            entered.wait()  # leave the worker a chunk to claim

    holder = threading.Thread(target=cpu_threads.split, args=(blocker, 64, ()))
    holder.start()
    assert entered.wait(HANG)  # the worker is inside blocker() until release is set
    out = np.zeros(1000, np.int64)
    ran_in = set()

    def fill(start, stop):
        ran_in.add(threading.current_thread().name)
        out[start:stop] += np.arange(start, stop)

    call = threading.Thread(target=cpu_threads.split, args=(fill, 1000, ()))
    try:
        call.start()
        call.join(HANG)
        assert not call.is_alive(), "the call waited for the blocked worker"
        assert np.array_equal(out, np.arange(1000))  # every element once
        assert ran_in == {call.name}
    finally:
        release.set()
        holder.join()
        call.join()


def test_both_threads_take_chunks_when_both_run(one_worker):
    """A call's range is cut into several chunks, and a worker that runs takes some."""
    ranges, lock = [], threading.Lock()
    entered = threading.Event()

    def part(start, stop):
        if in_worker():
            entered.set()
        else:
            entered.wait()  # the calling thread holds its first chunk until a worker ran one
        with lock:
            ranges.append((start, stop, in_worker()))

    cpu_threads.split(part, 100, ())
    ranges.sort()
    assert len(ranges) == 2 * cpu_threads.CHUNKS_PER_THREAD
    assert ranges[0][0] == 0 and ranges[-1][1] == 100
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))  # contiguous, no overlap
    assert any(w for _, _, w in ranges) and not all(w for _, _, w in ranges)


def test_grain_bounds_the_chunks(monkeypatch):
    monkeypatch.setitem(cpu_threads._state, "threads", 2)
    sizes, lock = [], threading.Lock()

    def part(start, stop):
        with lock:
            sizes.append(stop - start)

    cpu_threads.split(part, 30, (), grain=10)  # 3 chunks of at least 10
    assert sorted(sizes) == [10, 10, 10]
    sizes.clear()
    cpu_threads.split(part, 19, (), grain=10)  # one thread's worth: run in place
    assert sizes == [19]


@pytest.mark.parametrize("text, cpus", [
    ("max 100000\n", None), ("150000 100000\n", 2), ("100000 100000", 1),
    ("50000 100000", 1), ("400000 100000", 4), ("-1 100000", None)])
def test_cgroup_v2_quota(tmp_path, text, cpus):
    (tmp_path / "proc").write_text("0::/box/job\n")
    folder = tmp_path / "cg" / "box" / "job"
    folder.mkdir(parents=True)
    (folder / "cpu.max").write_text(text)
    assert cpu_threads.cgroup_cpus(str(tmp_path / "cg"), str(tmp_path / "proc")) == cpus


@pytest.mark.parametrize("parent, child, cpus", [
    ("150000 100000", "max 100000", 2),       # the child has none: the parent's bounds it
    ("100000 100000", "300000 100000", 1),    # the smaller of the two
    ("max 100000", "300000 100000", 3),
    ("max 100000", "max 100000", None)])
def test_cgroup_v2_quota_of_a_parent_bounds_its_children(tmp_path, parent, child, cpus):
    (tmp_path / "proc").write_text("0::/user.slice/job\n")
    folder = tmp_path / "cg" / "user.slice" / "job"
    folder.mkdir(parents=True)
    (folder / "cpu.max").write_text(child)
    (folder.parent / "cpu.max").write_text(parent)
    assert cpu_threads.cgroup_cpus(str(tmp_path / "cg"), str(tmp_path / "proc")) == cpus


def test_cgroup_v2_quota_of_a_container_at_the_root(tmp_path):
    """In a container the process's cgroup path does not exist under the mount: the mount's
    own cpu.max is the container's."""
    (tmp_path / "proc").write_text("0::/system.slice/docker-1.scope\n")
    (tmp_path / "cg").mkdir()
    (tmp_path / "cg" / "cpu.max").write_text("250000 100000\n")
    assert cpu_threads.cgroup_cpus(str(tmp_path / "cg"), str(tmp_path / "proc")) == 3


def test_cgroup_v1_quota(tmp_path):
    (tmp_path / "proc").write_text("4:memory:/x\n3:cpu,cpuacct:/job\n")
    folder = tmp_path / "cg" / "cpu,cpuacct" / "job"
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text("300000\n")
    (folder / "cpu.cfs_period_us").write_text("200000\n")
    assert cpu_threads.cgroup_cpus(str(tmp_path / "cg"), str(tmp_path / "proc")) == 2
    (folder / "cpu.cfs_quota_us").write_text("-1\n")
    assert cpu_threads.cgroup_cpus(str(tmp_path / "cg"), str(tmp_path / "proc")) is None


def test_no_cgroup_files_means_no_quota(tmp_path):
    assert cpu_threads.cgroup_cpus(str(tmp_path), str(tmp_path / "missing")) is None


def test_thread_count_follows_affinity_and_quota(monkeypatch):
    monkeypatch.delenv("PYCAFFE_LITE_CPU_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4, 5})
    monkeypatch.setattr(cpu_threads, "match_blas", lambda n: None)
    for quota, expected in ((None, 6), (3, 3), (16, 6)):
        monkeypatch.setattr(cpu_threads, "cgroup_cpus", lambda q=quota: q)
        monkeypatch.setitem(cpu_threads._state, "threads", None)
        assert cpu.threads() == expected
    monkeypatch.setenv("PYCAFFE_LITE_CPU_THREADS", "5")  # an explicit count wins
    monkeypatch.setitem(cpu_threads._state, "threads", None)
    assert cpu.threads() == 5
    monkeypatch.setitem(cpu_threads._state, "threads", None)


OURS, OMP = "PYCAFFE_LITE_CPU_THREADS", "OMP_NUM_THREADS"


@pytest.mark.parametrize("ours, omp, expected, warned", [
    ("abc", None, 6, [OURS]), ("1.5", None, 6, [OURS]), ("0", None, 6, [OURS]),
    ("-4", None, 6, [OURS]),
    ("one", "1", 1, [OURS]),  # a bad count of ours does not drop a good OMP_NUM_THREADS
    (None, "4,2", 4, []),     # OpenMP's list form: the outer level's count
    (None, "abc", 6, [OMP]),
    ("3", "abc", 3, [])])     # OMP_NUM_THREADS is not read where ours decides
def test_bad_thread_counts_in_the_environment_are_named_and_ignored(monkeypatch, caplog, ours,
                                                                     omp, expected, warned):
    values = {OURS: ours, OMP: omp}
    for name, value in values.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: set(range(6)))
    monkeypatch.setattr(cpu_threads, "cgroup_cpus", lambda: None)
    monkeypatch.setattr(cpu_threads, "match_blas", lambda n: None)
    monkeypatch.setitem(cpu_threads._state, "threads", None)
    assert cpu.threads() == expected
    monkeypatch.setitem(cpu_threads._state, "threads", None)
    for name in (OURS, OMP):
        message = "%s=%r is not a positive whole number of threads" % (name, values[name])
        assert (message in caplog.text) == (name in warned)


@pytest.mark.parametrize("name", [OURS, OMP])
@pytest.mark.parametrize("value", ["100000", "99999999999999999999"])
def test_a_huge_thread_count_in_the_environment_is_named_and_ignored(monkeypatch, caplog, name,
                                                                     value):
    """A count no machine runs (a typo, or more than OpenBLAS's C int holds) is ignored with
    a warning: it started a thread per chunk of work, thousands for one large call, and gave
    OpenBLAS the count wrapped around 2**32."""
    monkeypatch.delenv(OURS, raising=False)
    monkeypatch.delenv(OMP, raising=False)
    monkeypatch.setenv(name, value)
    monkeypatch.setattr(cpu_threads.os, "sched_getaffinity", lambda pid: set(range(6)))
    monkeypatch.setattr(cpu_threads, "cgroup_cpus", lambda: None)
    given = []
    monkeypatch.setattr(cpu_threads, "match_blas", given.append)
    monkeypatch.setitem(cpu_threads._state, "threads", None)
    assert cpu.threads() == 6
    monkeypatch.setitem(cpu_threads._state, "threads", None)
    assert given == [6]
    assert "%s=%r asks for more than 1024 threads; it is ignored" % (name, value) \
        in caplog.text


def test_a_large_but_sane_thread_count_is_kept(monkeypatch):
    monkeypatch.setenv(OURS, "1024")
    monkeypatch.setattr(cpu_threads, "match_blas", lambda n: None)
    monkeypatch.setitem(cpu_threads._state, "threads", None)
    assert cpu.threads() == 1024
    monkeypatch.setitem(cpu_threads._state, "threads", None)


def test_openblas_gets_the_kernels_budget(monkeypatch):
    if not cpu_threads.blas_controllable():
        pytest.skip("NumPy's BLAS here is not an OpenBLAS whose threads can be set")
    library = ctypes.CDLL(cpu_threads._state["blas_library"])
    get = getattr(library, cpu_threads._blas_functions()[1].__name__)
    get.restype = ctypes.c_int
    before = get()
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.delenv("GOTO_NUM_THREADS", raising=False)
    try:
        assert cpu_threads.match_blas(1) == 1 and get() == 1
        monkeypatch.setenv("OPENBLAS_NUM_THREADS", "3")  # the user's own choice is left alone
        assert cpu_threads.match_blas(2) is None and get() == 1
    finally:
        monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
        cpu_threads.match_blas(before)


# ---- every kernel that splits: the same bits on 1, 2 and 3 threads ------------------------------
def _kernel_outputs(dtype):
    """Each splitting kernel's outputs on fixed inputs (fresh output arrays each time)."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 5, 9, 9)).astype(dtype)
    out = {}
    col = np.empty((5 * 9, 3 * 7 * 7), dtype)
    out["im2col"] = cpu.im2col_batch_first(x, (3, 3), (0, 0), (1, 1), (1, 1), (7, 7), col).copy()
    out["col2im"] = cpu.col2im_batch_first(col, x.shape, (3, 3), (0, 0), (1, 1), (1, 1), (7, 7),
                                           np.empty_like(x))
    top, arg = np.empty((3, 5, 4, 4), dtype), np.empty((3, 5, 4, 4), np.int32)
    cpu.max_pool_forward(x, (3, 3), (0, 0), (2, 2), (4, 4), top, arg)
    out["max_pool"], out["argmax"] = top, arg
    dx = np.empty_like(x)
    cpu.max_pool_backward(top * 2, arg, (3, 3), (0, 0), (2, 2), (4, 4), dx)
    out["max_pool_backward"] = dx
    ave = np.empty((3, 5, 4, 4), dtype)
    cpu.ave_pool_forward(x, (3, 3), (0, 0), (2, 2), (4, 4), ave, np.full((4, 4), 9, dtype))
    out["ave_pool"] = ave
    scale, lrn_top = np.empty_like(x), np.empty_like(x)
    cpu.lrn_scale(x, scale, 3, dtype(1e-4 / 3), dtype(1), top=lrn_top)
    out["lrn_scale"], out["lrn_top"] = scale, lrn_top
    accum = np.empty_like(x)
    cpu.lrn_accum(x * 0.5, lrn_top, scale, np.empty_like(x), accum, 3)
    out["lrn_accum"] = accum
    bias = rng.standard_normal(5).astype(dtype)
    out["bias_relu"] = cpu.bias_relu(x, np.empty_like(x), bias)
    out["relu"] = cpu.bias_relu(x, np.empty_like(x))
    out["relu_backward"] = cpu.relu_backward(x, x * 3, np.empty_like(x))
    diff, history, data = x.ravel().copy(), (x * 0.1).ravel(), (x * 2).ravel()
    cpu.sgd_update(diff, history, data, dtype(0.5), dtype(1e-3), False, dtype(0.01), dtype(0.9))
    out["sgd_diff"], out["sgd_history"] = diff, history
    w = rng.standard_normal((5, 1, 3, 3)).astype(dtype)
    y = np.empty((3, 5, 7, 7), dtype)
    cpu_conv.depthwise_forward(x, w, bias, y, (3, 3), (0, 0), (1, 1), (1, 1), (7, 7))
    out["depthwise"] = y
    return out


@needs_library
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_every_splitting_kernel_gives_the_same_bits_on_any_thread_count(dtype, monkeypatch):
    """Chunks of one unit each (the smallest grain): however the chunks fall to threads, each
    element is computed by the same code as on one thread."""
    monkeypatch.setattr(cpu_threads, "MIN_ELEMENTS_PER_THREAD", 1)
    results = []
    with kernels(True):
        for n in (1, 2, 3):
            monkeypatch.setitem(cpu_threads._state, "threads", n)
            results.append(_kernel_outputs(dtype))
    for name, reference in results[0].items():
        for other in results[1:]:
            assert other[name].tobytes() == reference.tobytes(), name


# ---- products shared by the kernel threads ------------------------------------------------------
@pytest.mark.parametrize("shape", [(64, 27, 12544), (32, 144, 3025), (192, 576, 3136)])
def test_split_matmul_equals_the_product_to_rounding(shape, monkeypatch):
    """Columns shared by two threads, each a single-threaded OpenBLAS product: within the
    classical dot-product bound of the exact (float64) product; OpenBLAS's thread count
    restored afterwards."""
    if not cpu_threads.blas_controllable():
        pytest.skip("NumPy's BLAS here is not an OpenBLAS whose threads can be set")
    get = cpu_threads._blas_functions()[1]
    before = get()
    monkeypatch.setitem(cpu_threads._state, "threads", 2)
    m, k, n = shape
    rng = np.random.default_rng(3)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = np.full((m, n), np.nan, np.float32)
    columns = []
    real = cpu._matmul_columns

    def spy(a, b, out, start, stop):
        columns.append((start, stop))
        real(a, b, out, start, stop)

    monkeypatch.setattr(cpu, "_matmul_columns", spy)
    assert cpu.split_matmul(a, b, out)
    assert len(columns) > 1 and get() == before
    exact = a.astype(np.float64) @ b.astype(np.float64)
    bound = k * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(out - exact) <= bound)


def test_split_matmul_leaves_small_or_switched_off_products(monkeypatch):
    monkeypatch.setitem(cpu_threads._state, "threads", 2)
    a, b = np.ones((4, 3), np.float32), np.ones((3, 100), np.float32)
    assert not cpu.split_matmul(a, b, np.empty((4, 100), np.float32))  # too small to share
    old = cpu.set_gemm_split(False)
    try:
        big = np.ones((64, 64), np.float32), np.ones((64, 4096), np.float32)
        assert not cpu.split_matmul(*big, np.empty((64, 4096), np.float32))
    finally:
        cpu.set_gemm_split(old)


def test_split_matmul_of_a_stack_runs_each_product_as_numpy_does(monkeypatch):
    """A stack of products (Winograd's 36 per layer) shared whole by the threads: each
    product the very call NumPy makes on one BLAS thread, so the same bits."""
    if not cpu_threads.blas_controllable():
        pytest.skip("NumPy's BLAS here is not an OpenBLAS whose threads can be set")
    monkeypatch.setitem(cpu_threads._state, "threads", 3)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((36, 64, 96)).astype(np.float32)
    b = rng.standard_normal((36, 96, 200)).astype(np.float32)
    out = np.full((36, 64, 200), np.nan, np.float32)
    assert cpu.split_matmul(a, b, out)
    with cpu_threads.SingleThreadedBlas():
        reference = np.matmul(a, b)
    assert out.tobytes() == reference.tobytes()


def test_the_gemm_split_environment_switch():
    code = "from pycaffe_lite.ops import cpu; print(cpu.gemm_split_enabled())"
    assert switch_reads("PYCAFFE_LITE_GEMM_SPLIT", code) == ["False", "True"]


def test_host_matmul_keeps_small_products_off_openblas_threads(monkeypatch):
    """A product too small to share runs on the calling thread with OpenBLAS held to one
    thread (its threads, once woken, would spin on the cores the kernel threads use next);
    switched off (set_gemm_split(False)) it is left to OpenBLAS. The values are the product's."""
    if not cpu_threads.blas_controllable():
        pytest.skip("NumPy's BLAS here is not an OpenBLAS whose threads can be set")
    monkeypatch.setitem(cpu_threads._state, "threads", 2)
    get = cpu_threads._blas_functions()[1]
    seen = []

    class Spy(cpu_threads.SingleThreadedBlas):
        def __enter__(self):
            result = super().__enter__()
            seen.append(get())
            return result

    monkeypatch.setattr(cpu, "_SingleThreadedBlas", Spy)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 2048)).astype(np.float32)  # ResNet-50's classifier
    w = rng.standard_normal((1000, 2048)).astype(np.float32)
    out = np.empty((1, 1000), np.float32)
    assert not cpu.split_matmul(x, w.T, out)  # too small to share
    cpu.host_matmul(x, w.T, out)
    assert seen == [1]
    np.testing.assert_allclose(out, x.astype(np.float64) @ w.T.astype(np.float64),
                               rtol=1e-4, atol=1e-3)
    old = cpu.set_gemm_split(False)
    try:
        again = cpu.host_matmul(x, w.T, np.empty_like(out))
    finally:
        cpu.set_gemm_split(old)
    assert seen == [1]
    np.testing.assert_array_equal(again, x @ w.T)


WEIGHT_GRAD_NET = """
force_backward: true
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 4 dim: 16 dim: 20 dim: 20 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c"
  convolution_param { num_output: 64 kernel_size: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "grouped" type: "Convolution" bottom: "c" top: "g"
  convolution_param { num_output: 64 kernel_size: 3 group: 2
                      weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "g" top: "y"
  inner_product_param { num_output: 1000 weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "small" type: "InnerProduct" bottom: "y" top: "z"
  inner_product_param { num_output: 10 weight_filler { type: "gaussian" std: 0.01 } } }
"""


@needs_library
def test_the_weight_gradients_keep_off_openblas_threads(monkeypatch, tmp_path):
    """performance.md, "On a busy machine": a product on OpenBLAS's threads is split in fixed
    parts, and a descheduled thread stalls it for a time slice (LeNet's training step ran 2.4x
    slower on two threads than on one beside other jobs, 52 against 22 ms). The convolutions'
    and InnerProduct's weight gradients were such products; every product of a backward now
    runs with OpenBLAS on one thread (shared by the kernel threads, or on the calling thread),
    and the gradients are the products' values."""
    import pycaffe_lite as caffe

    if not cpu_threads.blas_controllable():
        pytest.skip("NumPy's BLAS here is not an OpenBLAS whose threads can be set")
    set_blas, get = cpu_threads._blas_functions()
    monkeypatch.setitem(cpu_threads._state, "threads", 2)
    before = get()
    set_blas(2)  # OpenBLAS's own threads ready, whatever the environment chose
    path = tmp_path / "net.prototxt"
    path.write_text(WEIGHT_GRAD_NET)
    net = caffe.Net(str(path), caffe.TRAIN)
    rng = np.random.default_rng(3)
    net.blobs["x"].data[...] = rng.standard_normal(net.blobs["x"].shape)
    net.forward()
    for name in ("z",):
        net.blobs[name].diff[...] = rng.standard_normal(net.blobs[name].shape)
    real_matmul = np.matmul
    threads_seen = []

    def spy(a, b, *args, **kwargs):
        if isinstance(a, np.ndarray) and a.size * b.shape[-1] >= 1 << 16:
            threads_seen.append(get())
        return real_matmul(a, b, *args, **kwargs)

    monkeypatch.setattr(np, "matmul", spy)
    try:
        for ps in net.params.values():
            for p in ps:
                p.diff[...] = 0
        net.backward()
    finally:
        monkeypatch.setattr(np, "matmul", real_matmul)
        set_blas(before)
    assert threads_seen and set(threads_seen) == {1}, threads_seen
    # the values: the InnerProduct's dW = dy^T x, the grouped convolution's by im2col, float64
    g = net.blobs["g"].data.reshape(4, -1).astype(np.float64)
    dy = net.blobs["y"].diff.reshape(4, -1).astype(np.float64)
    np.testing.assert_allclose(net.params["ip"][0].diff, dy.T @ g, rtol=1e-4, atol=1e-5)
    c = net.blobs["c"].data.astype(np.float64)
    dg = net.blobs["g"].diff.astype(np.float64)
    patches = np.lib.stride_tricks.sliding_window_view(c, (3, 3), axis=(2, 3))  # N C H W 3 3
    expected = np.concatenate([
        np.einsum("nohw,nchwij->ocij", dg[:, 32 * k:32 * (k + 1)],
                  patches[:, 32 * k:32 * (k + 1)]) for k in range(2)])
    np.testing.assert_allclose(net.params["grouped"][0].diff, expected, rtol=1e-4, atol=1e-4)
