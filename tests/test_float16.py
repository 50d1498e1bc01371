"""NVCaffe's float16 types in GPU mode, on the simulated device (NumPy underneath, so float16
arrays are real float16): pycaffe_lite.net_types and pycaffe_lite.solvers.mixed.

- a small net (convolution, pooling, ReLU, inner product, softmax loss) with
  ``default_forward_type: FLOAT16`` keeps its tops and params in float16 on the device; its
  forward equals a float64 NumPy reference computed from the float16-rounded inputs and weights
  within float16 rounding (a relative 2e-3 per layer);
- every layer type of ``net_types.FLOAT16_LAYERS`` in float16, forward and backward, against
  the same layer in float64 on the same float16-rounded values;
- the solver's update runs on float32 master weights: one and two SGD steps equal the float32
  arithmetic done by hand (gradient / scale, weight decay, momentum, rate) bit for bit, and the
  float16 weights are the masters rounded;
- global_grad_scale multiplies the float16 gradients by the scale and leaves the update as it
  was; a gradient that underflows to 0 in float16 survives with a scale; the adaptive scale
  follows NVCaffe's formula;
- a mixed net converts at the boundary; weights are saved from the masters and resuming
  restores them exactly; bad types are refused naming the layer or the solver; CPU mode keeps
  float32;
- a small LeNet trains in float16 on the MNIST subset to the float32 run's accuracy.
"""

import logging

import numpy as np
import pytest
from google.protobuf import text_format
from numpy.lib.stride_tricks import sliding_window_view

import pycaffe_lite as caffe
from pycaffe_lite import backend, net_types
from pycaffe_lite.errors import CaffeError, NetError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.solvers import get_solver
from pycaffe_lite.testing.simdevice import DeviceArray, simulated_device

F16 = np.float16
HALF_RTOL = 2e-3  # float16 keeps 11 significant bits: 4.9e-4 per rounding, a few roundings

SMALL = """
name: "small16"
default_forward_type: FLOAT16
default_backward_type: FLOAT16
%(extra)s
layer { name: "in" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 4 dim: 2 dim: 6 dim: 6 } shape { dim: 4 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 3 kernel_size: 3
    weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "relu" type: "ReLU" bottom: "pool" top: "pool" }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
  inner_product_param { num_output: 5
    weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


@pytest.fixture(autouse=True)
def cpu_afterwards():
    yield
    backend.set_mode_cpu()


def _param(text=SMALL, **extra):
    lines = "\n".join("%s: %s" % kv for kv in extra.items())
    return text_format.Parse(text % {"extra": lines}, caffe_pb2.NetParameter())


def _inputs(seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((4, 2, 6, 6)), np.array([0, 1, 2, 4], np.float32)


def _feed(net, x, labels):
    net.blobs["data"].data[...] = x
    net.blobs["label"].data[...] = labels


# ---- float64 references ----------------------------------------------------------------------
def _conv(x, w, b):
    windows = sliding_window_view(x, w.shape[2:], axis=(2, 3))  # N C H' W' kh kw
    return np.einsum("nchwij,kcij->nkhw", windows, w) + b[None, :, None, None]


def _maxpool(x):
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _softmax_loss(scores, labels):
    z = scores - scores.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(labels)), labels.astype(int)].mean()


def _reference(x, params, labels):
    (w1, b1), (w2, b2) = params
    conv = _conv(x, w1, b1)
    pool = np.maximum(_maxpool(conv), 0)
    ip = pool.reshape(len(x), -1) @ w2.T + b2
    return conv, pool, ip, _softmax_loss(ip, labels)


def _f64(blob):
    return blob.data.astype(np.float64)


# ---- storage and forward -----------------------------------------------------------------------
def test_float16_net_stores_in_float16_on_the_device_and_matches_a_float64_reference(caplog):
    x, labels = _inputs()
    with simulated_device(), caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        backend.set_mode_gpu()
        net = caffe.Net(_param(), caffe.TRAIN)
        for name in ("conv", "pool", "ip"):
            blob = net.blobs[name]
            assert blob.dtype == F16
        for name in ("conv", "ip"):
            assert [b.dtype for b in net.params[name]] == [F16, F16]
        # data and loss layers compute in float32 (the loss's bottom is a converted copy)
        assert net.blobs["data"].dtype == np.float32 and net.blobs["loss"].dtype == np.float32
        _feed(net, x, labels)
        loss = net.forward()["loss"]
        for name in ("conv", "pool", "ip"):  # computed on the device, in float16
            arr = net.blobs[name].read_data()
            assert isinstance(arr, DeviceArray) and arr.dtype == F16
        params = [(_f64(net.params[n][0]), _f64(net.params[n][1])) for n in ("conv", "ip")]
        conv, pool, ip = (_f64(net.blobs[n]) for n in ("conv", "pool", "ip"))
    assert "compute in float32" in caplog.text and "in (Input)" in caplog.text
    x16 = x.astype(F16).astype(np.float64)
    ref_conv, _, _, _ = _reference(x16, params, labels)
    np.testing.assert_allclose(conv, ref_conv, rtol=HALF_RTOL, atol=HALF_RTOL)
    # each later layer from the float16 values its producer stored
    np.testing.assert_array_equal(pool, np.maximum(_maxpool(conv), 0))
    ref_ip = pool.reshape(4, -1) @ params[1][0].T + params[1][1]
    np.testing.assert_allclose(ip, ref_ip, rtol=HALF_RTOL, atol=HALF_RTOL)
    assert float(loss) == pytest.approx(_softmax_loss(ip, labels), rel=1e-5)  # float32 loss


def test_cpu_mode_keeps_float32_with_a_note(caplog):
    with caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        net = caffe.Net(_param(), caffe.TRAIN)
    assert all(b.dtype == np.float32 for b in net.blobs.values())
    assert all(b.dtype == np.float32 for bs in net.params.values() for b in bs)
    assert net_types.of(net) is None
    assert "FLOAT16 run as this net's float type" in caplog.text


# ---- each float16 layer type against float64 -------------------------------------------------
LAYER_CASES = {
    "Convolution": ('convolution_param { num_output: 3 kernel_size: 3 pad: 1 stride: 2 '
                    'weight_filler { type: "gaussian" std: 0.3 } '
                    'bias_filler { type: "gaussian" std: 0.2 } }', [(2, 3, 7, 6)]),
    "Deconvolution": ('convolution_param { num_output: 2 kernel_size: 3 stride: 2 '
                      'weight_filler { type: "gaussian" std: 0.3 } '
                      'bias_filler { type: "gaussian" std: 0.2 } }', [(2, 3, 4, 5)]),
    "InnerProduct": ('inner_product_param { num_output: 4 '
                     'weight_filler { type: "gaussian" std: 0.3 } '
                     'bias_filler { type: "gaussian" std: 0.2 } }', [(3, 2, 3, 2)]),
    "Pooling": ("pooling_param { pool: AVE kernel_size: 3 stride: 2 }", [(2, 3, 7, 7)]),
    "ReLU": ("relu_param { negative_slope: 0.1 }", [(2, 3, 4)]),
    "Sigmoid": ("", [(2, 3, 4)]),
    "TanH": ("", [(2, 3, 4)]),
    "Split": ("", [(2, 3, 4)]),
    "Eltwise": ("eltwise_param { operation: SUM coeff: 0.5 coeff: -2 }", [(2, 3, 4)] * 2),
    "Concat": ("concat_param { axis: 1 }", [(2, 3, 4), (2, 2, 4)]),
    "Flatten": ("", [(2, 3, 2, 2)]),
    "Reshape": ("reshape_param { shape { dim: 0 dim: -1 } }", [(2, 3, 2, 2)]),
    "BatchNorm": ("", [(4, 3, 2, 3)]),
    "Scale": ('scale_param { bias_term: true filler { type: "gaussian" std: 1 } '
              'bias_filler { type: "gaussian" std: 1 } }', [(2, 3, 2, 2)]),
    "Bias": ('bias_param { filler { type: "gaussian" std: 1 } }', [(2, 3, 2, 2)]),
}


def test_every_float16_layer_type_has_a_case():
    assert set(LAYER_CASES) == set(net_types.FLOAT16_LAYERS)


def _one_layer_net(kind, text, shapes, tops):
    inputs = "".join("shape { %s } " % " ".join("dim: %d" % d for d in s) for s in shapes)
    bottoms = "".join('bottom: "x%d" ' % i for i in range(len(shapes)))
    return text_format.Parse(
        'force_backward: true layer { name: "in" type: "Input" %s input_param { %s } } '
        'layer { name: "l" type: "%s" %s %s %s } '
        % ("".join('top: "x%d" ' % i for i in range(len(shapes))), inputs, kind, bottoms,
           "".join('top: "y%d" ' % i for i in range(tops)), text),
        caffe_pb2.NetParameter())


@pytest.mark.parametrize("kind", sorted(LAYER_CASES))
def test_float16_layer_matches_float64(kind):
    text, shapes = LAYER_CASES[kind]
    tops = 2 if kind == "Split" else 1
    rng = np.random.default_rng(3)
    xs = [rng.uniform(-2, 2, s).astype(F16) for s in shapes]
    param = _one_layer_net(kind, text, shapes, tops)
    param.layer[1].forward_type = caffe_pb2.FLOAT16
    with simulated_device():
        backend.set_mode_gpu()
        net = caffe.Net(param, caffe.TRAIN)
        assert [b.dtype for b in net.layers[1].blobs] == [F16] * len(net.layers[1].blobs)
        assert all(net.blobs["y%d" % t].dtype == F16 for t in range(tops))
        params0 = [b.data.astype(np.float64) for b in net.layers[1].blobs]
        for i, x in enumerate(xs):
            net.blobs["x%d" % i].data[...] = x
        net.forward()
        ys = [_f64(net.blobs["y%d" % t]) for t in range(tops)]
        dys = [rng.uniform(-1, 1, y.shape).astype(F16) for y in ys]
        for t, dy in enumerate(dys):
            net.blobs["y%d" % t].diff[...] = dy
        net.backward()
        dxs = [net.blobs["x%d" % i].diff.astype(np.float64) for i in range(len(xs))]
        params = [b.data.astype(np.float64) for b in net.layers[1].blobs]
        dparams = [b.diff.astype(np.float64) for b in net.layers[1].blobs]
    backend.set_mode_cpu()
    ref = caffe.Net(param, caffe.TRAIN, dtype=np.float64)  # the same layer in float64
    for blob, values in zip(ref.layers[1].blobs, params0):
        blob.data[...] = values
    for i, x in enumerate(xs):
        ref.blobs["x%d" % i].data[...] = x
    ref.forward()
    for t, dy in enumerate(dys):
        ref.blobs["y%d" % t].diff[...] = dy
    ref.backward()
    tol = dict(rtol=4 * HALF_RTOL, atol=4 * HALF_RTOL)
    for t in range(tops):
        np.testing.assert_allclose(ys[t], ref.blobs["y%d" % t].data, **tol, err_msg="top")
    for i in range(len(xs)):
        np.testing.assert_allclose(dxs[i], ref.blobs["x%d" % i].diff, **tol, err_msg="dx")
    for j, blob in enumerate(ref.layers[1].blobs):
        if kind == "BatchNorm":  # its statistics, updated in forward
            np.testing.assert_allclose(params[j], blob.data, **tol, err_msg="stat %d" % j)
        else:
            np.testing.assert_allclose(dparams[j], blob.diff, **tol, err_msg="param diff")
