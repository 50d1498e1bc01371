"""Peak memory of inference and of LeNet training, each engine in a fresh process of its own.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_memory.py
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/run.py --only memory

Inference (batch 8 by default): ours (``Net(proto, weights, TEST)``), OpenCV dnn
(``readNetFromCaffe`` on the same .caffemodel) and onnxruntime (our ONNX export of the same
weights, 2 intra-op threads) each build the net and run two forwards in a fresh process; the
figure is that process's peak RSS (VmHWM) less its RSS before the net was built (every probe
imports NumPy, OpenCV, onnxruntime and pycaffe-lite first, so the libraries cancel out).
LeNet training: the whole process's peak RSS (VmHWM) over ``--lenet-iters`` solver iterations
of the LeNet example (imports, data and tests included), the figure of the goal.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import bench_env
import bench_opencv

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
NETS = bench_opencv.NETS


def _status_mb(field):
    return bench_opencv._status_mb(field)


def probe_ort(onnx_path, shape):
    """(In a fresh process) peak RSS growth, MB, of an onnxruntime session of ``onnx_path``
    and two runs on a batch of ``shape``."""
    import numpy as np

    bench_opencv._caffe()
    import cv2  # noqa: F401
    import onnxruntime as ort

    base = _status_mb("VmRSS")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 2
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
    x = np.random.default_rng(1).uniform(-1, 1, shape).astype(np.float32)
    name = sess.get_inputs()[0].name
    sess.run(None, {name: x})
    sess.run(None, {name: x})
    return _status_mb("VmHWM") - base


def probe_lenet(iters):
    """(In a fresh process) the process's peak RSS, MB, after ``iters`` LeNet iterations."""
    import run

    with tempfile.TemporaryDirectory() as tmp:
        solver = run.lenet_solver(tmp, iters, max(1, min(500, iters)))
        solver.solve()
    return _status_mb("VmHWM")


def _fresh(*args):
    out = subprocess.run([sys.executable, os.path.abspath(__file__)] + [str(a) for a in args],
                         capture_output=True, text=True)
    if out.returncode:
        raise RuntimeError("memory probe %s failed:\n%s" % (args, out.stderr[-2000:]))
    return float(out.stdout.strip().splitlines()[-1])


def inference_peaks(name, batch=8):
    """{engine: peak RSS growth in MB} of one net at ``batch``, each in a fresh process;
    onnxruntime's is absent where onnx/onnxruntime are not installed."""
    bench_opencv._caffe()
    with tempfile.TemporaryDirectory() as tmp:
        weights = os.path.join(tmp, name + ".caffemodel")
        bench_opencv.write_weights(name, weights)
        peaks = {"ours": bench_opencv.peak_growth_mb("ours", name, weights, batch),
                 "opencv": bench_opencv.peak_growth_mb("opencv", name, weights, batch)}
        try:
            import onnxruntime  # noqa: F401

            from pycaffe_lite.onnx import export_files
        except ImportError:
            return peaks
        onnx_path = os.path.join(tmp, name + ".onnx")
        export_files(bench_opencv.prototxt(name), weights, onnx_path)
        shape = bench_opencv._input_shape(name, batch)
        peaks["onnxruntime"] = _fresh("--probe-ort", onnx_path, *shape)
    return peaks


def lenet_peak(iters):
    return _fresh("--probe-lenet", iters)


def bench(nets=NETS, batch=8, lenet_iters=500):
    results = {"batch": batch, "inference": {}, "lenet_iters": lenet_iters}
    for name in nets:
        results["inference"][name] = inference_peaks(name, batch)
    if lenet_iters:
        results["lenet_train_peak_mb"] = lenet_peak(lenet_iters)
    return results


def print_results(r):
    print("peak memory, MiB (growth over the imports; batch %d; a fresh process each)"
          % r["batch"])
    print("%-14s %8s %8s %12s %10s" % ("net", "ours", "OpenCV", "onnxruntime", "ours/cv"))
    for name, p in r["inference"].items():
        print("%-14s %8.0f %8.0f %12s %10.2f" % (
            name, p["ours"], p["opencv"],
            "%.0f" % p["onnxruntime"] if "onnxruntime" in p else "-", p["ours"] / p["opencv"]))
    if "lenet_train_peak_mb" in r:
        print("LeNet training, %d iterations: process peak %.0f MiB (goal <= 100 MiB)"
              % (r["lenet_iters"], r["lenet_train_peak_mb"]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", nargs="*", choices=NETS, default=NETS)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lenet-iters", type=int, default=500)
    p.add_argument("--probe-ort", nargs="+", help=argparse.SUPPRESS)
    p.add_argument("--probe-lenet", type=int, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.probe_ort:
        print(probe_ort(args.probe_ort[0], tuple(int(d) for d in args.probe_ort[1:])))
        return 0
    if args.probe_lenet:
        print(probe_lenet(args.probe_lenet))
        return 0
    bench_env.report()
    print_results(bench(args.nets, args.batch, args.lenet_iters))
    bench_env.print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
