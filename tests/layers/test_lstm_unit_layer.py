import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import (GradientChecker, check_layer, empty_blobs, make_layer,
                                  random_blobs)

N, H = 3, 4
TEXT = 'type: "LSTMUnit"'


def unit_bottoms(cont, n=N, hdim=H, seed=0, dtype=np.float64):
    cont = np.asarray(cont, dtype=np.float64).reshape(1, n)
    return random_blobs([(1, n, hdim), (1, n, 4 * hdim), cont], seed=seed, dtype=dtype)


def reference_unit(c_prev, x, cont):
    """Element by element, in float64."""
    _, n, hdim = c_prev.shape
    c = np.zeros((1, n, hdim))
    h = np.zeros((1, n, hdim))
    for s in range(n):
        for u in range(hdim):
            def gate(k):
                return float(x[0, s, k * hdim + u])
            i = 1 / (1 + np.exp(-gate(0)))
            f = 0.0 if cont[0, s] == 0 else cont[0, s] / (1 + np.exp(-gate(1)))
            o = 1 / (1 + np.exp(-gate(2)))
            g = np.tanh(gate(3))
            c[0, s, u] = f * c_prev[0, s, u] + i * g
            h[0, s, u] = o * np.tanh(c[0, s, u])
    return c, h


def run(bottom, dtype=np.float64):
    layer = make_layer(TEXT, dtype)
    top = empty_blobs(2, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, top


@pytest.mark.parametrize("cont", [[0, 0, 0], [1, 0, 1], [0.5, 2.0, 1.0]])
def test_lstm_unit_forward(cont):
    bottom = unit_bottoms(cont)
    bottom[1].data[...] *= 3  # reach the saturating parts of the nonlinearities
    layer, top = run(bottom)
    assert top[0].shape == (1, N, H) and top[1].shape == (1, N, H)
    c, h = reference_unit(*(b.data for b in bottom))
    np.testing.assert_allclose(top[0].data, c, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(top[1].data, h, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cont", [[0, 0, 0], [1, 0, 1]])
def test_lstm_unit_gradient(cont):
    # as Caffe's TestLSTMUnitGradient(NonZeroCont): both tops, no gradient to cont
    check_layer(TEXT, unit_bottoms(cont), num_top=2, check_bottom=[0, 1])


def test_lstm_unit_gradient_exhaustive():
    layer = make_layer(TEXT)
    GradientChecker(1e-2, 1e-3).check_gradient_exhaustive(
        layer, unit_bottoms([1, 0], n=2, hdim=2, seed=3), empty_blobs(2), check_bottom=[0, 1])


def test_lstm_unit_backward_formulas():
    bottom = unit_bottoms([1, 0, 1])
    layer, top = run(bottom)
    rng = np.random.default_rng(1)
    dc, dh = rng.normal(size=(1, N, H)), rng.normal(size=(1, N, H))
    top[0].diff[...] = dc
    top[1].diff[...] = dh
    layer.Backward(top, [True, True, False], bottom)
    c_prev, x, cont = (b.data for b in bottom)
    sig = 1 / (1 + np.exp(-x))
    i, f, o = sig[..., :H], sig[..., H:2 * H] * cont[..., None], sig[..., 2 * H:3 * H]
    g = np.tanh(x[..., 3 * H:])
    tc = np.tanh(top[0].data)
    dct = dc + dh * o * (1 - tc ** 2)
    np.testing.assert_allclose(bottom[0].diff, dct * f, rtol=1e-12, atol=1e-14)
    expected = np.concatenate([dct * g * i * (1 - i), dct * c_prev * f * (1 - f),
                               dh * tc * o * (1 - o), dct * i * (1 - g ** 2)], axis=-1)
    np.testing.assert_allclose(bottom[1].diff, expected, rtol=1e-12, atol=1e-14)


def test_lstm_unit_float32_and_selective_backward():
    bottom = unit_bottoms([1, 1, 0], dtype=np.float32)
    layer, top = run(bottom, np.float32)
    assert top[0].data.dtype == np.float32 and top[1].data.dtype == np.float32
    c, h = reference_unit(*(b.data.astype(np.float64) for b in bottom))
    np.testing.assert_allclose(top[1].data, h, rtol=1e-5, atol=1e-6)
    top[0].diff[...] = 1
    top[1].diff[...] = 1
    bottom[1].diff[...] = 5
    layer.Backward(top, [True, False, False], bottom)
    assert bottom[0].diff.dtype == np.float32 and bottom[0].diff.any()
    assert (bottom[1].diff == 5).all()  # not asked for: left alone


def test_lstm_unit_no_gradient_to_cont():
    bottom = unit_bottoms([1, 1, 1])
    layer, top = run(bottom)
    assert layer.allow_force_backward(0) and layer.allow_force_backward(1)
    assert not layer.allow_force_backward(2)
    with pytest.raises(LayerError, match="cannot backpropagate to the sequence continuation"):
        layer.Backward(top, [True, True, True], bottom)


@pytest.mark.parametrize("shapes,message", [
    ([(1, N, H), (1, N, 4 * H + 1), (1, N)], r"4 \* H = 16 gate inputs"),
    ([(1, N, H), (1, N, 4 * H), (1, N + 1)], r"bottom\[2\] \(cont\) has 4 streams"),
    ([(1, N, H), (1, N, 4 * H), (N,)], r"bottom\[2\] \(cont\) must have 2 axes"),
    ([(N, H), (1, N, 4 * H), (1, N)], r"bottom\[0\] \(c_prev\) must have 3 axes"),
    ([(2, N, H), (2, N, 4 * H), (2, N)], "single time step"),
])
def test_lstm_unit_shape_errors(shapes, message):
    layer = make_layer(TEXT)
    with pytest.raises(LayerError, match=message):
        layer.SetUp(random_blobs(shapes), empty_blobs(2))


def test_lstm_unit_blob_counts():
    layer = make_layer(TEXT)
    with pytest.raises(LayerError, match="exactly 3 bottom"):
        layer.SetUp(random_blobs([(1, N, H), (1, N, 4 * H)]), empty_blobs(2))
    layer = make_layer(TEXT)
    with pytest.raises(LayerError, match="exactly 2 top"):
        layer.SetUp(unit_bottoms([1, 1, 1]), empty_blobs(1))
