"""Per-convolution GPU profile of a zoo net: each distinct convolution (shapes and geometry)
timed as pycaffe-lite runs it (cuDNN through NVIDIA's frontend, the plan autotuned once) and as
PyTorch runs it (``conv2d`` and ``convolution_backward``, ``cudnn.benchmark`` on), TF32 off on
both, on the same card in the same process, in alternating rounds (the fastest of each).

    E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"   # see bench_env.py
    $E python benchmarks/profile_gpu_convs.py --net resnet50 --batch 32 --json convs.json

InnerProduct layers are listed too: on the GPU they run as 1x1 convolutions of ``(M, K, 1,
1)`` through cuDNN (a CUDA graph can hold them), where PyTorch's ``linear`` calls cuBLAS.

For each configuration: the forward, the data gradient and the filter gradient (ms per call,
ours, PyTorch's, their ratio); the forward with bias and ReLU as a folded TEST net runs it
(ours: the path ``cudnn_graphs.prefer_fused`` chose, fused graph or convolution then one
pass; PyTorch: ``conv2d`` with its bias, then ``relu_``); how many plans were timed for the
forward and how far apart the fastest and the slowest were. The totals weight each
configuration by the number of layers that have it. Without a GPU it lists the
configurations and exits 0.
"""

import argparse
import contextlib
import json
import os
import sys
from collections import OrderedDict

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_env  # noqa: E402
import bench_gpu  # noqa: E402  (alternating rounds, PyTorch's settings)
import run as cpu_bench  # noqa: E402  (the zoo nets)

import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite import backend  # noqa: E402

PASSES = ("forward", "dgrad", "wgrad", "forward_bias_relu")


def conv_configs(net):
    """The net's distinct 2-D convolutions and InnerProduct layers (which run as 1x1
    convolutions of ``(M, K, 1, 1)`` on the GPU), in the order they first run: ``[{"type",
    "x", "w", "y" (shapes), "pad", "stride", "dilation", "group", "layers" (their names)}]``."""
    configs = OrderedDict()
    for rec in net.records:
        layer = rec.layer
        if layer.type == "Convolution":
            g = layer.plan.geometry
            x, w, y = (tuple(rec.bottoms[0].shape), tuple(layer.blobs[0].shape),
                       tuple(rec.tops[0].shape))
            geometry = (g.pad, g.stride, g.dilation, g.group)
        elif layer.type == "InnerProduct" and not layer.transpose:
            m, k, n = layer.M, layer.K, layer.num_output
            x, w, y = (m, k, 1, 1), (n, k, 1, 1), (m, n, 1, 1)
            geometry = ((0, 0), (1, 1), (1, 1), 1)
        else:
            continue
        key = (layer.type, x, w, y) + geometry
        if key not in configs:
            configs[key] = dict(zip(("type", "x", "w", "y", "pad", "stride", "dilation",
                                     "group"), key), layers=[])
        configs[key]["layers"].append(rec.name)
    return list(configs.values())


def describe(c):
    if c["type"] == "InnerProduct":
        return "fc %d x %d->%d" % (c["x"][0], c["x"][1], c["w"][0])
    kh, kw = c["w"][2:]
    return "%s %dx%d/%d %d->%d%s" % ("x".join(str(v) for v in c["x"][2:]), kh, kw,
                                     c["stride"][0], c["x"][1], c["w"][0],
                                     " g%d" % c["group"] if c["group"] > 1 else "")


def profile(c, torch, args):
    """{pass: {"ours": ms, "torch": ms}} for configuration ``c``, and our forward plan's
    timings."""
    from pycaffe_lite.ops.gpu import cudnn, cudnn_graphs
    cp = backend.device_module()
    rng = np.random.default_rng(0)

    def pair(shape):
        a = rng.standard_normal(shape).astype(np.float32)
        return cp.asarray(a), None if torch is None else torch.from_numpy(a).cuda(args.gpu)

    (x, tx), (w, tw), (dy, tdy) = pair(c["x"]), pair(c["w"]), pair(c["y"])
    (b, tb) = pair((c["w"][0],))
    y, dx, dw = cp.empty(c["y"], np.float32), cp.empty(c["x"], np.float32), \
        cp.zeros(c["w"], np.float32)
    geo = (c["pad"], c["stride"], c["dilation"], c["group"])
    ours = {
        "forward": lambda: cudnn.conv_forward(x, w, None, y, *geo),
        "dgrad": lambda: cudnn.conv_backward(None, dy, w, dx, None, *geo),
        "wgrad": lambda: cudnn.conv_backward(x, dy, w, None, dw, *geo),
        "forward_bias_relu": lambda: cudnn.conv_forward(x, w, b, y, *geo, relu=True),
    }
    for name, fn in ours.items():  # plans built and chosen before timing
        done = fn()
        if not (all(done) if isinstance(done, tuple) else done):
            raise AssertionError("%s: cuDNN did not run the %s" % (describe(c), name))
    theirs = {}
    if torch is not None:
        F, aten = torch.nn.functional, torch.ops.aten
        conv = dict(stride=list(c["stride"]), padding=list(c["pad"]),
                    dilation=list(c["dilation"]), groups=c["group"])

        def backward(mask):
            return lambda: aten.convolution_backward(
                tdy, tx, tw, None, conv["stride"], conv["padding"], conv["dilation"], False,
                [0, 0], c["group"], mask)

        theirs = {
            "forward": lambda: F.conv2d(tx, tw, None, **conv),
            "dgrad": backward([True, False, False]),
            "wgrad": backward([False, True, False]),
            "forward_bias_relu": lambda: F.conv2d(tx, tw, tb, **conv).relu_(),
        }
        if c["type"] == "InnerProduct":  # PyTorch's linear layer: cuBLAS
            x2, w2, dy2 = (t.reshape(t.shape[0], -1) for t in (tx, tw, tdy))
            theirs = {
                "forward": lambda: F.linear(x2, w2),
                "dgrad": lambda: dy2 @ w2,
                "wgrad": lambda: dy2.t() @ x2,
                "forward_bias_relu": lambda: F.linear(x2, w2, tb).relu_(),
            }
        with torch.no_grad():
            ref = theirs["forward_bias_relu"]().cpu().numpy().reshape(c["y"])
            np.testing.assert_allclose(cp.asnumpy(y), ref, rtol=1e-3,
                                       atol=1e-3 * float(np.abs(cp.asnumpy(y)).max()))
    out = {}
    for name in PASSES:
        with torch.no_grad() if torch is not None else contextlib.nullcontext():
            r = bench_gpu.alternating(ours[name], theirs.get(name), args.rounds,
                                      args.per_round, backend.synchronize,
                                      torch.cuda.synchronize if torch is not None else None)
        out[name] = {"ours": r["ms"]}
        if "torch_ms" in r:
            out[name]["torch"] = r["torch_ms"]
    dev = cp.cuda.runtime.getDevice()
    key = cudnn_graphs.Key.make(cudnn_graphs.FPROP, c["x"], c["w"], c["y"], c["pad"],
                                c["stride"], c["dilation"], np.float32, dev)
    plan = cudnn_graphs.CACHE.get(key)
    timings = sorted(plan.timings.values()) if plan else []
    fused_key = cudnn_graphs.Key.make(cudnn_graphs.FPROP_BIAS_RELU, c["x"], c["w"], c["y"],
                                      c["pad"], c["stride"], c["dilation"], np.float32, dev)
    info = {"plans_timed": len(timings), "fastest_plan_ms": timings[0] if timings else None,
            "slowest_plan_ms": timings[-1] if timings else None,
            "fused": cudnn_graphs.FUSED.get(fused_key)}
    return out, info


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--net", default="resnet50", help="a zoo net (models/zoo)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--gpu", type=int, default=0, help="device id")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--per-round", type=int, default=10)
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch side")
    p.add_argument("--heuristics", help="cuDNN heuristics whose plans are timed, e.g. "
                   "a,b,fallback (default: pycaffe-lite's, cudnn_graphs.DEFAULT_HEURISTICS)")
    p.add_argument("--json", help="write the results here as JSON")
    args = p.parse_args(argv)
    gpu = backend.gpu_available()
    if gpu:
        caffe.set_device(args.gpu)
        caffe.set_mode_gpu()
    net = cpu_bench.zoo_net(args.net, args.batch, batch_stats=True)
    configs = conv_configs(net)
    convs = [c for c in configs if c["type"] == "Convolution"]
    print("%s batch %d: %d convolutions, %d distinct; %d InnerProduct layers" % (
        args.net, args.batch, sum(len(c["layers"]) for c in convs), len(convs),
        sum(len(c["layers"]) for c in configs) - sum(len(c["layers"]) for c in convs)))
    if not gpu:
        for c in configs:
            print("  %-28s x%d" % (describe(c), len(c["layers"])))
        print("no GPU: skipped")
        return 0
    from pycaffe_lite.ops.gpu import cudnn, cudnn_graphs
    if args.heuristics:
        cudnn_graphs.set_heuristics(args.heuristics.split(","))
    print("cuDNN heuristics: %s" % ",".join(cudnn_graphs._settings["heuristics"]))
    if not cudnn.available():
        print("cuDNN is not available: %s" % cudnn.unavailable_reason())
        return 1
    torch = None
    if not args.no_torch:
        torch = bench_gpu.torch_cuda_or_none(True)
    env = bench_env.report()
    from pycaffe_lite.ops import gpu as gpu_ops
    props = backend.device_properties(args.gpu)
    print("GPU %d: %s, CuPy %s, cuDNN %s, PyTorch %s" % (
        props["id"], props["name"], props["cupy"], gpu_ops.cudnn.version(),
        getattr(torch, "__version__", None)))
    header = "%-28s %3s" % ("convolution", "n") + "".join(
        " %9s %9s %5s" % (name[:9], "torch", "x") for name in PASSES) + "  plans fused"
    print(header)
    totals = {name: {"ours": 0.0, "torch": 0.0} for name in PASSES}
    rows = []
    for c in configs:
        times, info = profile(c, torch, args)
        n = len(c["layers"])
        line = "%-28s %3d" % (describe(c), n)
        for name in PASSES:
            t = times[name]
            totals[name]["ours"] += n * t["ours"]
            totals[name]["torch"] += n * t.get("torch", 0.0)
            line += " %9.3f %9s %5s" % (t["ours"], "%.3f" % t["torch"] if "torch" in t else "-",
                                        "%.2f" % (t["ours"] / t["torch"]) if "torch" in t
                                        else "-")
        line += "  %5d %5s" % (info["plans_timed"], info["fused"])
        print(line, flush=True)
        rows.append(dict(c, times=times, **info))
    line = "%-28s %3s" % ("total (x n)", "")
    for name in PASSES:
        t = totals[name]
        line += " %9.3f %9.3f %5s" % (t["ours"], t["torch"], "%.2f" % (t["ours"] / t["torch"])
                                      if t["torch"] else "-")
    print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"net": args.net, "batch": args.batch, "configs": rows,
                       "totals": totals, "device": props, "env": env,
                       "heuristics": cudnn_graphs._settings["heuristics"],
                       "torch": getattr(torch, "__version__", None)},
                      f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
