"""Speed and memory benchmarks of pycaffe-lite on the CPU, side by side with PyTorch,
onnxruntime and OpenCV dnn.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/run.py   # every workload
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/run.py \
        --only lenet_step caffenet resnet50_train ort memory --json out.json

The OpenBLAS variables are unset for the benchmark process only (see bench_env.py: they pin
NumPy's BLAS kernel, which the other engines ignore); the run prints the BLAS kernel that
threadpoolctl reports, warns where they are set, and prints the load average at its start and
end (figures from a busy machine are not comparable).

Workloads:
  gemm        float32 GEMM peak through numpy (the physical ceiling for conv/IP layers)
  lenet_train LeNet training through the solver and the Data layer (tests included)
  lenet_step  one LeNet training step (ours through the Data layer; PyTorch on tensors)
  caffenet    CaffeNet forward+backward (batch 10 by default) + per-layer breakdown
  googlenet   GoogLeNet forward+backward (batch 4)
  resnet50    ResNet-50 forward+backward (batch 1)
  resnet50_train  ResNet-50 training step at batch 8: forward + backward + SGD update
              (momentum 0.9, weight decay 5e-4; BatchNorm on batch statistics), against
              the same net in PyTorch (benchmarks/torch_from_caffe.py), alternating rounds
  ort_<net>   batch-1 inference of a zoo net, ours and onnxruntime's side by side (the
              ratio is ours / onnxruntime; see bench_onnx.py); run where onnxruntime is
              installed; 2 intra-op threads, idle threads not spinning (the protocol of
              the goal); also ort_mobilenet_ssd and ort_resnet50_half (every convolution
              half as wide). ``--only ort`` runs the seven goal nets and prints the
              geometric mean
  memory      peak memory of batch-8 inference per engine (ours, OpenCV, onnxruntime),
              each in a fresh process, and of LeNet training (see bench_memory.py)
  cv_<net>    TEST-phase inference with weights (folding on), ours and OpenCV dnn's
              (cv2.dnn.readNetFromCaffe, same .caffemodel) side by side at the batches of
              --cv-batches, with each engine's peak memory measured in a fresh process (see
              bench_opencv.py); nets: caffenet googlenet resnet50 vgg16 squeezenet1.1
              mobilenet mobilenet_ssd. ``--only infer`` runs them all and prints the
              geometric means of the ratios.
With ``torch`` installed (``pip install torch==2.13.0``), the same workloads run in PyTorch in
this process and the report prints ours / PyTorch: that ratio is the figure to track, as
timings on a shared machine drift. The LeNet step and the zoo nets alternate with PyTorch
round by round and report each side's fastest round (medians in the JSON). Peak RSS is the
process's (``ru_maxrss``); run one workload per process (``--only``) for a per-workload figure.
``--numpy-only`` runs without the compiled CPU kernels, for comparison.
"""

import argparse
import json
import os
import resource
import sys
import tempfile
import time

# as ``import pycaffe_lite`` does, before NumPy loads OpenBLAS (see pycaffe_lite/__init__.py)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite.proto import protoio  # noqa: E402
from pycaffe_lite.profiling import time_layers  # noqa: E402

import bench_env  # noqa: E402
import bench_memory  # noqa: E402
import bench_onnx  # noqa: E402
import bench_opencv  # noqa: E402
import torch_from_caffe  # noqa: E402

ZOO = os.path.join(ROOT, "models", "zoo")
LENET = os.path.join(ROOT, "models", "lenet")


def peak_rss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def blas_info():
    """The BLAS libraries NumPy loaded, as threadpoolctl reports them (the kernel OpenBLAS
    picked for this CPU: its ``architecture``); [] without threadpoolctl."""
    try:
        import threadpoolctl
    except ImportError:
        return []
    keys = ("internal_api", "version", "architecture", "num_threads")
    return [{k: info.get(k) for k in keys} for info in threadpoolctl.threadpool_info()
            if info.get("user_api") == "blas"]


def best_of(fn, repeats, warmup=2):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.median(times)) * 1e3


def side_by_side(ours, theirs, rounds, per_round, warmup=2):
    """Time ``ours`` and ``theirs`` in alternating rounds of ``per_round`` calls, so both see
    the same machine (load from other jobs drifts over seconds). Returns ms per call: the
    fastest round of each (the figure least disturbed by other jobs) and the medians."""
    for _ in range(warmup):
        ours()
        theirs()
    times = {"ours": [], "theirs": []}
    for _ in range(rounds):
        for key, fn in (("ours", ours), ("theirs", theirs)):
            t = time.perf_counter()
            for _ in range(per_round):
                fn()
            times[key].append((time.perf_counter() - t) / per_round * 1e3)
    return {"ms": min(times["ours"]), "torch_ms": min(times["theirs"]),
            "ratio": min(times["ours"]) / min(times["theirs"]),
            "ms_median": float(np.median(times["ours"])),
            "torch_ms_median": float(np.median(times["theirs"]))}


def torch_or_none(enabled):
    if not enabled:
        return None
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1)))
    return torch


# ---- GEMM peak ---------------------------------------------------------------------------
def bench_gemm(args, torch):
    n = 1024
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    b = np.random.default_rng(1).random((n, n), dtype=np.float32)
    ms = best_of(lambda: a @ b, 10)
    return {"ms": ms, "gflops": 2 * n ** 3 / ms / 1e6}


# ---- zoo nets: forward + backward -----------------------------------------------------------
def zoo_param(name, batch, batch_stats=False, logits=False, net_options=None):
    """A zoo deploy file's NetParameter at ``batch``; ``batch_stats``: BatchNorm on the batch's
    statistics (as in training) instead of the deploy file's ``use_global_stats``; ``logits``:
    without the final Softmax; ``net_options``: NetParameter fields to set (NVCaffe's
    ``default_forward_type`` & co.)."""
    param = protoio.read_net_param(os.path.join(ZOO, name + "_deploy.prototxt"))
    if logits and param.layer[-1].type == "Softmax":
        del param.layer[-1]
    for key, value in (net_options or {}).items():
        setattr(param, key, value)
    for layer in param.layer:
        if batch_stats and layer.type == "BatchNorm":
            layer.batch_norm_param.ClearField("use_global_stats")
        if layer.type == "Input":
            for shape in layer.input_param.shape:
                shape.dim[0] = batch
    return param


def init_zoo_weights(net, rng):
    """The benchmarks' weights: normal with variance 1 / fan-in, BatchNorm's statistics 1."""
    for blobs in net.params.values():
        for blob in blobs:
            fan_in = max(1, blob.count // max(1, blob.shape[0]))
            blob.data[...] = rng.normal(0, 1.0 / np.sqrt(fan_in), blob.shape)
    for layer in net.layers:
        if layer.type == "BatchNorm":
            layer.blobs[1].data[...] = 1.0
            layer.blobs[2].data[...] = 1.0


def zoo_net(name, batch, batch_stats=False, inference=False, logits=False, net_options=None):
    """A zoo net for a training pass at ``batch``; ``batch_stats``: BatchNorm on the batch's
    statistics (as in training) instead of the deploy file's ``use_global_stats``;
    ``inference``: a TEST net instead, for forward passes alone; ``logits``: without the final
    Softmax; ``net_options``: NetParameter fields to set."""
    param = zoo_param(name, batch, batch_stats, logits, net_options)
    param.force_backward = not inference
    caffe.set_random_seed(0)
    # a training pass: TRAIN phase (dropout on, batch statistics), every param's gradient,
    # and, like PyTorch with an input that needs no gradient, none for the data itself
    net = caffe.Net(param, caffe.TEST if inference else caffe.TRAIN)
    data_ids = set(net._input_ids)
    for rec in net.records:
        rec.bottom_need_backward = [need and bid not in data_ids
                                    for need, bid in zip(rec.bottom_need_backward, rec.bottom_ids)]
    rng = np.random.default_rng(0)
    init_zoo_weights(net, rng)
    data = net.inputs[0]
    net.blobs[data].data[...] = rng.uniform(-1, 1, net.blobs[data].shape)
    return net


def conv_flops(net):
    """Forward multiply-adds x2 of each Convolution / InnerProduct layer."""
    flops = {}
    for rec in net.records:
        name, layer, tops = rec.name, rec.layer, rec.tops
        if layer.type in ("Convolution", "InnerProduct"):
            w = layer.blobs[0]
            out = tops[0]
            if layer.type == "Convolution":
                per_out = w.count // w.shape[0]
                flops[name] = 2.0 * out.count * per_out
            else:
                flops[name] = 2.0 * out.count * (w.count // w.shape[0])
    return flops


def bench_zoo(name, batch, iters, torch, torch_model=None):
    net = zoo_net(name, batch)
    top = net.outputs[0]
    net.blobs[top].diff[...] = 1.0 / net.blobs[top].count

    def step():
        net.forward_from_to()
        net.backward_from_to()

    ms = best_of(step, iters, warmup=1)
    tstep = None
    if torch is not None and torch_model is not None:
        model = torch_model(torch)
        x = torch.rand(batch, *net.blobs[net.inputs[0]].shape[1:])
        model.train()

        def tstep():
            model.zero_grad(set_to_none=False)
            model(x).sum().backward()
    breakdown = time_layers(net, max(1, iters // 2))
    flops = conv_flops(net)
    # forward + backward (data and weights) is about 3x the forward's multiply-adds
    gflops = {}
    for i, n in enumerate(breakdown["layers"]):
        spent = breakdown["forward"][i] + breakdown["backward"][i]
        if n in flops and spent > 0:
            gflops[n] = flops[n] * 3 / 1e6 / spent
    result = {"batch": batch, "ms": ms, "total_gflop": sum(flops.values()) * 3 / 1e9,
              "layers": breakdown, "layer_gflops": gflops}
    if tstep is not None:
        result.update(side_by_side(step, tstep, iters, 1, warmup=1))
    return result


def train_step_breakdown(net, step, steps=2):
    """Milliseconds per step spent in each layer type, forward and backward, over ``steps``
    extra steps of ``step`` (each kind of net_train_fuse's chains, BatchNorm -> Scale -> ReLU,
    Eltwise -> ReLU, Convolution -> ReLU, as one entry): {"layers", "forward", "backward"},
    the types by time spent."""
    clock = time.perf_counter
    spent = {}

    def timed(key, phase, fn):
        def run(*args):
            t = clock()
            result = fn(*args)
            spent.setdefault(key, [0.0, 0.0])[phase] += clock() - t
            return result
        return run

    fusion = net._train_fuse
    saved = (dict(fusion.forward_map), dict(fusion.backward_map)) if fusion else None
    chains = list(fusion.chains) + fusion.sums + fusion.convs if fusion else []
    for chain in chains:
        key = "+".join(r.layer.type for r in chain.records) + " (fused)"
        fusion.forward_map[chain.indices[0]] = timed(key, 0, chain.forward)
        if chain.indices[-1] in fusion.backward_map:
            fusion.backward_map[chain.indices[-1]] = timed(key, 1, chain.backward)
    for rec in net.records:
        rec.layer.Forward = timed(rec.layer.type, 0, rec.layer.Forward)
        rec.layer.Backward = timed(rec.layer.type, 1, rec.layer.Backward)
    try:
        for _ in range(steps):
            step()
    finally:
        for rec in net.records:
            del rec.layer.Forward, rec.layer.Backward
        if fusion:
            fusion.forward_map.update(saved[0])
            fusion.backward_map.update(saved[1])
    names = sorted(spent, key=lambda k: -sum(spent[k]))
    return {"layers": names, "forward": [spent[k][0] * 1e3 / steps for k in names],
            "backward": [spent[k][1] * 1e3 / steps for k in names]}


def bench_train_step(name, batch, rounds, torch, lr=0.01, momentum=0.9, decay=5e-4,
                     layers=False):
    """One training step (forward, backward, SGD update with momentum and weight decay) of a
    zoo net, ours and PyTorch's twin of the same net, in alternating rounds."""
    from pycaffe_lite.ops import solver_update

    net = zoo_net(name, batch, batch_stats=True)
    top = net.blobs[net.outputs[0]]
    params = net.learnable_params
    history = [np.zeros_like(b.data) for b in params]
    mom = [np.float32(momentum)]
    decays = [np.float32(decay * d) for d in net.params_weight_decay]
    rates = [np.float32(lr * m) for m in net.params_lr]

    def step():
        net.clear_param_diffs()
        net.forward_from_to()
        top.diff[...] = 1.0 / top.count
        net.backward_from_to()
        datas = [blob.write_data() for blob in params]
        diffs = [blob.write_diff() for blob in params]
        if solver_update.takes_all("SGD", datas, diffs, [history]):
            # every param in one compiled call, with data -= diff, as SGDSolver does
            solver_update.update_all("SGD", datas, diffs, [history], 1, decays, False, rates,
                                     mom)
            return
        for i, blob in enumerate(params):
            data, diff = blob.read_data(), blob.write_diff()
            if solver_update.takes("SGD", data, diff, history[i]):
                solver_update.update("SGD", data, diff, [history[i]], 1, decays[i], False,
                                     rates[i], mom)
            else:  # as the solver's NumPy steps
                diff += decays[i] * data
                history[i] *= mom[0]
                history[i] += rates[i] * diff
                diff[...] = history[i]
        net.update()

    result = {"batch": batch}
    if torch is None:
        result["ms"] = best_of(step, rounds, warmup=1)
        return result
    model = torch_from_caffe.build(torch, net)
    model.train()
    x = torch.from_numpy(np.array(net.blobs[net.inputs[0]].data))
    # the same function: both outputs on the same weights and batch agree before timing
    net.forward_from_to()
    with torch.no_grad():
        theirs = model(x).numpy()
    err = float(np.abs(theirs - top.data).max() / max(np.abs(top.data).max(), 1e-12))
    if not err <= 1e-3:
        raise AssertionError("%s: ours and PyTorch's outputs differ by %.3g of the largest"
                             % (name, err))
    result["max_rel_diff"] = err
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum, weight_decay=decay)

    def tstep():
        opt.zero_grad(set_to_none=False)
        out = model(x)
        (out.sum() / out.numel()).backward()
        opt.step()

    result.update(side_by_side(step, tstep, rounds, 1, warmup=1))
    if layers:
        result["layers"] = train_step_breakdown(net, step)
        result["layer_gflops"] = {}
    return result


def torch_caffenet(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.LocalResponseNorm(5, 1e-4, 0.75), nn.Conv2d(96, 256, 5, padding=2, groups=2),
        nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True),
        nn.LocalResponseNorm(5, 1e-4, 0.75), nn.Conv2d(256, 384, 3, padding=1),
        nn.ReLU(inplace=True), nn.Conv2d(384, 384, 3, padding=1, groups=2),
        nn.ReLU(inplace=True), nn.Conv2d(384, 256, 3, padding=1, groups=2),
        nn.ReLU(inplace=True), nn.MaxPool2d(3, 2, ceil_mode=True), nn.Flatten(),
        nn.Linear(9216, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5), nn.Linear(4096, 1000),
        nn.Softmax(dim=1))


# ---- LeNet ---------------------------------------------------------------------------------
def lenet_solver(workdir, max_iter, test_interval):
    from pycaffe_lite.solvers import example_data, get_solver

    solver_path = os.path.join(LENET, "lenet_solver.prototxt")
    param = protoio.read_solver_param(solver_path)
    example_data.prepare_missing_sources(param, solver_path)
    param.max_iter = max_iter
    param.test_interval = test_interval
    param.snapshot = 0
    param.snapshot_after_train = False
    param.display = 0
    param.snapshot_prefix = os.path.join(workdir, "lenet")
    param.random_seed = 1
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        return get_solver(param)
    finally:
        os.chdir(cwd)


def load_mnist(split):
    from pycaffe_lite.data.mnist import read_idx_images, read_idx_labels

    prefix = "train" if split == "train" else "t10k"
    images = read_idx_images(os.path.join(LENET, "mnist5k", prefix + "-images-idx3-ubyte.gz"))
    labels = read_idx_labels(os.path.join(LENET, "mnist5k", prefix + "-labels-idx1-ubyte.gz"))
    return images.astype(np.float32)[:, None] / 256.0, labels.astype(np.int64)


def torch_lenet(torch):
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5),
                         nn.MaxPool2d(2, 2), nn.Flatten(), nn.Linear(800, 500), nn.ReLU(),
                         nn.Linear(500, 10))


def torch_lenet_setup(torch):
    model = torch_lenet(torch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: (1 + 1e-4 * it) ** -0.75)
    return model, opt, sched


def bench_lenet_step(args, torch):
    with tempfile.TemporaryDirectory() as tmp:
        solver = lenet_solver(tmp, 10 ** 6, 10 ** 6)
        solver.step(5)
        if torch is None:
            return {"ms": best_of(lambda: solver.step(1), args.step_iters, warmup=5)}
        x, y = load_mnist("train")
        tx, ty = torch.from_numpy(x[:64]), torch.from_numpy(y[:64])
        model, opt, sched = torch_lenet_setup(torch)
        loss_fn = torch.nn.functional.cross_entropy

        def tstep():
            opt.zero_grad()
            loss_fn(model(tx), ty).backward()
            opt.step()
            sched.step()

        return side_by_side(lambda: solver.step(1), tstep, max(1, args.step_iters // 5), 5,
                            warmup=5)


def bench_lenet_train(args, torch):
    iters = args.lenet_iters
    interval = max(1, min(500, iters))
    with tempfile.TemporaryDirectory() as tmp:
        solver = lenet_solver(tmp, iters, interval)
        t = time.perf_counter()
        solver.solve()
        wall = time.perf_counter() - t
        acc = dict(solver.test_scores[0]).get("accuracy") if solver.test_scores else None
    result = {"iterations": iters, "wall_s": wall, "ms_per_iter": wall / iters * 1e3,
              "accuracy": acc}
    if torch is not None:
        x, y = load_mnist("train")
        tx, ty = load_mnist("test")
        X, Y = torch.from_numpy(x), torch.from_numpy(y)
        TX, TY = torch.from_numpy(tx), torch.from_numpy(ty)
        torch.manual_seed(1)
        model, opt, sched = torch_lenet_setup(torch)
        loss_fn = torch.nn.functional.cross_entropy
        t = time.perf_counter()
        pos = 0
        for it in range(iters):
            if it % interval == 0 and it:
                with torch.no_grad():
                    correct = sum(int((model(TX[i:i + 100]).argmax(1) == TY[i:i + 100]).sum())
                                  for i in range(0, 1000, 100))
            xb, yb = X[pos:pos + 64], Y[pos:pos + 64]
            pos = (pos + 64) % (len(X) - 64)
            opt.zero_grad()
            loss_fn(model(xb), yb).backward()
            opt.step()
            sched.step()
        with torch.no_grad():
            correct = sum(int((model(TX[i:i + 100]).argmax(1) == TY[i:i + 100]).sum())
                          for i in range(0, 1000, 100))
        twall = time.perf_counter() - t
        result.update(torch_ms_per_iter=twall / iters * 1e3, torch_accuracy=correct / 1000.0,
                      ratio=(wall / iters) / (twall / iters))
    return result


WORKLOADS = {
    "gemm": bench_gemm,
    "lenet_step": bench_lenet_step,
    "lenet_train": bench_lenet_train,
    "caffenet": lambda a, t: bench_zoo("caffenet", a.caffenet_batch, a.zoo_iters, t,
                                       torch_caffenet),
    "googlenet": lambda a, t: bench_zoo("googlenet", 4, a.zoo_iters, t),
    "resnet50": lambda a, t: bench_zoo("resnet50", 1, a.zoo_iters, t),
    "resnet50_train": lambda a, t: bench_train_step("resnet50", 8, a.train_rounds, t,
                                                    layers=a.layers),
    "memory": lambda a, t: bench_memory.bench(bench_memory.NETS, 8, a.memory_lenet_iters),
}


def _ort_workload(net):
    return lambda args, torch: bench_onnx.bench_net(net, args.ort_rounds, threads=2,
                                                    spinning=False)


ORT_NETS = bench_onnx.NETS + ["mobilenet_ssd", "resnet50_half"]
ORT_WORKLOADS = ["ort_" + net for net in bench_onnx.GOAL_NETS]
WORKLOADS.update(("ort_" + net, _ort_workload(net)) for net in ORT_NETS)
WORKLOADS["ort"] = None  # the goal's ort_<net>, then the geometric mean


def _cv_workload(net):
    def run(args, torch):
        # VGG-16 is by far the largest: fewer rounds keep the whole table to a few minutes
        rounds = {("vgg16", b): max(1, args.cv_rounds - 1) for b in args.cv_batches}
        return bench_opencv.bench_net(net, args.cv_batches, args.cv_rounds,
                                      not args.no_memory, rounds)
    return run


CV_WORKLOADS = ["cv_" + net for net in bench_opencv.NETS]
WORKLOADS.update(("cv_" + net, _cv_workload(net)) for net in bench_opencv.NETS)
WORKLOADS["infer"] = None  # every cv_<net>, then the geometric means


def print_cv(name, r, batches):
    for batch in batches:
        b = r[batch]
        print("%-12s %12.2f %12.2f %8.2f  batch %d, peak MB ours %s / OpenCV %s" % (
            name if batch == batches[0] else "", b["ms"], b["cv_ms"], b["ratio"], batch,
            "%.0f" % b["peak_mb"] if "peak_mb" in b else "-",
            "%.0f" % b["cv_peak_mb"] if "cv_peak_mb" in b else "-"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), help="workloads to run")
    p.add_argument("--json", help="write the results here as JSON")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch side")
    p.add_argument("--lenet-iters", type=int, default=300)
    p.add_argument("--step-iters", type=int, default=50)
    p.add_argument("--zoo-iters", type=int, default=3)
    p.add_argument("--caffenet-batch", type=int, default=10)
    p.add_argument("--layers", action="store_true", help="print per-layer breakdowns")
    p.add_argument("--cv-batches", nargs="*", type=int, default=[1, 8])
    p.add_argument("--cv-rounds", type=int, default=3)
    p.add_argument("--no-memory", action="store_true",
                   help="cv_*: skip the per-engine peak memory processes")
    p.add_argument("--ort-rounds", type=int, default=5)
    p.add_argument("--train-rounds", type=int, default=3, help="resnet50_train rounds")
    p.add_argument("--memory-lenet-iters", type=int, default=500,
                   help="memory: LeNet training iterations (0: skip)")
    p.add_argument("--numpy-only", action="store_true",
                   help="without the compiled CPU kernels (pycaffe_lite/ops/cpu)")
    args = p.parse_args(argv)
    from pycaffe_lite.ops import cpu
    if args.numpy_only:
        cpu.set_kernels_enabled(False)
    torch = torch_or_none(not args.no_torch)
    names = args.only or ["gemm", "lenet_step", "lenet_train", "caffenet", "googlenet",
                          "resnet50", "resnet50_train", "ort"] + CV_WORKLOADS + ["memory"]
    for group, members in (("infer", CV_WORKLOADS), ("ort", ORT_WORKLOADS)):
        if group in names:
            i = names.index(group)
            names = names[:i] + [n for n in members if n not in names] + names[i + 1:]
    env = bench_env.report()
    results = {"env": env, "numpy": np.__version__, "torch": getattr(torch, "__version__", None),
               "threads": os.environ.get("OMP_NUM_THREADS"),
               "cpu_kernels": cpu.kernels_enabled(),
               "cpu_kernels_missing": None if cpu.kernels_enabled() else
               cpu.unavailable_reason()}
    results["blas"] = blas_info()
    print("BLAS (threadpoolctl): %s" % (", ".join(
        "%(internal_api)s %(version)s, kernel %(architecture)s, %(num_threads)s threads" % b
        for b in results["blas"]) or "not reported"))
    print("compiled CPU kernels: %s" % ("on" if cpu.kernels_enabled() else
                                        "off (%s)" % (cpu.unavailable_reason() or
                                                      "--numpy-only")))
    print("%-12s %12s %12s %8s" % ("workload", "ours (ms)", "ref (ms)", "ratio"))
    print("(ref: PyTorch, onnxruntime for the ort_* workloads, OpenCV dnn for cv_*)")
    for name in names:
        r = WORKLOADS[name](args, torch)
        if r is None:
            print("%-12s skipped: %s is not installed"
                  % (name, "OpenCV" if name.startswith("cv_") else "onnxruntime"))
            continue
        if name.startswith("cv_"):
            results[name] = r
            print_cv(name, r, args.cv_batches)
            continue
        if name == "memory":
            results[name] = r
            bench_memory.print_results(r)
            continue
        r["peak_rss_mb"] = peak_rss_mb()
        results[name] = r
        ours = r.get("ms", r.get("ms_per_iter"))
        theirs = r.get("torch_ms", r.get("torch_ms_per_iter", r.get("ort_ms")))
        print("%-12s %12.2f %12s %8s" % (name, ours, "%.2f" % theirs if theirs else "-",
                                         "%.2f" % r["ratio"] if "ratio" in r else "-"))
        if name == "gemm":
            print("%-12s %12.1f GFLOP/s" % ("", r["gflops"]))
        if name == "lenet_train":
            print("%-12s accuracy %s (torch %s), peak RSS %.0f MB" % (
                "", r["accuracy"], r.get("torch_accuracy"), r["peak_rss_mb"]))
        if args.layers and "layers" in r:
            lt = r["layers"]
            for i, ln in enumerate(lt["layers"]):
                g = r["layer_gflops"].get(ln)
                print("    %-24s fwd %8.2f  bwd %8.2f ms%s" % (
                    ln, lt["forward"][i], lt["backward"][i],
                    "  %6.1f GFLOP/s" % g if g else ""))
    cv = [n for n in names if n.startswith("cv_") and n in results]
    for batch in args.cv_batches if cv else ():
        g = bench_opencv.geomean([results[n][batch]["ratio"] for n in cv])
        results["cv_geomean_batch%d" % batch] = g
        print("geometric mean of ours / OpenCV, batch %d (%d nets): %.2f" % (batch, len(cv), g))
    ort = [n for n in ORT_WORKLOADS if n in results]
    if ort:
        g = bench_opencv.geomean([results[n]["ratio"] for n in ort])
        results["ort_geomean"] = g
        print("geometric mean of ours / onnxruntime, batch 1 (%d nets): %.2f" % (len(ort), g))
    results["load_end"] = bench_env.print_load("end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=float)
    return 0


if __name__ == "__main__":
    sys.exit(main())
