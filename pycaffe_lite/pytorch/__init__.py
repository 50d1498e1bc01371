"""Caffe net -> PyTorch: the source of a readable ``torch.nn.Module`` and its weights, and a
comparison of our forward with other engines, layer by layer.

- :func:`export` writes ``model.py`` and ``weights.pt`` for a built
  :class:`pycaffe_lite.Net`; :func:`export_files` does it from a prototxt and weights.
- :func:`register_generator` adds the PyTorch code of a further Caffe layer type.
- :mod:`.compare` runs one input through our net, OpenCV, onnxruntime and PyTorch.

Nothing here imports torch: the weights are written in PyTorch's file format directly, and
the exported module is loaded only where torch is installed.
"""

from .codegen import GENERATORS, register_generator
from .export import export, export_files, generate

__all__ = ["GENERATORS", "export", "export_files", "generate", "register_generator"]
