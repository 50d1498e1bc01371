"""Batch-1 inference of the zoo deploy nets: pycaffe-lite's forward and onnxruntime's run of
the same net exported with :func:`pycaffe_lite.onnx.export`, side by side.

    E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"   # see bench_env.py
    $E python benchmarks/bench_onnx.py [--nets caffenet resnet50 ...] [--rounds 5]
    $E python benchmarks/bench_onnx.py --nets mobilenet_ssd res10_ssd   # SSD, 300 x 300
    $E python benchmarks/bench_onnx.py --threads 2 --no-spinning --nets resnet50_half
    $E python benchmarks/run.py --only ort   # the goal's protocol: 2 threads, not spinning

Both run in this process on the CPU, in alternating rounds (the load of other jobs drifts
over seconds); each side's fastest round is reported, and ours / onnxruntime is the figure
to track. The outputs are checked to agree before anything is timed. Needs ``onnx`` and
``onnxruntime`` (the test extra installs both).
"""

import argparse
import os
import sys
import time

import numpy as np

import bench_env

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ZOO = os.path.join(ROOT, "models", "zoo")
SSD = os.path.join(ROOT, "tests", "fixtures", "ssd")
NETS = ["squeezenet1.1", "caffenet", "alexnet", "googlenet", "resnet50", "vgg16", "mobilenet"]
# the nets of the batch-1 goal against onnxruntime (their geometric mean is the figure)
GOAL_NETS = ["caffenet", "googlenet", "resnet50", "squeezenet1.1", "vgg16", "mobilenet",
             "mobilenet_ssd"]
# ResNet-50 with every convolution half as wide (narrow layers: where onnxruntime leads most)
DERIVED = {"resnet50_half": ("resnet50", 0.5)}
# the public SSD deploy nets of the tests, DetectionOutput included (on request: --nets)
PROTOTXT = {"mobilenet_ssd": os.path.join(SSD, "mobilenet_ssd_deploy.prototxt"),
            "res10_ssd": os.path.join(SSD, "res10_deploy.prototxt")}


def net_param(name):
    """The NetParameter of a benchmark net: a zoo deploy net, an SSD deploy net of the
    tests, or a zoo net with its convolutions narrowed (``DERIVED``)."""
    sys.path.insert(0, ROOT)
    from pycaffe_lite.proto import protoio

    base, width = DERIVED.get(name, (name, 1.0))
    param = protoio.read_net_param(PROTOTXT.get(base, os.path.join(ZOO, base + "_deploy.prototxt")))
    if width != 1.0:
        param.name += " (convolutions x%g)" % width
        for layer in param.layer:
            if layer.type == "Convolution":
                p = layer.convolution_param
                p.num_output = max(1, int(round(p.num_output * width)))
    return param


def build_ours(name, seed=0, keep_intermediates=True):
    """Our TEST net ``name`` with seeded He-normal weights (BatchNorm as the identity), the
    ONNX model exported from it, and a seeded input; the net is folded afterwards (as a TEST
    net built with its weights runs; onnxruntime fuses the same)."""
    sys.path.insert(0, ROOT)
    import pycaffe_lite as caffe
    from pycaffe_lite import onnx as caffe_onnx

    caffe.set_random_seed(seed)
    net = caffe.Net(net_param(name), caffe.TEST)
    rng = np.random.default_rng(seed)
    for layer in net.layers:
        for i, blob in enumerate(layer.blobs):
            if layer.type == "BatchNorm":
                blob.data[...] = (0.0, 1.0, 1.0)[i]
            else:
                fan_in = max(1, blob.count // max(1, blob.shape[0]))
                blob.data[...] = rng.normal(0, np.sqrt(2.0 / fan_in), blob.shape)
    x = rng.uniform(-1, 1, net.blobs["data"].shape).astype(np.float32)
    model, _ = caffe_onnx.export(net, None)
    net.fold(keep_intermediates)
    return net, model, x


def session(model, threads, spinning=True, profile_prefix=None):
    """An onnxruntime CPU session of ``model``: ``threads`` intra-op threads (None: its
    default), idle threads spinning or not, per-node profiling when ``profile_prefix``."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if profile_prefix:
        opts.enable_profiling = True
        opts.profile_file_prefix = profile_prefix
    if threads:
        opts.intra_op_num_threads = threads
    if not spinning:  # its idle threads sleep (by default they spin, taking cores from ours)
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def bench_net(name, rounds=5, per_round=1, threads=None, spinning=True,
              keep_intermediates=True):
    """ms per batch-1 forward, ours and onnxruntime's (fastest round of each), and the
    ratio; ``None`` when onnx / onnxruntime are missing. ``spinning=False``: onnxruntime's
    idle threads sleep instead of spinning (which slows our rounds by 10-30% on 2 cores).
    ``keep_intermediates=False``: our net folded without keeping intermediates (as
    ``Net(..., keep_intermediates=False)``)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return None
    net, model, x = build_ours(name, keep_intermediates=keep_intermediates)
    sess = session(model, threads, spinning)
    out = net.outputs[0]
    ours_out = net.forward(data=x)[out].copy()
    theirs_out = sess.run([out], {"data": x})[0]
    np.testing.assert_allclose(theirs_out, ours_out, rtol=1e-3, atol=1e-5)

    def ours():
        net.forward(data=x)

    def theirs():
        sess.run([out], {"data": x})

    ours()
    theirs()
    times = {"ours": [], "ort": []}
    for _ in range(rounds):
        for key, fn in (("ours", ours), ("ort", theirs)):
            t = time.perf_counter()
            for _ in range(per_round):
                fn()
            times[key].append((time.perf_counter() - t) / per_round * 1e3)
    return {"batch": 1, "ms": min(times["ours"]), "ort_ms": min(times["ort"]),
            "ratio": min(times["ours"]) / min(times["ort"]),
            "ms_median": float(np.median(times["ours"])),
            "ort_ms_median": float(np.median(times["ort"]))}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", nargs="*", choices=NETS + sorted(PROTOTXT) + sorted(DERIVED),
                   default=NETS)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    p.add_argument("--no-spinning", action="store_true",
                   help="onnxruntime's idle threads sleep (session.intra_op.allow_spinning 0)")
    p.add_argument("--no-intermediates", action="store_true",
                   help="our nets folded with keep_intermediates=False")
    args = p.parse_args(argv)
    bench_env.report()
    print("%-14s %10s %14s %8s" % ("net (batch 1)", "ours (ms)", "onnxruntime", "ratio"))
    for name in args.nets:
        r = bench_net(name, args.rounds, threads=args.threads, spinning=not args.no_spinning,
                      keep_intermediates=not args.no_intermediates)
        if r is None:
            print("onnxruntime is not installed (pip install onnx onnxruntime)")
            return 1
        print("%-14s %10.2f %14.2f %8.2f" % (name, r["ms"], r["ort_ms"], r["ratio"]))
    bench_env.print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
