"""Data-parallel training benchmark: time per iteration, communication share, allreduce
bandwidth, and the ring-allreduce scaling model computed from those figures.

For LeNet and CaffeNet (synthetic data, batch 10 per rank, SGD), three runs:

- 1 rank, 1 thread;
- 2 ranks under mpiexec, 1 thread each (the effective batch is 20);
- 1 rank, 2 threads (the same two cores used by one process instead);

each gives the time per iteration and the share of it spent in communication (the time a rank
spends starting reductions and waiting for them; with layer-wise reduction part of the
reduction overlaps the backward pass and is not counted). Then the allreduce bandwidth between
2 ranks on this machine (shared-memory loopback) for buffers of 1 to 256 MiB, and the ring
model's prediction for CaffeNet's gradient buffer against its measured allreduce.

Usage: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_parallel.py
    [--iters 5] [--nets lenet,caffenet] [--json out]
[--configs 1x1,2x1,1x2] (ResNet-50, ``--nets resnet50 --configs 1x1``, gives the scaling model
its compute time)
(needs the ``mpi`` extra: mpi4py and mpiexec next to the Python interpreter or on PATH).
Figures from a shared or loaded machine are noisy: repeat before drawing conclusions.

Over emulated links (root on Linux): ``--links 25mbit,100mbit,400mbit [--nets lenet]`` runs 1 rank
per host on 2 hosts (network namespaces joined by a switch, each host's link limited with ``tc
tbf``: tests/helpers/netns_hosts.py), MPI over TCP across the links, and prints the time per
iteration beside scaling_model.py's prediction for the same rate: ``t_c + t_comm`` (no overlap) and
``max(t_c, t_comm)`` (the backward pass hiding it all), ``t_c`` measured by the 1 rank run and
``t_comm`` the ring allreduce of the gradients at the link's rate; and ``t_2 + t_comm``, ``t_2``
the 2 hosts' time per iteration over an unlimited link (on one machine the two hosts share its
cores, and the kernel's TCP work runs on them too).
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

import bench_env  # noqa: E402

NETS = {"lenet": os.path.join(ROOT, "models", "lenet", "lenet.prototxt"),
        "caffenet": os.path.join(ROOT, "models", "zoo", "caffenet_deploy.prototxt"),
        "resnet50": os.path.join(ROOT, "models", "zoo", "resnet50_deploy.prototxt")}
BATCH = 10


def train_net_param(deploy, batch):
    """A train net from a deploy net: DummyData in place of the Input, SoftmaxWithLoss in
    place of the final Softmax, MSRA (convolutions) and gaussian fillers, BatchNorm on the
    batch's statistics."""
    from pycaffe_lite.proto import protoio
    net = protoio.read_net_param(deploy)
    layers = list(net.layer)
    del net.layer[:]
    for lp in layers:
        if lp.type == "Input":
            dd = net.layer.add(name="data", type="DummyData")
            dd.top.extend([lp.top[0], "label"])
            shape = dd.dummy_data_param.shape.add()
            shape.dim.extend([batch] + list(lp.input_param.shape[0].dim[1:]))
            dd.dummy_data_param.shape.add().dim.extend([batch])
            dd.dummy_data_param.data_filler.add(type="gaussian", std=1.0)
            dd.dummy_data_param.data_filler.add(type="constant", value=1.0)
            continue
        if lp.type == "Softmax":
            loss = net.layer.add(name="loss", type="SoftmaxWithLoss")
            loss.bottom.extend([lp.bottom[0], "label"])
            loss.top.append("loss")
            continue
        new = net.layer.add()
        new.CopyFrom(lp)
        if new.type == "Convolution":
            new.convolution_param.weight_filler.type = "msra"
        if new.type == "InnerProduct":
            new.inner_product_param.weight_filler.type = "gaussian"
            new.inner_product_param.weight_filler.std = 0.01
        if new.type == "BatchNorm":  # a deploy net's BatchNorm uses stored statistics
            new.batch_norm_param.use_global_stats = False
    return net


def worker(args):
    """One rank: time ``iters`` iterations (after two warm-up ones)."""
    import numpy as np

    from pycaffe_lite import parallel
    from pycaffe_lite.proto import caffe_pb2
    from pycaffe_lite.solvers import SGDSolver

    comm = parallel.init() if args.mpi else parallel.LocalComm()
    timer = {"comm": 0.0}
    comm = _Timed(comm, timer)
    param = caffe_pb2.SolverParameter(base_lr=0.001, lr_policy="fixed", momentum=0.9,
                                      max_iter=10 ** 6, random_seed=1, display=0)
    param.net_param.CopyFrom(train_net_param(NETS[args.net], BATCH))
    solver = SGDSolver(param)
    solver.stop_on_nonfinite = False  # timing only: synthetic labels may diverge
    sync = None
    if comm.size > 1:
        sync = parallel.DataParallel(solver, comm).attach()
    solver.step(2)
    timer["comm"] = 0.0
    t0 = time.perf_counter()
    solver.step(args.iters)
    elapsed = time.perf_counter() - t0
    count = sum(p.count for p in solver.net.learnable_params)
    result = {"net": args.net, "ranks": comm.size, "threads": args.threads,
              "ms_per_iter": 1000 * elapsed / args.iters,
              "comm_share": timer["comm"] / elapsed, "params": count,
              "buckets": len(sync.buckets) if sync else 0}
    if comm.size > 1 and comm.rank != 0:
        return
    print("RESULT " + json.dumps(result), flush=True)
    del np


class _Timed:
    """A communicator whose start/wait time is added to ``timer['comm']``."""

    def __init__(self, comm, timer):
        self._comm, self._timer = comm, timer
        self.rank, self.size = comm.rank, comm.size
        self.on_device, self.name = comm.on_device, comm.name

    def start_allreduce(self, buf):
        t0 = time.perf_counter()
        handle = self._comm.start_allreduce(buf)
        self._timer["comm"] += time.perf_counter() - t0
        return _TimedHandle(handle, self._timer)

    def __getattr__(self, name):
        return getattr(self._comm, name)


class _TimedHandle:
    def __init__(self, handle, timer):
        self._handle, self._timer = handle, timer

    def test(self):
        t0 = time.perf_counter()
        done = self._handle.test()
        self._timer["comm"] += time.perf_counter() - t0
        return done

    def wait(self):
        t0 = time.perf_counter()
        self._handle.wait()
        self._timer["comm"] += time.perf_counter() - t0


def bandwidth_worker(args):
    """Median time of an in-place float32 Allreduce on 2 ranks, per buffer size."""
    import numpy as np

    from pycaffe_lite import parallel
    comm = parallel.init()
    rows = []
    for mib in [int(s) for s in args.sizes.split(",")]:
        buf = np.ones(mib * (1 << 20) // 4, np.float32)
        times = []
        for _ in range(args.repeats):
            comm.barrier()
            t0 = time.perf_counter()
            comm.allreduce(buf)
            times.append(time.perf_counter() - t0)
        t = float(np.median(times))
        nbytes = buf.nbytes
        rows.append({"mib": mib, "seconds": t, "algbw_GBps": nbytes / t / 1e9,
                     "busbw_GBps": 2 * (comm.size - 1) / comm.size * nbytes / t / 1e9})
    if comm.rank == 0:
        print("RESULT " + json.dumps({"ranks": comm.size, "allreduce": rows}), flush=True)


def _mpiexec():
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return here if os.path.isfile(here) else "mpiexec"


def _run(command, threads, extra_env=None):
    env = dict(os.environ)
    env.update(extra_env or {})
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        env[name] = str(threads)
    out = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=False)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError("benchmark run failed:\n" + out.stdout[-3000:])


def ring_seconds(nbytes, ranks, gbit_per_s):
    """Ring allreduce: each rank sends and receives 2(N-1)/N of the buffer."""
    return 2.0 * (ranks - 1) / ranks * nbytes / (gbit_per_s * 1e9 / 8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--nets", default="lenet,caffenet")
    ap.add_argument("--configs", default="1x1,2x1,1x2",
                    help="runs as RANKSxTHREADS, separated by ','")
    ap.add_argument("--sizes", default="1,16,64,256", help="allreduce buffer sizes, MiB")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default="", help="also write the figures to this file")
    ap.add_argument("--links", default="", help="tc rates of emulated links between 2 hosts "
                    "('none': unlimited), separated by ','; needs root")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--bandwidth", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--mpi", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--net", default="lenet", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    if args.bandwidth:
        return bandwidth_worker(args)
    env = bench_env.report()
    if args.links:
        return links(args)
    me = [sys.executable, os.path.abspath(__file__), "--worker", "--iters", str(args.iters)]
    results = {"runs": [], "env": env}
    for net in args.nets.split(","):
        for config in args.configs.split(","):
            ranks, threads = (int(v) for v in config.split("x"))
            command = me + ["--net", net, "--threads", str(threads)]
            if ranks > 1:
                command = [_mpiexec(), "-n", str(ranks)] + command + ["--mpi"]
            r = _run(command, threads)
            results["runs"].append(r)
            print("%-9s %d rank(s) x %d thread(s): %8.1f ms/iter (batch %d per rank), "
                  "communication %4.1f%%" % (net, ranks, threads, r["ms_per_iter"], BATCH,
                                            100 * r["comm_share"]), flush=True)
    bw = _run([_mpiexec(), "-n", "2", sys.executable, os.path.abspath(__file__), "--bandwidth",
               "--sizes", args.sizes, "--repeats", str(args.repeats)], 1)
    results["allreduce"] = bw["allreduce"]
    for row in bw["allreduce"]:
        print("allreduce 2 ranks %4d MiB: %8.2f ms, bus bandwidth %6.2f GB/s"
              % (row["mib"], 1000 * row["seconds"], row["busbw_GBps"]))
    # the ring formula with the bandwidth measured at 16 MiB, against the measured 256 MiB
    rows = {row["mib"]: row for row in bw["allreduce"]}
    if 16 in rows and 256 in rows:
        gbit = rows[16]["busbw_GBps"] * 8
        predicted = ring_seconds(256 << 20, 2, gbit)
        print("ring model at the 16 MiB bandwidth (%.1f Gb/s) predicts %.1f ms for 256 MiB; "
              "measured %.1f ms" % (gbit, 1000 * predicted, 1000 * rows[256]["seconds"]))
        results["prediction_256MiB"] = {"gbit": gbit, "predicted_s": predicted,
                                        "measured_s": rows[256]["seconds"]}
    bench_env.print_load("end")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def links(args):
    """1 rank per host on 2 emulated hosts at each rate, beside the scaling model."""
    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from helpers.netns_hosts import Hosts, rate_bits, unavailable_reason
    from scaling_model import ring_seconds as model_ring_seconds
    reason = unavailable_reason()
    if reason:
        raise SystemExit("--links: " + reason)
    me = [sys.executable, os.path.abspath(__file__), "--worker", "--iters", str(args.iters)]
    results = {"links": [], "load_before": os.getloadavg()}
    for net in args.nets.split(","):
        one = _run(me + ["--net", net, "--threads", "1"], 1)
        t_c = one["ms_per_iter"] / 1000.0
        nbytes = 4 * one["params"]
        print("%s: 1 rank %.1f ms/iter (t_c), %.2f MB of gradients" % (net, 1000 * t_c,
                                                                       nbytes / 1e6))
        print("| link | measured ms/iter | model: t_c + t_comm | model: max(t_c, t_comm) | "
              "t_2 + t_comm | measured speed-up | model speed-up (no overlap .. full "
              "overlap) |")
        print("|---|---|---|---|---|---|---|")
        rates = ["none"] + [r for r in args.links.split(",") if r != "none"]
        t_2 = None
        for rate in rates:
            hosts = Hosts(2, rate=None if rate == "none" else rate)
            try:
                r = _run(hosts.command(1, me + ["--net", net, "--threads", "1", "--mpi"]), 1,
                         hosts.env())
            finally:
                hosts.close()
            t = r["ms_per_iter"] / 1000.0
            row = {"net": net, "link": rate, "t_c": t_c, "measured_s": t, "bytes": nbytes,
                   "comm_share": r["comm_share"]}
            if rate == "none":
                t_2 = t  # 2 ranks on this machine's cores, the link no limit
                print("| unlimited | %.1f | | | | %.2fx | |" % (1000 * t, 2 * t_c / t))
            else:
                t_comm = model_ring_seconds(nbytes, 2, rate_bits(rate) / 1e9)
                serial, overlap = t_c + t_comm, max(t_c, t_comm)
                row.update(t_comm=t_comm, model_serial_s=serial, model_overlap_s=overlap,
                           t_2_plus_comm_s=t_2 + t_comm)
                print("| %s | %.1f | %.1f | %.1f | %.1f | %.2fx | %.2fx .. %.2fx |"
                      % (rate, 1000 * t, 1000 * serial, 1000 * overlap, 1000 * (t_2 + t_comm),
                         2 * t_c / t, 2 * t_c / serial, 2 * t_c / overlap))
            results["links"].append(row)
            sys.stdout.flush()
    results["load_after"] = os.getloadavg()
    print("load average before %s, after %s" % (
        " ".join("%.2f" % x for x in results["load_before"]),
        " ".join("%.2f" % x for x in results["load_after"])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
