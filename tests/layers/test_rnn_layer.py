import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.net import Net
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import (GradientChecker, check_layer, empty_blobs, make_layer,
                                  random_blobs)
from pycaffe_lite.weights import copy_trained_layers_from_param

T, N, D, H = 3, 2, 3, 4
CONT_RESETS = [[0, 0], [1, 0], [1, 1]]


def rnn_text(num_output=H, extra=""):
    return ('type: "RNN" recurrent_param { num_output: %d '
            'weight_filler { type: "uniform" min: -0.5 max: 0.5 } '
            'bias_filler { type: "uniform" min: -0.3 max: 0.3 } %s }' % (num_output, extra))


def reference_rnn(x, cont, w_xh, b_h, w_hh, w_ho, b_o, x_static=None, w_static=None, h0=None):
    """Step-by-step float64 RNN, one stream at a time."""
    t_steps, n = cont.shape
    hdim = w_hh.shape[0]
    x = x.reshape(t_steps, n, -1).astype(np.float64)
    h = np.zeros((n, hdim)) if h0 is None else h0.reshape(n, hdim).astype(np.float64)
    out = np.zeros((t_steps, n, hdim))
    for t in range(t_steps):
        h_new = np.zeros_like(h)
        for s in range(n):
            a = w_hh @ (cont[t, s] * h[s]) + w_xh @ x[t, s] + b_h
            if x_static is not None:
                a = a + w_static @ x_static.reshape(n, -1)[s]
            h_new[s] = np.tanh(a)
            out[t, s] = np.tanh(w_ho @ h_new[s] + b_o)
        h = h_new
    return out, h


def bottoms(cont, x_shape=(T, N, D), static_shape=None, seed=0, dtype=np.float64):
    shapes = [x_shape, np.asarray(cont, dtype=np.float64)]
    if static_shape is not None:
        shapes.append(static_shape)
    return random_blobs(shapes, seed=seed, dtype=dtype)


def run(text, bottom, num_top=1, dtype=np.float64):
    layer = make_layer(text, dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, top


def test_rnn_forward_matches_reference_and_param_layout():
    bottom = bottoms(CONT_RESETS, x_shape=(T, N, 3, 1))
    layer, top = run(rnn_text(), bottom)
    assert layer.param_names == ["W_xh", "b_h", "W_hh", "W_ho", "b_o"]
    assert [b.shape for b in layer.blobs] == [(H, D), (H,), (H, H), (H, H), (H,)]
    assert top[0].shape == (T, N, H)
    ref, _ = reference_rnn(bottom[0].data, bottom[1].data, *(b.data for b in layer.blobs))
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_rnn_forward_with_static_input_and_non_binary_cont():
    bottom = bottoms([[0, 0.5], [1, 0.25], [2, 1]], static_shape=(N, 2, 1))
    layer, top = run(rnn_text(), bottom)
    assert layer.param_names == ["W_xh", "b_h", "W_xh_static", "W_hh", "W_ho", "b_o"]
    w_xh, b_h, w_s, w_hh, w_ho, b_o = (b.data for b in layer.blobs)
    assert w_s.shape == (H, 2)
    ref, _ = reference_rnn(bottom[0].data, bottom[1].data, w_xh, b_h, w_hh, w_ho, b_o,
                           x_static=bottom[2].data, w_static=w_s)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)


def test_rnn_state_carries_across_forward_calls():
    cont = np.ones((T, N))
    cont[0] = 0
    full = bottoms(cont)
    layer, top = run(rnn_text(), full)
    step = make_layer(layer.to_proto())
    step_bottom = bottoms([[0, 0]], x_shape=(1, N, D))
    step_top = empty_blobs(1)
    step.SetUp(step_bottom, step_top)
    for t in range(T):
        step_bottom[0].data[...] = full[0].data[t:t + 1]
        step_bottom[1].data[...] = cont[t:t + 1]
        step.Forward(step_bottom, step_top)
        np.testing.assert_allclose(step_top[0].data[0], top[0].data[t], rtol=1e-10, atol=1e-12)


def test_rnn_expose_hidden():
    cont = np.array([[1, 1], [0, 1], [1, 1]])
    bottom = bottoms(cont) + random_blobs([(1, N, H)], seed=2)
    layer, top = run(rnn_text(extra="expose_hidden: true"), bottom, num_top=2)
    assert [t.shape for t in top] == [(T, N, H), (1, N, H)]
    ref, h_t = reference_rnn(bottom[0].data, cont, *(b.data for b in layer.blobs),
                             h0=bottom[2].data)
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(top[1].data[0], h_t, rtol=1e-10, atol=1e-12)
    # h_0 gets no gradient (Caffe shares only its data with the unrolled net)
    bottom[2].diff[...] = 3.0
    top[0].diff[...] = 1.0
    layer.Backward(top, [True, False, True], bottom)
    assert not bottom[2].diff.any()


def test_rnn_gradient_x_and_params():
    check_layer(rnn_text(), bottoms(CONT_RESETS), check_bottom=[0], reshape_batch=False)


def test_rnn_gradient_with_static_input():
    check_layer(rnn_text(), bottoms([[0, 0], [1, 1], [0, 1]], static_shape=(N, 2)),
                check_bottom=[0, 2], reshape_batch=False)


def test_rnn_gradient_expose_hidden_through_initial_state_path():
    class FirstTopOnly:
        def __init__(self, layer):
            self.layer, self.extra = layer, empty_blobs(1)
            self.name, self.type, self.blobs = layer.name, layer.type, layer.blobs

        def SetUp(self, bottom, top):
            self.layer.SetUp(bottom, top + self.extra)
            self.blobs = self.layer.blobs

        def Forward(self, bottom, top):
            return self.layer.Forward(bottom, top + self.extra)

        def Backward(self, top, propagate_down, bottom):
            self.layer.Backward(top + self.extra, propagate_down, bottom)

    bottom = bottoms(np.ones((T, N))) + random_blobs([(1, N, H)], seed=5)
    layer = FirstTopOnly(make_layer(rnn_text(extra="expose_hidden: true")))
    GradientChecker(1e-2, 1e-3).check_gradient(layer, bottom, empty_blobs(1), check_bottom=[0])


def test_rnn_float32_and_accumulation():
    bottom = bottoms(CONT_RESETS, dtype=np.float32)
    layer, top = run(rnn_text(), bottom, dtype=np.float32)
    assert top[0].data.dtype == np.float32
    ref, _ = reference_rnn(bottom[0].data, bottom[1].data,
                           *(b.data.astype(np.float64) for b in layer.blobs))
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-5, atol=1e-6)
    top[0].diff[...] = 1
    layer.Backward(top, [True, False], bottom)
    first = [b.diff.copy() for b in layer.blobs]
    assert all(d.dtype == np.float32 and np.abs(d).sum() > 0 for d in first)
    layer.Backward(top, [True, False], bottom)
    for b, d in zip(layer.blobs, first):
        np.testing.assert_allclose(b.diff, 2 * d, rtol=1e-6)


NET = """
layer { name: "data" type: "Input" top: "x" top: "cont"
        input_param { shape { dim: 3 dim: 2 dim: 3 } shape { dim: 3 dim: 2 } } }
layer { name: "rnn" type: "RNN" bottom: "x" bottom: "cont" top: "o"
        recurrent_param { num_output: 4 } }
"""


def test_rnn_loads_caffe_weights_in_a_net():
    net = Net(NET, caffe_pb2.TEST)
    rng = np.random.default_rng(4)
    shapes = [(H, D), (H,), (H, H), (H, H), (H,)]
    weights = [rng.uniform(-0.5, 0.5, s).astype(np.float32) for s in shapes]
    model = caffe_pb2.NetParameter()
    src = model.layer.add()
    src.name = "rnn"
    for w in weights:
        bp = src.blobs.add()
        bp.shape.dim.extend(w.shape)
        bp.data.extend(w.ravel())
    copy_trained_layers_from_param(net, model)
    x = rng.normal(size=(T, N, D)).astype(np.float32)
    cont = np.array(CONT_RESETS, np.float32)
    out = net.forward(x=x, cont=cont)["o"]
    ref, _ = reference_rnn(x, cont, *(w.astype(np.float64) for w in weights))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_rnn_errors():
    layer = make_layer('type: "RNN" recurrent_param { }')
    with pytest.raises(LayerError, match="num_output must be positive, got 0"):
        layer.SetUp(bottoms(CONT_RESETS), empty_blobs(1))
    layer = make_layer(rnn_text())
    with pytest.raises(LayerError, match=r"bottom\[1\] \(cont\) has shape \(2, 2\)"):
        layer.SetUp(random_blobs([(T, N, D), (T - 1, N)]), empty_blobs(1))
    layer = make_layer(rnn_text(extra="expose_hidden: true"))
    with pytest.raises(LayerError, match=r"exactly 2 top"):
        layer.SetUp(bottoms(CONT_RESETS) + random_blobs([(1, N, H)]), empty_blobs(1))
    layer = make_layer(rnn_text(extra="expose_hidden: true"))
    with pytest.raises(LayerError, match=r"bottom\[2\] \(h_0\) has shape \(1, 1, 4\)"):
        layer.SetUp(bottoms(CONT_RESETS) + random_blobs([(1, 1, H)]), empty_blobs(2))


def test_rnn_debug_info_logs_per_step(caplog):
    caplog.set_level("INFO", logger="pycaffe_lite")
    bottom = bottoms(CONT_RESETS)
    layer, top = run(rnn_text(extra="debug_info: true"), bottom)
    steps = [r for r in caplog.records if "step" in r.getMessage()]
    assert len(steps) == T
    top[0].diff[...] = 1
    layer.Backward(top, [True, False], bottom)
    assert any("[Backward]" in r.getMessage() for r in caplog.records)
    assert bottom[0].diff.any()
