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
import threading
import types

import pytest

from pycaffe_lite import backend


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


def test_the_simulated_device_has_no_pool_to_measure():
    from pycaffe_lite.testing.simdevice import simulated_device
    with simulated_device():
        backend.set_mode_gpu()
        try:
            with backend.track_device_memory() as memory:
                pass
        finally:
            backend.set_mode_cpu()
    assert memory is None


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

