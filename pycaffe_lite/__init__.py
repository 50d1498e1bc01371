"""pycaffe-lite: a Caffe-compatible deep learning framework in Python.

``import pycaffe_lite as caffe`` gives pycaffe's surface: ``caffe.Net``, ``caffe.TRAIN`` /
``caffe.TEST``, ``caffe.set_mode_cpu()`` / ``set_mode_gpu()``, ``caffe.Layer`` for Python layers,
``caffe.layer_type_list()``.
"""

__version__ = "0.1.0"

from .backend import set_device, set_mode_cpu, set_mode_gpu, set_random_seed  # noqa: E402
from .blob import Blob  # noqa: E402
from .errors import CaffeError  # noqa: E402
from .layer import Layer  # noqa: E402
from .net import TEST, TRAIN, Net  # noqa: E402
from .proto import caffe_pb2  # noqa: E402
from .registry import register_layer  # noqa: E402


def layer_type_list():
    """Every registered layer type string, sorted."""
    from .layers import load_all
    from .registry import layer_type_list as _names

    load_all()
    return _names()


__all__ = ["Net", "TRAIN", "TEST", "Blob", "Layer", "CaffeError", "caffe_pb2", "set_mode_cpu",
           "set_mode_gpu", "set_device", "set_random_seed", "register_layer", "layer_type_list",
           "__version__"]
