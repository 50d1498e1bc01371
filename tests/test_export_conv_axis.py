"""Convolution and Deconvolution over a channel axis other than 1 (Caffe's
``ConvolutionParameter.axis``: the axes before it are all "num") in both exporters: against
our CPU forward, and against torch's conv of the batch-folded tensor computed here."""

import numpy as np
import pytest

from helpers.export_sweep import run_pytorch
from helpers.onnx_runtime import assert_close, fill_random, input_layers, net_from_text, \
    run_ort

torch = pytest.importorskip("torch")

CASES = [("Convolution", 2, (2, 3, 4, 6, 7)), ("Deconvolution", 2, (2, 3, 4, 6, 7)),
         ("Convolution", -3, (2, 3, 4, 6, 7)), ("Convolution", 0, (4, 6, 7)),
         ("Deconvolution", 3, (2, 2, 3, 4, 6, 7)), ("Convolution", 2, (2, 3, 4, 9))]


def _net(kind, axis, shape):
    text = input_layers({"data": shape}) + (
        '\nlayer { name: "layer" type: "%s" bottom: "data" top: "out" convolution_param '
        '{ num_output: 4 kernel_size: 3 stride: 2 pad: 1 group: 2 axis: %d } }' % (kind, axis))
    net = net_from_text(text)
    fill_random(net, seed=3)
    return net


def _folded_reference(net, kind, axis, x):
    """torch's conv of ``x`` with the leading axes folded into one batch axis."""
    axis = axis + x.ndim if axis < 0 else axis
    w, b = (torch.from_numpy(np.array(blob.data)) for blob in net.layers[-1].blobs)
    folded = torch.from_numpy(x.reshape((-1,) + x.shape[axis:]))
    n = x.ndim - axis - 1
    fn = getattr(torch.nn.functional,
                 ("conv%dd" if kind == "Convolution" else "conv_transpose%dd") % n)
    y = fn(folded, w, b, stride=2, padding=1, groups=2).numpy()
    return y.reshape(x.shape[:axis] + y.shape[1:])


@pytest.mark.parametrize("kind,axis,shape", CASES)
def test_conv_axis_onnx_and_pytorch(kind, axis, shape):
    from pycaffe_lite import onnx as caffe_onnx

    net = _net(kind, axis, shape)
    x = np.random.default_rng(7).normal(size=shape).astype(np.float32)
    ours = np.array(net.forward(data=x)["out"], copy=True)
    reference = _folded_reference(net, kind, axis, x)
    assert_close(reference, ours, "ours vs torch on the folded tensor")
    model, _ = caffe_onnx.export(net, None)
    assert_close(reference, run_ort(model, {"data": x})["out"], "onnxruntime")
    assert_close(reference, run_pytorch(net, {"data": x}, None)["out"], "generated PyTorch")


def test_conv_axis_onnx_other_batch():
    """The folded graph keeps the batch dynamic: a batch of 3 on a net built for 2."""
    from pycaffe_lite import onnx as caffe_onnx

    net = _net("Convolution", 2, (2, 3, 4, 6, 7))
    model, _ = caffe_onnx.export(net, None)
    x = np.random.default_rng(8).normal(size=(3, 3, 4, 6, 7)).astype(np.float32)
    assert_close(_folded_reference(net, "Convolution", 2, x), run_ort(model, {"data": x})["out"],
                 "onnxruntime at batch 3")
