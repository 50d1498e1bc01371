import math

import numpy as np
import pytest

from pycaffe_lite.proto import protoio
from pycaffe_lite.blob import array_to_blobproto
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

_special = pytest.importorskip("scipy.special", reason="SciPy (the reference) is a test dependency")
softmax = _special.softmax

H3 = np.array([[1.0, 0.5, 0.0], [0.2, 2.0, 0.1], [0.0, 0.3, 1.5]])


def _naive(scores, labels, h, axis=1, ignore=None, mode="VALID"):
    """Loss and gradient by loops over (outer, inner) positions."""
    s = np.moveaxis(scores, axis, -1)
    lab = np.asarray(labels).reshape(s.shape[:-1])
    loss, grad, count = 0.0, np.zeros_like(s), 0
    for pos in np.ndindex(lab.shape):
        k = int(lab[pos])
        if ignore is not None and k == ignore:
            continue
        p = softmax(s[pos])
        loss -= sum(h[k, j] * math.log(max(p[j], 1e-20)) for j in range(len(p)))
        grad[pos] = p * h[k].sum() - h[k]
        count += 1
    outer = int(np.prod(scores.shape[:axis % scores.ndim]))
    normalizer = {"FULL": lab.size, "VALID": count, "BATCH_SIZE": outer, "NONE": 1}[mode]
    normalizer = max(normalizer, 1)
    return loss / normalizer, np.moveaxis(grad, -1, axis) / normalizer


def _h_file(tmp_path, h, legacy=False):
    path = str(tmp_path / "H.binaryproto")
    if legacy:
        proto = caffe_pb2.BlobProto(num=1, channels=1, height=h.shape[0], width=h.shape[1])
        proto.data.extend(h.ravel().astype(np.float32))
    else:
        proto = array_to_blobproto(h)
    protoio.write_binary(proto, path)
    return path


def _run(text, bottoms, num_top=1, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    bottom = random_blobs(bottoms, dtype=dtype)
    top = empty_blobs(num_top, dtype)
    layer.SetUp(bottom, top)
    weighted = layer.Forward(bottom, top)
    return layer, bottom, top, weighted


def test_h_as_third_bottom_hand_checked():
    scores = np.array([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    labels = np.array([1.0, 2.0])
    layer, bottom, top, weighted = _run('type: "InfogainLoss"', [scores, labels, H3])
    p = softmax(scores, axis=1)
    expected = -(H3[1] @ np.log(p[0]) + H3[2] @ np.log(p[1])) / 2
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-12)
    assert weighted == pytest.approx(expected, rel=1e-12)
    top[0].diff[...] = 2.0
    layer.Backward(top, [True, False, False], bottom)
    expected_grad = np.stack([p[0] * H3[1].sum() - H3[1], p[1] * H3[2].sum() - H3[2]]) * 2 / 2
    np.testing.assert_allclose(bottom[0].diff, expected_grad, rtol=1e-12)


@pytest.mark.parametrize("legacy", [False, True])
def test_h_from_source_file(tmp_path, legacy):
    rng = np.random.default_rng(1)
    scores, labels = rng.normal(size=(4, 3)), np.array([0.0, 2.0, 1.0, 1.0])
    text = ('type: "InfogainLoss" infogain_loss_param { source: "%s" }'
            % _h_file(tmp_path, H3, legacy))
    layer, bottom, top = check_layer(text, [scores, labels], check_bottom=0)
    h32 = H3.astype(np.float32).astype(np.float64)  # the file holds float32 values
    np.testing.assert_allclose(top[0].data, _naive(scores, labels, h32)[0], rtol=1e-12)
    assert len(layer.blobs) == 0  # H is not a learnable parameter


def test_identity_h_equals_softmax_with_loss():
    rng = np.random.default_rng(2)
    scores, labels = rng.normal(size=(5, 4)), rng.integers(0, 4, 5).astype(float)
    _, _, top, _ = _run('type: "InfogainLoss"', [scores, labels, np.eye(4)])
    _, _, ref, _ = _run('type: "SoftmaxWithLoss"', [scores, labels])
    np.testing.assert_allclose(top[0].data, ref[0].data, rtol=1e-12)


@pytest.mark.parametrize("mode", ["FULL", "VALID", "BATCH_SIZE", "NONE"])
def test_spatial_ignore_label_and_normalization_gradient(mode):
    rng = np.random.default_rng(3)
    scores = rng.normal(size=(2, 3, 2, 2))
    labels = np.array([0, 2, 1, 9, 2, 9, 0, 1], float).reshape(2, 1, 2, 2)
    h = rng.uniform(0, 2, (1, 1, 3, 3))
    text = ('type: "InfogainLoss" loss_param { ignore_label: 9 normalization: %s }' % mode)
    _, bottom, top = check_layer(text, [scores, labels, h], check_bottom=0)
    loss, _ = _naive(scores, labels, h.reshape(3, 3), ignore=9, mode=mode)
    np.testing.assert_allclose(top[0].data, loss, rtol=1e-12)


@pytest.mark.parametrize("axis, shape, label_shape", [(-1, (2, 3, 4), (2, 3)),
                                                      (2, (2, 2, 3, 2), (2, 2, 2))])
def test_other_axes_gradient(axis, shape, label_shape):
    rng = np.random.default_rng(4)
    scores = rng.normal(size=shape)
    c = shape[axis]
    labels = rng.integers(0, c, size=label_shape).astype(float)
    h = rng.uniform(0, 2, (c, c))
    text = 'type: "InfogainLoss" infogain_loss_param { axis: %d }' % axis
    layer, bottom, top = check_layer(text, [scores, labels, h], check_bottom=0)
    loss, grad = _naive(scores, labels, h, axis=axis)
    np.testing.assert_allclose(top[0].data, loss, rtol=1e-12)
    top[0].diff[...] = 1
    layer.Backward(top, [True, False, False], bottom)
    np.testing.assert_allclose(bottom[0].diff, grad, rtol=1e-10, atol=1e-14)


def test_probability_top_and_float32():
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(3, 4)).astype(np.float32)
    labels = np.array([1.0, 0.0, 3.0], np.float32)
    h = rng.uniform(0, 1, (4, 4)).astype(np.float32)
    layer, bottom, top, _ = _run('type: "InfogainLoss"', [scores, labels, h], num_top=2,
                                 dtype=np.float32)
    assert top[0].data.dtype == np.float32 and top[1].data.dtype == np.float32
    assert (layer.loss(0), layer.loss(1)) == (1.0, 0.0)
    s64 = scores.astype(np.float64)
    np.testing.assert_allclose(top[1].data, softmax(s64, axis=1), rtol=1e-6)
    loss, grad = _naive(s64, labels, h.astype(np.float64))
    np.testing.assert_allclose(top[0].data, loss, rtol=1e-5)
    layer.Backward(top, [True, False, False], bottom)
    assert bottom[0].diff.dtype == np.float32
    np.testing.assert_allclose(bottom[0].diff, grad, rtol=1e-5, atol=1e-7)


def test_missing_source_is_refused():
    layer = make_layer('type: "InfogainLoss"')
    with pytest.raises(LayerError, match=r"InfogainLoss.*infogain matrix source must be "
                                         r"specified"):
        layer.SetUp(random_blobs([(2, 3), np.array([0.0, 1.0])]), empty_blobs(1))


def test_unreadable_source_is_refused(tmp_path):
    path = str(tmp_path / "nope.binaryproto")
    layer = make_layer('type: "InfogainLoss" infogain_loss_param { source: "%s" }' % path)
    with pytest.raises(LayerError, match=r"cannot read the infogain matrix from "
                                         r"infogain_loss_param.source .*file not found"):
        layer.SetUp(random_blobs([(2, 3), np.array([0.0, 1.0])]), empty_blobs(1))


def test_h_of_wrong_size_is_refused():
    layer = make_layer('type: "InfogainLoss"')
    with pytest.raises(LayerError, match=r"H must be 3x3 for 3 classes, got 4 values"):
        layer.SetUp(random_blobs([(2, 3), np.array([0.0, 1.0]), (2, 2)]), empty_blobs(1))


def test_deprecated_normalize_is_refused():
    layer = make_layer('type: "InfogainLoss" loss_param { normalize: true }')
    with pytest.raises(LayerError, match=r"normalize is deprecated .*use "
                                         r"loss_param.normalization"):
        layer.SetUp(random_blobs([(2, 3), np.array([0.0, 1.0]), (3, 3)]), empty_blobs(1))


def test_no_gradient_to_labels_or_h():
    layer, bottom, top, _ = _run('type: "InfogainLoss"', [(2, 3), np.array([0.0, 1.0]), H3])
    assert [layer.allow_force_backward(i) for i in range(3)] == [True, False, False]
    with pytest.raises(LayerError, match="cannot backpropagate to the labels"):
        layer.Backward(top, [True, True, False], bottom)
    with pytest.raises(LayerError, match="cannot backpropagate to the infogain matrix"):
        layer.Backward(top, [True, False, True], bottom)


def test_invalid_label_is_refused():
    with pytest.raises(LayerError, match=r"label value 3 is out of range"):
        _run('type: "InfogainLoss"', [(2, 3), np.array([0.0, 3.0]), H3])
