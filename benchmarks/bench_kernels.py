"""Per-layer times of the convolution kernels that are not im2col + GEMM, against that path and
against OpenCV dnn running a one-layer net of the same shape.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/bench_kernels.py \
        [--groups vgg16 resnet50 googlenet squeezenet mobilenet pointwise]
                                       [--batch 1 8] [--rounds 3] [--no-opencv]

For every layer shape: ms of ``gemm`` (im2col + GEMM with the compiled im2col, the path
before these kernels), ``new`` (what :func:`pycaffe_lite.ops.conv.forward` picks: Winograd's
F(4x4, 3x3) or F(2x2, 3x3) for 3x3 stride-1 layers where it pays, the direct kernel for
depthwise layers, the direct 1x1 kernel for narrow 1x1 layers; ``rule`` says which: w4, w2, dw,
pw or gemm), their ratio, each Winograd variant
forced (``w2/g``, ``w4/g``: the data behind the rule in :mod:`pycaffe_lite.ops.conv`), and
OpenCV dnn's forward of a net holding only that convolution (``cv2``, when installed).
Depthwise layers also time the backward (data and filter gradients). The sides run in
alternating rounds (the load of other jobs drifts over seconds) and each side's fastest round
is reported. The outputs are checked to agree before anything is timed.
"""

import argparse
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import bench_env  # noqa: E402
from pycaffe_lite.ops import conv, cpu, pointwise  # noqa: E402
from pycaffe_lite.ops.cpu import convolution as cpu_conv  # noqa: E402

# (name, in channels, out channels, map size, kernel, stride, pad, group)
VGG16 = [("conv1_1", 3, 64, 224), ("conv1_2", 64, 64, 224), ("conv2_1", 64, 128, 112),
         ("conv2_2", 128, 128, 112), ("conv3_1", 128, 256, 56), ("conv3_x", 256, 256, 56),
         ("conv4_1", 256, 512, 28), ("conv4_x", 512, 512, 28), ("conv5_x", 512, 512, 14)]
RESNET50 = [("res2_3x3", 64, 64, 56), ("res3_3x3", 128, 128, 28), ("res4_3x3", 256, 256, 14),
            ("res5_3x3", 512, 512, 7)]
GOOGLENET = [("conv2_3x3", 64, 192, 56), ("3a_3x3", 96, 128, 28), ("3b_3x3", 128, 192, 28),
             ("4a_3x3", 96, 208, 14), ("4e_3x3", 160, 320, 14), ("5b_3x3", 192, 384, 7)]
SQUEEZENET = [("fire2_3x3", 16, 64, 56), ("fire4_3x3", 32, 128, 28), ("fire6_3x3", 48, 192, 14),
              ("fire9_3x3", 64, 256, 14)]
# narrow 1x1 layers (name, in channels, out channels, map size): the direct 1x1 kernel's
# (ops/pointwise.py) territory; "half": ResNet-50 with half-width convolutions
POINTWISE = [("squeezenet/fire2_sq", 64, 16, 56), ("squeezenet/fire2_e1", 16, 64, 56),
             ("squeezenet/fire4_sq", 128, 32, 28), ("squeezenet/fire5_e1", 32, 128, 28),
             ("squeezenet/fire6_e1", 48, 192, 14), ("squeezenet/fire9_sq", 512, 64, 14),
             ("squeezenet/fire9_e1", 64, 256, 14), ("half/res2a_2a", 32, 32, 56),
             ("half/res2a_2c", 32, 128, 56), ("half/res2b_2a", 128, 32, 56),
             ("half/res3b_2a", 256, 64, 28), ("half/res3b_2c", 64, 256, 28),
             ("half/res4b_2c", 128, 512, 14), ("resnet50/res2a_2a", 64, 64, 56),
             ("resnet50/res2a_2c", 64, 256, 56), ("resnet50/res3b_2c", 128, 512, 28),
             ("resnet50/res4b_2a", 1024, 256, 14), ("googlenet/3a_1x1", 192, 64, 28),
             ("googlenet/3a_3x3_reduce", 192, 96, 28), ("googlenet/4a_5x5_reduce", 480, 16, 14)]
MOBILENET = [("dw1", 32, 112, 1), ("dw2", 64, 112, 2), ("dw3", 128, 56, 1), ("dw4", 128, 56, 2),
             ("dw5", 256, 28, 1), ("dw6", 256, 28, 2), ("dw7", 512, 14, 1),
             ("dw12", 512, 14, 2), ("dw13", 1024, 7, 1)]


def shapes(groups):
    out = []
    for group in groups:
        if group == "vgg16":
            out += [("vgg16/" + n, ci, co, s, 3, 1, 1, 1) for n, ci, co, s in VGG16]
        elif group in ("resnet50", "googlenet", "squeezenet"):
            table = {"resnet50": RESNET50, "googlenet": GOOGLENET, "squeezenet": SQUEEZENET}
            out += [(group + "/" + n, ci, co, s, 3, 1, 1, 1) for n, ci, co, s in table[group]]
        elif group == "pointwise":
            out += [("1x1/" + n, ci, co, s, 1, 1, 0, 1) for n, ci, co, s in POINTWISE]
        elif group == "mobilenet":
            out += [("mobilenet/" + n, c, c, s, 3, st, 1, c) for n, c, s, st in MOBILENET]
    return out


def geometry(ci, co, size, k, stride, pad, group, num):
    o = (size + 2 * pad - k) // stride + 1
    geom = conv.ConvGeometry(kernel=(k, k), pad=(pad, pad), stride=(stride, stride),
                             dilation=(1, 1), group=group, in_channels=ci, out_channels=co,
                             in_spatial=(size, size), out_spatial=(o, o), num=num)
    return conv.ConvPlan(geom, 4, 1 << 30), o


# wall time; ``--cpu-time``: this process's CPU time, one thread on every side
CLOCK = [time.perf_counter]


def _best(fn, rounds):
    fn()  # warm: buffers, pages, thread pool
    best = float("inf")
    for _ in range(rounds):
        t = CLOCK[0]()
        fn()
        best = min(best, CLOCK[0]() - t)
    return best


def opencv_net(ci, co, size, k, stride, pad, group, num, w, b, folder):
    """An OpenCV dnn net holding one Convolution with these weights (None without cv2)."""
    try:
        import cv2
    except ImportError:
        return None
    import pycaffe_lite as caffe
    proto = os.path.join(folder, "one.prototxt")
    with open(proto, "w") as f:
        f.write('input: "data" input_shape { dim: %d dim: %d dim: %d dim: %d }\n'
                'layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"\n'
                '  convolution_param { num_output: %d kernel_size: %d stride: %d pad: %d '
                'group: %d } }\n' % (num, ci, size, size, co, k, stride, pad, group))
    net = caffe.Net(proto, caffe.TEST)
    net.params["conv"][0].data[...] = w
    net.params["conv"][1].data[...] = b
    model = os.path.join(folder, "one.caffemodel")
    net.save(model)
    cv2.setNumThreads(cpu.threads())
    return cv2.dnn.readNetFromCaffe(proto, model)


def _forced_winograd(tile, x, w, b, pad, o):
    """A call of Winograd's F(tile x tile, 3x3) on these arrays, whatever the rule says."""
    num, ci = x.shape[:2]
    co = w.shape[0]
    products, tiles = (tile + 2) ** 2, cpu_conv.winograd_tiles(num, (o, o), tile)[2]
    u, v, m = (np.empty(products * a * c, np.float32) for a, c in ((co, ci), (ci, tiles),
                                                                   (co, tiles)))
    y = np.empty((num, co, o, o), np.float32)
    return lambda: cpu_conv.winograd_forward(x, w, b, y, (pad, pad), (o, o), u, v, m, tile)


def bench_layer(name, ci, co, size, k, stride, pad, group, num, rounds, use_opencv):
    geom, o = geometry(ci, co, size, k, stride, pad, group, num)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((num, ci, size, size)).astype(np.float32)
    w = (rng.standard_normal((co, ci // group, k, k)) / np.sqrt(ci // group * k * k))
    w = w.astype(np.float32)
    b = rng.standard_normal(co).astype(np.float32)
    y_gemm = np.empty((num, co, o, o), np.float32)
    y_new = np.empty_like(y_gemm)

    def gemm():
        conv.gemm_forward_and_weight(x, w, geom, output=y_gemm, bias=b)

    def new():
        conv.forward(x, w, y_new, geom, bias=b)

    sides = {"gemm": gemm, "new": new}
    # the rule's pick, for the table
    geom.pointwise = pointwise.takes(geom.geometry, x, w, y_new, b)
    if k == 3 and stride == 1 and group == 1:
        for tile in (2, 4):
            sides["w%d" % tile] = _forced_winograd(tile, x, w, b, pad, o)
    if k == 1 and stride == 1 and pad == 0 and group == 1 and cpu.kernels_enabled():
        y_pw = np.empty_like(y_gemm)
        sides["pw"] = lambda: pointwise.forward(x, w, y_pw, b)  # forced, whatever the rule
    gemm()
    new()
    scale = np.abs(y_gemm).max()
    err = float(np.abs(y_new - y_gemm).max() / scale)
    assert err < 1e-4, "%s: the outputs differ by %g of their scale" % (name, err)
    if geom.geometry.is_depthwise:
        dy = rng.standard_normal(y_gemm.shape).astype(np.float32)
        dx, dw = np.empty_like(x), np.zeros_like(w)

        def back_gemm():
            conv.gemm_backward_and_weight(x, dy, w, geom, input_diff=dx, weight_diff=dw)

        def back_new():
            conv.backward(x, dy, w, geom, dx=dx, dw=dw)

        sides.update(back_gemm=back_gemm, back_new=back_new)
    with tempfile.TemporaryDirectory() as folder:
        net = opencv_net(ci, co, size, k, stride, pad, group, num, w, b, folder) \
            if use_opencv else None
        if net is not None:
            def opencv():
                net.setInput(x)
                return net.forward()

            got = opencv()
            assert np.abs(got - y_gemm).max() / scale < 1e-3, "%s: OpenCV differs" % name
            sides["opencv"] = opencv
        best = {key: float("inf") for key in sides}
        for _ in range(rounds):
            for key, fn in sides.items():
                best[key] = min(best[key], _best(fn, 1))
    return {key: 1e3 * v for key, v in best.items()}, err, geom


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", nargs="+",
                    default=["vgg16", "resnet50", "googlenet", "squeezenet", "mobilenet"])
    ap.add_argument("--batch", nargs="+", type=int, default=[1])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-opencv", action="store_true")
    ap.add_argument("--cpu-time", action="store_true",
                    help="one thread everywhere (kernels, BLAS, OpenCV) and CPU time instead of "
                    "wall time: per-core figures that other jobs' load barely moves")
    args = ap.parse_args(argv)
    if args.cpu_time:
        import threadpoolctl

        os.environ["PYCAFFE_LITE_CPU_THREADS"] = "1"
        threadpoolctl.threadpool_limits(1, user_api="blas")
        CLOCK[0] = time.process_time
    if not cpu.library_available():
        sys.exit("the compiled kernels are not built: %s" % cpu.unavailable_reason())
    bench_env.report()
    print("threads %d; %s ms per call, fastest of %d alternating rounds" % (
        cpu.threads(), "CPU" if args.cpu_time else "wall", args.rounds))
    print("%-22s %5s %5s %8s %8s %6s %6s %6s %6s %8s %7s %9s %9s %7s" % (
        "layer", "batch", "rule", "gemm", "new", "new/g", "w2/g", "w4/g", "pw/g", "opencv",
        "new/cv",
        "bwd_gemm", "bwd_new", "rel.err"))

    def ratio(t, key):
        return "%.2f" % (t[key] / t["gemm"]) if key in t else "-"
    for num in args.batch:
        for shape in shapes(args.groups):
            t, err, geom = bench_layer(*shape, num=num, rounds=args.rounds,
                                       use_opencv=not args.no_opencv)
            cv = t.get("opencv")
            rule = "w%d" % geom.winograd_tile if geom.winograd else \
                "dw" if geom.geometry.is_depthwise else "pw" if geom.pointwise else "gemm"
            print("%-22s %5d %5s %8.2f %8.2f %6.2f %6s %6s %6s %8s %7s %9s %9s %7.1e" % (
                shape[0], num, rule, t["gemm"], t["new"], t["new"] / t["gemm"],
                ratio(t, "w2"), ratio(t, "w4"), ratio(t, "pw"),
                "-" if cv is None else "%.2f" % cv,
                "-" if cv is None else "%.2f" % (t["new"] / cv),
                "%.2f" % t["back_gemm"] if "back_gemm" in t else "-",
                "%.2f" % t["back_new"] if "back_new" in t else "-", err), flush=True)
    bench_env.print_load("end")


if __name__ == "__main__":
    main()
