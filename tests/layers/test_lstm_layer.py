import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.net import Net
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import (GradientChecker, check_layer, empty_blobs, make_layer,
                                  random_blobs)
from pycaffe_lite.weights import copy_trained_layers_from_param

T, N, D, H = 3, 2, 3, 4


def lstm_text(num_output=H, extra=""):
    return ('type: "LSTM" recurrent_param { num_output: %d '
            'weight_filler { type: "gaussian" std: 0.4 } '
            'bias_filler { type: "gaussian" std: 0.2 } %s }' % (num_output, extra))


def sig(a):
    return 1.0 / (1.0 + np.exp(-a))


def reference_lstm(x, cont, w_xc, b_c, w_hc, x_static=None, w_static=None, h0=None, c0=None):
    """Step-by-step float64 LSTM, one stream and one unit at a time."""
    t_steps, n = cont.shape
    hdim = w_hc.shape[1]
    x = x.reshape(t_steps, n, -1).astype(np.float64)
    h = np.zeros((n, hdim)) if h0 is None else h0.reshape(n, hdim).astype(np.float64)
    c = np.zeros((n, hdim)) if c0 is None else c0.reshape(n, hdim).astype(np.float64)
    out = np.zeros((t_steps, n, hdim))
    for t in range(t_steps):
        h_new, c_new = np.zeros_like(h), np.zeros_like(c)
        for s in range(n):
            k = cont[t, s]
            gates = w_xc @ x[t, s] + b_c + w_hc @ (k * h[s])
            if x_static is not None:
                gates = gates + w_static @ x_static.reshape(n, -1)[s]
            for u in range(hdim):
                i = sig(gates[u])
                f = k * sig(gates[hdim + u])
                o = sig(gates[2 * hdim + u])
                g = np.tanh(gates[3 * hdim + u])
                c_new[s, u] = f * c[s, u] + i * g
                h_new[s, u] = o * np.tanh(c_new[s, u])
        h, c = h_new, c_new
        out[t] = h
    return out, h, c


def bottoms(cont, x_shape=(T, N, D), static_shape=None, seed=0, dtype=np.float64):
    shapes = [x_shape, np.asarray(cont, dtype=np.float64)]
    if static_shape is not None:
        shapes.append(static_shape)
    return random_blobs(shapes, seed=seed, dtype=dtype)


CONT_RESETS = [[0, 0], [1, 0], [1, 1]]


def run(text, bottom, num_top=1, dtype=np.float64):
    layer = make_layer(text, dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, top


# ---- forward -----------------------------------------------------------------------------
@pytest.mark.parametrize("x_shape", [(T, N, D), (T, N, 3, 2)])
def test_lstm_forward_matches_reference_with_sequence_resets(x_shape):
    bottom = bottoms(CONT_RESETS, x_shape)
    layer, top = run(lstm_text(), bottom)
    assert layer.param_names == ["W_xc", "b_c", "W_hc"]
    d = int(np.prod(x_shape[2:]))
    assert [b.shape for b in layer.blobs] == [(4 * H, d), (4 * H,), (4 * H, H)]
    assert top[0].shape == (T, N, H)
    ref, _, _ = reference_lstm(bottom[0].data, bottom[1].data,
                               *(b.data for b in layer.blobs))
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_lstm_forward_with_static_input():
    bottom = bottoms(CONT_RESETS, static_shape=(N, 2, 2))
    layer, top = run(lstm_text(), bottom)
    assert layer.param_names == ["W_xc", "b_c", "W_xc_static", "W_hc"]
    assert [b.shape for b in layer.blobs] == [(4 * H, D), (4 * H,), (4 * H, 4), (4 * H, H)]
    w_xc, b_c, w_s, w_hc = (b.data for b in layer.blobs)
    ref, _, _ = reference_lstm(bottom[0].data, bottom[1].data, w_xc, b_c, w_hc,
                               x_static=bottom[2].data, w_static=w_s)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_lstm_non_binary_cont_scales_state_and_forget_gate():
    bottom = bottoms([[0.0, 0.0], [0.5, 1.0], [0.25, 2.0]])
    layer, top = run(lstm_text(), bottom)
    ref, _, _ = reference_lstm(bottom[0].data, bottom[1].data, *(b.data for b in layer.blobs))
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_lstm_state_carries_across_forward_calls():
    """As Caffe's TestForward: the full sequence at once equals one step per Forward."""
    cont = np.array([[0, 0], [1, 1], [1, 1]])
    full = bottoms(cont)
    layer, top = run(lstm_text(), full)
    params = [b.data.copy() for b in layer.blobs]
    step = make_layer(lstm_text())
    step_bottom = bottoms([[0, 0]], x_shape=(1, N, D))
    step_top = empty_blobs(1)
    step.SetUp(step_bottom, step_top)
    for dst, src in zip(step.blobs, params):
        dst.data[...] = src
    for t in range(T):
        step_bottom[0].data[...] = full[0].data[t:t + 1]
        step_bottom[1].data[...] = cont[t:t + 1]
        step.Forward(step_bottom, step_top)
        np.testing.assert_allclose(step_top[0].data[0], top[0].data[t], rtol=1e-10, atol=1e-12)
    # all-zero cont: every step starts afresh, so only the first step agrees
    step.reset()
    for t in range(T):
        step_bottom[0].data[...] = full[0].data[t:t + 1]
        step_bottom[1].data[...] = 0
        step.Forward(step_bottom, step_top)
        same = np.allclose(step_top[0].data[0], top[0].data[t], rtol=1e-10, atol=1e-12)
        assert same == (t == 0)
    # reset() zeroes the carried state
    step.reset()
    step_bottom[0].data[...] = full[0].data[1:2]
    step_bottom[1].data[...] = 1
    step.Forward(step_bottom, step_top)
    ref, _, _ = reference_lstm(full[0].data[1:2], np.ones((1, N)), *params)
    np.testing.assert_allclose(step_top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_lstm_carried_state_feeds_next_forward():
    bottom = bottoms(np.ones((T, N)))
    layer, top = run(lstm_text(), bottom)
    params = [b.data for b in layer.blobs]
    _, h_t, c_t = reference_lstm(bottom[0].data, bottom[1].data, *params)
    layer.Forward(bottom, top)
    ref, _, _ = reference_lstm(bottom[0].data, bottom[1].data, *params, h0=h_t, c0=c_t)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_lstm_expose_hidden_forward():
    cont = np.array([[1, 0], [1, 1], [0, 1]])
    bottom = bottoms(cont) + random_blobs([(1, N, H), (1, N, H)], seed=3)
    layer, top = run(lstm_text(extra="expose_hidden: true"), bottom, num_top=3)
    assert [t.shape for t in top] == [(T, N, H), (1, N, H), (1, N, H)]
    params = [b.data for b in layer.blobs]
    ref, h_t, c_t = reference_lstm(bottom[0].data, cont, *params,
                                   h0=bottom[2].data, c0=bottom[3].data)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(top[1].data[0], h_t, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(top[2].data[0], c_t, rtol=1e-10, atol=1e-12)
    # no carried state with expose_hidden: the same Forward gives the same result
    layer.Forward(bottom, top)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_lstm_expose_hidden_with_static_input_bottom_order():
    bottom = bottoms(CONT_RESETS, static_shape=(N, 5)) + random_blobs([(1, N, H)] * 2, seed=4)
    bottom[1].data[0] = 1
    layer, top = run(lstm_text(extra="expose_hidden: true"), bottom, num_top=3)
    w_xc, b_c, w_s, w_hc = (b.data for b in layer.blobs)
    ref, h_t, c_t = reference_lstm(bottom[0].data, bottom[1].data, w_xc, b_c, w_hc,
                                   x_static=bottom[2].data, w_static=w_s,
                                   h0=bottom[3].data, c0=bottom[4].data)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(top[2].data[0], c_t, rtol=1e-10, atol=1e-12)


def test_lstm_float32_end_to_end_and_param_diffs_accumulate():
    bottom = bottoms(CONT_RESETS, static_shape=(N, 2), dtype=np.float32)
    layer, top = run(lstm_text(), bottom, dtype=np.float32)
    assert top[0].data.dtype == np.float32
    assert all(b.data.dtype == np.float32 for b in layer.blobs)
    w_xc, b_c, w_s, w_hc = (b.data.astype(np.float64) for b in layer.blobs)
    ref, _, _ = reference_lstm(bottom[0].data, bottom[1].data, w_xc, b_c, w_hc,
                               x_static=bottom[2].data, w_static=w_s)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-5, atol=1e-6)
    top[0].diff[...] = 1
    layer.Backward(top, [True, False, True], bottom)
    assert bottom[0].diff.dtype == np.float32 and bottom[2].diff.dtype == np.float32
    first = [b.diff.copy() for b in layer.blobs]
    assert all(d.dtype == np.float32 and np.abs(d).sum() > 0 for d in first)
    dx = bottom[0].diff.copy()
    layer.Backward(top, [True, False, True], bottom)
    for b, d in zip(layer.blobs, first):
        np.testing.assert_allclose(b.diff, 2 * d, rtol=1e-6)
    np.testing.assert_allclose(bottom[0].diff, dx)  # bottom diffs are overwritten
    layer.param_propagate_down = [False] * len(layer.blobs)
    layer.Backward(top, [True, False, True], bottom)
    for b, d in zip(layer.blobs, first):
        np.testing.assert_allclose(b.diff, 2 * d, rtol=1e-6)


def test_lstm_default_fillers_are_constant_zero():
    bottom = bottoms(CONT_RESETS)
    layer, top = run('type: "LSTM" recurrent_param { num_output: 2 }', bottom)
    assert not any(b.data.any() for b in layer.blobs)
    # all gates 0.5, g = 0: c and h stay 0
    assert not top[0].data.any()


def test_lstm_reshape_to_other_batch_size():
    bottom = bottoms(CONT_RESETS)
    layer, top = run(lstm_text(), bottom)
    params = [b.data for b in layer.blobs]
    small = bottoms([[0], [1], [0]], x_shape=(T, 1, D), seed=5)
    layer.Forward(small, top)
    assert top[0].shape == (T, 1, H)
    ref, _, _ = reference_lstm(small[0].data, small[1].data, *params)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)
    layer.Forward(bottom, top)
    assert top[0].shape == (T, N, H)


# ---- gradients ---------------------------------------------------------------------------
def test_lstm_gradient_x_and_params():
    # cont is 0 at the first step, so the state carried between the checker's forwards
    # does not matter
    bottom = bottoms(CONT_RESETS)
    check_layer(lstm_text(), bottom, check_bottom=[0], reshape_batch=False)


def test_lstm_gradient_with_static_input():
    bottom = bottoms([[0, 0], [1, 1], [0, 1]], static_shape=(N, 2))
    check_layer(lstm_text(), bottom, check_bottom=[0, 2], reshape_batch=False)


def test_lstm_gradient_exhaustive_small():
    bottom = bottoms([[0, 0], [1, 0]], x_shape=(2, N, 2))
    layer = make_layer(lstm_text(num_output=2))
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(layer, bottom, empty_blobs(1),
                                                          check_bottom=[0])


class FirstTopOnly:
    """Shows the gradient checker only the first top of a layer: the final-state tops of an
    expose_hidden layer do not backpropagate (as in Caffe), so they stay out of the
    objective."""

    def __init__(self, layer, num_top):
        self.layer, self.extra = layer, empty_blobs(num_top - 1)
        self.name, self.type, self.blobs = layer.name, layer.type, layer.blobs

    def SetUp(self, bottom, top):
        self.layer.SetUp(bottom, top + self.extra)
        self.blobs = self.layer.blobs

    def Forward(self, bottom, top):
        return self.layer.Forward(bottom, top + self.extra)

    def Backward(self, top, propagate_down, bottom):
        self.layer.Backward(top + self.extra, propagate_down, bottom)


def test_lstm_gradient_expose_hidden():
    cont = np.array([[1, 1], [1, 0], [1, 1]])
    bottom = bottoms(cont, static_shape=(N, 2)) + random_blobs([(1, N, H)] * 2, seed=7)
    layer = FirstTopOnly(make_layer(lstm_text(extra="expose_hidden: true")), 3)
    GradientChecker(1e-2, 1e-3).check_gradient(layer, bottom, empty_blobs(1),
                                                check_bottom=[0, 2])


def test_lstm_expose_hidden_gives_no_gradient_to_initial_state():
    """Caffe shares only the data of h_0 / c_0 and h_T / c_T with its unrolled net."""
    cont = np.ones((T, N))
    bottom = bottoms(cont) + random_blobs([(1, N, H)] * 2, seed=8)
    layer, top = run(lstm_text(extra="expose_hidden: true"), bottom, num_top=3)
    for b in bottom:
        b.diff[...] = 7.0
    top[0].diff[...] = top[0].data
    layer.Backward(top, [True, True, True, True], bottom)
    dx = bottom[0].diff.copy()
    dparams = [b.diff.copy() for b in layer.blobs]
    assert np.abs(dx).sum() > 0
    for b in bottom[1:]:
        assert not b.diff.any()
    # the final-state tops' diffs are ignored
    top[1].diff[...] = 5.0
    top[2].diff[...] = -3.0
    for b in layer.blobs:
        b.diff[...] = 0
    layer.Backward(top, [True, False, False, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, dx)
    for b, d in zip(layer.blobs, dparams):
        np.testing.assert_allclose(b.diff, d)


def test_lstm_backward_matches_finite_difference_of_reference():
    """An independent check of the whole BPTT: d(sum(w * h))/dW_hc against the reference."""
    bottom = bottoms([[0, 1], [1, 1], [1, 0]])
    layer, top = run(lstm_text(), bottom)
    params = [b.data.copy() for b in layer.blobs]
    weights = np.random.default_rng(1).uniform(-1, 1, (T, N, H))
    top[0].diff[...] = weights
    # the carried state is zero before the first forward; recompute on a fresh layer
    fresh = make_layer(layer.to_proto())
    fresh_top = empty_blobs(1)
    fresh.SetUp(bottom, fresh_top)
    fresh.Forward(bottom, fresh_top)
    fresh_top[0].diff[...] = weights
    fresh.Backward(fresh_top, [True, False], bottom)
    eps = 1e-6
    for k in (0, 2):
        numeric = np.zeros_like(params[k])
        for idx in np.ndindex(params[k].shape):
            plus = [p.copy() for p in params]
            minus = [p.copy() for p in params]
            plus[k][idx] += eps
            minus[k][idx] -= eps
            fp = (reference_lstm(bottom[0].data, bottom[1].data, *plus)[0] * weights).sum()
            fm = (reference_lstm(bottom[0].data, bottom[1].data, *minus)[0] * weights).sum()
            numeric[idx] = (fp - fm) / (2 * eps)
        np.testing.assert_allclose(fresh.blobs[k].diff, numeric, rtol=1e-6, atol=1e-8)


def test_lstm_cont_gets_no_gradient_and_no_force_backward():
    bottom = bottoms(CONT_RESETS)
    layer, top = run(lstm_text(), bottom)
    bottom[1].diff[...] = 9.0
    top[0].diff[...] = 1.0
    layer.Backward(top, [True, True], bottom)
    assert not bottom[1].diff.any()
    assert layer.allow_force_backward(0) and not layer.allow_force_backward(1)
    assert layer.allow_force_backward(2)


# ---- in a Net, weights from Caffe --------------------------------------------------------
NET = """
name: "lstm_net"
layer { name: "data" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 3 } shape { dim: 3 dim: 2 } } }
layer { name: "lstm1" type: "LSTM" bottom: "x" bottom: "cont" top: "h"
        param { lr_mult: 1 } param { lr_mult: 2 } param { lr_mult: 1 }
        recurrent_param { num_output: 4 weight_filler { type: "xavier" } } }
"""


def test_lstm_loads_caffe_weights_in_a_net():
    net = Net(NET, caffe_pb2.TEST)
    assert [b.shape for b in net.params["lstm1"]] == [(16, 3), (16,), (16, 4)]
    assert net.params_lr == [1.0, 2.0, 1.0]
    # a caffemodel as Caffe writes it: the unrolled net's owner params W_xc, b_c, W_hc
    rng = np.random.default_rng(2)
    weights = [rng.normal(0, 0.3, s) for s in [(16, 3), (16,), (16, 4)]]
    model = caffe_pb2.NetParameter()
    src = model.layer.add()
    src.name, src.type = "lstm1", "LSTM"
    for w in weights:
        bp = src.blobs.add()
        bp.shape.dim.extend(w.shape)
        bp.data.extend(w.ravel().astype(np.float32))
    copy_trained_layers_from_param(net, model)
    x = rng.normal(size=(T, N, D)).astype(np.float32)
    cont = np.array(CONT_RESETS, np.float32)
    out = net.forward(x=x, cont=cont)["h"]
    assert out.dtype == np.float32
    w32 = [w.astype(np.float32).astype(np.float64) for w in weights]
    ref, _, _ = reference_lstm(x, cont, *w32)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    # a wrongly shaped blob is refused
    model.layer[0].blobs[2].shape.dim[1] = 5
    del model.layer[0].blobs[2].data[:]
    model.layer[0].blobs[2].data.extend(np.zeros(80, np.float32))
    with pytest.raises(ValueError, match="shape mismatch"):
        copy_trained_layers_from_param(net, model)


def test_lstm_params_given_with_layer_are_used_and_checked():
    bottom = bottoms(CONT_RESETS)
    layer, top = run(lstm_text(), bottom)
    twin, twin_top = run(layer.to_proto(), bottom)
    np.testing.assert_array_equal(twin_top[0].data, top[0].data)
    param = layer.to_proto()
    del param.blobs[2]
    with pytest.raises(LayerError, match="expected 3 parameter blobs"):
        run(param, bottom)
    param = layer.to_proto()
    param.blobs[2].shape.dim[1] = 5
    del param.blobs[2].double_data[:]
    param.blobs[2].double_data.extend(np.zeros(80))
    with pytest.raises(LayerError, match=r"parameter blob 2 \(W_hc\) has shape \(16, 5\)"):
        run(param, bottom)


# ---- invalid usage -----------------------------------------------------------------------
def setup_error(text, bottom, num_top=1):
    layer = make_layer(text)
    with pytest.raises(LayerError) as info:
        layer.SetUp(bottom, empty_blobs(num_top))
    return str(info.value)


def test_lstm_missing_num_output():
    msg = setup_error('type: "LSTM" recurrent_param { }', bottoms(CONT_RESETS))
    assert "num_output must be positive, got 0" in msg


def test_lstm_cont_shape_mismatch():
    bottom = random_blobs([(T, N, D), (T, N + 1)])
    msg = setup_error(lstm_text(), bottom)
    assert "bottom[1] (cont) has shape (3, 3); expected (T, N) = (3, 2)" in msg
    msg = setup_error(lstm_text(), random_blobs([(T, N, D), (T, N, 1)]))
    assert "exactly 2 axes" in msg


def test_lstm_bad_inputs():
    assert "at least 3 axes" in setup_error(lstm_text(), random_blobs([(T, N), (T, N)]))
    msg = setup_error(lstm_text(), random_blobs([(T, N, D), (T, N), (N + 1, 2)]))
    assert "bottom[2] (x_static) has 3 streams" in msg
    msg = setup_error(lstm_text(), random_blobs([(T, N, D), (T, N), (N,)]))
    assert "(x_static) must have at least 2 axes" in msg
    assert "at least 2 bottom" in setup_error(lstm_text(), random_blobs([(T, N, D)]))
    msg = setup_error(lstm_text(), random_blobs([(T, N, D), (T, N)] + [(N, 1)] * 2))
    assert "at most 3 bottom" in msg
    assert "exactly 1 top" in setup_error(lstm_text(), bottoms(CONT_RESETS), num_top=3)


def test_lstm_expose_hidden_blob_counts_and_shapes():
    text = lstm_text(extra="expose_hidden: true")
    assert "at least 4 bottom" in setup_error(text, bottoms(CONT_RESETS), num_top=3)
    bottom = bottoms(CONT_RESETS) + random_blobs([(1, N, H), (1, N, H + 1)])
    msg = setup_error(text, bottom, num_top=3)
    assert "bottom[3] (c_0) has shape (1, 2, 5)" in msg
    bottom = bottoms(CONT_RESETS) + random_blobs([(1, N, H)] * 2)
    assert "exactly 3 top" in setup_error(text, bottom, num_top=1)


def test_lstm_reshape_errors():
    layer, top = run(lstm_text(), bottoms(CONT_RESETS))
    with pytest.raises(LayerError, match="number of time steps changed from 3 .* to 2"):
        layer.Forward(bottoms([[0, 0], [1, 1]], x_shape=(2, N, D)), top)
    with pytest.raises(LayerError, match="input size incompatible.* 4 features"):
        layer.Forward(bottoms(CONT_RESETS, x_shape=(T, N, 4)), top)
    with pytest.raises(LayerError, match="cont"):
        layer.Forward(random_blobs([(T, N, D), (T, 1)]), top)


def test_lstm_runs_on_the_device_path():
    """In GPU mode (a simulated device here) forward and backward give the CPU numbers."""
    from pycaffe_lite import backend
    from pycaffe_lite.testing.simdevice import cpu_and_simulated_gpu

    def forward_backward():
        bottom = bottoms(CONT_RESETS, static_shape=(N, 2))
        backend.set_random_seed(3)
        layer, top = run(lstm_text(), bottom)
        top[0].diff[...] = top[0].data
        layer.Backward(top, [True, False, True], bottom)
        return [top[0].data.copy(), bottom[0].diff.copy(), bottom[2].diff.copy()] + \
            [b.diff.copy() for b in layer.blobs]

    cpu, gpu, dev = cpu_and_simulated_gpu(forward_backward)
    assert dev.to_device > 0
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


def test_lstm_backward_inside_a_net_reaches_earlier_layers():
    text = """
    force_backward: true
    layer { name: "data" type: "Input" top: "x" top: "cont" top: "target"
            input_param { shape { dim: 3 dim: 2 dim: 3 } shape { dim: 3 dim: 2 }
                          shape { dim: 3 dim: 2 dim: 4 } } }
    layer { name: "ip" type: "InnerProduct" bottom: "x" top: "xp"
            inner_product_param { num_output: 2 axis: 2
                                  weight_filler { type: "gaussian" std: 0.5 } } }
    layer { name: "lstm" type: "LSTM" bottom: "xp" bottom: "cont" top: "h"
            recurrent_param { num_output: 4 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "gaussian" std: 0.2 } } }
    layer { name: "loss" type: "EuclideanLoss" bottom: "h" bottom: "target" top: "loss" }
    """
    net = Net(text, caffe_pb2.TRAIN, dtype=np.float64)
    lstm_index = net.layer_names.index("lstm")
    assert net.records[lstm_index].bottom_need_backward == [True, False]
    rng = np.random.default_rng(5)
    inputs = {"x": rng.normal(size=(T, N, D)), "cont": np.array(CONT_RESETS, np.float64),
              "target": rng.normal(size=(T, N, H))}
    w = net.params["ip"][0]

    def loss():
        return float(net.forward(**inputs)["loss"])

    net.clear_param_diffs()
    loss()
    net.backward()
    analytic = w.diff.copy()
    numeric = np.zeros_like(analytic)
    for idx in np.ndindex(w.shape):
        orig = w.data[idx]
        w.data[idx] = orig + 1e-6
        plus = loss()
        w.data[idx] = orig - 1e-6
        minus = loss()
        w.data[idx] = orig
        numeric[idx] = (plus - minus) / 2e-6
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-9)
