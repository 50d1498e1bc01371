"""Inference (TEST phase, weights loaded) of the zoo deploy nets and MobileNet-SSD: pycaffe-lite's
``Net(proto, weights, TEST).forward`` and OpenCV's ``cv2.dnn.readNetFromCaffe(proto, weights)``
on the same ``.caffemodel``, side by side.

    E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"   # see bench_env.py
    $E python benchmarks/bench_opencv.py [--nets resnet50 mobilenet ...] [--batches 1 8]
    $E python benchmarks/run.py --only cv_resnet50 cv_mobilenet --cv-batches 1 8

Both run in one process on the CPU, in alternating rounds (other jobs' load drifts over
seconds); each side's fastest round is reported and ours / OpenCV is the figure to track. The
outputs are checked to agree (1e-3 of the largest magnitude) before anything is timed. Peak
memory: each engine builds the net and runs two forwards in a fresh process of its own; the
figure is that process's peak RSS (VmHWM) less its RSS before the net was built (both processes
import NumPy, OpenCV and pycaffe-lite first).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZOO = os.path.join(ROOT, "models", "zoo")
NETS = ["caffenet", "googlenet", "resnet50", "vgg16", "squeezenet1.1", "mobilenet",
        "mobilenet_ssd"]
# the blob compared with OpenCV's (the classifier before the softmax; SSD's box regressions)
CHECK = {"caffenet": "fc8", "googlenet": "loss3/classifier", "resnet50": "fc1000",
         "vgg16": "fc8", "squeezenet1.1": "pool10", "mobilenet": "fc7",
         "mobilenet_ssd": "mbox_loc"}


def prototxt(name):
    if name == "mobilenet_ssd":
        return os.path.join(ROOT, "tests", "fixtures", "ssd", "mobilenet_ssd_deploy.prototxt")
    return os.path.join(ZOO, name + "_deploy.prototxt")


def _caffe():
    sys.path.insert(0, ROOT)
    import pycaffe_lite as caffe
    return caffe


def write_weights(name, path):
    """Seeded weights as a .caffemodel: He-normal filters, BatchNorm statistics and Scale
    blobs near the identity (the activations stay of order one through the deep nets)."""
    caffe = _caffe()
    net = caffe.Net(prototxt(name), caffe.TEST)
    rng = np.random.default_rng(0)
    for layer in net.layers:
        c = layer.blobs[0].count if len(layer.blobs) else 0
        for i, blob in enumerate(layer.blobs):
            if layer.type == "BatchNorm":
                blob.data[...] = (rng.normal(0, 0.1, c), rng.uniform(0.5, 1.5, c), 1.0)[i]
            elif layer.type == "Scale":
                blob.data[...] = rng.uniform(0.5, 1.5, c) if i == 0 else rng.normal(0, 0.1, c)
            else:
                fan_in = max(1, blob.count // max(1, blob.shape[0]))
                blob.data[...] = rng.normal(0, np.sqrt(2.0 / fan_in), blob.shape)
    net.save(path)


def _input_shape(name, batch):
    """The data shape for ``batch`` images, read from the prototxt (an Input layer or the
    legacy input fields) without building a net."""
    _caffe()
    from pycaffe_lite.proto import protoio

    param = protoio.read_net_param(prototxt(name))
    if len(param.input_shape):
        dims = param.input_shape[0].dim
    elif len(param.input_dim):
        dims = param.input_dim[:4]
    else:
        dims = next(lp.input_param.shape[0].dim for lp in param.layer if lp.type == "Input")
    return (batch,) + tuple(int(d) for d in dims[1:])


def build(engine, name, weights, batch):
    """A callable running one forward of ``engine`` (ours / opencv) on a seeded batch, and a
    function giving the checked blob after it."""
    caffe = _caffe()
    import cv2

    shape = _input_shape(name, batch)
    x = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
    if engine == "ours":
        net = caffe.Net(prototxt(name), weights, caffe.TEST)
        data = net.inputs[0]
        net.blobs[data].reshape(shape)
        net.reshape()

        def run():
            net.forward(**{data: x})
        return run, lambda: net.blobs[CHECK[name]].data.reshape(batch, -1).copy()
    reader = cv2.dnn.readNetFromCaffe(prototxt(name), weights)
    reader.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
    reader.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)

    def run():
        reader.setInput(x)
        reader.forward()

    def checked():
        reader.setInput(x)
        return np.asarray(reader.forward(CHECK[name])).reshape(batch, -1).copy()
    return run, checked


def side_by_side(ours, theirs, rounds, per_round=1, warmup=1):
    for _ in range(warmup):
        ours()
        theirs()
    times = {"ours": [], "cv": []}
    for _ in range(rounds):
        for key, fn in (("ours", ours), ("cv", theirs)):
            t = time.perf_counter()
            for _ in range(per_round):
                fn()
            times[key].append((time.perf_counter() - t) / per_round * 1e3)
    return {"ms": min(times["ours"]), "cv_ms": min(times["cv"]),
            "ratio": min(times["ours"]) / min(times["cv"]),
            "ms_median": float(np.median(times["ours"])),
            "cv_ms_median": float(np.median(times["cv"]))}


def _status_mb(field):
    """VmRSS (now) or VmHWM (peak) of this process, in MB. Not ru_maxrss: Linux carries that
    over from the parent through fork and exec."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError("no %s in /proc/self/status" % field)


def probe(engine, name, weights, batch):
    """(In a fresh process) the peak RSS growth, in MB, of building the net and two
    forwards."""
    _caffe()
    import cv2  # noqa: F401
    base = _status_mb("VmRSS")
    run, _ = build(engine, name, weights, batch)
    run()
    run()
    return _status_mb("VmHWM") - base


def peak_growth_mb(engine, name, weights, batch):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", engine, name,
                          weights, str(batch)], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def bench_net(name, batches=(1, 8), rounds=3, memory=True, rounds_for=None):
    """{batch: timings, ratio and peak memory of each engine} for one net; ``None`` without
    OpenCV. ``rounds_for``: {(name, batch): rounds} overrides (the big nets)."""
    try:
        import cv2
    except ImportError:
        return None
    results = {"opencv": cv2.__version__, "cv_threads": cv2.getNumThreads()}
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, name + ".caffemodel")
        write_weights(name, weights)
        for batch in batches:
            ours, ours_out = build("ours", name, weights, batch)
            theirs, theirs_out = build("opencv", name, weights, batch)
            ours()
            theirs()
            a, b = ours_out(), theirs_out()
            err = float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-12))
            if not err <= 1e-3:
                raise AssertionError("%s batch %d: ours and OpenCV's %s differ by %.3g of its "
                                     "largest value" % (name, batch, CHECK[name], err))
            n = (rounds_for or {}).get((name, batch), rounds)
            r = side_by_side(ours, theirs, n)
            r["rounds"] = n
            r["max_rel_diff"] = err
            del ours, theirs, ours_out, theirs_out
            if memory:
                r["peak_mb"] = peak_growth_mb("ours", name, weights, batch)
                r["cv_peak_mb"] = peak_growth_mb("opencv", name, weights, batch)
            results[batch] = r
    return results


def geomean(values):
    values = [v for v in values if v and v > 0]
    return float(np.exp(np.mean(np.log(values)))) if values else None


def print_table(table, batches):
    print("%-14s %5s %10s %10s %7s %10s %10s" % ("net", "batch", "ours (ms)", "OpenCV",
                                                 "ratio", "ours MB", "OpenCV MB"))
    for name, res in table.items():
        for batch in batches:
            r = res[batch]
            print("%-14s %5d %10.1f %10.1f %7.2f %10s %10s" % (
                name, batch, r["ms"], r["cv_ms"], r["ratio"],
                "%.0f" % r["peak_mb"] if "peak_mb" in r else "-",
                "%.0f" % r["cv_peak_mb"] if "cv_peak_mb" in r else "-"))
    for batch in batches:
        g = geomean([res[batch]["ratio"] for res in table.values()])
        print("geometric mean of ours / OpenCV at batch %d: %.2f" % (batch, g))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", nargs="*", choices=NETS, default=NETS)
    p.add_argument("--batches", nargs="*", type=int, default=[1, 8])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--no-memory", action="store_true")
    p.add_argument("--json")
    p.add_argument("--probe", nargs=4, metavar=("ENGINE", "NET", "WEIGHTS", "BATCH"),
                   help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe:
        engine, name, weights, batch = args.probe
        print(probe(engine, name, weights, int(batch)))
        return 0
    table = {}
    for name in args.nets:
        r = bench_net(name, args.batches, args.rounds, not args.no_memory)
        if r is None:
            print("OpenCV is not installed (pip install opencv-python-headless)")
            return 1
        table[name] = r
    print_table(table, args.batches)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
