"""GPU benchmarks of pycaffe-lite (CuPy), side by side with PyTorch on the same GPU.

    E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"   # see bench_env.py
    $E python benchmarks/bench_gpu.py                  # LeNet step + CaffeNet batch 256
    $E python benchmarks/bench_gpu.py --only caffenet --caffenet-batch 128 --json gpu.json
    $E python benchmarks/bench_gpu.py --engine caffe   # no cuDNN: pycaffe-lite's own kernels
    $E PYCAFFE_LITE_GPU_KERNELS=0 python benchmarks/bench_gpu.py   # xp-generic code on CuPy

Workloads (GPU mode, float32):
  lenet     LeNet training through the solver and the Data layer (prefetch into pinned
            memory, upload from the loading thread): ms per iteration (batch 64)
  caffenet  CaffeNet forward + backward at batch 256: ms per pass
With ``torch`` built for CUDA, the same workloads run in PyTorch on the same GPU in this
process and the report prints ours / PyTorch. Each timing is the median of single iterations,
each ended by a device synchronisation. Without a GPU (or CuPy) it prints "no GPU: skipped"
and exits 0.
"""

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_env  # noqa: E402
import run as cpu_bench  # noqa: E402  (the CPU benchmarks' nets and data)

import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite import backend  # noqa: E402
from pycaffe_lite.ops import gpu as gpu_ops  # noqa: E402


def timed(fn, iters, warmup, sync):
    """Median milliseconds of ``fn()`` followed by ``sync()``."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def torch_cuda_or_none(enabled):
    if not enabled:
        return None
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cudnn.benchmark = True
    return torch


def bench_lenet(args, torch):
    with tempfile.TemporaryDirectory() as tmp:
        solver = cpu_bench.lenet_solver(tmp, 10 ** 6, 10 ** 6)
        ms = timed(lambda: solver.step(1), args.step_iters, 10, backend.synchronize)
        for layer in [*solver.net.layers, *(x for n in solver.test_nets for x in n.layers)]:
            if hasattr(layer, "close"):
                layer.close()
    result = {"batch": 64, "ms": ms}
    if torch is not None:
        x, y = cpu_bench.load_mnist("train")
        dev = torch.device("cuda", args.gpu)
        X, Y = torch.from_numpy(x).to(dev), torch.from_numpy(y).to(dev)
        model, opt, sched = cpu_bench.torch_lenet_setup(torch)
        model.to(dev)
        loss_fn = torch.nn.functional.cross_entropy
        pos = [0]

        def tstep():
            i = pos[0]
            pos[0] = (i + 64) % (len(X) - 64)
            opt.zero_grad()
            loss_fn(model(X[i:i + 64]), Y[i:i + 64]).backward()
            opt.step()
            sched.step()

        result["torch_ms"] = timed(tstep, args.step_iters, 10, torch.cuda.synchronize)
        result["ratio"] = ms / result["torch_ms"]
    return result


def bench_caffenet(args, torch):
    net = cpu_bench.zoo_net("caffenet", args.caffenet_batch)
    top = net.outputs[0]
    net.blobs[top].diff[...] = 1.0 / net.blobs[top].count

    def step():
        net.forward_from_to()
        net.backward_from_to()

    ms = timed(step, args.zoo_iters, 2, backend.synchronize)
    result = {"batch": args.caffenet_batch, "ms": ms}
    if torch is not None:
        dev = torch.device("cuda", args.gpu)
        model = cpu_bench.torch_caffenet(torch).to(dev)
        x = torch.rand(args.caffenet_batch, *net.blobs[net.inputs[0]].shape[1:], device=dev)

        def tstep():
            model.zero_grad(set_to_none=False)
            model(x).sum().backward()

        result["torch_ms"] = timed(tstep, args.zoo_iters, 2, torch.cuda.synchronize)
        result["ratio"] = ms / result["torch_ms"]
    return result


WORKLOADS = {"lenet": bench_lenet, "caffenet": bench_caffenet}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="workloads to run")
    p.add_argument("--gpu", type=int, default=0, help="device id")
    p.add_argument("--json", help="write the results here as JSON")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch side")
    p.add_argument("--engine", choices=["default", "caffe"], default="default",
                   help="default: cuDNN where CuPy provides it; caffe: never cuDNN")
    p.add_argument("--step-iters", type=int, default=50)
    p.add_argument("--zoo-iters", type=int, default=10)
    p.add_argument("--caffenet-batch", type=int, default=256)
    args = p.parse_args(argv)
    if not backend.gpu_available():
        try:
            backend.device_module()
            reason = "no CUDA device"
        except backend.GPUUnavailableError as exc:
            reason = str(exc)
        print("no GPU: skipped (%s)" % reason)
        return 0
    caffe.set_device(args.gpu)
    caffe.set_mode_gpu()
    if args.engine == "caffe":
        gpu_ops.cudnn.set_enabled(False)
    props = backend.device_properties(args.gpu)
    torch = torch_cuda_or_none(not args.no_torch)
    results = {"device": props, "engine": args.engine, "env": bench_env.report(),
               "kernels": gpu_ops.kernels_enabled(),
               "cudnn": gpu_ops.cudnn.version() if args.engine == "default" else None,
               "torch": getattr(torch, "__version__", None)}
    print("GPU %d: %s (compute capability %s, %.0f GiB), CuPy %s, cuDNN %s, kernels %s"
          % (props["id"], props["name"], props["compute_capability"],
             props["total_memory"] / float(1 << 30), props["cupy"], results["cudnn"],
             "on" if results["kernels"] else "off"))
    print("%-10s %7s %12s %12s %8s" % ("workload", "batch", "ours (ms)", "torch (ms)", "ratio"))
    for name in args.only or ["lenet", "caffenet"]:
        r = WORKLOADS[name](args, torch)
        results[name] = r
        print("%-10s %7d %12.2f %12s %8s" % (
            name, r["batch"], r["ms"], "%.2f" % r["torch_ms"] if "torch_ms" in r else "-",
            "%.2f" % r["ratio"] if "ratio" in r else "-"))
    bench_env.print_load("end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
