"""backend.track_device_memory: the most device memory in use at once during a block (what
PyTorch's ``max_memory_allocated`` counts), measured through CuPy's allocator hook.

Without a GPU the hook runs against a stand-in device module with CuPy's memory-pool surface
(``get_default_memory_pool``, ``cuda.get_allocator`` / ``cuda.set_allocator``, a pool that
rounds to 512 bytes, keeps what it allocated and frees when the memory object goes), so the
expected figures are sums done by hand. tests/test_net_memory.py runs it on a real GPU
through ``pycaffe-lite time --gpu 0``.
"""

import gc
import logging
import os
import sys
import threading
import types
import weakref

import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.testing.simdevice import simulated_device
from pycaffe_lite.testing.simgraph import device_buffers


class StandInPool:
    """CuPy's MemoryPool as far as the hook sees it: 512-byte units, blocks kept cached."""

    UNIT = 512

    def __init__(self):
        self.used = self.held = 0

    def malloc(self, size):
        n = -(-size // self.UNIT) * self.UNIT
        self.used += n
        self.held = max(self.held, self.used)
        return _Memory(self, n)

    def used_bytes(self):
        return self.used

    def total_bytes(self):
        return self.held


class _Memory:
    def __init__(self, pool, n):
        self.pool, self.n = pool, n

    def __del__(self):
        self.pool.used -= self.n


def _module():
    pool = StandInPool()
    cuda = types.SimpleNamespace(allocator=pool.malloc)
    cuda.get_allocator = lambda: cuda.allocator
    cuda.set_allocator = lambda f=None: setattr(cuda, "allocator", f)
    return types.SimpleNamespace(__name__="standin", get_default_memory_pool=lambda: pool,
                                 cuda=cuda), pool


@pytest.fixture
def device():
    mod, pool = _module()
    old = backend.use_device_module(mod)
    backend.set_mode_gpu()
    try:
        yield mod, pool
    finally:
        backend.set_mode_cpu()
        backend.use_device_module(old)


def _alloc(mod, size):
    """An allocation as CuPy makes one: through the current allocator."""
    return mod.cuda.get_allocator()(size)


def test_the_peak_is_the_most_in_use_at_once(device):
    mod, pool = device
    kept = _alloc(mod, 1000)  # 1024, in use before the block
    with backend.track_device_memory() as memory:
        a = _alloc(mod, 3000)  # 3072: 4096 in use
        b = _alloc(mod, 4096)  # 8192
        del a  # 5120
        c = _alloc(mod, 2000)  # 2048: 7168, under the peak
        del b, c  # 1024
        d = _alloc(mod, 1)  # 512: 1536
    assert memory.peak == 1024 + 3072 + 4096
    assert pool.used == 1536 and memory.peak > pool.used
    # the pool kept what it allocated: it held the peak
    assert memory.held == 8192
    del kept, d


def test_the_allocator_comes_back_after_the_block_and_after_an_error(device):
    mod, pool = device
    with backend.track_device_memory() as memory:
        assert mod.cuda.get_allocator() != pool.malloc
    assert mod.cuda.get_allocator() == pool.malloc
    with pytest.raises(RuntimeError):
        with backend.track_device_memory():
            raise RuntimeError("boom")
    assert mod.cuda.get_allocator() == pool.malloc
    # nothing allocated in the block: what was in use when it began and ended
    assert memory.peak == 0
    m = _alloc(mod, 600)  # allocations after the block are not seen
    assert memory.peak == 0 and pool.used == 1024
    del m


def test_the_pools_own_allocator_in_another_wrapper_is_measured(device):
    """CuPy may hand back the pool's malloc as an object of its own: what counts is that it is
    the pool's (its ``__self__``)."""
    mod, pool = device

    class Bound:
        __self__ = pool

        def __call__(self, size):
            return pool.malloc(size)

    mod.cuda.set_allocator(Bound())
    with backend.track_device_memory() as memory:
        m = _alloc(mod, 2048)
        del m
    assert memory is not None and memory.peak == 2048
    assert isinstance(mod.cuda.get_allocator(), Bound)


def test_allocations_of_other_threads_count(device):
    mod, pool = device
    with backend.track_device_memory() as memory:
        box = []
        t = threading.Thread(target=lambda: box.append(_alloc(mod, 10 * 512)))
        t.start()
        t.join()
        mine = _alloc(mod, 512)
        box.clear()
        del mine
    assert memory.peak == 11 * 512


def test_a_captured_graphs_pool_counts_whole(device):
    mod, pool = device
    graph_pool = StandInPool()
    keep = graph_pool.malloc(20 * 512)  # the graph's temporaries, held by its pool
    del keep  # freed inside the capture: the pool still holds it for the graph
    graph = backend._DeviceGraph(None, None, graph_pool)
    backend._graphs.add(graph)
    try:
        with backend.track_device_memory() as memory:
            x = _alloc(mod, 3 * 512)
            del x
    finally:
        backend._graphs.discard(graph)
    assert memory.peak == 23 * 512 and memory.held == 23 * 512


def test_nothing_is_measured_where_nothing_can_be(device, caplog):
    mod, pool = device
    mod.cuda.set_allocator(lambda size: pool.malloc(size))  # an allocator of one's own
    caplog.set_level(logging.INFO, "pycaffe_lite")
    with backend.track_device_memory() as memory:
        pass
    assert memory is None
    assert "not CuPy's default memory pool" in caplog.text
    backend.set_mode_cpu()
    with backend.track_device_memory() as memory:
        pass
    assert memory is None


# ---- the simulated device: its arrays counted as CuPy's pool counts them -------------------
def _rounded(nbytes):
    return -(-nbytes // 512) * 512


def test_the_simulated_device_counts_its_arrays_in_pool_units():
    """One block per buffer, in 512-byte units, held while any view of it lives."""
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            pool = dev.get_default_memory_pool()
            kept = dev.zeros(100, np.float32)  # 400 -> 512, before the block
            with backend.track_device_memory() as memory:
                a = dev.empty((3, 1000), np.float32)  # 12000 -> 12288: 12800 in use
                v, t = a[1:], a.T  # views: nothing
                v.reshape(-1)
                b = a * 2  # 12288: 25088
                del a  # its views keep its buffer
                c = dev.ones(10, np.float64)  # 80 -> 512: 25600
                del b, c  # 12800
                del v, t  # a's buffer goes: 512
                d = dev.zeros(0, np.float32)  # nothing
                e = dev.ones(40, np.float32)  # 160 -> 512: 1024
            assert memory is not None
            assert memory.peak == 25600 and memory.held == 25600
            assert pool.used_bytes() == 1024
            del kept, d, e
            assert pool.used_bytes() == 0
        finally:
            backend.set_mode_cpu()


TINY = """
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 6 dim: 6 } } }
layer { name: "label" type: "Input" top: "label" input_param { shape { dim: 2 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
                            weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "fc" type: "InnerProduct" bottom: "conv" top: "fc"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "fc" bottom: "label" top: "loss" }
"""


def _tiny_solver():
    from google.protobuf import text_format

    from pycaffe_lite.proto import caffe_pb2
    from pycaffe_lite.solvers import get_solver
    sp = caffe_pb2.SolverParameter()
    text_format.Merge('type: "SGD" base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 '
                      'lr_policy: "fixed" max_iter: 100 display: 0 random_seed: 0 '
                      'snapshot_after_train: false', sp)
    text_format.Merge(TINY, sp.net_param)
    solver = get_solver(sp)
    solver.net.blobs["data"].data[...] = np.linspace(-1, 1, 216).reshape(2, 3, 6, 6)
    solver.net.blobs["label"].data[...] = [1, 3]
    return solver


def test_a_training_iteration_on_the_simulated_device_is_counted():
    """GPU mode's captured iterations on the simulated device: what the pool has in use is
    the buffers under every live device array (found through the garbage collector), and the
    count script's parts are the arrays' sizes counted by hand."""
    count_gpu_memory = _count_script()
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            solver = _tiny_solver()
            solver.step(1)
            with backend.track_device_memory() as memory:
                solver.step(2)  # the capture, a replay
            assert solver.train_graph.captures == 1 and solver.train_graph.replays == 2
            gc.collect()
            roots = device_buffers(dev)
            in_use = dev.get_default_memory_pool().used_bytes()
            assert in_use == sum(_rounded(r.nbytes) for r in roots)
            assert memory.peak >= in_use
            labels = count_gpu_memory.label_roots(solver, dev)
            parts = count_gpu_memory.breakdown(
                [(id(r), weakref.ref(r), _rounded(r.nbytes), "?") for r in roots],
                labels)
        finally:
            backend.set_mode_cpu()
    # conv 4x3x3x3 (432 bytes), Scale's gamma and beta (16 each), fc 5x144 (2880) and its
    # bias (20): a block each
    params = 512 + 512 + 512 + 3072 + 512
    assert parts["params"] == params
    assert parts["params' diffs"] == params
    # a history for each learnable blob, BatchNorm's three included (as Caffe's solver)
    assert parts["solver history (momentum)"] == params + 3 * 512
    assert parts["BatchNorm statistics"] == 3 * 512
    assert parts["fused BN chains: x_hat"] == _rounded(2 * 4 * 36 * 4)
    # conv (288 floats), fc (10), loss (1)
    assert parts["activations (blob data)"] == _rounded(288 * 4) + 512 + 512
    assert parts["input batch (data, label)"] == _rounded(216 * 4) + 512
    # conv's and fc's diffs are both in use at fc's backward: two buffers; the loss's its own
    assert parts["activation diffs (after sharing)"] == _rounded(288 * 4) + 512 + 512


def test_a_capture_restores_every_device_buffer_without_walking_the_interpreters_objects(
        monkeypatch):
    """A simulated capture runs nothing: what the captured function wrote into device memory is
    put back. The buffers it saves are at least every buffer under a live device array as the
    garbage collector finds them (device_buffers), and it finds them without that walk over
    every object of the interpreter (which took most of a capture's time in a large test
    process)."""
    from pycaffe_lite.testing import simgraph

    with simulated_device() as dev:
        a = dev.arange(12, dtype=np.float32).reshape(3, 4)
        view = a[1:]
        del a  # its buffer stays under the view
        b = dev.ones(5, np.float64)
        gc.collect()
        found = {id(root) for root in device_buffers(dev)}
        assert {id(root) for root, _ in simgraph._device_memory(dev)} >= found and len(found) == 2

        def step():
            view[...] = -1.0
            b[...] = 7.0

        def walk(*args):
            raise AssertionError("the capture walked the interpreter's objects for memory")
        monkeypatch.setattr(simgraph, "device_buffers", walk)
        dev.capture_graph(step)
        monkeypatch.undo()
        np.testing.assert_array_equal(view.get(), np.arange(4, 12, dtype=np.float32).reshape(2, 4))
        np.testing.assert_array_equal(b.get(), np.ones(5))


def test_the_hand_account_of_pytorchs_twin():
    """What PyTorch's twin keeps at the end of its forward, by hand: BatchNorm2d saves its
    input (the convolution's output), the in-place ReLU its result (which the Linear saves
    as its input too), log_softmax its output; the dict of tops holds the logits; params,
    gradients and momentum one copy each."""
    count_gpu_memory = _count_script()
    solver = _tiny_solver()
    parts = count_gpu_memory.torch_account(solver.net)
    params = (108 + 4 + 4 + 720 + 5) * 4
    assert parts["params"] == parts["param gradients"] == parts["momentum buffers"] == params
    # the Convolution's input (data, 216), BatchNorm's input (288), the ReLU's result (288),
    # the log-probabilities (10)
    assert parts["saved for the backward"] == (216 + 288 + 288 + 10) * 4
    assert parts["other tops the forward's dict holds"] == (10 + 1 + 2) * 4  # fc, loss, label
    assert parts["running mean / var"] == 2 * 4 * 4


def _count_script():
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, os.path.join(os.path.dirname(here), "benchmarks"))
    return pytest.importorskip("count_gpu_memory")


@pytest.mark.gpu
def test_the_peak_on_a_gpu_is_the_arrays_bytes(cupy_device):
    """CuPy's own pool: arrays of whole 512-byte units, the peak their sum at its largest."""
    import cupy
    backend.set_mode_gpu()
    pool = cupy.get_default_memory_pool()
    gc.collect()
    before = pool.used_bytes()
    with backend.track_device_memory() as memory:
        a = cupy.empty(1 << 20, dtype=cupy.uint8)
        b = cupy.empty(3 << 20, dtype=cupy.uint8)
        del a
        c = cupy.empty(2 << 20, dtype=cupy.uint8)
        del b, c
    assert memory.peak == before + (4 << 20)
    assert pool.used_bytes() == before
    assert cupy.cuda.get_allocator() == pool.malloc



# ---- the fused BatchNorm chain's generic code: its full-size temporaries, counted ------------
N, C, S = 4, 3, 1000  # a full-size array: 48000 bytes in float32, the per-channel ones 512


def _chain_forward_reference(x, gamma, beta, relu):
    """The layers' formulas, NumPy on the host, as BatchNorm, Scale and ReLU compute them."""
    mean = x.mean(axis=(0, 2))
    centred = x - mean[:, None]
    var = (centred * centred).mean(axis=(0, 2))
    std = (var + np.asarray(1e-5, x.dtype)) ** 0.5
    xhat = (x - mean[:, None]) / std[:, None]
    z = xhat * gamma[:, None] + beta[:, None]
    return xhat, std, (np.maximum(z, 0) if relu else z)


def _chain_backward_reference(dy, y, xhat, std, gamma, relu):
    dz = dy * (y > 0) if relu else dy
    dbeta, dgamma = dz.sum(axis=(0, 2)), (dz * xhat).sum(axis=(0, 2))
    dxh = dz * gamma[:, None]
    mean_dxh = dxh.mean(axis=(0, 2))[:, None]
    mean_dxh_xhat = (dxh * xhat).mean(axis=(0, 2))[:, None]
    return (dxh - mean_dxh - mean_dxh_xhat * xhat) / std[:, None], dgamma, dbeta


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("relu", [True, False])
def test_the_fused_chains_generic_code_keeps_few_full_size_temporaries(dtype, relu):
    """ops.train_fused's generic BatchNorm -> Scale -> ReLU (the simulated device's path, and
    a GPU's with the kernels off): the forward holds one full-size temporary at a time beyond
    its outputs (it held three: the centred values, kept to the end, and the normalisation's
    two steps), the backward two (it held five), and their values are the layers' formulas',
    bit for bit."""
    from pycaffe_lite.ops import train_fused
    rng = np.random.default_rng(3)
    host = {k: rng.normal(size=(N, C, S)).astype(dtype) for k in ("x", "dy")}
    gamma_h, beta_h = (rng.normal(size=C).astype(dtype) for _ in range(2))
    full = _rounded(N * C * S * np.dtype(dtype).itemsize)
    with simulated_device() as dev:
        backend.set_mode_gpu()
        try:
            x, dy = dev.asarray(host["x"]), dev.asarray(host["dy"])
            gamma, beta = dev.asarray(gamma_h), dev.asarray(beta_h)
            running = [dev.zeros(C, dtype), dev.zeros(C, dtype), dev.zeros(1, dtype)]
            y, xhat, dx = (dev.empty((N, C, S), dtype) for _ in range(3))
            dgamma, dbeta = dev.zeros(C, dtype), dev.zeros(C, dtype)
            work = train_fused.Workspace()
            train_fused.bn_forward(x, y, xhat, gamma, beta, running, False, 1e-5, 0.999, relu,
                                   work)  # the workspace's per-channel buffers made
            dgamma[...] = 0
            pool = dev.get_default_memory_pool()
            before = pool.used_bytes()
            with backend.track_device_memory() as forward:
                std = train_fused.bn_forward(x, y, xhat, gamma, beta, running, False, 1e-5,
                                             0.999, relu, work)
            with backend.track_device_memory() as backward:
                train_fused.bn_backward(dy, y, xhat, std, gamma, dgamma, dbeta, dx, None,
                                        False, relu, work)
            assert pool.used_bytes() == before
            got = [a.get() for a in (xhat, std, y, dx, dgamma, dbeta)]
        finally:
            backend.set_mode_cpu()
    # beyond one (two) full-size arrays, a few per-channel ones of 512 bytes at most
    assert full <= forward.peak - before <= full + 4 * 512
    assert 2 * full <= backward.peak - before <= 2 * full + 4 * 512
    xhat_r, std_r, y_r = _chain_forward_reference(host["x"], gamma_h, beta_h, relu)
    dx_r, dgamma_r, dbeta_r = _chain_backward_reference(host["dy"], y_r, xhat_r, std_r,
                                                        gamma_h, relu)
    for a, b in zip(got, (xhat_r, std_r, y_r, dx_r, dgamma_r, dbeta_r)):
        np.testing.assert_array_equal(a, b)
