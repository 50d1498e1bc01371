"""Per-layer profile of batch-1 inference: our layers' times (pycaffe_lite.profiling) beside
onnxruntime's per-node times (``SessionOptions.enable_profiling``) on our ONNX export of the
same net, layer by layer.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/profile_vs_ort.py \\
        [--nets squeezenet1.1 resnet50 mobilenet_ssd resnet50_half] [--runs 20] [--top 25]

Our side is the folded TEST net (as a net built with weights runs), each layer timed on its
own (``profiling.time_layers``: mean ms per forward); the layers folded into a convolution
show ~0 there. onnxruntime runs with 2 intra-op threads, its idle threads not spinning; each
node's time is the median over the runs of its ``_kernel_time`` event. Its nodes are matched
to our layers by name (the export names each node after its layer; onnxruntime's rewrites add
suffixes such as ``_nchwc``): a node fused into a convolution (a BatchNorm, a ReLU, a residual
Add) counts under that convolution. Nodes onnxruntime adds (layout reorders) are listed apart.
Per layer type, the totals; per net, the sums and the whole forward of each side.
"""

import argparse
import collections
import json
import os
import sys
import tempfile
import time

import numpy as np

import bench_env
import bench_onnx

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from pycaffe_lite.profiling import time_layers  # noqa: E402

NETS = ["squeezenet1.1", "resnet50", "mobilenet_ssd", "resnet50_half"]
SUFFIX = "_kernel_time"


def ort_node_times(sess, x, runs, tmp):
    """{node name: median ms per run} from onnxruntime's profile, and the median ms of a
    whole run (its ``model_run`` events)."""
    feed = {sess.get_inputs()[0].name: x}
    for _ in range(runs):
        sess.run(None, feed)
    path = sess.end_profiling()
    with open(path) as f:
        events = json.load(f)
    os.remove(path)
    per_node = collections.defaultdict(list)
    runs_ms = []
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith(SUFFIX):
            per_node[e["name"][:-len(SUFFIX)]].append(e["dur"] / 1e3)
        elif e.get("cat") == "Session" and e.get("name") == "model_run":
            runs_ms.append(e["dur"] / 1e3)
    ops = {e["name"][:-len(SUFFIX)]: e["args"].get("op_name") for e in events
           if e.get("cat") == "Node" and e["name"].endswith(SUFFIX)}
    return ({n: float(np.median(v)) for n, v in per_node.items()}, ops,
            float(np.median(runs_ms[1:] or runs_ms)))


def match(node, layer_names):
    """The longest layer name that ``node`` starts with (the export's node names are layer
    names, or a layer name and ``/part``), else None."""
    best = None
    for name in layer_names:
        if node.startswith(name) and (best is None or len(name) > len(best)):
            rest = node[len(name):]
            if not rest or rest[0] in "/_":
                best = name
    return best


def describe(net, i):
    """The geometry of a convolution (in -> out channels, kernel, stride, output map)."""
    layer = net.records[i].layer
    if layer.type not in ("Convolution", "ConvolutionDepthwise", "DepthwiseConvolution"):
        return ""
    w = layer.blobs[0].shape
    top = net.records[i].tops[0].shape
    group = layer.layer_param.convolution_param.group
    stride = layer.layer_param.convolution_param.stride
    return "%d->%d %dx%d%s%s @%dx%d" % (
        w[1] * group, w[0], w[2], w[3], " s%d" % stride[0] if stride and stride[0] > 1 else "",
        " g%d" % group if group > 1 else "", top[2], top[3])


def profile(name, runs, threads=2):
    net, model, x = bench_onnx.build_ours(name)
    with tempfile.TemporaryDirectory() as tmp:
        sess = bench_onnx.session(model, threads, spinning=False,
                                  profile_prefix=os.path.join(tmp, "ort"))
        net.forward(data=x)
        sess.run(None, {sess.get_inputs()[0].name: x})
        ours = time_layers(net, runs)
        theirs, ops, ort_run_ms = ort_node_times(sess, x, runs, tmp)
    t = time.perf_counter()
    for _ in range(runs):
        net.forward(data=x)
    ours_run_ms = (time.perf_counter() - t) / runs * 1e3
    names = list(net.layer_names)
    by_layer, extra = collections.defaultdict(float), {}
    for node, ms in theirs.items():
        layer = match(node, names)
        if layer is None:
            extra[node] = ms
        else:
            by_layer[layer] += ms
    rows = []
    for i, lname in enumerate(names):
        rows.append({"layer": lname, "type": net.records[i].layer.type, "shape": describe(net, i),
                     "ours_ms": ours["forward"][i], "ort_ms": by_layer.get(lname, 0.0)})
    return {"net": name, "rows": rows, "ort_extra": extra, "ort_ops": ops,
            "ours_sum_ms": sum(ours["forward"]), "ort_sum_ms": sum(theirs.values()),
            "ours_forward_ms": ours_run_ms, "ort_run_ms": ort_run_ms}


def print_profile(r, top):
    print("\n== %s (batch 1): ours %.2f ms per forward (layer sum %.2f), onnxruntime %.2f ms "
          "per run (node sum %.2f): ratio %.2f" % (
              r["net"], r["ours_forward_ms"], r["ours_sum_ms"], r["ort_run_ms"],
              r["ort_sum_ms"], r["ours_forward_ms"] / r["ort_run_ms"]))
    rows = sorted(r["rows"], key=lambda row: -max(row["ours_ms"], row["ort_ms"]))
    print("%-30s %-13s %-24s %8s %8s %7s %8s" % ("layer", "type", "geometry", "ours ms",
                                                "ort ms", "ratio", "ours-ort"))
    for row in rows[:top]:
        print("%-30s %-13s %-24s %8.3f %8.3f %7s %8.3f" % (
            row["layer"][:30], row["type"][:13], row["shape"], row["ours_ms"], row["ort_ms"],
            "%.2f" % (row["ours_ms"] / row["ort_ms"]) if row["ort_ms"] > 1e-3 else "-",
            row["ours_ms"] - row["ort_ms"]))
    for node, ms in sorted(r["ort_extra"].items(), key=lambda kv: -kv[1])[:5]:
        print("%-30s %-13s %-24s %8s %8.3f   (onnxruntime's own node)" % (
            node[:30], (r["ort_ops"].get(node) or "")[:13], "", "-", ms))
    totals = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for row in r["rows"]:
        key = row["type"]
        if key == "Convolution":
            shape = row["shape"]
            kernel = shape.split()[1]
            key = "Conv %s%s" % (kernel, " dw" if " g" in shape else "")
        t = totals[key]
        t[0] += row["ours_ms"]
        t[1] += row["ort_ms"]
        t[2] += 1
    print("per layer type:")
    for key, (o, t, n) in sorted(totals.items(), key=lambda kv: -kv[1][0]):
        if o > 0.005 or t > 0.005:
            print("  %-22s %3d layers  ours %8.3f  ort %8.3f ms  %s" % (
                key, n, o, t, "ratio %.2f" % (o / t) if t > 1e-3 else ""))
    print("  %-22s %3s         ours %8s  ort %8.3f ms" % (
        "(onnxruntime's own)", "", "-", sum(r["ort_extra"].values())))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", nargs="*", default=NETS,
                   choices=bench_onnx.NETS + sorted(bench_onnx.PROTOTXT)
                   + sorted(bench_onnx.DERIVED))
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--top", type=int, default=25, help="rows per net (largest first)")
    p.add_argument("--json", help="write the profiles here as JSON")
    args = p.parse_args(argv)
    env = bench_env.report()
    results = {"env": env, "profiles": []}
    for name in args.nets:
        r = profile(name, args.runs)
        results["profiles"].append(r)
        print_profile(r, args.top)
    results["load_end"] = bench_env.print_load("end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
