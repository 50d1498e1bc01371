import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_reindex(x, idx):
    out = np.zeros((len(idx),) + x.shape[1:])
    for m, i in enumerate(idx):
        for rest in np.ndindex(*x.shape[1:]):
            out[(m,) + rest] = x[(int(i),) + rest]
    return out


@pytest.mark.parametrize("indices", [[2, 0, 2, 2, 1], [1], [2.7, 0.2]])
def test_batch_reindex_forward_and_gradient(indices):
    x = np.random.default_rng(0).uniform(-1, 1, (3, 2, 2))
    layer, bottom, top = check_layer('type: "BatchReindex"', [x, np.array(indices, float)],
                                     check_bottom=[0], reshape_batch=False)
    np.testing.assert_array_equal(top[0].data, naive_reindex(x, indices))


def test_batch_reindex_backward_sums_repeats_and_zeros_the_rest():
    layer = make_layer('type: "BatchReindex"', dtype=np.float32)
    bottom = random_blobs([(3, 2), np.array([2.0, 0.0, 2.0])], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].shape == (3, 2) and top[0].data.dtype == np.float32
    top[0].diff[...] = [[1, 2], [3, 4], [5, 6]]
    bottom[0].diff[...] = 99
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [[3, 4], [0, 0], [6, 8]])
    # a different number of indices reshapes the top
    bottom[1].reshape(5)
    bottom[1].data[...] = [0, 1, 1, 2, 0]
    layer.Forward(bottom, top)
    assert top[0].shape == (5, 2)
    np.testing.assert_array_equal(top[0].data, bottom[0].data[[0, 1, 1, 2, 0]])


@pytest.mark.parametrize("bad,shown", [(3.0, "3.0"), (-1.0, "-1.0"), (-0.5, "-0.5")])
def test_batch_reindex_out_of_range_index_is_named(bad, shown):
    layer = make_layer('type: "BatchReindex"')
    bottom, top = random_blobs([(3, 2), np.array([0.0, bad])]), empty_blobs(1)
    layer.SetUp(bottom, top)
    with pytest.raises(LayerError, match=r"index %s at position 1 of bottom 1 is outside the "
                                         r"batch of bottom 0 \(expected 0 <= index < 3\)"
                                         % shown.replace(".", r"\.")):
        layer.Forward(bottom, top)


def test_batch_reindex_other_errors():
    with pytest.raises(LayerError, match=r"must have exactly 1 axis, got shape \(2, 1\)"):
        make_layer('type: "BatchReindex"').SetUp(random_blobs([(3, 2), np.zeros((2, 1))]),
                                                 empty_blobs(1))
    layer = make_layer('type: "BatchReindex"')
    bottom, top = random_blobs([(3, 2), np.array([1.0])]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    with pytest.raises(LayerError, match="cannot backpropagate to the indices"):
        layer.Backward(top, [True, True], bottom)


def test_force_backward_leaves_the_index_bottoms_alone(tmp_path):
    # force_backward asks every layer for its bottoms' gradients, but BatchReindex's
    # indices, Filter's selector and Embed's input have none: the net's backward runs and
    # the data gets the gradient a hand computation gives
    import pycaffe_lite as caffe
    path = tmp_path / "net.prototxt"
    path.write_text("""force_backward: true
layer { name: "in" type: "Input" top: "x" top: "idx" top: "keep" top: "words"
        input_param { shape { dim: 3 dim: 2 } shape { dim: 4 } shape { dim: 4 }
                      shape { dim: 4 } } }
layer { name: "pick" type: "BatchReindex" bottom: "x" bottom: "idx" top: "y" }
layer { name: "sel" type: "Filter" bottom: "y" bottom: "keep" top: "z" }
layer { name: "emb" type: "Embed" bottom: "words" top: "e"
        embed_param { num_output: 2 input_dim: 5 weight_filler { type: "gaussian" } } }
layer { name: "z2" type: "Power" bottom: "e" top: "z2_all" power_param { scale: 0.5 } }
layer { name: "cut" type: "Filter" bottom: "z2_all" bottom: "keep" top: "z2" }
layer { name: "loss" type: "EuclideanLoss" bottom: "z" bottom: "z2" top: "loss" }
""")
    net = caffe.Net(str(path), caffe.TRAIN)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(3, 2)).astype(np.float32)
    idx = np.array([2, 0, 2, 1], np.float32)
    keep = np.array([1, 0, 1, 1], np.float32)
    words = np.array([4, 1, 0, 3], np.float32)
    net.forward(x=x, idx=idx, keep=keep, words=words)
    net.backward()
    kept = keep.astype(bool)
    y = x[idx.astype(int)]
    z2 = 0.5 * net.params["emb"][0].data[words.astype(int)]
    diff = (y[kept] - z2[kept]) / kept.sum()
    want = np.zeros_like(x)
    np.add.at(want, idx.astype(int)[kept], diff)
    np.testing.assert_allclose(net.blobs["x"].diff, want, rtol=1e-5, atol=1e-7)
