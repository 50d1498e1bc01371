"""ONNX ops of the mobile nets (MobileNetV3 as torchvision writes it) -> Caffe layers:
HardSigmoid and HardSwish (Power, ReLU6, Power; an Eltwise PROD by the input). Registered in
:data:`.import_ops.IMPORTERS` as the other importers."""

import numpy as np

from ..proto import caffe_pb2
from .import_ops import _name, attrs, importer


def _hard_sigmoid(ctx, node, x, top, alpha, beta):
    """``max(0, min(1, alpha * x + beta))`` as ``ReLU6(6 alpha x + 6 beta) / 6``: a Power, a
    ReLU6 and a Power (Caffe's Clip is not in OpenCV's Caffe importer; ReLU6 is). For
    PyTorch's alpha 1/6 and beta 1/2 this is ``relu6(x + 3) / 6``, PyTorch's own formula."""
    name = _name(node)
    lp = ctx.layer("Power", name + "/affine", [x], [top + "/affine"])
    scale, shift = float(np.float32(6 * alpha)), float(np.float32(6 * beta))
    if scale != 1.0:
        lp.power_param.scale = scale
    if shift != 0.0:
        lp.power_param.shift = shift
    ctx.layer("ReLU6", name + "/relu6", [top + "/affine"], [top + "/relu6"])
    lp = ctx.layer("Power", name, [top + "/relu6"], [top])
    lp.power_param.scale = 1.0 / 6.0


@importer("HardSigmoid")
def hard_sigmoid(ctx, node):
    a = attrs(node)
    _hard_sigmoid(ctx, node, node.input[0], node.output[0], float(a.get("alpha", 0.2)),
                  float(a.get("beta", 0.5)))


@importer("HardSwish")
def hard_swish(ctx, node):
    """``x * HardSigmoid(x)`` with alpha 1/6 and beta 1/2 (opset 14's op): the gate as
    above, then an Eltwise PROD with the input."""
    x, top = node.input[0], node.output[0]
    gate = top + "/gate"
    _hard_sigmoid(ctx, node, x, gate, 1.0 / 6.0, 0.5)
    lp = ctx.layer("Eltwise", _name(node) + "/mul", [x, gate], [top])
    lp.eltwise_param.operation = caffe_pb2.EltwiseParameter.PROD
