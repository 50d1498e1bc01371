"""ONNX export and import (needs the ``onnx`` extra: ``pip install '.[onnx]'`` in the source tree).

- :func:`export` writes a built :class:`pycaffe_lite.Net` as an ONNX model;
  :func:`export_files` does it from a deploy prototxt and a ``.caffemodel``.
- :func:`to_caffe` turns an ONNX model into a ``.prototxt`` and a ``.caffemodel``.
- :func:`register_converter` adds the exporter of a further Caffe layer type.

``onnx`` itself is imported on first use, so ``import pycaffe_lite.onnx`` works without it.
"""

from .builder import CONVERTERS, register_converter
from .export import export, export_files
from .import_ import to_caffe

__all__ = ["CONVERTERS", "export", "export_files", "register_converter", "to_caffe"]
