"""ONNX import of the less common forms of ops that convert: non-square geometry, default
axes, broadcasting slopes and constants, constant operands, degenerate variadics, Pads that
cannot become a pool's pad, training-mode Dropout and shapes known only after folding. Each
accepted model gives onnxruntime's numbers from a prototxt that loads back; each refused one is
an error naming the node and its op."""

import numpy as np
import pytest

from onnx import numpy_helper

from pycaffe_lite import onnx as caffe_onnx
from pycaffe_lite.errors import CaffeError
from test_onnx_import import RNG, Graph, convert_and_compare


def _const(g, value):
    name = g.w(1)
    g.inits[-1].CopyFrom(numpy_helper.from_array(np.asarray(value), name))
    return name


def test_non_square_convolution_geometry(tmp_path):
    # Inception's 1x3 / 3x1 convolutions: Caffe takes kernel_h/kernel_w (and stride_h/w,
    # pad_h/w) instead of the repeated fields, never both
    g = Graph((1, 3, 7, 8))
    y = g.op("Conv", ["x", g.w(4, 3, 1, 3), g.w(4, scale=0.1)], "conv13", kernel_shape=[1, 3],
             strides=[1, 2], pads=[0, 1, 0, 1])
    y = g.op("Conv", [y, g.w(5, 4, 3, 1)], "conv31", kernel_shape=[3, 1], strides=[2, 2],
             pads=[1, 0, 1, 0])
    g.op("ConvTranspose", [y, g.w(5, 2, 1, 3), g.w(2, scale=0.1)], "deconv",
         kernel_shape=[1, 3], strides=[1, 2], pads=[0, 1, 0, 1])
    deploy, net = convert_and_compare(g.model(["deconv"]), tmp_path, "nonsquare")
    p = {lp.name: lp.convolution_param for lp in deploy.layer}
    assert (p["conv13"].kernel_h, p["conv13"].kernel_w) == (1, 3)
    assert not p["conv13"].kernel_size and not p["conv13"].stride and not p["conv13"].pad
    assert (p["conv31"].kernel_h, p["conv31"].kernel_w, list(p["conv31"].stride)) == (3, 1, [2])
    assert (p["deconv"].stride_h, p["deconv"].stride_w, p["deconv"].pad_w) == (1, 2, 1)
    assert net.blobs["deconv"].shape == (1, 2, 4, 3)
