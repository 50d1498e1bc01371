"""Batch-1 inference on a busy machine: GoogLeNet and SqueezeNet 1.1, ours and onnxruntime's
(the same net through :func:`pycaffe_lite.onnx.export`), quiet and beside busy processes.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_busy.py
    ... bench_busy.py --nets googlenet --rounds 3 --busy 2 --ort-threads 2

Each round times both engines quiet, then starts ``--busy`` processes that spin forever
(``python -c "while True: pass"``: the normal state of a shared server), times both again
beside them, and kills them; the engines alternate run by run. The fastest time of each
(engine, phase) is reported, and the median (a stall that comes and goes shows there); the
figures to track are each engine's slowdown, busy / quiet, and ours / onnxruntime's (the goal:
at most 1.5). onnxruntime runs ``--ort-threads`` intra-op
threads, idle threads not spinning; ours runs :func:`pycaffe_lite.ops.cpu.threads` threads
(``PYCAFFE_LITE_CPU_THREADS`` sets it) with OpenBLAS on the same count. The figures are only
comparable on a machine with nothing else running (the load average is printed).
"""

import argparse
import ctypes
import os
import statistics
import subprocess
import sys
import time

# as ``import pycaffe_lite`` does, before NumPy loads OpenBLAS (see pycaffe_lite/__init__.py)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import bench_env  # noqa: E402
import bench_onnx  # noqa: E402

SPIN = "import sys; print('spinning', flush=True)\nwhile True: pass"


def openblas_kernel():
    """NumPy's OpenBLAS kernel and thread count, read from the library (threadpoolctl need
    not be installed): ``(kernel, threads)``, or None."""
    import numpy  # noqa: F401  (maps OpenBLAS)

    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "openblas" in line.lower()})
    for path in paths:
        lib = ctypes.CDLL(path)
        for suffix in ("64_", "", "_64"):
            core = getattr(lib, "scipy_openblas_get_corename" + suffix, None) or \
                getattr(lib, "openblas_get_corename" + suffix, None)
            count = getattr(lib, "scipy_openblas_get_num_threads" + suffix, None) or \
                getattr(lib, "openblas_get_num_threads" + suffix, None)
            if core is not None and count is not None:
                core.restype, count.restype = ctypes.c_char_p, ctypes.c_int
                return core().decode(), count()
    return None


def start_busy(n):
    """``n`` processes spinning on the CPU, each confirmed running."""
    procs = [subprocess.Popen([sys.executable, "-c", SPIN], stdout=subprocess.PIPE, text=True)
             for _ in range(n)]
    for p in procs:
        p.stdout.readline()  # it runs its loop from here on
    return procs


def stop_busy(procs):
    for p in procs:
        p.kill()
    for p in procs:
        p.wait()
        p.stdout.close()


def bench(names, rounds, per_round, busy, ort_threads):
    built = {}
    for name in names:
        net, model, x = bench_onnx.build_ours(name)
        sess = bench_onnx.session(model, ort_threads, spinning=False)
        out = net.outputs[0]
        ours_out = net.forward(data=x)[out].copy()
        import numpy as np
        np.testing.assert_allclose(sess.run([out], {"data": x})[0], ours_out,
                                   rtol=1e-3, atol=1e-5)
        built[name] = (lambda net=net, x=x: net.forward(data=x),
                       lambda sess=sess, out=out, x=x: sess.run([out], {"data": x}))
    times = {}
    for _ in range(rounds):
        for phase in ("quiet", "busy"):
            procs = start_busy(busy) if phase == "busy" else []
            try:
                for name, engines in built.items():
                    for fn in engines:
                        fn()  # warm, in this phase
                    for _ in range(per_round):
                        for engine, fn in zip(("ours", "ort"), engines):
                            t = time.perf_counter()
                            fn()
                            ms = (time.perf_counter() - t) * 1e3
                            times.setdefault((name, engine, phase), []).append(ms)
            finally:
                stop_busy(procs)
    return times


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", nargs="*", default=["googlenet", "squeezenet1.1"])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--per-round", type=int, default=3, help="runs per engine and phase")
    p.add_argument("--busy", type=int, default=2, help="busy processes beside the run")
    p.add_argument("--ort-threads", type=int, default=2)
    args = p.parse_args(argv)
    bench_env.report()
    sys.path.insert(0, bench_onnx.ROOT)
    from pycaffe_lite.ops import cpu

    threads = cpu.threads()
    blas = openblas_kernel()
    print("BLAS kernel (from the library): %s" % ("%s, %d threads" % blas if blas else "unknown"))
    print("our kernel threads: %d; onnxruntime intra-op threads: %d; %d busy processes"
          % (threads, args.ort_threads, args.busy))
    times = bench(args.nets, args.rounds, args.per_round, args.busy, args.ort_threads)
    for stat, pick in (("fastest", min), ("median", statistics.median)):
        print("%-14s %9s %9s %9s %9s %9s %9s %9s" % (
            "%s (ms)" % stat, "ours", "ours busy", "slowdown", "ort", "ort busy", "slowdown",
            "ratio"))
        for name in args.nets:
            q, b, oq, ob = (pick(times[(name, engine, phase)]) for engine, phase in (
                ("ours", "quiet"), ("ours", "busy"), ("ort", "quiet"), ("ort", "busy")))
            print("%-14s %9.1f %9.1f %8.2fx %9.1f %9.1f %8.2fx %8.2fx"
                  % (name, q, b, b / q, oq, ob, ob / oq, (b / q) / (ob / oq)))
    print("(batch 1, %d runs per engine and phase; ratio: our slowdown / onnxruntime's)"
          % (args.rounds * args.per_round))
    bench_env.print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
