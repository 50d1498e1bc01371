import numpy as np
import pytest

from pycaffe_lite import backend
from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def _run(text, x, phase=caffe_pb2.TRAIN, dtype=np.float64, seed=3):
    layer = make_layer(text, dtype=dtype, phase=phase)
    bottom, top = random_blobs([x], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    backend.set_random_seed(seed)
    layer.Forward(bottom, top)
    return layer, bottom, top


@pytest.mark.parametrize("ratio", [0.5, 0.3, 0.8])
def test_dropout_train_forward_and_backward(ratio):
    x = np.random.default_rng(0).uniform(0.5, 1.5, (50, 40, 10))
    layer, bottom, top = _run('type: "Dropout" dropout_param { dropout_ratio: %g }' % ratio, x)
    y = top[0].data
    r = float(np.float32(ratio))  # the schema stores the ratio as a float
    kept = y != 0
    # kept elements are scaled by 1 / (1 - ratio), dropped ones are exactly zero
    np.testing.assert_allclose(y[kept], x[kept] / (1 - r), rtol=1e-12)
    # keep probability 1 - ratio: 20000 draws, 5 standard deviations of slack
    sd = np.sqrt(r * (1 - r) / x.size)
    assert abs(kept.mean() - (1 - r)) < 5 * sd
    # backward reuses the forward's mask and scale
    dy = np.random.default_rng(1).normal(size=x.shape)
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(bottom[0].diff, np.where(kept, dy / (1 - r), 0.0), rtol=1e-12)


def test_dropout_mask_is_redrawn_every_forward():
    x = np.ones((4, 100))
    layer, bottom, top = _run('type: "Dropout"', x)
    first = top[0].data.copy()
    layer.Forward(bottom, top)
    assert not np.array_equal(first, top[0].data)
    assert set(np.unique(top[0].data)) <= {0.0, 2.0}


@pytest.mark.parametrize("ratio", [0.5, 0.25])
def test_dropout_gradient_train(ratio):
    check_layer('type: "Dropout" dropout_param { dropout_ratio: %g }' % ratio, [(2, 3, 4, 5)])


def test_dropout_test_phase_is_identity_in_place():
    layer, bottom, top = check_layer('type: "Dropout" dropout_param { dropout_ratio: 0.7 }',
                                     [(2, 3, 4)], phase=caffe_pb2.TEST, in_place=True)
    np.testing.assert_array_equal(top[0].data, bottom[0].data)


def test_dropout_ratio_zero_keeps_everything():
    x = np.random.default_rng(2).normal(size=(3, 7))
    _, bottom, top = _run('type: "Dropout" dropout_param { dropout_ratio: 0 }', x)
    np.testing.assert_array_equal(top[0].data, x)


def test_dropout_train_in_place_matches_out_of_place():
    text = 'type: "Dropout" dropout_param { dropout_ratio: 0.4 }'
    x = np.random.default_rng(4).normal(size=(3, 5, 6))
    ref, ref_bottom, ref_top = _run(text, x, seed=11)
    ref_top[0].diff[...] = 1.5
    ref.Backward(ref_top, [True], ref_bottom)

    layer = make_layer(text)
    blob = Blob(x.shape, np.float64)
    blob.data[...] = x
    layer.SetUp([blob], [blob])
    backend.set_random_seed(11)
    layer.Forward([blob], [blob])
    np.testing.assert_array_equal(blob.data, ref_top[0].data)
    blob.diff[...] = 1.5
    layer.Backward([blob], [True], [blob])
    np.testing.assert_array_equal(blob.diff, ref_bottom[0].diff)


def test_dropout_without_train_scaling_scales_at_test():
    # scale_train: false (absent from BVLC's final schema, so set on the layer directly):
    # TRAIN keeps x unscaled, TEST multiplies by 1 - ratio.
    x = np.random.default_rng(5).uniform(1.0, 2.0, (6, 8)).astype(np.float32)
    text = 'type: "Dropout" dropout_param { dropout_ratio: 0.25 }'
    for phase in (caffe_pb2.TRAIN, caffe_pb2.TEST):
        layer = make_layer(text, dtype=np.float32, phase=phase)
        bottom, top = random_blobs([x], dtype=np.float32), empty_blobs(1, np.float32)
        layer.SetUp(bottom, top)
        layer.scale_train = False
        layer.Forward(bottom, top)
        y = top[0].data
        assert y.dtype == np.float32
        top[0].diff[...] = 1
        layer.Backward(top, [True], bottom)
        if phase == caffe_pb2.TRAIN:
            kept = y != 0
            assert 0 < kept.sum() < x.size
            np.testing.assert_array_equal(y[kept], x[kept])
            np.testing.assert_array_equal(bottom[0].diff, kept.astype(np.float32))
        else:
            np.testing.assert_allclose(y, x * 0.75, rtol=1e-6)
            np.testing.assert_allclose(bottom[0].diff, np.full(x.shape, 0.75), rtol=1e-6)


def test_dropout_float32_stays_float32():
    x = np.random.default_rng(6).normal(size=(4, 5)).astype(np.float32)
    _, _, top = _run('type: "Dropout"', x, dtype=np.float32)
    assert top[0].data.dtype == np.float32
    kept = top[0].data != 0
    np.testing.assert_array_equal(top[0].data[kept], x[kept] * np.float32(2))


@pytest.mark.parametrize("ratio, shown", [(1.0, "got 1"), (-0.1, "got -0.1"), (1.5, "got 1.5")])
def test_dropout_rejects_ratio_outside_unit_interval(ratio, shown):
    layer = make_layer('type: "Dropout" dropout_param { dropout_ratio: %g }' % ratio)
    with pytest.raises(LayerError, match=r"dropout_ratio must be in \[0, 1\), " + shown):
        layer.SetUp(random_blobs([(2, 3)]), empty_blobs(1))
