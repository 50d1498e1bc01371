"""A Deconvolution whose output size is 0 on a spatial axis. BVLC's
DeconvolutionLayer::compute_output_shape writes ``stride * (in - 1) + extent - 2 * pad`` with no
check, and Blob::Reshape accepts a 0 (only a negative size fails its CHECK): the top is empty,
the forward writes nothing, and the backward adds nothing to the weight and bias diffs and
gives a zero bottom diff (im2col of an empty image is all padding). Both exporters give the
empty top; torch's own conv_transpose2d is the independent reference."""

import numpy as np
import pytest

from helpers.export_sweep import run_pytorch
from helpers.onnx_runtime import fill_random, input_layers, net_from_text, run_ort
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import caffe_pb2

torch = pytest.importorskip("torch")

SHAPE = (2, 3, 1, 4)
LAYER = ('layer { name: "layer" type: "Deconvolution" bottom: "data" top: "out" '
         'convolution_param { num_output: 4 kernel_size: 2 stride: 2 pad: %d %s } }')


def _net(pad=1, extra="", phase=caffe_pb2.TEST, shape=SHAPE):
    text = input_layers({"data": shape}) + "\n" + LAYER % (pad, extra)
    if phase == caffe_pb2.TRAIN:
        text += '\nlayer { name: "sum" type: "Reduction" bottom: "out" top: "loss" ' \
                'loss_weight: 1 }'
    net = net_from_text(text, phase)
    fill_random(net, seed=5)
    return net


def _x(shape=SHAPE, seed=1):
    return np.random.default_rng(seed).normal(size=shape).astype(np.float32)


def _torch_reference(net, x):
    w, b = (torch.from_numpy(np.array(blob.data)) for blob in net.layers[-1].blobs)
    return torch.nn.functional.conv_transpose2d(torch.from_numpy(x), w, b, stride=2,
                                                padding=1).numpy()


def test_forward_gives_an_empty_top():
    net = _net()
    x = _x()
    out = net.forward(data=x)["out"]
    # height 2 * (1 - 1) + 2 - 2 * 1 = 0, width 2 * (4 - 1) + 2 - 2 = 6
    assert out.shape == (2, 4, 0, 6) == _torch_reference(net, x).shape


def test_backward_adds_nothing():
    net = _net(phase=caffe_pb2.TRAIN)
    deconv = net.layers[1]
    for blob in deconv.blobs:
        blob.diff[...] = 7.0
    net.forward(data=_x())
    assert float(net.blobs["loss"].data) == 0.0  # the sum of an empty top
    net.backward()
    for blob in deconv.blobs:
        np.testing.assert_array_equal(blob.diff, 7.0)
    x = torch.from_numpy(_x()).requires_grad_()
    w = torch.from_numpy(np.array(deconv.blobs[0].data)).requires_grad_()
    torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), 0.0)
    np.testing.assert_array_equal(w.grad.numpy(), 0.0)
    np.testing.assert_array_equal(net.blobs["data"].diff, x.grad.numpy())


def test_a_negative_size_is_refused_naming_the_layer():
    with pytest.raises(CaffeError, match=r"layer.*'layer'.*negative on spatial axis 0"):
        _net(pad=2)


@pytest.mark.parametrize("extra", ["", "axis: 2"])
def test_exporters_give_the_empty_top(extra):
    from pycaffe_lite import onnx as caffe_onnx

    shape = SHAPE if not extra else (2, 5, 3, 1, 4)
    net = _net(extra=extra, shape=shape)
    x = _x(shape)
    ours = net.forward(data=x)["out"]
    assert 0 in ours.shape
    model, _ = caffe_onnx.export(net, None)
    assert run_ort(model, {"data": x})["out"].shape == ours.shape
    bigger = _x((3,) + shape[1:], seed=2)  # the batch stays dynamic
    assert run_ort(model, {"data": bigger})["out"].shape == (3,) + ours.shape[1:]
    assert run_pytorch(net, {"data": x}, None)["out"].shape == ours.shape


def test_device_path_gives_the_empty_top_too():
    """In GPU mode (a simulated device here) the empty top and the backward's zeros are the
    CPU's."""
    from pycaffe_lite import backend
    from pycaffe_lite.testing.simdevice import cpu_and_simulated_gpu

    def forward_backward():
        backend.set_random_seed(4)
        net = _net(phase=caffe_pb2.TRAIN)
        for blob in net.layers[1].blobs:
            blob.diff[...] = 7.0
        net.forward(data=_x())
        net.backward()
        return [net.blobs["out"].data.copy(), net.blobs["data"].diff.copy()] + \
            [b.diff.copy() for b in net.layers[1].blobs]

    cpu, gpu, _ = cpu_and_simulated_gpu(forward_backward)
    assert cpu[0].shape == gpu[0].shape == (2, 4, 0, 6)
    for a, b in zip(cpu, gpu):
        np.testing.assert_array_equal(b, a)
    np.testing.assert_array_equal(gpu[1], 0.0)
