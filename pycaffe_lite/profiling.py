"""Per-layer timing of a net (``pycaffe-lite time`` and the benchmarks)."""

import time

from . import backend


def synchronize():
    """Wait for the device to finish (a no-op on the CPU)."""
    if backend.mode() == backend.GPU:
        cuda = getattr(backend.device_module(), "cuda", None)
        if cuda is not None and hasattr(cuda, "runtime"):
            cuda.runtime.deviceSynchronize()


def time_layers(net, iterations, on_iteration=None):
    """Run ``iterations`` timed forward/backward passes, layer by layer.

    Returns ``{"layers": names, "forward": ms per layer, "backward": ms per layer,
    "forward_total", "backward_total", "total"}`` (averages per pass, in milliseconds).
    ``on_iteration(j, ms)`` is called after each pass.
    """
    clock = time.perf_counter
    n = len(net.records)
    fwd, bwd = [0.0] * n, [0.0] * n
    fwd_total = bwd_total = 0.0
    start = clock()
    for j in range(iterations):
        t0 = clock()
        for i in range(n):
            t = clock()
            net.forward_from_to(i, i)
            synchronize()
            fwd[i] += clock() - t
        t1 = clock()
        for i in range(n - 1, -1, -1):
            t = clock()
            if net.records[i].need_backward:
                net.backward_from_to(i, i)
                synchronize()
            bwd[i] += clock() - t
        t2 = clock()
        fwd_total += t1 - t0
        bwd_total += t2 - t1
        if on_iteration is not None:
            on_iteration(j, (t2 - t0) * 1e3)
    total = clock() - start
    scale = 1e3 / iterations
    return {"layers": list(net.layer_names), "forward": [v * scale for v in fwd],
            "backward": [v * scale for v in bwd], "forward_total": fwd_total * scale,
            "backward_total": bwd_total * scale, "total": total * scale,
            "total_all_ms": total * 1e3}


class Timer:
    """pycaffe's ``caffe.Timer``: ``start()``, ``stop()`` and ``ms``, the milliseconds between
    the last start and stop (a running timer is stopped first; 0 before the first start).
    In GPU mode the device's queued work is waited for at start and stop."""

    def __init__(self):
        self._begin = self._end = None

    @property
    def running(self):
        return self._begin is not None and self._end is None

    def start(self):
        if not self.running:
            synchronize()
            self._begin, self._end = time.perf_counter(), None

    def stop(self):
        if self.running:
            synchronize()
            self._end = time.perf_counter()

    @property
    def ms(self):
        if self._begin is None:
            return 0.0
        self.stop()
        return (self._end - self._begin) * 1000.0

    @property
    def seconds(self):
        return self.ms / 1000.0
