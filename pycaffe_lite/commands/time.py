"""``pycaffe-lite time``: per-layer forward and backward times, as ``caffe time`` prints them.

    pycaffe-lite time --model M.prototxt [--iterations 50] [--phase TRAIN] [--gpu 0]
                      [--level N] [--stage a,b]

One untimed forward/backward pass first (allocation), then ``--iterations`` timed passes; the
averages per layer (``<name>\\tforward: x ms.``), per pass and in total. On the GPU every layer
is synchronised before its time is read.
"""

import logging
import time

from .. import Net, backend
from ..errors import CaffeError
from ..proto import caffe_pb2
from ..tools_log import use_glog_format
from .train import parse_gpus, parse_stages

log = logging.getLogger("pycaffe_lite")


def add_net_arguments(p, default_phase):
    p.add_argument("--model", default="", help="the net definition (prototxt)")
    p.add_argument("--iterations", type=int, default=50, help="number of iterations (50)")
    p.add_argument("--gpu", default="", help="run on the GPU with this device id")
    p.add_argument("--phase", default="", help="TRAIN or TEST (default %s)" % default_phase)
    p.add_argument("--level", type=int, default=0, help="the net level (NetState)")
    p.add_argument("--stage", default="", help="net stages, separated by ','")


def add_arguments(p):
    add_net_arguments(p, default_phase="TRAIN")


def parse_phase(value, default):
    value = value or default
    if value == "TRAIN":
        return caffe_pb2.TRAIN
    if value == "TEST":
        return caffe_pb2.TEST
    raise CaffeError("--phase must be \"TRAIN\" or \"TEST\", got \"%s\"" % value)


def select_single_gpu(flag):
    gpus = parse_gpus(flag) if flag else []
    for extra in gpus[1:]:
        log.info("Not using GPU #%d for single-GPU function", extra)
    if gpus:
        log.info("Use GPU with device ID %d", gpus[0])
        backend.set_device(gpus[0])
        backend.set_mode_gpu()
    else:
        log.info("Use CPU.")
        backend.set_mode_cpu()


def _synchronize():
    if backend.mode() == backend.GPU:
        mod = backend.device_module()
        cuda = getattr(mod, "cuda", None)
        if cuda is not None and hasattr(cuda, "runtime"):
            cuda.runtime.deviceSynchronize()


def run(args):
    use_glog_format()
    if not args.model:
        raise CaffeError("need a model definition to time: --model path/to/net.prototxt")
    if args.iterations < 1:
        raise CaffeError("--iterations must be >= 1 (got %d)" % args.iterations)
    select_single_gpu(args.gpu)
    net = Net(args.model, parse_phase(args.phase, "TRAIN"), level=args.level,
              stages=parse_stages(args.stage))
    log.info("Performing Forward")
    initial_loss = net.forward_from_to()
    log.info("Initial loss: %g", initial_loss)
    log.info("Performing Backward")
    net.backward_from_to()
    _synchronize()
    layers = net.layers
    n = len(layers)
    forward_ms = [0.0] * n
    backward_ms = [0.0] * n
    forward_total = backward_total = 0.0
    log.info("*** Benchmark begins ***")
    log.info("Testing for %d iterations.", args.iterations)
    clock = time.perf_counter
    total_start = clock()
    for j in range(args.iterations):
        iter_start = clock()
        for i in range(n):
            t = clock()
            net.forward_from_to(i, i)
            _synchronize()
            forward_ms[i] += (clock() - t) * 1000.0
        backward_start = clock()
        forward_total += (backward_start - iter_start) * 1000.0
        for i in range(n - 1, -1, -1):
            t = clock()
            if net.layer_need_backward[i]:
                net.backward_from_to(i, i)
                _synchronize()
            backward_ms[i] += (clock() - t) * 1000.0
        end = clock()
        backward_total += (end - backward_start) * 1000.0
        log.info("Iteration: %d forward-backward time: %g ms.", j + 1, (end - iter_start) * 1000)
    total = (clock() - total_start) * 1000.0
    its = args.iterations
    log.info("Average time per layer: ")
    for i, name in enumerate(net.layer_names):
        log.info("%10s\tforward: %g ms.", name, forward_ms[i] / its)
        log.info("%10s\tbackward: %g ms.", name, backward_ms[i] / its)
    log.info("Average Forward pass: %g ms.", forward_total / its)
    log.info("Average Backward pass: %g ms.", backward_total / its)
    log.info("Average Forward-Backward: %g ms.", total / its)
    log.info("Total Time: %g ms.", total)
    log.info("*** Benchmark ends ***")
    args.timings = {"forward": forward_ms, "backward": backward_ms, "total_ms": total,
                    "layers": net.layer_names}
    return 0


COMMANDS = [("time", "benchmark model execution time", add_arguments, run)]
