"""Darknet import: ``.cfg`` + ``.weights`` to a Caffe prototxt + ``.caffemodel``, and Darknet's
training settings to a solver.

::

    from pycaffe_lite.darknet import darknet2caffe
    result = darknet2caffe("yolov3-tiny.cfg", "yolov3-tiny.weights",
                           "yolov3-tiny.prototxt", "yolov3-tiny.caffemodel",
                           solver="yolov3-tiny_solver.prototxt")
    net = pycaffe_lite.Net("yolov3-tiny.prototxt", "yolov3-tiny.caffemodel", pycaffe_lite.TEST)

The same from the command line: ``pycaffe-lite darknet2caffe MODEL.cfg [MODEL.weights]
OUT.prototxt [OUT.caffemodel] [--solver OUT_solver.prototxt]``. What each Darknet section and
key becomes is tabulated in ``README.md`` next to this file.
"""

from .cfg import CfgSection, DarknetCfg, DarknetError, DarknetWarning, parse_cfg, read_cfg
from .convert import BN_VARIANTS, Conversion, convert, darknet2caffe
from .solver import solver_from_cfg
from .weights import DarknetWeights, read_weights

__all__ = ["BN_VARIANTS", "CfgSection", "Conversion", "DarknetCfg", "DarknetError",
           "DarknetWarning", "DarknetWeights", "convert", "darknet2caffe", "parse_cfg",
           "read_cfg", "read_weights", "solver_from_cfg"]
