"""The channel-blocked direct convolution (:mod:`pycaffe_lite.ops.cpu.blocked`) against our
NCHW path (:func:`pycaffe_lite.ops.conv.forward` with the layer's plan: im2col + GEMM,
Winograd, the direct depthwise or 1x1 kernels, whatever the layer runs today), layer shape by
layer shape, on the convolutions of zoo nets at batch 1.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_blocked.py \
        [--nets resnet50 squeezenet1.1 googlenet] [--batch 1] [--rounds 5] [--isa avx2]
        [--filter 3x3]

Each distinct shape (channels, map, kernel, stride, pad, group) of the nets' Convolution
layers is timed once: both sides in alternating rounds (the load of other jobs drifts over
seconds), each side's fastest round reported, as GFLOP/s (2 multiply-adds' flops per weight
and output pixel) and the ratio NCHW time / blocked time (above 1: the blocked kernel is
faster). The blocked side includes the bias and nothing else (no layout conversion: in a
blocked net the activations stay blocked). The outputs are checked to agree first. The
totals at the end sum every layer of the nets (shapes counted as often as they occur).
Figures from a machine that other jobs share are noisy: compare ratios from the same run.
"""

import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import bench_env  # noqa: E402
import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite.ops import conv, cpu  # noqa: E402
from pycaffe_lite.ops.cpu import blocked  # noqa: E402

ZOO = os.path.join(os.path.dirname(HERE), "models", "zoo")


def net_shapes(net_name, batch):
    """[(geometry, layer name)] of the Convolution layers of a zoo net at ``batch``."""
    path = os.path.join(ZOO, net_name + "_deploy.prototxt")
    net = caffe.Net(path, caffe.TEST)
    if net.blobs[net.inputs[0]].data.shape[0] != batch:
        net.blobs[net.inputs[0]].reshape(batch, *net.blobs[net.inputs[0]].data.shape[1:])
        net.reshape()
    return [(layer.plan, name) for name, layer in zip(net._layer_names, net.layers)
            if layer.type == "Convolution"]


def key(g):
    return (g.conv_in_channels, g.conv_out_channels, g.conv_input_spatial, g.kernel_shape,
            g.stride, g.pad, g.dilation, g.group, g.num)


def flops(g):
    return 2.0 * g.num * g.conv_out_channels * g.kernel_dim * g.conv_out_spatial_dim


def best_alternating(fns, rounds):
    for fn in fns:
        fn()  # warm: buffers, pages, threads
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            t = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - t)
    return best


def bench(plan, B, rounds, first):
    g = plan.geometry
    rng = np.random.default_rng(0)
    ci, co, grp = g.conv_in_channels, g.conv_out_channels, g.group
    x = rng.standard_normal((g.num, ci) + g.conv_input_spatial).astype(np.float32)
    w = (rng.standard_normal((co, ci // grp) + g.kernel_shape) /
         np.sqrt(g.kernel_dim)).astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    y = np.empty((g.num, co) + g.conv_out_spatial, np.float32)
    try:
        packed = blocked.pack_conv(w, b, grp, B, input_blocked=not first)
    except ValueError as exc:
        return None, str(exc)
    xb = x if first else blocked.to_blocked(x, B)
    yb = np.empty(blocked.blocked_shape(y.shape, B), np.float32)

    def nchw():
        conv.forward(x, w, y, plan, bias=b)

    def blk():
        blocked.conv_forward(packed, xb, yb, g.pad, g.stride, g.dilation)

    nchw()
    blk()
    err = np.abs(blocked.from_blocked(yb, co) - y).max() / max(1e-30, np.abs(y).max())
    if err > 1e-4:
        raise SystemExit("the blocked output differs from the NCHW one by %.2e" % err)
    return best_alternating([nchw, blk], rounds), None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nets", nargs="+", default=["resnet50", "squeezenet1.1", "googlenet"])
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--isa", choices=sorted(blocked.ISAS), default=None)
    ap.add_argument("--filter", default=None,
                    help="only shapes whose kernel is this, e.g. 3x3 or 1x1")
    args = ap.parse_args(argv)
    bench_env.report()
    blocked.set_isa(args.isa)
    B = blocked.block_size()
    if B is None:
        raise SystemExit("the blocked kernels are not available on this machine")
    print("block size %d, %d threads" % (B, cpu.threads()))
    print("%-28s %-26s %8s %8s %8s %8s %6s" % ("layer", "shape", "nchw ms", "blk ms",
                                               "nchw GF/s", "blk GF/s", "ratio"))
    seen = {}
    totals = {}
    for net_name in args.nets:
        total = [0.0, 0.0, 0.0]
        for index, (plan, name) in enumerate(net_shapes(net_name, args.batch)):
            g = plan.geometry
            kk = "%dx%d" % g.kernel_shape
            if args.filter and kk != args.filter:
                continue
            first = g.conv_in_channels == 3 and g.group == 1 and index == 0
            k = key(g) + (first,)
            if k not in seen:
                times, why = bench(plan, B, args.rounds, first)
                seen[k] = times
                shape = "%d>%d %dx%d %s s%d g%d" % (
                    g.conv_in_channels, g.conv_out_channels, g.conv_input_spatial[0],
                    g.conv_input_spatial[1], kk, g.stride[0], g.group)
                if times is None:
                    print("%-28s %-26s unsupported: %s" % (net_name + "/" + name, shape, why))
                else:
                    f = flops(g) / 1e9
                    print("%-28s %-26s %8.3f %8.3f %8.1f %8.1f %6.2f" % (
                        net_name + "/" + name, shape, times[0] * 1e3, times[1] * 1e3,
                        f / times[0], f / times[1], times[0] / times[1]), flush=True)
            times = seen[k]
            if times is not None:
                total[0] += times[0]
                total[1] += times[1]
                total[2] += flops(g)
        totals[net_name] = total
    for net_name, (t0, t1, f) in totals.items():
        if t1 > 0:
            print("%-16s conv total: nchw %.1f ms (%.1f GF/s), blocked %.1f ms (%.1f GF/s), "
                  "ratio %.2f" % (net_name, t0 * 1e3, f / 1e9 / t0, t1 * 1e3, f / 1e9 / t1,
                                  t0 / t1))
    bench_env.print_load("end")


if __name__ == "__main__":
    main()
