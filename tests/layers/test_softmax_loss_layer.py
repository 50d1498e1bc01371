import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
log_softmax = _special.log_softmax
softmax = _special.softmax

FLT_MIN = np.finfo(np.float32).tiny


def _forward(text, scores, labels, num_top=1, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    bottom = random_blobs([np.asarray(scores), np.asarray(labels, float)], dtype=dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    weighted = layer.Forward(bottom, top)
    return layer, bottom, top, weighted


# -- hand-computed losses ---------------------------------------------------------------------

SCORES_2X3 = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
# row 0, label 2: -log(e^3 / (e + e^2 + e^3)) = log(1 + e^-1 + e^-2)
ROW0 = np.log(1 + np.exp(-1) + np.exp(-2))
# row 1, label 0: -log(1/3)
ROW1 = np.log(3.0)


@pytest.mark.parametrize("mode, expected", [
    ("FULL", ROW0 / 2),  # outer * inner = 2, ignored label included
    ("VALID", ROW0 / 1),  # one label not ignored
    ("BATCH_SIZE", ROW0 / 2),  # outer = 2
    ("NONE", ROW0),
])
def test_2x3_with_ignored_label_per_normalization(mode, expected):
    text = ('type: "SoftmaxWithLoss" loss_param { ignore_label: 7 normalization: %s }' % mode)
    layer, bottom, top, weighted = _forward(text, SCORES_2X3, [2, 7])
    assert top[0].data.shape == ()
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)
    assert weighted == pytest.approx(expected, rel=1e-12)  # default loss weight 1
    if mode == "VALID":
        np.testing.assert_allclose(top[0].data, 0.40760596444438, rtol=1e-12)


def test_2x3_default_is_valid_normalization_without_ignore():
    _, _, top, _ = _forward('type: "SoftmaxWithLoss"', SCORES_2X3, [2, 0])
    np.testing.assert_allclose(top[0].data, (ROW0 + ROW1) / 2, rtol=1e-12)


def _spatial_case():
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(2, 3, 2))  # outer 2, classes 3, inner 2
    labels = np.array([[0, 2], [-1, 1]])  # one ignored position (-1)
    logp = log_softmax(scores, axis=1)
    picked = [logp[0, 0, 0], logp[0, 2, 1], logp[1, 1, 1]]
    return scores, labels, -np.sum(picked)


@pytest.mark.parametrize("mode, normalizer", [("FULL", 4), ("VALID", 3), ("BATCH_SIZE", 2),
                                              ("NONE", 1)])
def test_spatial_normalization_modes(mode, normalizer):
    scores, labels, total = _spatial_case()
    text = 'type: "SoftmaxWithLoss" loss_param { ignore_label: -1 normalization: %s }' % mode
    layer, bottom, top, _ = _forward(text, scores, labels)
    np.testing.assert_allclose(top[0].data, total / normalizer, rtol=1e-12)
    # backward: (p - onehot) * loss_weight / normalizer, zero where the label is ignored
    top[0].diff[...] = 2.5
    layer.Backward(top, [True, False], bottom)
    expected = softmax(scores, axis=1)
    for (i, j), lab in np.ndenumerate(labels):
        if lab == -1:
            expected[i, :, j] = 0
        else:
            expected[i, lab, j] -= 1
    np.testing.assert_allclose(bottom[0].diff, expected * 2.5 / normalizer, rtol=1e-12,
                               atol=1e-15)


@pytest.mark.parametrize("normalize, extra, normalizer", [
    ("true", "", 3),  # legacy normalize: true = VALID
    ("false", "", 2),  # legacy normalize: false = BATCH_SIZE
    ("false", "normalization: FULL", 4),  # an explicit normalization wins
    ("true", "normalization: NONE", 1),
])
def test_legacy_normalize_flag(normalize, extra, normalizer):
    scores, labels, total = _spatial_case()
    text = ('type: "SoftmaxWithLoss" loss_param { ignore_label: -1 normalize: %s %s }'
            % (normalize, extra))
    _, _, top, _ = _forward(text, scores, labels)
    np.testing.assert_allclose(top[0].data, total / normalizer, rtol=1e-12)


@pytest.mark.parametrize("mode", ["VALID", "FULL", "BATCH_SIZE", "NONE"])
def test_all_labels_ignored_gives_zero_not_nan(mode):
    text = 'type: "SoftmaxWithLoss" loss_param { ignore_label: 4 normalization: %s }' % mode
    layer, bottom, top, _ = _forward(text, SCORES_2X3, [4, 4])
    assert float(top[0].data) == 0.0
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.zeros((2, 3)))


def test_ignored_label_may_be_out_of_range():
    text = 'type: "SoftmaxWithLoss" loss_param { ignore_label: 255 }'
    _, _, top, _ = _forward(text, SCORES_2X3, [2, 255])
    np.testing.assert_allclose(top[0].data, ROW0, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_probability_clamped_at_flt_min(dtype):
    scores = np.array([[0.0, -1000.0]])
    _, _, top, _ = _forward('type: "SoftmaxWithLoss"', scores, [1], dtype=dtype)
    assert top[0].data.dtype == dtype
    np.testing.assert_allclose(top[0].data, -np.log(FLT_MIN), rtol=1e-6)


def test_probability_top_and_loss_weights():
    scores, labels, total = _spatial_case()
    text = 'type: "SoftmaxWithLoss" loss_param { ignore_label: -1 }'
    layer, bottom, top, weighted = _forward(text, scores, labels, num_top=2)
    assert top[1].data.shape == scores.shape
    np.testing.assert_allclose(top[1].data, softmax(scores, axis=1), rtol=1e-12)
    assert (layer.loss(0), layer.loss(1)) == (1.0, 0.0)
    assert weighted == pytest.approx(total / 3, rel=1e-12)


def test_explicit_loss_weight_scales_gradient():
    text = 'type: "SoftmaxWithLoss" loss_weight: 3'
    layer, bottom, top, weighted = _forward(text, SCORES_2X3, [2, 0])
    assert weighted == pytest.approx(3 * (ROW0 + ROW1) / 2, rel=1e-12)
    layer.Backward(top, [True, False], bottom)
    expected = softmax(SCORES_2X3, axis=1) - np.eye(3)[[2, 0]]
    np.testing.assert_allclose(bottom[0].diff, 3 * expected / 2, rtol=1e-12)


def test_float32_end_to_end():
    rng = np.random.default_rng(8)
    scores = rng.normal(size=(4, 5)).astype(np.float32)
    labels = np.array([0, 4, 2, 2])
    layer, bottom, top, _ = _forward('type: "SoftmaxWithLoss"', scores, labels,
                                     dtype=np.float32)
    ref = -log_softmax(scores.astype(np.float64), axis=1)[np.arange(4), labels].mean()
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, ref, rtol=1e-6)
    layer.Backward(top, [True, False], bottom)
    assert bottom[0].diff.dtype == np.float32
    expected = (softmax(scores.astype(np.float64), axis=1) - np.eye(5)[labels]) / 4
    np.testing.assert_allclose(bottom[0].diff, expected, rtol=1e-5, atol=1e-7)


# -- numerical gradients ----------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["FULL", "VALID", "BATCH_SIZE", "NONE"])
def test_gradient_spatial_axis1_every_normalization(mode):
    rng = np.random.default_rng(10)
    scores = rng.normal(size=(2, 3, 2, 2))
    labels = np.array([0, 2, 1, 5, 2, 5, 0, 1], float).reshape(2, 1, 2, 2)
    text = ('type: "SoftmaxWithLoss" loss_param { ignore_label: 5 normalization: %s }' % mode)
    _, bottom, top = check_layer(text, [scores, labels], check_bottom=0)
    logp = log_softmax(scores, axis=1)
    lab = labels.reshape(2, 2, 2)
    picked = [logp[n, int(lab[n, h, w]), h, w] for n in range(2) for h in range(2)
              for w in range(2) if lab[n, h, w] != 5]
    normalizer = {"FULL": 8, "VALID": 6, "BATCH_SIZE": 2, "NONE": 1}[mode]
    np.testing.assert_allclose(top[0].data, -np.sum(picked) / normalizer, rtol=1e-12)


@pytest.mark.parametrize("axis, shape, label_shape", [
    (1, (3, 4), (3,)),
    (-1, (2, 3, 4), (2, 3)),
    (2, (2, 3, 4, 2), (2, 3, 2)),
    (-2, (2, 2, 3, 2), (2, 2, 2)),
])
@pytest.mark.parametrize("mode", ["FULL", "VALID", "BATCH_SIZE", "NONE"])
def test_gradient_over_axes(axis, shape, label_shape, mode):
    rng = np.random.default_rng(abs(axis) + len(shape))
    scores = rng.normal(size=shape)
    labels = rng.integers(0, shape[axis], size=label_shape).astype(float)
    text = ('type: "SoftmaxWithLoss" softmax_param { axis: %d } '
            'loss_param { normalization: %s }' % (axis, mode))
    _, _, top = check_layer(text, [scores, labels], check_bottom=0)
    logp = np.moveaxis(log_softmax(scores, axis=axis), axis, -1)
    picked = np.take_along_axis(logp, labels.astype(int)[..., None], axis=-1)
    outer = int(np.prod(shape[:axis % len(shape)]))
    normalizer = {"FULL": labels.size, "VALID": labels.size, "BATCH_SIZE": outer, "NONE": 1}
    np.testing.assert_allclose(top[0].data, -picked.sum() / normalizer[mode], rtol=1e-12)


# -- invalid usage ----------------------------------------------------------------------------

@pytest.mark.parametrize("labels, value, what", [
    ([2, 3], "3", "out of range"),
    ([-1, 0], "-1", "out of range"),
    ([0.5, 1], "0.5", "not an integer"),
])
def test_invalid_label_values(labels, value, what):
    with pytest.raises(LayerError, match=r"SoftmaxWithLoss.*label value %s is %s: labels must "
                                         r"be integers in \[0, 3\)" % (value, what)):
        _forward('type: "SoftmaxWithLoss"', SCORES_2X3, labels)


def test_invalid_label_message_names_ignore_label():
    with pytest.raises(LayerError, match=r"label value 9 .*\[0, 3\) \(or the ignore_label 7\)"):
        _forward('type: "SoftmaxWithLoss" loss_param { ignore_label: 7 }', SCORES_2X3, [7, 9])


def test_label_count_must_match_predictions():
    layer = make_layer('type: "SoftmaxWithLoss"')
    bottom = random_blobs([(2, 3, 2, 2), (2, 1, 2, 1)])
    with pytest.raises(LayerError, match=r"need 8 labels \(outer 2 x inner 4\), got 4"):
        layer.SetUp(bottom, empty_blobs(1))


def test_no_gradient_to_labels():
    layer, bottom, top, _ = _forward('type: "SoftmaxWithLoss"', SCORES_2X3, [2, 0])
    assert layer.allow_force_backward(0) and not layer.allow_force_backward(1)
    with pytest.raises(LayerError, match="cannot backpropagate to the labels"):
        layer.Backward(top, [True, True], bottom)


def test_top_count_limits():
    layer = make_layer('type: "SoftmaxWithLoss"')
    with pytest.raises(LayerError, match="at most 2 top"):
        layer.SetUp(random_blobs([(2, 3), np.array([0.0, 1.0])]), empty_blobs(3))


def test_softmax_axis_out_of_range():
    layer = make_layer('type: "SoftmaxWithLoss" softmax_param { axis: 2 }')
    with pytest.raises(LayerError, match=r"softmax axis 2 is out of range"):
        layer.SetUp(random_blobs([(2, 3), np.array([0.0, 1.0])]), empty_blobs(1))
