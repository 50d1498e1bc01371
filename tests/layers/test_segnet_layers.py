"""SegNet's and ENet's BN layer and max-unpooling Upsample (with the Pooling mask)."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

BN_LEARN = ('type: "BN" bn_param { scale_filler { type: "uniform" min: 0.5 max: 1.5 } '
            'shift_filler { type: "uniform" min: -1 max: 1 } }')
BN_INFERENCE = BN_LEARN.replace("bn_param {", "bn_param { bn_mode: INFERENCE")


def test_bn_learn_forward_against_the_formula():
    check_layer(BN_LEARN, [(3, 2, 4, 5)])  # gradients (the statistics tops carry none)
    layer = make_layer(BN_LEARN)
    bottom, top = random_blobs([(3, 2, 4, 5)], seed=2), empty_blobs(3)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    x = bottom[0].data
    scale, shift = (b.data.reshape(1, 2, 1, 1) for b in layer.blobs)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=(0, 2, 3), keepdims=True)
    expected = scale * (x - mean) / np.sqrt(var + 1e-9) + shift
    np.testing.assert_allclose(top[0].data, expected, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(top[1].data.ravel(), mean.ravel(), rtol=1e-12)
    np.testing.assert_allclose(top[2].data.ravel(), var.ravel(), rtol=1e-9)


def test_bn_inference_is_scale_and_shift():
    layer, bottom, top = check_layer(BN_INFERENCE, [(2, 3, 3, 4)])
    scale, shift = (b.data.reshape(1, 3, 1, 1) for b in layer.blobs)
    np.testing.assert_allclose(top[0].data, bottom[0].data * scale + shift, rtol=1e-12)
    assert layer.blobs[0].shape == (1, 3, 1, 1)


def test_bn_inference_refuses_statistics_tops():
    layer = make_layer(BN_INFERENCE)
    with pytest.raises(CaffeError, match="LEARN"):
        layer.SetUp(random_blobs([(2, 3, 2, 2)]), empty_blobs(2))


def unpool_reference(x, mask, out_h, out_w):
    n, c = x.shape[:2]
    y = np.zeros((n, c, out_h * out_w))
    for i in range(n):
        for j in range(c):
            for k, idx in enumerate(mask[i, j].ravel()):
                y[i, j, int(idx)] = x[i, j].ravel()[k]
    return y.reshape(n, c, out_h, out_w)


SEGNET = """
name: "segnet_block"
input: "data" input_shape { dim: 2 dim: 3 dim: 7 dim: 9 }
layer { name: "pool" type: "Pooling" bottom: "data" top: "pool" top: "mask"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "scale" type: "Power" bottom: "pool" top: "scaled" power_param { scale: 2 } }
layer { name: "up" type: "Upsample" bottom: "scaled" bottom: "mask" top: "up"
        upsample_param { %s } }
"""


@pytest.mark.parametrize("params,shape", [("upsample_h: 7 upsample_w: 9", (7, 9)),
                                          ("scale: 2 pad_out_h: true pad_out_w: true", (7, 9)),
                                          ("scale_h: 2 scale_w: 2", (8, 10))])
def test_pooling_mask_then_unpooling_in_a_net(tmp_path, params, shape):
    path = tmp_path / "net.prototxt"
    path.write_text(SEGNET % params)
    net = caffe.Net(str(path), caffe.TEST)
    x = np.random.default_rng(1).uniform(-1, 1, (2, 3, 7, 9)).astype(np.float32)
    net.blobs["data"].data[...] = x
    net.forward()
    mask = net.blobs["mask"].data
    # the mask indexes the maxima of each input plane (hand check on the first window)
    win = x[0, 0, :2, :2]
    assert mask[0, 0, 0, 0] == np.argmax(win) // 2 * 9 + np.argmax(win) % 2
    expected = unpool_reference(2 * net.blobs["pool"].data, mask, *shape)
    np.testing.assert_array_equal(net.blobs["up"].data, expected)


def test_unpooling_gradient():
    x = random_blobs([(2, 2, 3, 4)], seed=3)[0]
    mask = np.zeros((2, 2, 3, 4))
    rng = np.random.default_rng(5)
    for i in range(2):
        for j in range(2):  # distinct indices into a 6 x 8 plane
            mask[i, j] = rng.choice(48, 12, replace=False).reshape(3, 4)
    m = random_blobs([mask])[0]
    layer, bottom, top = check_layer('type: "Upsample" upsample_param { scale: 2 }', [x, m],
                                     check_bottom=[0])
    np.testing.assert_array_equal(top[0].data, unpool_reference(x.data, mask, 6, 8))


def test_unpooling_mask_out_of_range_is_an_error():
    x, m = random_blobs([(1, 1, 2, 2), np.full((1, 1, 2, 2), 99.0)])
    layer = make_layer('type: "Upsample" upsample_param { scale: 2 }')
    top = empty_blobs(1)
    layer.SetUp([x, m], top)
    with pytest.raises(CaffeError, match="outside the 4 x 4 top plane"):
        layer.Forward([x, m], top)


def test_one_bottom_is_still_nearest_neighbour():
    layer, bottom, top = check_layer('type: "Upsample" upsample_param { scale: 3 }',
                                     [(1, 2, 2, 3)])
    np.testing.assert_array_equal(top[0].data, bottom[0].data.repeat(3, 2).repeat(3, 3))


ENET_DROPOUT = """
name: "enet_block"
input: "data" input_shape { dim: 2 dim: 4 dim: 3 dim: 3 }
layer { name: "drop" type: "Python" bottom: "data" top: "drop"
        python_param { module: "spatial_dropout" layer: "SpatialDropoutLayer"
                       param_str: "{'phase': '%s', 'p': '0.25'}" } }
"""


def test_enet_spatial_dropout_built_in(tmp_path):
    x = np.random.default_rng(2).uniform(0.5, 1, (2, 4, 3, 3)).astype(np.float32)
    path = tmp_path / "test.prototxt"
    path.write_text(ENET_DROPOUT % "TEST")
    net = caffe.Net(str(path), caffe.TEST)
    np.testing.assert_allclose(net.forward(data=x)["drop"], x / 0.75, rtol=1e-6)
    path.write_text(ENET_DROPOUT % "TRAIN")
    caffe.set_random_seed(4)
    net = caffe.Net(str(path), caffe.TRAIN)
    y = net.forward(data=x)["drop"].copy()
    ratio = (y / x).reshape(2, 4, 9)
    # whole maps are either dropped or kept and scaled
    assert np.all((np.abs(ratio - 0) < 1e-6) | (np.abs(ratio - 1 / 0.75) < 1e-5))
    assert np.all(ratio.max(axis=2) - ratio.min(axis=2) < 1e-5)
    assert 0 < (ratio[:, :, 0] == 0).sum() < 8
    layer = net.layers[list(net._layer_names).index("drop")]
    top, bottom = net.blobs["drop"], net.blobs["data"]
    top.diff[...] = 1
    layer.Backward([top], [True], [bottom])
    np.testing.assert_allclose(bottom.diff, y / x, rtol=1e-5)


WEIGHTED_LOSS = ('type: "SoftmaxWithLoss" loss_param { weight_by_label_freqs: true '
                 'ignore_label: 3 class_weighting: 0.5 class_weighting: 2 class_weighting: 1.5 '
                 'class_weighting: 9 }')


def test_segnet_class_weighting_against_the_forks_formula_and_gradient():
    labels = np.array([[[0, 1, 3], [2, 1, 0]], [[2, 2, 1], [3, 0, 1]]], np.float64)
    scores, lab = random_blobs([(2, 4, 2, 3), labels[:, None]])
    layer, bottom, top = check_layer(WEIGHTED_LOSS, [scores, lab], check_bottom=[0])
    x = scores.data
    p = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    weights = [0.5, 2, 1.5, 9]
    loss, count = 0.0, 0
    for n in range(2):
        for i in range(2):
            for j in range(3):
                k = int(labels[n, i, j])
                if k == 3:
                    continue
                loss -= np.log(p[n, k, i, j]) * weights[k]
                count += 1
    np.testing.assert_allclose(top[0].data, loss / count, rtol=1e-12)


def test_bayesian_segnet_samples_dropout_in_test(tmp_path):
    path = tmp_path / "bayes.prototxt"
    path.write_text('name: "bayes" input: "data" input_shape { dim: 2 dim: 50 }\n'
                    'layer { name: "drop" type: "Dropout" bottom: "data" top: "drop" '
                    'dropout_param { dropout_ratio: 0.5 sample_weights_test: true } }\n')
    caffe.set_random_seed(1)
    net = caffe.Net(str(path), caffe.TEST)
    x = np.random.default_rng(0).uniform(1, 2, (2, 50)).astype(np.float32)
    y = net.forward(data=x)["drop"]
    kept = y != 0
    assert 20 < kept.sum() < 80
    np.testing.assert_allclose(y[kept], 2 * x[kept], rtol=1e-6)
