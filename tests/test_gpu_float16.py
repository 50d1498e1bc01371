"""NVCaffe's float16 types on a real NVIDIA GPU (``@pytest.mark.gpu``: skipped, with the reason,
where no GPU is present; tests/conftest.py). tests/test_float16.py checks the same logic on the
simulated device.

- a cuDNN convolution in float16 with math FLOAT (forward, data and filter gradients) against
  a float64 reference from the same float16-rounded values: within float16 rounding (cuDNN
  accumulates in float32), and cuDNN really ran it;
- LeNet (models/lenet) with ``default_forward_type: FLOAT16`` and ``default_backward_type:
  FLOAT16`` (math FLOAT, ``global_grad_scale: 64``) trains on the bundled MNIST subset to a
  test accuracy of at least 0.97, its params float16 on the device and their masters
  float32.
"""

import os

import numpy as np
import pytest
from google.protobuf import text_format

import pycaffe_lite as caffe
from pycaffe_lite import backend, net_types
from pycaffe_lite.ops import gpu
from pycaffe_lite.proto import caffe_pb2, protoio
from pycaffe_lite.solvers import get_solver

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("cupy_device")]

F16 = np.float16
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "models", "lenet")


CONV = """
force_backward: true
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 8 dim: 16 dim: 14 dim: 14 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "y" forward_type: FLOAT16
  backward_type: FLOAT16 forward_math: FLOAT backward_math: FLOAT
  convolution_param { num_output: 32 kernel_size: 3 pad: 1 engine: CUDNN
    weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "gaussian" std: 0.1 } } }
"""


def _conv64(x, w, b):
    from numpy.lib.stride_tricks import sliding_window_view
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = sliding_window_view(xp, w.shape[2:], axis=(2, 3))
    return np.einsum("nchwij,kcij->nkhw", windows, w) + b[None, :, None, None], windows


def test_cudnn_convolution_in_float16_against_a_float32_reference(monkeypatch):
    if not gpu.cudnn.available():
        pytest.skip("cuDNN is not available: %s" % gpu.cudnn.unavailable_reason())
    calls = []
    forward = gpu.cudnn.conv_forward

    def counting(x, *args, **kwargs):
        calls.append(x.dtype)
        return forward(x, *args, **kwargs)

    monkeypatch.setattr(gpu.cudnn, "conv_forward", counting)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 16, 14, 14)).astype(F16)
    dy = rng.standard_normal((8, 32, 14, 14)).astype(F16)
    backend.set_mode_gpu()
    net = caffe.Net(text_format.Parse(CONV, caffe_pb2.NetParameter()), caffe.TRAIN)
    conv = net.layers[1]
    assert [b.dtype for b in conv.blobs] == [F16, F16] and net.blobs["y"].dtype == F16
    net.blobs["x"].data[...] = x
    net.forward()
    net.blobs["y"].diff[...] = dy
    net.backward()
    y = net.blobs["y"].data.astype(np.float64)
    dx = net.blobs["x"].diff.astype(np.float64)  # converted back into the float32 input's diff
    dw = conv.blobs[0].diff.astype(np.float64)
    w, b = (blob.data.astype(np.float64) for blob in conv.blobs)
    assert F16 in calls  # cuDNN ran the float16 convolution
    ref_y, windows = _conv64(x.astype(np.float64), w, b)
    d = dy.astype(np.float64)
    ref_dw = np.einsum("nchwij,nkhw->kcij", windows, d)
    flipped = w[:, :, ::-1, ::-1]
    ref_dx, _ = _conv64(d, flipped.transpose(1, 0, 2, 3), np.zeros(16))
    for got, want in ((y, ref_y), (dx, ref_dx), (dw, ref_dw)):
        scale = np.abs(want).max()
        np.testing.assert_allclose(got, want, rtol=0, atol=4e-3 * scale)


def _lenet_fp16_param(lmdbs, tmp_path, iterations):
    train_db, test_db = lmdbs
    net = protoio.read_net_param(os.path.join(LENET, "lenet_train_test.prototxt"))
    for layer in net.layer:
        if layer.type == "Data":
            layer.data_param.source = str(train_db if layer.include[0].phase == 0 else test_db)
    net.default_forward_type = net.default_backward_type = caffe_pb2.FLOAT16
    net.default_forward_math = net.default_backward_math = caffe_pb2.FLOAT
    net.global_grad_scale = 64
    param = protoio.read_solver_param(os.path.join(LENET, "lenet_solver.prototxt"))
    param.ClearField("net")
    param.net_param.CopyFrom(net)
    param.snapshot_prefix = str(tmp_path / "lenet16")
    param.solver_mode = caffe_pb2.SolverParameter.GPU
    param.max_iter, param.test_interval, param.snapshot = iterations, iterations, 0
    param.random_seed = 1
    return param


def test_lenet_trains_in_float16_on_the_gpu(mnist_lmdbs, tmp_path):
    """The LeNet example in float16 (6000 iterations of the standard solver, seed 1) reaches
    0.97 on the 1,000 test digits. The same run in float32 on the CPU (2026-11-27) tested
    0.969, 0.971, 0.972, 0.971 after 2000, 4000, 6000, 8000 iterations: on this 4,000-digit
    subset LeNet levels off there, so the goal leaves float16 a margin of a digit or two."""
    backend.set_mode_gpu()
    solver = get_solver(_lenet_fp16_param(mnist_lmdbs, tmp_path, 6000))
    try:
        params = solver.net.learnable_params
        assert all(p.dtype == F16 for p in params)
        assert gpu.is_cupy(params[0].read_data())
        solver.solve()
        masters = net_types.of(solver.net).masters
        assert sorted(masters) == list(range(len(params)))
        assert all(m.dtype == np.float32 for m in masters.values())
        scores = dict(solver.test_scores[0])
    finally:
        solver.close()
    print("LeNet float16 on the GPU, 6000 iterations: %s" % scores)
    assert scores["accuracy"] >= 0.97
