"""GPU benchmarks of pycaffe-lite (CuPy), side by side with PyTorch on the same GPU.

    E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"   # see bench_env.py
    $E python benchmarks/bench_gpu.py                  # LeNet step + CaffeNet batch 256
    $E python benchmarks/bench_gpu.py --only caffenet --caffenet-batch 128 --json gpu.json
    $E python benchmarks/bench_gpu.py --engine caffe   # no cuDNN: pycaffe-lite's own kernels
    $E PYCAFFE_LITE_GPU_KERNELS=0 python benchmarks/bench_gpu.py   # xp-generic code on CuPy

    $E python benchmarks/bench_gpu.py --only resnet50_train resnet50_infer resnet50_b1 \
        googlenet_train --json gpu.json

Workloads (GPU mode, float32; TF32 off on both sides, PyTorch's cudnn.benchmark on):
  lenet            LeNet training through the solver and the Data layer (prefetch into
                   pinned memory, upload from the loading thread): ms per iteration (batch 64)
  caffenet         CaffeNet forward + backward at batch 256: ms per pass
  resnet50_train   ResNet-50 SGD iteration through the solver (softmax loss, forward,
                   backward, momentum update; a CUDA graph unless --cuda-graph off), batch 32
  resnet50_infer   ResNet-50 TEST forward, batch 32
  resnet50_b1      ResNet-50 TEST forward, batch 1 (latency)
  googlenet_train  GoogLeNet SGD iteration, batch 32
  resnet50_fp16    ResNet-50 SGD iteration, batch 32, in NVCaffe's float16
                   (default_forward_type/backward_type FLOAT16, math FLOAT, global_grad_scale
                   1024, float32 master weights) against PyTorch's autocast(float16) +
                   GradScaler
The zoo workloads run the net of models/zoo against PyTorch's twin of the same net
(benchmarks/torch_from_caffe.py: the same layers, the same weights; the outputs are checked
equal before timing) in alternating rounds, the fastest round of each. With ``torch`` built for
CUDA the report prints ours / PyTorch, and the GPU memory of each side in the steps after the
warm-up: the most in use at once and the most the memory pools held. Without a GPU
(or CuPy) it prints "no GPU: skipped" and exits 0.
"""

import argparse
import gc
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
import torch_from_caffe  # noqa: E402

import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite import backend  # noqa: E402
from pycaffe_lite.ops import gpu as gpu_ops  # noqa: E402
from pycaffe_lite.proto import caffe_pb2  # noqa: E402


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
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
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


def alternating(ours, theirs, rounds, per_round, sync, tsync):
    """ms per call of ``ours`` and ``theirs`` (each round ended by its device's
    synchronisation), in alternating rounds: the fastest round of each."""
    for fn, s in ((ours, sync), (theirs, tsync)):
        if fn is None:  # --no-torch
            continue
        fn()
        fn()
        s()
    times = {"ours": [], "theirs": []}
    for _ in range(rounds):
        for key, fn, s in (("ours", ours, sync), ("theirs", theirs, tsync)):
            if fn is None:
                continue
            s()
            t = time.perf_counter()
            for _ in range(per_round):
                fn()
            s()
            times[key].append((time.perf_counter() - t) / per_round * 1e3)
    out = {"ms": min(times["ours"])}
    if times["theirs"]:
        out.update(torch_ms=min(times["theirs"]), ratio=out["ms"] / min(times["theirs"]))
    return out


#: NVCaffe's float16 training: float16 storage, float32 math, the loss scaled by this
FP16_SCALE = 1024.0
FP16_OPTIONS = {"default_forward_type": caffe_pb2.FLOAT16,
                "default_backward_type": caffe_pb2.FLOAT16,
                "default_forward_math": caffe_pb2.FLOAT, "default_backward_math": caffe_pb2.FLOAT,
                "global_grad_scale": FP16_SCALE}


def zoo_solver(name, batch, net_options=None):
    """An SGD solver (lr 0.01, momentum 0.9, weight decay 5e-4) training the zoo net at
    ``batch``: its logits into SoftmaxWithLoss over an Input of labels; the weights and the
    batch those of :func:`run.zoo_net` (the same draws); ``net_options``: NetParameter fields
    (:data:`FP16_OPTIONS`). Returns ``(solver, logits blob)``."""
    from google.protobuf import text_format

    from pycaffe_lite.proto import caffe_pb2
    from pycaffe_lite.solvers import get_solver

    param = cpu_bench.zoo_param(name, batch, batch_stats=True, logits=True,
                                net_options=net_options)
    logits = param.layer[-1].top[0]
    text_format.Merge('layer { name: "label" type: "Input" top: "label" '
                      'input_param { shape { dim: %d } } } '
                      'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "%s" '
                      'bottom: "label" top: "loss" }' % (batch, logits), param)
    sp = caffe_pb2.SolverParameter()
    text_format.Merge('type: "SGD" base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 '
                      'lr_policy: "fixed" max_iter: 1000000000 display: 0 random_seed: 0 '
                      'snapshot_after_train: false', sp)
    sp.net_param.CopyFrom(param)
    solver = get_solver(sp)
    rng = np.random.default_rng(0)
    cpu_bench.init_zoo_weights(solver.net, rng)
    data = solver.net.blobs[solver.net.inputs[0]]
    data.data[...] = rng.uniform(-1, 1, data.shape)
    classes = solver.net.blobs[logits].shape[1]
    solver.net.blobs["label"].data[...] = np.arange(batch) % classes
    return solver, logits


def zoo_workload(name, batch, train, args, torch, fp16=False):
    """A zoo net's SGD iteration through the solver (``train``: captured into a CUDA graph
    unless --cuda-graph off) or TEST forward, ours and PyTorch's twin; ``fp16``: training in
    NVCaffe's float16 (:data:`FP16_OPTIONS`, the update on float32 master weights) against
    PyTorch's automatic mixed precision (autocast float16 + GradScaler)."""
    cp = backend.device_module()
    pool = cp.get_default_memory_pool()
    gc.collect()
    pool.free_all_blocks()
    if train:
        solver, logits = zoo_solver(name, batch, FP16_OPTIONS if fp16 else None)
        if fp16 and getattr(solver.net, "_types", None) is None:
            raise AssertionError("%s: the net did not build in float16" % name)
        net = cpu_bench.zoo_net(name, batch, batch_stats=True, logits=True)  # the twin's

        def step():
            solver.step(1)
    else:  # a TEST net: its forward replays a CUDA graph unless --cuda-graph off
        net = cpu_bench.zoo_net(name, batch, inference=True)

        def step():
            net.forward_from_to()

    top = net.blobs[net.outputs[0]]
    step()  # warm-up: kernels compiled, cuDNN plans chosen
    with backend.track_device_memory() as memory:
        for _ in range(2):  # capture, replay
            step()
        backend.synchronize()
    result = {"batch": batch}
    if torch is not None:
        dev = torch.device("cuda", args.gpu)
        model = torch_from_caffe.build(torch, net).to(dev)
        model.train(train)
        with torch.no_grad():  # the twin's running statistics: the net's global ones
            for key, module in model.layers.items():
                if isinstance(module, torch.nn.BatchNorm2d):
                    blobs = net.records[int(key[1:])].layer.blobs
                    s = float(blobs[2].data[0])
                    f = 0.0 if s == 0 else 1.0 / s
                    module.running_mean.copy_(torch.from_numpy(blobs[0].data * f))
                    module.running_var.copy_(torch.from_numpy(blobs[1].data * f))
        x = torch.from_numpy(np.array(net.blobs[net.inputs[0]].data)).to(dev)
        if train:
            label = torch.from_numpy(
                solver.net.blobs["label"].data.astype(np.int64)).to(dev)
        else:
            net.forward_from_to()
            with torch.no_grad():
                theirs = model(x).cpu().numpy()
            err = float(np.abs(theirs - top.data).max() / max(np.abs(top.data).max(), 1e-12))
            if not err <= 1e-3:
                raise AssertionError("%s: ours and PyTorch's outputs differ by %.3g" % (name,
                                                                                      err))
            result["max_rel_diff"] = err
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        scaler = torch.amp.GradScaler("cuda", init_scale=FP16_SCALE) if fp16 else None

        def tstep():
            if not train:
                with torch.no_grad():
                    model(x)
                return
            opt.zero_grad(set_to_none=False)
            if scaler is None:
                torch.nn.functional.cross_entropy(model(x), label).backward()
                opt.step()
                return
            with torch.autocast("cuda", dtype=torch.float16):
                out = model(x)
            scaler.scale(torch.nn.functional.cross_entropy(out.float(), label)).backward()
            scaler.step(opt)
            scaler.update()

        tstep()  # warm-up (cudnn.benchmark's plan search), as ours above
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(dev)
        tstep()
        torch.cuda.synchronize()
        result["torch_peak_mib"] = torch.cuda.max_memory_allocated(dev) / 2.0 ** 20
        result["torch_held_mib"] = torch.cuda.max_memory_reserved(dev) / 2.0 ** 20
    else:
        tstep = None
    result.update(alternating(step, tstep, args.rounds, args.per_round, backend.synchronize,
                              torch.cuda.synchronize if torch is not None else
                              backend.synchronize))
    if memory is not None:  # the steps after the warm-up, as PyTorch's figures
        result["peak_mib"] = memory.peak / 2.0 ** 20
        result["held_mib"] = memory.held / 2.0 ** 20
    if train:
        graph = solver.train_graph
        result["captured"] = bool(graph and graph.replays)
        result["eager_because"] = graph.why_not() if graph else "CPU mode"
    return result


WORKLOADS = {
    "lenet": bench_lenet, "caffenet": bench_caffenet,
    "resnet50_train": lambda a, t: zoo_workload("resnet50", 32, True, a, t),
    "resnet50_infer": lambda a, t: zoo_workload("resnet50", 32, False, a, t),
    "resnet50_b1": lambda a, t: zoo_workload("resnet50", 1, False, a, t),
    "googlenet_train": lambda a, t: zoo_workload("googlenet", 32, True, a, t),
    "resnet50_fp16": lambda a, t: zoo_workload("resnet50", 32, True, a, t, fp16=True),
}


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
    p.add_argument("--cuda-graph", choices=["on", "off"], default="on",
                   help="capture TEST forwards and training iterations into CUDA graphs (on) "
                        "or not (off)")
    p.add_argument("--rounds", type=int, default=5, help="alternating rounds (zoo workloads)")
    p.add_argument("--per-round", type=int, default=5, help="iterations per round")
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
    caffe.set_cuda_graph(args.cuda_graph == "on")
    props = backend.device_properties(args.gpu)
    torch = torch_cuda_or_none(not args.no_torch)
    results = {"device": props, "engine": args.engine, "env": bench_env.report(),
               "kernels": gpu_ops.kernels_enabled(),
               "cudnn": gpu_ops.cudnn.version() if args.engine == "default" else None,
               "torch": getattr(torch, "__version__", None)}
    cp = backend.device_module()
    results["cuda_runtime"] = cp.cuda.runtime.runtimeGetVersion()
    try:
        results["cudnn_frontend"] = backend.cudnn_frontend().__version__
    except Exception as exc:  # not installed: the CAFFE engine runs
        results["cudnn_frontend"] = "none (%s)" % exc
    print("CUDA runtime %s, cuDNN frontend %s" % (results["cuda_runtime"],
                                                  results["cudnn_frontend"]))
    print("GPU %d: %s (compute capability %s, %.0f GiB), CuPy %s, cuDNN %s, kernels %s"
          % (props["id"], props["name"], props["compute_capability"],
             props["total_memory"] / float(1 << 30), props["cupy"], results["cudnn"],
             "on" if results["kernels"] else "off"))
    print("memory (MiB): the most in use at once in the steps after the warm-up (PyTorch's "
          "max_memory_allocated), and held by the pools (max_memory_reserved)")
    print("%-16s %6s %10s %10s %7s %10s %10s %10s %10s" % (
        "workload", "batch", "ours (ms)", "torch (ms)", "ratio", "ours MiB", "torch MiB",
        "ours held", "torch held"))
    for name in args.only or ["lenet", "caffenet"]:
        r = WORKLOADS[name](args, torch)
        results[name] = r
        print("%-16s %6d %10.2f %10s %7s %10s %10s %10s %10s" % (
            (name, r["batch"], r["ms"], "%.2f" % r["torch_ms"] if "torch_ms" in r else "-",
             "%.2f" % r["ratio"] if "ratio" in r else "-")
            + tuple("%.0f" % r[k] if k in r else "-"
                    for k in ("peak_mib", "torch_peak_mib", "held_mib", "torch_held_mib"))),
            flush=True)
    bench_env.print_load("end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
