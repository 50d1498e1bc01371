"""``pycaffe-lite time``: per-layer forward and backward times, as ``caffe time`` prints them.

    pycaffe-lite time --model M.prototxt [--iterations 50] [--phase TRAIN] [--gpu 0]
                      [--level N] [--stage a,b]

One untimed forward/backward pass first (allocation), then ``--iterations`` timed passes; the
averages per layer (``<name>\\tforward: x ms.``), per pass and in total. On the GPU every layer
is synchronised before its time is read. A TRAIN net shares its activation diffs as a Solver's
train net does (:mod:`pycaffe_lite.net_memory`); the bytes its blobs hold (data, diffs after
sharing, params) are printed at the end, and on the GPU the most device memory in use at once
during the timed passes (:func:`pycaffe_lite.backend.track_device_memory`) and the memory
pool's peak.
"""

import logging

from .. import Net, backend
from ..errors import CaffeError
from ..profiling import synchronize, time_layers
from ..proto import caffe_pb2
from ..tools_log import use_glog_format
from .. import cuda_graphs, net_memory
from . import add_int8_flag, add_net_flags, help_of, int8_choice
from .train import add_cuda_graph_flag, parse_gpus, parse_stages

log = logging.getLogger("pycaffe_lite")


def add_net_arguments(p, default_phase):
    p.add_argument("--model", default="", help="the net definition (prototxt)")
    p.add_argument("--iterations", type=int, default=50, help="number of iterations (50)")
    p.add_argument("--gpu", default="", help="run on the GPU with this device id")
    p.add_argument("--phase", default="", help="TRAIN or TEST (default %s)" % default_phase)
    p.add_argument("--level", type=int, default=0, help="the net level (NetState)")
    p.add_argument("--stage", default="", help="net stages, separated by ','")
    add_cuda_graph_flag(p)
    add_int8_flag(p)
    add_net_flags(p)


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


def open_net(args, default_phase):
    """The net of the flags declared by :func:`add_net_arguments`, after checking
    ``--iterations`` and selecting the device (``--gpu``)."""
    if args.iterations < 1:
        raise CaffeError("--iterations must be >= 1 (got %d)" % args.iterations)
    select_single_gpu(args.gpu)
    cuda_graphs.set_enabled(args.cuda_graph == "on")
    return Net(args.model, parse_phase(args.phase, default_phase), level=args.level,
               stages=parse_stages(args.stage), int8=int8_choice(args))


def run(args):
    use_glog_format()
    if not args.model:
        raise CaffeError("need a model definition to time: --model path/to/net.prototxt")
    net = open_net(args, "TRAIN")
    if net.phase == caffe_pb2.TRAIN:
        net_memory.attach(net, any_net=True)  # nothing reads a diff here
    log.info("Performing Forward")
    initial_loss = net.forward_from_to()
    log.info("Initial loss: %g", initial_loss)
    log.info("Performing Backward")
    net.backward_from_to()
    synchronize()
    log.info("*** Benchmark begins ***")
    log.info("Testing for %d iterations.", args.iterations)
    with backend.track_device_memory() as peak:
        t = time_layers(net, args.iterations, lambda j, ms: log.info(
            "Iteration: %d forward-backward time: %g ms.", j + 1, ms))
    log.info("Average time per layer: ")
    for i, name in enumerate(t["layers"]):
        log.info("%10s\tforward: %g ms.", name, t["forward"][i])
        log.info("%10s\tbackward: %g ms.", name, t["backward"][i])
    log.info("Average Forward pass: %g ms.", t["forward_total"])
    log.info("Average Backward pass: %g ms.", t["backward_total"])
    log.info("Average Forward-Backward: %g ms.", t["total"])
    log.info("Total Time: %g ms.", t["total_all_ms"])
    args.blob_memory = report_blob_memory(net)
    memory = backend.device_memory()
    if memory is not None:
        log.info("GPU memory: %.1f MiB held by the memory pool at its peak, %.1f MiB in use "
                 "at the end.", memory[0] / 2.0 ** 20, memory[1] / 2.0 ** 20)
        args.gpu_memory = {"held_bytes": memory[0], "used_bytes": memory[1]}
    if peak is not None:
        log.info("GPU memory of a timed pass: %.1f MiB in use at the peak, %.1f MiB held by "
                 "the memory pools.", peak.peak / 2.0 ** 20, peak.held / 2.0 ** 20)
        args.gpu_memory = dict(getattr(args, "gpu_memory", None) or {},
                               peak_used_bytes=peak.peak, peak_held_bytes=peak.held)
    log.info("*** Benchmark ends ***")
    args.timings = {"forward": t["forward"], "backward": t["backward"],
                    "total_ms": t["total_all_ms"], "layers": t["layers"]}
    return 0


def report_blob_memory(net):
    """Log (and return) the bytes the net's blobs hold where the net runs."""
    report = net_memory.memory_report(net, device=backend.mode() == backend.GPU)
    mib = 2.0 ** 20
    shared = ""
    if "diff_shared" in report:
        shared = " (activation diffs shared: %.1f MiB for %.1f MiB of diffs)" % (
            report["diff_shared"] / mib, report["diff_unshared"] / mib)
    log.info("Blob memory: data %.1f MiB, diffs %.1f MiB%s, params %.1f MiB (data and diff).",
             report["data"] / mib, report["diff"] / mib, shared, report["params"] / mib)
    return report


COMMANDS = [("time", help_of("time"), add_arguments, run)]
