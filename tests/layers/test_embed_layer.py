import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

FILLERS = ('weight_filler { type: "gaussian" std: 0.5 } '
           'bias_filler { type: "uniform" min: -1 max: 1 }')


def embed_text(extra=""):
    return ('type: "Embed" embed_param { num_output: 3 input_dim: 5 %s %s }'
            % (FILLERS, extra))


def naive_embed(indices, w, b):
    out = np.zeros(indices.shape + (w.shape[1],))
    for pos in np.ndindex(*indices.shape):
        row = int(indices[pos])
        for j in range(w.shape[1]):
            out[pos + (j,)] = w[row, j] + (b[j] if b is not None else 0.0)
    return out


INDICES = np.array([[0, 4, 2], [2, 1, 2]], dtype=float)


@pytest.mark.parametrize("extra,bias", [("", True), ("bias_term: false", False)])
def test_embed_forward_and_gradient(extra, bias):
    layer, bottom, top = check_layer(embed_text(extra), [INDICES], check_bottom=[])
    w = layer.blobs[0].data
    assert w.shape == (5, 3)
    assert len(layer.blobs) == (2 if bias else 1)
    b = layer.blobs[1].data if bias else None
    assert top[0].shape == (2, 3, 3)
    np.testing.assert_allclose(top[0].data, naive_embed(INDICES, w, b), rtol=1e-12)


def test_embed_param_diffs_accumulate_over_repeated_indices_float32():
    layer = make_layer(embed_text(), dtype=np.float32)
    bottom = random_blobs([INDICES], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    dy = np.arange(18, dtype=np.float32).reshape(2, 3, 3)
    top[0].diff[...] = dy
    layer.Backward(top, [False], bottom)
    expected = np.zeros((5, 3))
    for pos in np.ndindex(2, 3):
        expected[int(INDICES[pos])] += dy[pos]
    np.testing.assert_allclose(layer.blobs[0].diff, expected)
    np.testing.assert_allclose(layer.blobs[1].diff, dy.reshape(6, 3).sum(0))
    assert layer.blobs[0].diff.dtype == np.float32
    layer.Backward(top, [False], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * expected)
    np.testing.assert_allclose(layer.blobs[1].diff, 2 * dy.reshape(6, 3).sum(0))
    layer.param_propagate_down = [False, False]
    layer.Backward(top, [False], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * expected)


def test_embed_default_fillers_are_zero():
    layer = make_layer('type: "Embed" embed_param { num_output: 2 input_dim: 4 }')
    layer.SetUp(random_blobs([np.array([1.0, 3.0])]), empty_blobs(1))
    assert layer.blobs[0].shape == (4, 2) and layer.blobs[1].shape == (2,)
    assert not layer.blobs[0].data.any() and not layer.blobs[1].data.any()


@pytest.mark.parametrize("bad,pos", [(5.0, 1), (-1.0, 1), (1.5, 1), (np.nan, 1)])
def test_embed_bad_index_is_named(bad, pos):
    layer = make_layer(embed_text())
    bottom, top = random_blobs([np.array([0.0, bad, 7.0])]), empty_blobs(1)
    layer.SetUp(bottom, top)
    with pytest.raises(LayerError, match=r"layer 'embed' \(type Embed\): bottom value %s at "
                       r"flat position %d is not an integer index in \[0, input_dim=5\)"
                       % (repr(float(bad)).replace(".", r"\."), pos)):
        layer.Forward(bottom, top)


def test_embed_bad_parameters_and_no_bottom_gradient():
    with pytest.raises(LayerError, match="num_output must be > 0, got 0"):
        make_layer('type: "Embed" embed_param { input_dim: 3 }').SetUp(
            random_blobs([np.zeros(2)]), empty_blobs(1))
    with pytest.raises(LayerError, match="input_dim must be > 0, got 0"):
        make_layer('type: "Embed" embed_param { num_output: 3 }').SetUp(
            random_blobs([np.zeros(2)]), empty_blobs(1))
    layer = make_layer(embed_text())
    bottom, top = random_blobs([INDICES]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    with pytest.raises(LayerError, match="cannot backpropagate to the Embed input"):
        layer.Backward(top, [True], bottom)
