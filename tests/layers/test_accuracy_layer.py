import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_accuracy(scores, labels, axis=1, top_k=1, ignore_label=None):
    """Caffe's rule, one prediction at a time: correct when fewer than top_k other classes
    score at least as high as the true class."""
    moved = np.moveaxis(scores, axis, -1)
    classes = moved.shape[-1]
    flat = moved.reshape(-1, classes)
    flat_labels = labels.reshape(-1)
    hits, count = 0, 0
    per_hits, per_count = np.zeros(classes), np.zeros(classes)
    for row, lab in zip(flat, flat_labels):
        lab = int(lab)
        if ignore_label is not None and lab == ignore_label:
            continue
        at_least = 0
        for k in range(classes):
            if k != lab and row[k] >= row[lab]:
                at_least += 1
        correct = at_least < top_k
        hits += correct
        count += 1
        per_hits[lab] += correct
        per_count[lab] += 1
    acc = hits / count if count else 0.0
    per = np.array([h / c if c else 0.0 for h, c in zip(per_hits, per_count)])
    return acc, per


def _forward(text, scores, labels, num_top=1, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    bottom = random_blobs([np.asarray(scores, float), np.asarray(labels, float)], dtype=dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


@pytest.mark.parametrize("top_k", [1, 2, 3])
def test_accuracy_matches_naive_loop(top_k):
    rng = np.random.default_rng(top_k)
    # coarse integer scores so that ties happen
    scores = rng.integers(0, 4, size=(40, 5)).astype(float)
    labels = rng.integers(0, 5, size=40)
    text = 'type: "Accuracy" accuracy_param { top_k: %d }' % top_k
    layer, bottom, top = check_layer(text, [scores, labels.astype(float)], num_top=2,
                                     check_bottom=[])
    acc, per = naive_accuracy(scores, labels, top_k=top_k)
    assert top[0].data.shape == () and top[1].data.shape == (5,)
    np.testing.assert_allclose(top[0].data, acc, rtol=1e-12)
    np.testing.assert_allclose(top[1].data, per, rtol=1e-12)


@pytest.mark.parametrize("axis, shape, label_shape", [
    (1, (3, 4, 2, 3), (3, 1, 2, 3)),
    (-1, (4, 2, 6), (4, 2)),
    (2, (2, 3, 4), (2, 3)),
])
def test_accuracy_axis_and_ignore_label(axis, shape, label_shape):
    rng = np.random.default_rng(7)
    scores = rng.normal(size=shape)
    labels = rng.integers(0, shape[axis], size=label_shape)
    labels.reshape(-1)[::4] = -3  # some ignored positions
    text = ('type: "Accuracy" accuracy_param { axis: %d top_k: 2 ignore_label: -3 }' % axis)
    _, _, top = _forward(text, scores, labels, num_top=2)
    sq_labels = labels.reshape(np.moveaxis(scores, axis, -1).shape[:-1])
    acc, per = naive_accuracy(scores, sq_labels, axis=axis, top_k=2, ignore_label=-3)
    np.testing.assert_allclose(top[0].data, acc, rtol=1e-12)
    np.testing.assert_allclose(top[1].data, per, rtol=1e-12)


def test_ties_count_against_the_true_class():
    scores = [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.5, 2.0, 0.5]]
    labels = [0, 1, 2]
    _, _, top1 = _forward('type: "Accuracy"', scores, labels, num_top=2)
    # every true class shares its score with another class: no hit at top_k 1
    assert float(top1[0].data) == 0.0
    _, _, top2 = _forward('type: "Accuracy" accuracy_param { top_k: 2 }', scores, labels,
                          num_top=2)
    # top_k 2: rows 0 and 1 hit (one tie), row 2 misses (class 1 higher, class 0 tied)
    np.testing.assert_allclose(top2[0].data, 2 / 3, rtol=1e-12)
    np.testing.assert_allclose(top2[1].data, [1.0, 1.0, 0.0])


def test_per_class_is_zero_for_absent_class_and_float32():
    scores = np.array([[0.1, 0.9, 0.0], [0.8, 0.1, 0.1], [0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])
    labels = [1, 0, 1, 0]  # class 2 never appears
    _, _, top = _forward('type: "Accuracy"', scores, labels, num_top=2, dtype=np.float32)
    assert top[0].data.dtype == np.float32
    np.testing.assert_allclose(top[0].data, 0.75)
    np.testing.assert_allclose(top[1].data, [1.0, 0.5, 0.0])


def test_all_ignored_gives_zero():
    _, _, top = _forward('type: "Accuracy" accuracy_param { ignore_label: 2 }',
                         [[1.0, 0.0], [0.0, 1.0]], [2, 2], num_top=2)
    assert float(top[0].data) == 0.0
    np.testing.assert_array_equal(top[1].data, [0.0, 0.0])


def test_no_backward():
    layer, bottom, top = _forward('type: "Accuracy"', [[1.0, 0.0]], [0])
    layer.Backward(top, [False, False], bottom)  # nothing asked: fine
    with pytest.raises(LayerError, match="Accuracy has no backward pass"):
        layer.Backward(top, [True, False], bottom)


def test_top_k_larger_than_classes():
    with pytest.raises(LayerError, match=r"got top_k 4 for 3 classes"):
        _forward('type: "Accuracy" accuracy_param { top_k: 4 }', [[1.0, 2.0, 3.0]], [0])


def test_top_k_zero_rejected():
    with pytest.raises(LayerError, match="top_k must be at least 1, got 0"):
        _forward('type: "Accuracy" accuracy_param { top_k: 0 }', [[1.0, 2.0, 3.0]], [0])


def test_label_count_mismatch_and_bad_label():
    with pytest.raises(LayerError, match=r"need 2 labels \(outer 2 x inner 1\), got 3"):
        _forward('type: "Accuracy"', [[1.0, 2.0], [3.0, 4.0]], [0, 1, 1])
    with pytest.raises(LayerError, match=r"label value 2 is out of range.*\[0, 2\)"):
        _forward('type: "Accuracy"', [[1.0, 2.0], [3.0, 4.0]], [0, 2])


@pytest.mark.parametrize("text, labels, hint", [
    # ENet's and VOC's label images mark the pixels to skip with 255
    ('type: "Accuracy"', [0, 255, 2, 255],
     "set accuracy_param { ignore_label: 255 } in the layer"),
    ('type: "SoftmaxWithLoss"', [0, 255, 2, 255],
     "set loss_param { ignore_label: 255 } in the layer"),
    ('type: "Accuracy"', [0, 255, 2, 7], None),  # two values: no single marker to name
    ('type: "Accuracy" accuracy_param { ignore_label: 1 }', [0, 255, 2, 1], None),
    ('type: "Accuracy"', [0, 2.5, 2, 1], None),  # not an integer
])
def test_invalid_labels_of_one_value_suggest_the_ignore_label(text, labels, hint):
    scores = np.random.default_rng(0).normal(size=(4, 3))
    with pytest.raises(LayerError) as info:
        _forward(text, scores, labels)
    msg = str(info.value)
    assert "labels must be integers in [0, 3)" in msg
    if hint is None:
        assert "ignore_label:" not in msg.split("invalid", 1)[1]
    else:
        assert msg.endswith("labels are invalid; if 255 marks labels to skip, " + hint)
