"""``pycaffe-lite device_query``: the GPU that ``--gpu`` would use (Caffe's device_query)."""

from .. import backend
from ..ops.gpu import cudnn
from . import help_of


def add_arguments(p):
    p.add_argument("--gpu", default="0", help="device id (default 0; 'all' lists every GPU)")


def _print(props):
    gib = props["total_memory"] / float(1 << 30)
    print("Device id:                     %d" % props["id"])
    print("Name:                          %s" % props["name"])
    print("Compute capability:            %s" % props["compute_capability"])
    print("Total global memory:           %d (%.1f GiB)" % (props["total_memory"], gib))
    print("Multiprocessors:               %d" % props["multiprocessors"])
    print("Clock rate:                    %d kHz" % props["clock_khz"])
    print("CUDA runtime / driver:         %s / %s" % (props["cuda_runtime"],
                                                      props["cuda_driver"]))
    print("CuPy:                          %s" % props["cupy"])
    version = cudnn.version()
    print("cuDNN:                         %s" % (version if version is not None
                                                 else "not available (CAFFE engine only)"))


def run(args):
    from ..errors import CaffeError
    from .train import parse_gpus

    flag = str(args.gpu).strip()
    if flag != "all":  # a bad --gpu is an error with a GPU or without one
        ids = parse_gpus(flag) or [0]
        negative = [i for i in ids if i < 0]
        if negative:
            raise CaffeError("--gpu: device id must be >= 0, got %d" % negative[0])
    if not backend.gpu_available():
        print("No CUDA device available (CuPy missing or no GPU): pycaffe-lite runs on the CPU.")
        return 0
    if flag == "all":
        ids = list(range(backend.device_count()))
    for i, dev_id in enumerate(ids):
        if i:
            print()
        _print(backend.device_properties(dev_id))
    return 0


COMMANDS = [("device_query", help_of("device_query"), add_arguments, run)]
