"""``pycaffe-lite device_query``: the GPU that ``--gpu`` would use."""

from .. import backend


def add_arguments(p):
    p.add_argument("--gpu", default="0", help="device id (default 0)")


def run(args):
    if not backend.gpu_available():
        print("No CUDA device available (CuPy missing or no GPU): pycaffe-lite runs on the CPU.")
        return 0
    mod = backend.device_module()
    dev_id = int(str(args.gpu).split(",")[0])
    props = mod.cuda.runtime.getDeviceProperties(dev_id)
    name = props["name"]
    print("Device id:                     %d" % dev_id)
    name = name.decode() if isinstance(name, bytes) else name
    print("Name:                          %s" % name)
    print("Total global memory:           %d" % props["totalGlobalMem"])
    print("Compute capability:            %d.%d" % (props["major"], props["minor"]))
    print("Multiprocessors:               %d" % props["multiProcessorCount"])
    return 0


COMMANDS = [("device_query", "show the GPU device that --gpu would use", add_arguments, run)]
