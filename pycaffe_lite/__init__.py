"""pycaffe-lite: a Caffe-compatible deep learning framework in Python.

``import pycaffe_lite as caffe`` gives pycaffe's surface: ``caffe.Net``, ``caffe.TRAIN`` /
``caffe.TEST``, ``caffe.set_mode_cpu()`` / ``set_mode_gpu()``, ``caffe.set_device``,
``caffe.set_random_seed``, ``caffe.Layer`` for Python layers, ``caffe.layer_type_list()``,
``caffe.io`` (Transformer, load_image, ...), ``caffe.NetSpec`` / ``caffe.layers`` /
``caffe.params`` / ``caffe.to_proto``, ``caffe.Classifier``, ``caffe.Detector`` and
``caffe.draw``. Each of these loads its module the first time it is read (``import
pycaffe_lite`` itself loads neither NumPy nor the net), and optional packages (Pillow, SciPy,
OpenCV, h5py, matplotlib) are imported only by the functions that use them.
"""

__version__ = "0.1.0"

import os  # noqa: E402
import sys  # noqa: E402

# OpenBLAS's idle threads spin for about 2^28 cycles after each matrix product before they
# sleep; between the products of a training step they then take a core from everything else
# (the compiled kernels, NumPy), which made a LeNet step about 20% slower on 2 cores. A short
# spin (2^4 cycles) only costs a thread wake-up per product. OpenBLAS reads this when it is
# loaded: it applies when pycaffe_lite is imported before NumPy (as by the pycaffe-lite
# command), and an explicit setting wins.
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "4")

from .errors import CaffeError  # noqa: E402
from . import _face  # noqa: E402

# ``caffe.layers``: a property of the package's module class (see _face.Face)
sys.modules[__name__].__class__ = _face.Face

# The rest of the face loads on first use (PEP 562's module __getattr__): ``import
# pycaffe_lite`` stays light for scripts and commands that never build a net. The names, and
# the module each comes from:
_LAZY = {
    "set_device": ".backend", "set_mode_cpu": ".backend", "set_mode_gpu": ".backend",
    "set_random_seed": ".backend", "Blob": ".blob", "Layer": ".layer", "Net": ".net",
    "TEST": ".net", "TRAIN": ".net", "caffe_pb2": ".proto", "register_layer": ".registry",
    "NetSpec": ".net_spec", "params": ".net_spec", "to_proto": ".net_spec",
    "Classifier": ".classifier", "Detector": ".detector", "Timer": ".profiling",
    "SGDSolver": ".solvers", "NesterovSolver": ".solvers", "AdaGradSolver": ".solvers",
    "RMSPropSolver": ".solvers", "AdaDeltaSolver": ".solvers", "AdamSolver": ".solvers",
    "get_solver": ".solvers", "NCCL": ".parallel", "set_multiprocess": ".parallel",
    "set_solver_count": ".parallel", "set_solver_rank": ".parallel",
    "solver_count": ".parallel", "solver_rank": ".parallel",
}

# A variable read when its module is imported, set to a value it ignores with a warning:
# that module loads now, so the warning comes at ``import pycaffe_lite`` as it always did.
_face.warn_now_for_ignored_settings()


def __getattr__(name):
    return _face.resolve(sys.modules[__name__], name, _LAZY)


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"layers"} | set(_face.submodule_names(__path__)))


def set_cuda_graph(flag):
    """Capture TEST forwards and training iterations on the GPU into CUDA graphs and replay
    them (True, the default) or run them layer by layer (False); see
    :mod:`pycaffe_lite.cuda_graphs` and :mod:`pycaffe_lite.solvers.train_graph`. Returns the
    old setting."""
    from . import cuda_graphs
    return cuda_graphs.set_enabled(flag)


def set_allow_tf32(flag):
    """Let cuDNN compute float32 convolutions with TF32 tensor cores (faster, about 1e-3
    relative error), as PyTorch's ``allow_tf32``; off by default. Returns the old setting."""
    from .ops.gpu import cudnn_graphs
    return cudnn_graphs.set_allow_tf32(flag)


def set_share_diffs(flag):
    """Let a Solver's train net keep activation diffs that are never needed at the same time
    in one buffer (True, the default; ``PYCAFFE_LITE_SHARE_DIFFS=0`` turns it off) or keep every
    blob's diff readable after a step (False); applies to solvers created afterwards (see
    :mod:`pycaffe_lite.net_memory`). Returns the old setting."""
    from . import net_memory
    return net_memory.set_enabled(flag)


def init_log(level=0, stderr=False):
    """pycaffe's ``caffe.init_log``: show pycaffe-lite's log from glog's ``level`` up (0 INFO,
    1 WARNING, 2 ERROR, 3 FATAL) on standard error, in glog's format. ``stderr`` is accepted
    (the log always goes to standard error)."""
    import logging

    from .tools_log import use_glog_format
    levels = {0: logging.INFO, 1: logging.WARNING, 2: logging.ERROR, 3: logging.CRITICAL}
    if level not in levels:
        raise CaffeError("init_log: level must be 0 (INFO), 1 (WARNING), 2 (ERROR) or 3 "
                         "(FATAL), got %r" % (level,))
    logging.basicConfig()
    logging.getLogger("pycaffe_lite").setLevel(levels[level])
    use_glog_format()


def log(message):
    """pycaffe's ``caffe.log``: ``message`` into pycaffe-lite's log at INFO."""
    import logging
    logging.getLogger("pycaffe_lite").info("%s", message)


def has_nccl():
    """Whether NCCL can be used (CuPy with its NCCL binding and a GPU), as pycaffe's
    ``caffe.has_nccl``."""
    from .backend import GPUUnavailableError, nccl
    try:
        nccl()
    except GPUUnavailableError:
        return False
    return True


def layer_type_list():
    """Every registered layer type string, sorted."""
    from .layers import load_all
    from .registry import layer_type_list as _names

    load_all()
    return _names()


__all__ = ["Net", "TRAIN", "TEST", "Blob", "Layer", "CaffeError", "caffe_pb2", "set_mode_cpu",
           "set_mode_gpu", "set_device", "set_random_seed", "register_layer", "layer_type_list",
           "set_cuda_graph", "set_allow_tf32", "set_share_diffs", "init_log", "log",
           "has_nccl", "Timer",
           "io", "net_spec", "draw", "NetSpec", "layers", "params", "to_proto", "Classifier",
           "Detector", "SGDSolver", "NesterovSolver", "AdaGradSolver", "RMSPropSolver",
           "AdaDeltaSolver", "AdamSolver", "get_solver", "__version__"]

__all__ += ["NCCL", "set_multiprocess", "set_solver_count", "set_solver_rank", "solver_count",
            "solver_rank"]


# ---- int8 post-training quantization (pycaffe_lite.quantization; ``pycaffe-lite quantize``) ----
def quantize(model, weights, calibration_iterations, output_dir, method="entropy",
             per_channel=False, eval_iterations=50, skip=(), **options):
    """Calibrate ``model`` (a train/test prototxt) with ``weights`` over
    ``calibration_iterations`` TEST batches of its data layers and write ``model.int8.onnx``,
    ``quantized.prototxt`` and ``report.json`` into ``output_dir``; returns the report
    (:func:`pycaffe_lite.quantization.quantize`, docs/int8.md)."""
    from .quantization import quantize as run

    return run(model, weights, calibration_iterations, output_dir, method=method,
               per_channel=per_channel, eval_iterations=eval_iterations, skip=skip, **options)


__all__ += ["quantize"]
