"""int8 against float inference in onnxruntime for the zoo deploy nets: each net exported as
float ONNX and as the QDQ model ``pycaffe-lite quantize`` writes (calibrated here on seeded
random inputs: the timing does not depend on the weights' values), both run in this process on
the CPU in alternating rounds; the fastest round of each is reported, and float / int8 is the
speed-up. The CPU's int8 instructions decide it: the header says whether it has AVX-512 VNNI
(or AVX-VNNI, AMX).

    E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"   # see bench_env.py
    $E python benchmarks/bench_int8.py [--nets squeezenet1.1 resnet50 ...] [--rounds 10]
                                       [--batch 1] [--threads N] [--per-channel]
                                       [--activation-type int8|uint8]

Measure on a quiet machine (the load average is printed before and after); docs/int8.md
keeps the figures. Needs ``onnx`` and ``onnxruntime``.
"""

import argparse
import os
import sys
import time

import numpy as np

import bench_env
import bench_onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8", "avx512bw", "avx2")


def cpu_int8_flags():
    """{flag: present} of the x86 int8 instruction sets in /proc/cpuinfo (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f
                          if line.startswith("flags")), [])
    except OSError:
        return {}
    return {name: name in flags for name in INT8_FLAGS}


def bench_net(name, rounds=10, batch=1, threads=None, per_channel=False, calibration=4,
              activation_type="int8"):
    """ms per forward of the float and the int8 model (fastest round of each) and the ratio."""
    sys.path.insert(0, ROOT)
    from pycaffe_lite.quantization.run import qdq_model

    net, float_model, _ = bench_onnx.build_ours(name)
    net.unfold()  # calibration reads every blob
    rng = np.random.default_rng(1)
    shape = (batch,) + tuple(net.blobs["data"].shape[1:])
    feeds = [{"data": rng.uniform(-1, 1, (1,) + shape[1:]).astype(np.float32)}
             for _ in range(calibration)]
    int8_model = qdq_model(net, feeds, method="minmax", per_channel=per_channel,
                           activation_type=activation_type)["model"]
    net.close()
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    sessions = {"float": bench_onnx.session(float_model, threads),
                "int8": bench_onnx.session(int8_model, threads)}
    outs = {k: s.run(None, {"data": x})[0] for k, s in sessions.items()}
    drift = float(np.abs(outs["int8"] - outs["float"]).max() /
                  max(float(np.abs(outs["float"]).max()), 1e-12))
    times = {k: [] for k in sessions}
    for _ in range(rounds):
        for key, sess in sessions.items():
            t = time.perf_counter()
            sess.run(None, {"data": x})
            times[key].append((time.perf_counter() - t) * 1e3)
    fl, q = min(times["float"]), min(times["int8"])
    return {"float_ms": fl, "int8_ms": q, "speedup": fl / q, "max_rel_diff": drift}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nets", nargs="*", choices=bench_onnx.NETS, default=bench_onnx.NETS)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--threads", type=int, default=None, help="onnxruntime intra-op threads")
    p.add_argument("--per-channel", action="store_true", help="per-channel weight scales")
    p.add_argument("--activation-type", default="int8", choices=("int8", "uint8"),
                   help="the QDQ activations: int8 (zero point 0) or uint8 (zero point 128)")
    args = p.parse_args(argv)
    try:
        import onnxruntime
    except ImportError:
        print("onnxruntime is not installed (pip install onnx onnxruntime)")
        return 1
    bench_env.report()
    flags = cpu_int8_flags()
    print("CPU int8 instructions: %s; AVX-512 VNNI: %s; onnxruntime %s"
          % (", ".join(k for k, v in flags.items() if v) or "none found",
             "yes" if flags.get("avx512_vnni") else "no", onnxruntime.__version__))
    print("%-14s %6s %11s %11s %9s %13s" % ("net", "batch", "float (ms)", "int8 (ms)",
                                             "speed-up", "max rel diff"))
    for name in args.nets:
        r = bench_net(name, args.rounds, args.batch, args.threads, args.per_channel,
                      activation_type=args.activation_type)
        print("%-14s %6d %11.2f %11.2f %9.2f %13.3g" % (name, args.batch, r["float_ms"],
                                                        r["int8_ms"], r["speedup"],
                                                        r["max_rel_diff"]))
    bench_env.print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
