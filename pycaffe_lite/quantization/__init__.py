"""int8 post-training quantization of a Caffe model with its own data (needs the ``onnx``
extra, and onnxruntime for the accuracy it costs).

- :func:`quantize` calibrates a train/test net over TEST batches of its data layers and writes
  a QDQ ONNX model (``model.int8.onnx``), the net with Intel Caffe's ``quantization_param``
  (``quantized.prototxt``) and ``report.json``: float and int8 accuracy, per-layer scales,
  the layers left in float and why (docs/int8.md).
- :mod:`.calibrate`: the statistics and thresholds (min-max, percentile, TensorRT's entropy).

Running a net with Intel Caffe's ``quantization_param`` in int8 is the Net's own business
(:mod:`pycaffe_lite.net_int8`).
"""

from .calibrate import METHODS, Histogram, kl_divergence, threshold
from .run import format_report, quantize

__all__ = ["METHODS", "Histogram", "format_report", "kl_divergence", "quantize", "threshold"]
