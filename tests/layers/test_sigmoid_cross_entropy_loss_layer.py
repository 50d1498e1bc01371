import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
expit = _special.expit


def _forward(text, x, t, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    bottom = random_blobs([np.asarray(x, float), np.asarray(t, float)], dtype=dtype)
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    weighted = layer.Forward(bottom, top)
    return layer, bottom, top, weighted


def _naive_terms(x, t):
    """-(t log s + (1 - t) log(1 - s)) element by element (fine for moderate |x|)."""
    s = expit(np.asarray(x, float))
    return -(np.asarray(t) * np.log(s) + (1 - np.asarray(t)) * np.log(1 - s))


X = np.array([[1.5, -0.5, 2.0], [0.3, -2.0, 0.0]])
T = np.array([[1.0, 0.0, -1.0], [0.25, 1.0, -1.0]])  # -1: ignored when ignore_label is -1


def test_default_normalization_is_batch_size():
    t = np.where(T < 0, 0.5, T)
    _, _, top, weighted = _forward('type: "SigmoidCrossEntropyLoss"', X, t)
    expected = _naive_terms(X, t).sum() / 2  # N = 2, not the 6 elements
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)
    assert weighted == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("extra, normalizer", [
    ("normalization: FULL", 6),
    ("normalization: VALID", 4),
    ("normalization: BATCH_SIZE", 2),
    ("normalization: NONE", 1),
    ("normalize: true", 4),  # legacy: VALID
    ("normalize: false", 2),  # legacy: BATCH_SIZE
    ("normalize: true normalization: NONE", 1),  # explicit normalization wins
])
def test_ignore_label_and_normalizations(extra, normalizer):
    text = 'type: "SigmoidCrossEntropyLoss" loss_param { ignore_label: -1 %s }' % extra
    layer, bottom, top, _ = _forward(text, X, T)
    valid = T != -1
    terms = _naive_terms(X, np.where(valid, T, 0))
    np.testing.assert_allclose(top[0].data, terms[valid].sum() / normalizer, rtol=1e-12)
    top[0].diff[...] = 1.5
    layer.Backward(top, [True, False], bottom)
    expected = np.where(valid, expit(X) - T, 0) * 1.5 / normalizer
    np.testing.assert_allclose(bottom[0].diff, expected, rtol=1e-12, atol=1e-16)


def test_ignore_label_compares_truncated_targets():
    # static_cast<int>: -1.5 truncates to -1 (ignored); -0.5 truncates to 0 (kept)
    x, t = np.array([[0.5, 0.5, 0.5]]), np.array([[-1.5, -0.5, 1.0]])
    text = 'type: "SigmoidCrossEntropyLoss" loss_param { ignore_label: -1 normalization: NONE }'
    _, _, top, _ = _forward(text, x, t)
    np.testing.assert_allclose(top[0].data, _naive_terms(x, t)[0, 1:].sum(), rtol=1e-12)


def test_all_ignored_gives_zero():
    text = 'type: "SigmoidCrossEntropyLoss" loss_param { ignore_label: 3 normalization: VALID }'
    layer, bottom, top, _ = _forward(text, X, np.full(X.shape, 3.0))
    assert float(top[0].data) == 0.0
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.zeros(X.shape))


def test_float32_stable_for_large_scores():
    x = np.array([[-200.0, -30.0, 0.0, 30.0, 200.0]], np.float32)
    t = np.array([[1.0, 0.0, 1.0, 0.0, 0.0]], np.float32)
    with np.errstate(over="raise", invalid="raise"):
        layer, bottom, top, _ = _forward('type: "SigmoidCrossEntropyLoss"', x, t,
                                         dtype=np.float32)
        layer.Backward(top, [True, False], bottom)
    assert top[0].data.dtype == np.float32 and bottom[0].diff.dtype == np.float32
    # softplus form: t=1 at -200 costs 200, t=0 at 200 costs 200, t=0 at 30 costs ~30
    x64 = x.astype(np.float64)
    expected = (np.logaddexp(0, x64) - t * x64).sum()
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-6)
    np.testing.assert_allclose(bottom[0].diff, expit(x64) - t, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("extra", ["", "normalization: FULL", "normalization: VALID",
                                   "normalization: NONE"])
def test_gradient(extra):
    rng = np.random.default_rng(4)
    x = rng.normal(size=(3, 2, 2)) * 2
    t = rng.uniform(0, 1, size=(3, 4))
    t[0, 1] = t[2, 3] = 9  # ignored
    text = 'type: "SigmoidCrossEntropyLoss" loss_param { ignore_label: 9 %s }' % extra
    check_layer(text, [x, t], check_bottom=0)


def test_count_mismatch_is_refused():
    layer = make_layer('type: "SigmoidCrossEntropyLoss"')
    with pytest.raises(LayerError, match=r"SigmoidCrossEntropyLoss.*same count: the scores "
                                         r"\(shape \(2, 3\)\) have 6 values, the targets "
                                         r"\(shape \(2, 2\)\) 4"):
        layer.SetUp(random_blobs([(2, 3), (2, 2)]), empty_blobs(1))


def test_no_gradient_to_targets():
    layer, bottom, top, _ = _forward('type: "SigmoidCrossEntropyLoss"', X, np.abs(T))
    assert layer.allow_force_backward(0) and not layer.allow_force_backward(1)
    with pytest.raises(LayerError, match="cannot backpropagate to the targets"):
        layer.Backward(top, [True, True], bottom)
