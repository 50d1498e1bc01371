"""pycaffe-lite: a Caffe-compatible deep learning framework in Python."""

__version__ = "0.1.0"
