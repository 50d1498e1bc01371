"""The fused training chains (pycaffe_lite/net_train_fuse.py) against the layers on their own:
a zoo net's forward + backward (TRAIN, batch statistics) with ``PYCAFFE_LITE_TRAIN_FUSE`` on and
off, both nets in the same process, in alternating rounds (the fastest round of each).

    E="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE"   # see bench_env.py
    $E python benchmarks/bench_train_fuse.py --net googlenet --batch 8
    $E python benchmarks/bench_train_fuse.py --net resnet50 --batch 8 --gpu 0

ResNet-50 has BatchNorm -> Scale -> ReLU and Eltwise SUM -> ReLU chains, GoogLeNet, VGG and
CaffeNet Convolution -> ReLU ones. ``--gpu N`` runs in GPU mode (layer by layer: no CUDA
graph outside a solver).
"""

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_env  # noqa: E402
import run as cpu_bench  # noqa: E402  (the zoo nets)

import pycaffe_lite as caffe  # noqa: E402
from pycaffe_lite import backend, net_train_fuse  # noqa: E402


def chains(net):
    fusion = net._train_fuse
    if fusion is None:
        return {}
    return {"BatchNorm": len(fusion.chains), "Eltwise": len(fusion.sums),
            "Convolution": len(fusion.convs)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--net", default="googlenet", help="a zoo net (models/zoo)")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--gpu", type=int, default=None, help="run in GPU mode on this device")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--per-round", type=int, default=2)
    args = p.parse_args(argv)
    bench_env.report()
    if args.gpu is not None:
        caffe.set_device(args.gpu)
        caffe.set_mode_gpu()
    nets = {}
    for fused, value in (("fused", "1"), ("layers", "0")):
        old = os.environ.get(net_train_fuse.ENV_VAR)
        os.environ[net_train_fuse.ENV_VAR] = value
        try:
            nets[fused] = cpu_bench.zoo_net(args.net, args.batch, batch_stats=True)
        finally:
            if old is None:
                del os.environ[net_train_fuse.ENV_VAR]
            else:
                os.environ[net_train_fuse.ENV_VAR] = old
    print("%s batch %d, %s: fused chains %s" % (args.net, args.batch,
                                              "GPU" if args.gpu is not None else "CPU",
                                              chains(nets["fused"])))
    best = {}
    for net in nets.values():  # warm-up: allocation, kernels compiled, plans chosen
        net.forward_from_to()
        net.backward_from_to()
    backend.synchronize()
    for _ in range(args.rounds):
        for name, net in nets.items():
            t = time.perf_counter()
            for _ in range(args.per_round):
                net.forward_from_to()
                net.backward_from_to()
            backend.synchronize()
            ms = (time.perf_counter() - t) / args.per_round * 1e3
            best[name] = min(best.get(name, ms), ms)
    print("forward + backward: fused %.1f ms, layers on their own %.1f ms, ratio %.3f"
          % (best["fused"], best["layers"], best["fused"] / best["layers"]))
    bench_env.print_load("end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
