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
- a mixed net converts at the boundary (``Net.reshape`` included); a layer in place takes its
  blob's type; weights are saved from the masters (binary and HDF5) and resuming restores
  them exactly; net surgery reaches the masters; bad types are refused naming the layer or
  the solver; CPU mode keeps float32; NVCaffe's float16 deploy file runs folded;
- the math types reach cuDNN as NVCaffe resolves them (half accumulation for FLOAT16);
- a small LeNet trains in float16 on the MNIST subset to the float32 run's accuracy (slow).
"""

import logging

import numpy as np
import pytest
from google.protobuf import text_format
from numpy.lib.stride_tricks import sliding_window_view

import pycaffe_lite as caffe
from pycaffe_lite import backend, net_types
from pycaffe_lite.errors import CaffeError, NetError
from pycaffe_lite.ops.gpu import cudnn_graphs as graphs
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
        blobs = net.layers[1].blobs
        assert [b.dtype for b in blobs] == [np.float32 if kind in net_types.FLOAT32_PARAMS
                                            else F16] * len(blobs)
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


# ---- the solver: float32 master weights ------------------------------------------------------
def _solver(scale=None, adaptive=False, **changes):
    extra = {}
    if scale is not None:
        extra["global_grad_scale"] = scale
    if adaptive:
        extra["global_grad_scale_adaptive"] = "true"
    sp = caffe_pb2.SolverParameter()
    sp.net_param.CopyFrom(_param(**extra))
    sp.base_lr, sp.momentum, sp.weight_decay = 0.05, 0.9, 0.01
    sp.lr_policy, sp.max_iter, sp.random_seed = "fixed", 100, 7
    for key, value in changes.items():
        setattr(sp, key, value)
    solver = get_solver(sp)
    _feed(solver.net, *_inputs())
    return solver


def _record_gradients(solver):
    """The float16 gradients and float32 weights each update starts from (host copies)."""
    seen = []

    def on_gradients_ready():
        params = solver.net.learnable_params
        masters = net_types.of(solver.net).masters or {}
        seen.append(([p.diff.copy() for p in params],
                     [masters[k].data.copy() if k in masters else
                      p.data.astype(np.float32) for k, p in enumerate(params)]))

    solver.add_callback(lambda: None, on_gradients_ready)
    return seen


def test_sgd_steps_run_on_float32_masters_as_float32_arithmetic():
    with simulated_device():
        backend.set_mode_gpu()
        solver = _solver(scale=8)
        seen = _record_gradients(solver)
        solver.step(2)
        types = net_types.of(solver.net)
        params = solver.net.learnable_params
        assert all(p.dtype == F16 for p in params)
        masters = [types.masters[k].data.copy() for k in range(len(params))]
        halves = [p.data.copy() for p in params]
        assert all(h.dtype == np.float32 for h in solver.history)
    f32 = np.float32
    history = [np.zeros_like(m) for m in masters]
    for diffs, weights in seen:  # SGDSolver's steps, by hand, in float32
        assert all(d.dtype == F16 for d in diffs)
        for k, (d, w) in enumerate(zip(diffs, weights)):
            g = d.astype(f32) * f32(1.0 / 8)
            g = g + w * f32(0.01)
            history[k] = history[k] * f32(0.9) + g * f32(0.05)
    for k in range(len(masters)):
        expected = seen[-1][1][k] - history[k]
        np.testing.assert_array_equal(masters[k], expected)
        np.testing.assert_array_equal(halves[k], expected.astype(F16))
    # the second update started from the first one's masters, not from their float16 copies
    assert any(not np.array_equal(w, w.astype(F16)) for w in seen[1][1])


def test_float16_training_copies_no_array_to_the_host():
    with simulated_device() as dev:
        backend.set_mode_gpu()
        solver = _solver(scale=8)
        solver.step(1)
        with dev.forbid("to_host"):
            solver.step(2)
        # the masters and the history live on the device
        masters = net_types.of(solver.net).masters
        assert all(isinstance(m.read_data(), DeviceArray) for m in masters.values())
        assert all(isinstance(h, DeviceArray) for h in solver.history)


def test_global_grad_scale_scales_the_float16_gradients_not_the_update():
    runs = {}
    for scale in (1, 64):
        with simulated_device():
            backend.set_mode_gpu()
            solver = _solver(scale=scale)
            seen = _record_gradients(solver)
            solver.step(1)
            masters = net_types.of(solver.net).masters
            runs[scale] = (seen[0][0], [masters[k].data.copy() for k in sorted(masters)])
    for plain, scaled in zip(runs[1][0], runs[64][0]):
        assert np.abs(plain).max() > 0
        # a power of two: float16 scales exactly except where the plain gradient is subnormal
        normal = np.abs(plain) >= np.finfo(F16).tiny
        np.testing.assert_array_equal(scaled[normal], plain[normal] * F16(64))
        np.testing.assert_allclose(scaled.astype(np.float64) / 64, plain, rtol=0, atol=6e-8)
    for plain, scaled in zip(runs[1][1], runs[64][1]):
        np.testing.assert_allclose(scaled, plain, rtol=1e-6, atol=1e-9)


UNDERFLOW = """
name: "underflow"
default_forward_type: FLOAT16
default_backward_type: FLOAT16
%(extra)s
layer { name: "in" type: "Input" top: "x" top: "t"
  input_param { shape { dim: 1 dim: 1 } shape { dim: 1 dim: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
  inner_product_param { num_output: 1 bias_term: false
    weight_filler { type: "constant" value: 0.001 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss"
  loss_weight: 0.001 }
"""


def _underflow_step(scale):
    """One SGD step (rate 1) of w = 1e-3 on x = 1e-5, target 1: dL/dw = x (y - t) * 1e-3,
    about -1e-8, under float16's smallest subnormal (6e-8) by half."""
    sp = caffe_pb2.SolverParameter()
    sp.net_param.CopyFrom(_param(UNDERFLOW, **({"global_grad_scale": scale} if scale else {})))
    sp.base_lr, sp.lr_policy, sp.max_iter = 1.0, "fixed", 10
    with simulated_device():
        backend.set_mode_gpu()
        solver = get_solver(sp)
        solver.net.blobs["x"].data[...] = 1e-5
        solver.net.blobs["t"].data[...] = 1.0
        seen = _record_gradients(solver)
        solver.step(1)
        master = net_types.of(solver.net).masters[0].data.copy()
    return seen[0][0][0], master


def test_a_gradient_that_underflows_in_float16_survives_with_a_scale():
    x16 = float(F16(1e-5))
    y = float(F16(F16(0.001) * F16(1e-5)))  # the float16 product underflows to 0 too
    grad = x16 * (y - 1.0) * 0.001  # EuclideanLoss: (y - t) / N, times the loss weight
    assert abs(grad) < float(np.finfo(F16).smallest_subnormal) / 2
    w16 = np.float32(F16(0.001))
    plain_diff, plain_master = _underflow_step(None)
    assert plain_diff.item() == 0  # lost in float16
    assert plain_master.item() == w16
    scaled_diff, scaled_master = _underflow_step(65536)
    assert scaled_diff.item() == pytest.approx(grad * 65536, rel=HALF_RTOL)
    assert float(w16) - scaled_master.item() == pytest.approx(grad, rel=HALF_RTOL)


def test_adaptive_scale_follows_nvcaffes_formula():
    with simulated_device():
        backend.set_mode_gpu()
        solver = _solver(scale=2, adaptive=True)
        seen = _record_gradients(solver)
        solver.step(1)
        types = net_types.of(solver.net)
        after_one = types.current_scale()
        solver.step(1)
    largest = max(np.abs(d.astype(np.float32) * np.float32(1 / 2)).max() for d in seen[0][0])
    assert after_one == pytest.approx(2 * 4 / float(largest), rel=1e-6)
    # the second step's float16 gradients were taken at the new scale: the largest sits
    # near 2 * 4 (as the gradients changed little), where the first one's was 2 * largest
    second = max(np.abs(d.astype(np.float64)).max() for d in seen[1][0])
    assert 4 < second < 16 and not 4 < 2 * float(largest) < 16


# ---- a mixed net, weights in and out, errors ---------------------------------------------------
def test_a_mixed_net_converts_at_the_boundary():
    param = _param()
    param.layer[4].forward_type = caffe_pb2.FLOAT  # ip in float32 after float16 layers
    param.layer[4].backward_type = caffe_pb2.FLOAT
    x, labels = _inputs(1)
    with simulated_device():
        backend.set_mode_gpu()
        net = caffe.Net(param, caffe.TRAIN)
        assert (net.blobs["pool"].dtype, net.blobs["ip"].dtype) == (F16, np.float32)
        assert [b.dtype for b in net.params["ip"]] == [np.float32] * 2
        _feed(net, x, labels)
        net.forward()
        net.backward()
        pool, ip = _f64(net.blobs["pool"]), _f64(net.blobs["ip"])
        w, b = (_f64(p) for p in net.params["ip"])
        dip = net.blobs["ip"].diff.astype(np.float64)
        dpool = net.blobs["pool"].diff
    np.testing.assert_allclose(ip, pool.reshape(4, -1) @ w.T + b, rtol=1e-5, atol=1e-6)
    assert dpool.dtype == F16
    relu_mask = pool.reshape(4, -1) > 0  # ReLU in place on pool: its diff is masked
    expected = np.where(relu_mask, dip @ w, 0).reshape(pool.shape)
    np.testing.assert_allclose(dpool.astype(np.float64), expected, rtol=HALF_RTOL, atol=1e-6)


@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
def test_weights_are_saved_from_the_masters_and_resuming_restores_them(tmp_path, fmt):
    fmt = caffe_pb2.SolverParameter.SnapshotFormat.Value(fmt)
    ext = ".h5" if fmt == caffe_pb2.SolverParameter.HDF5 else ""
    with simulated_device():
        backend.set_mode_gpu()
        solver = _solver(scale=8, snapshot_prefix=str(tmp_path / "s"), snapshot_format=fmt)
        solver.step(3)
        masters = net_types.of(solver.net).masters
        expected = [masters[k].data.copy() for k in sorted(masters)]
        assert any(not np.array_equal(m, m.astype(F16)) for m in expected)  # finer than half
        solver.snapshot()
        state = str(tmp_path / ("s_iter_3.solverstate" + ext))
        resumed = _solver(scale=8, snapshot_prefix=str(tmp_path / "r"), snapshot_format=fmt)
        resumed.restore(state)
        types = net_types.of(resumed.net)
        restored = [types.masters[k].data.copy() for k in sorted(types.masters)]
        halves = [p.data.copy() for p in resumed.net.learnable_params]
        history = [backend.to_host(h) for h in resumed.history]
        expected_history = [backend.to_host(h) for h in solver.history]
        # both continue alike
        solver.step(1)
        resumed.step(1)
        after = [p.data.copy() for p in solver.net.learnable_params]
        resumed_after = [p.data.copy() for p in resumed.net.learnable_params]
    if ext:
        import h5py
        with h5py.File(tmp_path / "s_iter_3.caffemodel.h5") as f:
            saved_values = [f["data"][layer][str(j)][...] for layer in ("conv", "ip")
                            for j in range(2)]
    else:
        saved = caffe_pb2.NetParameter()
        saved.ParseFromString((tmp_path / "s_iter_3.caffemodel").read_bytes())
        saved_values = [np.array(b.data, np.float32) for lp in saved.layer for b in lp.blobs]
    assert len(saved_values) == len(expected) == 4
    for got, want in zip(saved_values, expected):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.ravel(), want.ravel())  # float32, the masters
    for got, want, half in zip(restored, expected, halves):
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(half, want.astype(F16))
    for got, want in zip(history, expected_history):
        np.testing.assert_array_equal(got, want)
    for got, want in zip(resumed_after, after):
        np.testing.assert_array_equal(got, want)


def test_integer_types_are_refused_naming_the_layer():
    param = _param()
    param.layer[2].forward_type = caffe_pb2.INT
    with pytest.raises(NetError, match="layer 'pool' \\(type Pooling\\): forward_type: INT"):
        caffe.Net(param, caffe.TRAIN)
    param = _param(default_backward_math="BOOL")
    with pytest.raises(NetError, match="default_backward_math: BOOL"):
        caffe.Net(param, caffe.TRAIN)


def test_float16_master_weights_are_refused():
    sp = caffe_pb2.SolverParameter()
    sp.net_param.CopyFrom(_param())
    sp.base_lr, sp.lr_policy = 0.1, "fixed"
    sp.solver_data_type = caffe_pb2.FLOAT16
    with pytest.raises(CaffeError, match="solver_data_type: FLOAT16 cannot hold the master"):
        get_solver(sp)
    assert text_format.Parse("solver_data_type: FLOAT16 store_blobs_in_old_format: true",
                             caffe_pb2.SolverParameter()).store_blobs_in_old_format


def test_net_surgery_on_float16_params_reaches_the_masters():
    """Reading ``blob.data`` keeps the masters' precision; writing a value replaces it there."""
    with simulated_device():
        backend.set_mode_gpu()
        solver = _solver(scale=8)
        solver.step(2)
        types = net_types.of(solver.net)
        before = types.masters[0].data.copy()
        assert not np.array_equal(before, before.astype(F16))
        weights = solver.net.params["conv"][0]
        weights.data[0, 0, 0, 0] = 0.25  # net surgery through pycaffe's blob.data
        with net_types.master_weights(solver.net) as swapped:
            k, half, master = swapped[0]
            assert (k, half) == (0, weights) and solver.net.learnable_params[0] is master
            start = master.data.copy()
    assert start[0, 0, 0, 0] == 0.25
    np.testing.assert_array_equal(start.ravel()[1:], before.ravel()[1:])  # not rounded


def test_nvcaffe_deploy_net_with_weights_runs_folded_in_float16(tmp_path):
    """NVCaffe's float16 deploy file (BatchNorm with scale_bias, a residual sum) with float32
    weights, folded in a TEST net: the float16 output is the float32 one within float16
    rounding of its largest value."""
    import os
    proto = os.path.join(os.path.dirname(__file__), "fixtures", "forks",
                         "nvcaffe_deploy_fp16.prototxt")
    net = caffe.Net(proto, caffe.TEST)
    rng = np.random.default_rng(1)
    for name, blobs in net.params.items():
        for b in blobs:
            b.data[...] = rng.uniform(0.5, 1.5, b.data.shape)
        if net.layer_dict[name].type == "BatchNorm":
            blobs[2].data[...] = 1  # the variance correction
    weights = str(tmp_path / "w.caffemodel")
    net.save(weights)
    x = rng.standard_normal((2, 3, 11, 11)).astype(np.float32)
    expected = caffe.Net(proto, weights, caffe.TEST).forward(data=x)["pool"].copy()
    with simulated_device():
        backend.set_mode_gpu()
        half = caffe.Net(proto, weights, caffe.TEST)
        assert half.folding is not None and half.blobs["conv2"].dtype == F16
        got = half.forward(data=x)["pool"].copy()
    assert got.dtype == F16
    np.testing.assert_allclose(got, expected, rtol=0, atol=4 * HALF_RTOL * np.abs(expected).max())


# ---- training ---------------------------------------------------------------------------------
SMALL_LENET = """
name: "SmallLeNet"
%(types)s
layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TRAIN }
  transform_param { scale: 0.00390625 }
  data_param { source: "%(train)s" batch_size: 32 backend: LMDB } }
layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TEST }
  transform_param { scale: 0.00390625 }
  data_param { source: "%(test)s" batch_size: 100 backend: LMDB } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 8 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 16 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  inner_product_param { num_output: 64 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""


def _train_small_lenet(lmdbs, types, iterations=150):
    train, test = lmdbs
    sp = caffe_pb2.SolverParameter()
    sp.net_param.CopyFrom(text_format.Parse(
        SMALL_LENET % {"types": types, "train": train, "test": test}, caffe_pb2.NetParameter()))
    sp.base_lr, sp.momentum, sp.weight_decay, sp.lr_policy = 0.02, 0.9, 0.0005, "fixed"
    sp.max_iter, sp.random_seed, sp.test_iter[:] = iterations, 1, [5]
    sp.test_interval, sp.test_initialization, sp.snapshot_after_train = iterations, False, False
    with simulated_device():
        backend.set_mode_gpu()
        solver = get_solver(sp)
        try:
            assert all(p.dtype == (F16 if types else np.float32)
                       for p in solver.net.learnable_params)
            solver.solve()
        finally:
            solver.close()
    return dict(solver.test_scores[0])


@pytest.mark.slow
def test_small_lenet_trains_in_float16_as_in_float32(mnist_lmdbs):
    """150 iterations of batch 32 on the MNIST subset, tested on 500 digits: the float16 run
    (global_grad_scale 128) ends within 0.03 of the float32 run's accuracy."""
    half = _train_small_lenet(mnist_lmdbs, "default_forward_type: FLOAT16 "
                              "default_backward_type: FLOAT16 global_grad_scale: 128")
    single = _train_small_lenet(mnist_lmdbs, "")
    print("small LeNet, 150 iterations: float16 %s, float32 %s" % (half, single))
    assert single["accuracy"] > 0.8
    assert half["accuracy"] >= single["accuracy"] - 0.03
    assert half["loss"] == pytest.approx(single["loss"], abs=0.1)


def test_a_layer_in_place_takes_its_blobs_type(caplog):
    """Dropout (no float16 code here) in place on a float16 ReLU top runs in float16, as no
    conversion can sit between in-place layers; a Softmax on its own falls back to float32."""
    param = _param()
    layers = list(param.layer)
    drop = caffe_pb2.LayerParameter(name="drop", type="Dropout", bottom=["pool"], top=["pool"])
    prob = caffe_pb2.LayerParameter(name="prob", type="Softmax", bottom=["ip"], top=["prob"])
    del param.layer[:]
    param.layer.extend(layers[:4] + [drop] + layers[4:] + [prob])
    with simulated_device(), caplog.at_level(logging.INFO, logger="pycaffe_lite"):
        backend.set_mode_gpu()
        net = caffe.Net(param, caffe.TEST)
        assert [net.layers[i].type for i in (3, 4)] == ["ReLU", "Dropout"]
        assert net.layers[4].dtype == F16 and net.blobs["pool"].dtype == F16
        assert net.blobs["prob"].dtype == np.float32
        _feed(net, *_inputs())
        prob = net.forward()["prob"]
        ip = _f64(net.blobs["ip"])
    assert "work in place on a float16 blob, so compute in float16: drop (Dropout)" in caplog.text
    assert "prob (Softmax)" in caplog.text
    e = np.exp(ip - ip.max(axis=1, keepdims=True))
    np.testing.assert_allclose(prob, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


def test_reshape_reaches_the_converted_bottoms():
    x, labels = _inputs()
    with simulated_device():
        backend.set_mode_gpu()
        net = caffe.Net(_param(), caffe.TRAIN)
        net.blobs["data"].reshape(2, 2, 6, 6)
        net.blobs["label"].reshape(2)
        net.reshape()
        assert net.blobs["conv"].shape == (2, 3, 4, 4) and net.blobs["ip"].shape == (2, 5)
        _feed(net, x[:2], labels[:2])
        loss = float(net.forward()["loss"])
        ip = _f64(net.blobs["ip"])
    assert loss == pytest.approx(_softmax_loss(ip, labels[:2]), rel=1e-5)


# ---- math types ---------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["Convolution", "Deconvolution"])
@pytest.mark.parametrize("math, expected", [
    ("", (True, True)),  # unset: the storage type, FLOAT16 (NVCaffe's rule)
    ("default_forward_math: FLOAT16 default_backward_math: FLOAT", (True, False)),
    ("default_forward_math: FLOAT", (False, True)),
])
def test_math_types_reach_cudnn(kind, math, expected, monkeypatch):
    """What cuDNN is asked for: half math in the forward and backward of a float16
    convolution as its math types say (a Deconvolution's forward is a convolution's backward,
    and the reverse); cuDNN is stood in for and declines, so the CAFFE engine computes."""
    from pycaffe_lite.ops import conv as conv_ops
    asked = []
    monkeypatch.setattr(conv_ops._cudnn, "conv_takes",
                        lambda engine, *arrays: all(a.dtype == F16 for a in arrays
                                                    if a is not None))
    monkeypatch.setattr(conv_ops._cudnn, "conv_forward",
                        lambda *a, half_math=False, **k: asked.append(("fwd", half_math)))
    monkeypatch.setattr(conv_ops._cudnn, "conv_backward",
                        lambda *a, half_math=False, **k: asked.append(("bwd", half_math))
                        or (False, False))
    param = text_format.Parse(
        'default_forward_type: FLOAT16 default_backward_type: FLOAT16 %s force_backward: true '
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 2 '
        'dim: 5 dim: 5 } } } layer { name: "c" type: "%s" bottom: "x" top: "y" '
        'convolution_param { num_output: 2 kernel_size: 3 } }' % (math, kind),
        caffe_pb2.NetParameter())
    with simulated_device():
        backend.set_mode_gpu()
        net = caffe.Net(param, caffe.TRAIN)
        net.forward()
        net.blobs["y"].diff[...] = 1
        net.backward()
    fwd, bwd = expected
    if kind == "Deconvolution":  # its forward runs cuDNN's backward kinds and the reverse
        assert asked == [("bwd", fwd), ("fwd", bwd)]  # declined: CAFFE does the rest
    else:
        assert asked == [("fwd", fwd), ("bwd", bwd)]


def test_half_math_is_a_float16_graphs_compute_type():
    from test_cudnn_graphs import fake_frontend, timings

    def compute_type(dtype, half_math):
        fe = fake_frontend()
        key = graphs.Key.make(graphs.FPROP, (2, 4, 9, 8), (4, 2, 3, 3), (2, 4, 5, 4), (1, 1),
                              (2, 2), (1, 1), dtype, 0, half_math=half_math)
        graphs.GraphCache().plan(fe, key, None, [1, 2, 3], lambda s: 0, timings({0: 1.0}))
        return fe.graphs[0].kwargs["io_data_type"], fe.graphs[0].kwargs["compute_data_type"]

    assert compute_type(F16, True) == ("HALF", "HALF")
    assert compute_type(F16, False) == ("HALF", "FLOAT")
    assert compute_type(np.float32, True) == ("FLOAT", "FLOAT")  # float32 ignores it


def test_a_pooling_with_a_mask_top_computes_in_float32():
    """Its mask holds window indices, which float16 would round beyond 2048."""
    param = text_format.Parse(
        'default_forward_type: FLOAT16 layer { name: "in" type: "Input" top: "x" input_param '
        '{ shape { dim: 1 dim: 1 dim: 100 dim: 100 } } } layer { name: "p" type: "Pooling" '
        'bottom: "x" top: "y" top: "mask" pooling_param { pool: MAX kernel_size: 2 stride: 2 } '
        '}', caffe_pb2.NetParameter())
    x = np.random.default_rng(0).standard_normal((1, 1, 100, 100))
    with simulated_device():
        backend.set_mode_gpu()
        net = caffe.Net(param, caffe.TEST)
        assert net.blobs["mask"].dtype == np.float32
        net.blobs["x"].data[...] = x
        net.forward()
        mask = net.blobs["mask"].data.copy()
    windows = x[0, 0].reshape(50, 2, 50, 2).transpose(0, 2, 1, 3).reshape(50, 50, 4)
    pick = windows.argmax(axis=2)
    rows = np.arange(50)[:, None] * 2 + pick // 2
    cols = np.arange(50)[None, :] * 2 + pick % 2
    np.testing.assert_array_equal(mask[0, 0], rows * 100 + cols)  # up to 9999, exactly


RESIDUAL = """
name: "residual16"
default_forward_type: FLOAT16
default_backward_type: FLOAT16
default_forward_math: FLOAT
default_backward_math: FLOAT
force_backward: true
layer { name: "in" type: "Input" top: "data" top: "label"
  input_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } shape { dim: 4 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
    weight_filler { type: "msra" } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1"
  scale_param { bias_term: true filler { type: "gaussian" mean: 1 std: 0.1 }
    bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 bias_term: false
    weight_filler { type: "msra" } } }
layer { name: "bn2" type: "BatchNorm" bottom: "conv2" top: "conv2" }
layer { name: "sum" type: "Eltwise" bottom: "conv1" bottom: "conv2" top: "sum" }
layer { name: "relu2" type: "ReLU" bottom: "sum" top: "sum" }
layer { name: "pool" type: "Pooling" bottom: "sum" top: "pool"
  pooling_param { pool: AVE global_pooling: true } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def test_residual_block_with_in_place_batch_norm_against_float32():
    """conv -> BatchNorm -> Scale -> ReLU in place, a residual sum: the float16 run's loss,
    gradients and BatchNorm statistics (kept in float32) follow the float32 run's from the same
    float16-rounded weights and inputs."""
    param = text_format.Parse(RESIDUAL, caffe_pb2.NetParameter())
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 3, 8, 8)).astype(F16)
    labels = np.array([0, 1, 2, 1], np.float32)
    with simulated_device():
        backend.set_mode_gpu()
        net = caffe.Net(param, caffe.TRAIN)
        assert net.blobs["conv1"].dtype == F16 and net.blobs["sum"].dtype == F16
        assert [b.dtype for b in net.params["bn1"]] == [np.float32] * 3
        assert net.params["scale1"][0].dtype == F16
        weights = {n: [b.data.astype(np.float32) for b in bs] for n, bs in net.params.items()}
        net.blobs["data"].data[...] = x
        net.blobs["label"].data[...] = labels
        loss = float(net.forward()["loss"])
        net.backward()
        got = {n: [b.diff.astype(np.float64) for b in bs] for n, bs in net.params.items()}
        stats = [b.data.copy() for b in net.params["bn2"]]
    backend.set_mode_cpu()
    ref = caffe.Net(param, caffe.TRAIN)  # CPU mode: float32 throughout
    for name, blobs in ref.params.items():
        for blob, values in zip(blobs, weights[name]):
            blob.data[...] = values
    ref.blobs["data"].data[...] = x
    ref.blobs["label"].data[...] = labels
    assert loss == pytest.approx(float(ref.forward()["loss"]), rel=1e-2)
    ref.backward()
    for name in ("conv1", "conv2", "scale1", "ip"):
        for j, (g, blob) in enumerate(zip(got[name], ref.params[name])):
            scale = np.abs(blob.diff).max()
            np.testing.assert_allclose(g, blob.diff, rtol=0, atol=2e-2 * scale,
                                       err_msg="%s %d" % (name, j))
    for s, blob in zip(stats, ref.params["bn2"]):
        np.testing.assert_allclose(s, blob.data, rtol=5e-3, atol=1e-3)
