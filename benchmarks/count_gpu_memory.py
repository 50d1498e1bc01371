#!/usr/bin/env python
"""The device memory of a zoo net's SGD training iteration in GPU mode, counted on the
simulated device (no GPU needed), beside a hand account of what PyTorch keeps for its twin.

    python benchmarks/count_gpu_memory.py --net resnet50 --batch 32
    python benchmarks/count_gpu_memory.py --net resnet50 --batch 32 --json mem.json

The solver is ``bench_gpu.py``'s ``resnet50_train`` (the zoo deploy net with batch statistics,
its logits into SoftmaxWithLoss, SGD with momentum 0.9 and weight decay), run as GPU mode runs
it: one iteration layer by layer (the warm-up), then the captured one and a replay, measured
by ``backend.track_device_memory`` as ``bench_gpu.py`` measures them on a GPU. The simulated
device is NumPy underneath: a count of the arrays the code keeps on the device, in CuPy's
512-byte units, not a measurement of a GPU (see docs/gpu.md, "Memory, counted on the simulated
device"). What it prints:

- the peak in use and the arrays in use at that moment, by what holds them (activations,
  diffs after sharing, params, param diffs, solver history, the fused chains' arrays, the
  layers' own, ...) and, for temporaries, by the line that allocated them;
- PyTorch's twin (``torch_from_caffe.py``) counted by hand from the same shapes: the tensors
  autograd saves for the backward, what the forward's dict of tops holds at its end, the
  params, their gradients and the momentum (no cuDNN workspace, no allocator rounding).

A ResNet-50 iteration at batch 32 is a few minutes of NumPy on two cores.
"""

import argparse
import collections
import json
import os
import sys
import weakref

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_gpu  # noqa: E402

from pycaffe_lite import backend  # noqa: E402
from pycaffe_lite.ops import conv as conv_ops  # noqa: E402
from pycaffe_lite.testing import simmemory  # noqa: E402
from pycaffe_lite.testing.simdevice import simulated_device  # noqa: E402

MIB = 2.0 ** 20


class PeakProbe:
    """Inside the block, each allocation that brings the pool's use to a new high keeps a note
    of the live roots then (weakly) and of the allocation's caller."""

    def __init__(self, dev):
        self.dev, self.best, self.roots, self.site = dev, 0, [], None

    def __enter__(self):
        cuda = self.dev.cuda
        previous = self._previous = cuda.get_allocator()
        pool = self.dev.get_default_memory_pool()

        def malloc(size):
            block = previous(size)
            if pool.used_bytes() > self.best:
                self.best = pool.used_bytes()
                self.roots = [(id(r), weakref.ref(r), n, s)
                              for r, n, s in self.dev._memory.live()]
                self.site = (simmemory._site(), block.size)
            return block

        cuda.set_allocator(malloc)
        return self

    def __exit__(self, *exc):
        self.dev.cuda.set_allocator(self._previous)


def _root(array):
    a = array._a
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def _synced_roots(synced):
    storage = getattr(synced, "storage", synced)  # a shared diff's slot: its buffer
    gpu = getattr(storage, "_gpu", None)
    return [] if gpu is None else [_root(gpu)]


def _device_arrays(obj, dev, depth, seen):
    """The roots of the device arrays reachable from ``obj`` in ``depth`` steps."""
    if id(obj) in seen or depth < 0:
        return []
    seen.add(id(obj))
    if isinstance(obj, dev.ndarray):
        return [_root(obj)]
    if isinstance(obj, (np.ndarray, str, bytes, int, float, type(None))):
        return []
    if hasattr(obj, "_gpu") and hasattr(obj, "head"):
        return _synced_roots(obj)
    if isinstance(obj, dict):
        items = list(obj.values())
    elif isinstance(obj, (list, tuple, set)):
        items = list(obj)
    elif hasattr(obj, "__dict__") or hasattr(type(obj), "__slots__"):
        items = list(getattr(obj, "__dict__", {}).values())
        items += [getattr(obj, s, None) for s in getattr(type(obj), "__slots__", ())
                  if isinstance(s, str)]
    else:
        return []
    out = []
    for item in items:
        out += _device_arrays(item, dev, depth - 1, seen)
    return out


def label_roots(solver, dev):
    """``{id(root): what holds it}`` for the arrays the net and the solver keep; the first
    label a root gets stays."""
    net = solver.net
    labels = {}

    def put(roots, label):
        for r in roots:
            labels.setdefault(id(r), label)

    inputs = set(net.inputs)
    for name, blob in net.blobs.items():
        if name in inputs:
            put(_synced_roots(blob.synced_data), "input batch (data, label)")
    learnable = {id(b) for b in net.learnable_params}
    for rec in net.records:
        for blob in rec.layer.blobs:
            what = "BatchNorm statistics" if rec.layer.type == "BatchNorm" or \
                id(blob) not in learnable else "params"
            put(_synced_roots(blob.synced_data), what)
            put(_synced_roots(blob.synced_diff), what + "' diffs")
    put([_root(h) for h in solver.history if isinstance(h, dev.ndarray)],
        "solver history (momentum)")
    for name, blob in net.blobs.items():
        put(_synced_roots(blob.synced_data), "activations (blob data)")
    for blob in net.blobs.values():
        put(_synced_roots(blob.synced_diff), "activation diffs (after sharing)")
    fuse = getattr(net, "_train_fuse", None)
    for chain in getattr(fuse, "chains", ()):
        for key, a in chain.work._arrays.items():
            put([_root(a)], "fused BN chains: x_hat" if key == "xhat" else
                "fused BN chains: per-channel buffers")
    for rec in net.records:
        for attr, value in vars(rec.layer).items():
            if attr not in ("blobs",):
                put(_device_arrays(value, dev, 3, set()),
                    "layers' own: %s.%s" % (rec.layer.type, attr))
    graph = getattr(solver, "train_graph", None)
    if graph is not None:
        put(_device_arrays(vars(graph), dev, 4, set()), "captured iteration's buffers")
    for attr, value in vars(solver).items():
        if attr not in ("net", "test_nets", "train_graph"):
            put(_device_arrays(value, dev, 3, set()), "solver.%s" % attr)
    for attr, value in vars(net).items():
        put(_device_arrays(value, dev, 2, set()), "net.%s" % attr)
    for key, a in conv_ops._workspace().items():  # this thread's
        put(_device_arrays(a, dev, 0, set()),
            "im2col + GEMM's buffers (%s; cuDNN's path has its workspace instead)" % key[0])
    return labels


def breakdown(roots, labels):
    """``{what: bytes}`` of ``roots`` (``[(id, weakref, bytes, site)]``): a root still alive
    and labelled by what holds it, else the line that allocated it."""
    parts = collections.Counter()
    for key, ref, n, site in roots:
        alive = ref()
        label = labels.get(key) if alive is not None else None
        parts[label or "temporary, allocated at %s" % site] += n
    return parts


# ---- PyTorch's twin, by hand ----------------------------------------------------------------
def torch_account(net):
    """Bytes PyTorch's twin of ``net`` (``torch_from_caffe.build``; SGD with momentum) holds
    at the end of its forward, by what holds them: the tensors autograd saves for the
    backward, the other tops the twin's dict of blobs keeps until the forward returns, the
    params, their gradients and the momentum buffers."""
    f32 = 4
    current, sizes, saved = {}, {}, set()
    counter = [0]

    def new(name, count):
        counter[0] += 1
        current[name] = counter[0]
        sizes[counter[0]] = count * f32
        return counter[0]

    extra = collections.Counter()
    for name in net.inputs:
        new(name, net.blobs[name].count)
    records = net.records
    skip = set()
    for i, rec in enumerate(records):
        kind = rec.layer.type
        bottoms = [net._blob_names[b] for b in rec.bottom_ids]
        tops = [net._blob_names[t] for t in rec.top_ids]
        if i in skip or kind in ("Input", "Silence"):
            continue
        if kind == "Split":
            for t in tops:
                current[t] = current[bottoms[0]]
            continue
        count = rec.tops[0].count if rec.tops else 0
        if kind == "BatchNorm":
            nxt = records[i + 1] if i + 1 < len(records) else None
            if nxt is not None and nxt.layer.type == "Scale" and \
                    nxt.bottom_ids == rec.top_ids:
                skip.add(i + 1)
            saved.add(current[bottoms[0]])  # its input (and per-channel mean, invstd)
            new(tops[0], count)
        elif kind == "ReLU":
            if bottoms == tops:  # in place: saves its result
                saved.add(current[bottoms[0]])
            else:
                saved.add(new(tops[0], count))
        elif kind in ("Convolution", "InnerProduct"):
            saved.add(current[bottoms[0]])  # its input (and the weight, a param)
            new(tops[0], count)
        elif kind == "Pooling":
            saved.add(current[bottoms[0]])
            if rec.layer.layer_param.pooling_param.pool == 0:  # MAX: int64 indices
                extra["max pooling's int64 indices"] += count * 8
            new(tops[0], count)
        elif kind == "Eltwise":
            new(tops[0], count)  # a sum saves nothing
        elif kind == "SoftmaxWithLoss":
            saved.add(new("log_softmax", rec.bottoms[0].count))
            new(tops[0], 1)
        else:
            raise ValueError("no hand account for layer type %s" % kind)
    params = sum(b.count for rec in records if rec.layer.type != "BatchNorm"
                 for b in rec.layer.blobs) * f32  # BatchNorm's: the twin's buffers
    stats = sum(b.count for rec in records if rec.layer.type == "BatchNorm"
                for b in rec.layer.blobs[:2]) * f32
    alive = set(current.values()) | saved
    parts = collections.Counter({
        "saved for the backward": sum(sizes[t] for t in saved),
        "other tops the forward's dict holds": sum(sizes[t] for t in alive - saved),
        "params": params, "param gradients": params, "momentum buffers": params,
        "running mean / var": stats})
    parts.update(extra)
    return parts


def _table(parts, total=None):
    lines = []
    for what, n in sorted(parts.items(), key=lambda kv: -kv[1]):
        lines.append("  %10.1f MiB  %s" % (n / MIB, what))
    lines.append("  %10.1f MiB  total" % ((sum(parts.values()) if total is None else total)
                                          / MIB))
    return "\n".join(lines)


def count(name, batch, steps=2):
    """Run the warm-up and ``steps`` measured iterations; returns the report's dict."""
    with simulated_device() as dev:
        simmemory.attach(dev, sites=True)
        backend.set_mode_gpu()
        try:
            solver, _ = bench_gpu.zoo_solver(name, batch)
            solver.step(1)  # warm-up: layer by layer
            with backend.track_device_memory() as memory, PeakProbe(dev) as probe:
                for _ in range(steps):  # the capture, a replay
                    solver.step(1)
            labels = label_roots(solver, dev)
            held = breakdown([(id(r), weakref.ref(r), n, s)
                              for r, n, s in dev._memory.live()], labels)
            at_peak = breakdown(probe.roots, labels)
            site, size = probe.site
            at_peak["temporary, allocated at %s" % site] += size
            graph = solver.train_graph
            result = {
                "net": name, "batch": batch, "peak": memory.peak, "held": memory.held,
                "at_peak": dict(at_peak), "between_iterations": dict(held),
                "captured": bool(graph and graph.replays),
                "torch": dict(torch_account(solver.net)),
            }
            solver.close()
        finally:
            backend.set_mode_cpu()
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--net", default="resnet50", help="a zoo net (models/zoo)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=2,
                   help="measured iterations after the warm-up (the capture, replays)")
    p.add_argument("--json", help="write the figures (bytes) here")
    args = p.parse_args(argv)
    r = count(args.net, args.batch, args.steps)
    torch_total = sum(r["torch"].values())
    print("%s, batch %d, SGD iteration on the simulated device (captured: %s)"
          % (r["net"], r["batch"], r["captured"]))
    print("peak in use: %.1f MiB; in use at that moment:" % (r["peak"] / MIB))
    print(_table(r["at_peak"]))
    print("in use between iterations:")
    print(_table(r["between_iterations"]))
    print("PyTorch's twin, by hand, at the end of its forward:")
    print(_table(r["torch"]))
    print("ratio (ours / PyTorch's hand account): %.2f" % (r["peak"] / torch_total))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(r, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
