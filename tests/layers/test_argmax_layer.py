import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import empty_blobs, make_layer, random_blobs


def ranked(values, k):
    """Caffe's order: (value, index) pairs sorted in decreasing order, first k."""
    pairs = sorted(((float(v), j) for j, v in enumerate(values)), reverse=True)
    return pairs[:k]


def naive_argmax(x, k, out_max_val, axis):
    if axis is None:
        shape = [1] * max(x.ndim, 3)
        shape[0], shape[1], shape[2] = x.shape[0], 2 if out_max_val else 1, k
        out = np.zeros(shape)
        for n in range(x.shape[0]):
            for j, (v, i) in enumerate(ranked(x[n].ravel(), k)):
                out[(n, 0, j) + (0,) * (len(shape) - 3)] = i
                if out_max_val:
                    out[(n, 1, j) + (0,) * (len(shape) - 3)] = v
        return out
    moved = np.moveaxis(x, axis, -1)
    out = np.zeros(moved.shape[:-1] + (k,))
    for idx in np.ndindex(*moved.shape[:-1]):
        for j, (v, i) in enumerate(ranked(moved[idx], k)):
            out[idx + (j,)] = v if out_max_val else i
    return np.moveaxis(out, -1, axis)


def run(text, x, dtype=np.float64):
    layer = make_layer(text, dtype=dtype)
    bottom, top = random_blobs([x], dtype=dtype), empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


# integer values from a small range: plenty of ties
TIED = np.random.default_rng(3).integers(0, 4, (3, 2, 3, 2)).astype(float)


@pytest.mark.parametrize("params,k,out_max_val,axis", [
    ("", 1, False, None),
    ("top_k: 4", 4, False, None),
    ("out_max_val: true top_k: 3", 3, True, None),
    ("axis: 1", 1, False, 1),
    ("axis: 2 top_k: 3", 3, False, 2),
    ("axis: -1 out_max_val: true top_k: 2", 2, True, 3),
    ("axis: 0 top_k: 2", 2, False, 0),
])
@pytest.mark.parametrize("data", ["random", "tied"])
def test_argmax_matches_caffe_ordering(params, k, out_max_val, axis, data):
    x = TIED if data == "tied" else np.random.default_rng(0).normal(size=TIED.shape)
    layer, bottom, top = run('type: "ArgMax" argmax_param { %s }' % params, x)
    expected = naive_argmax(x, k, out_max_val, axis)
    assert top[0].shape == expected.shape
    np.testing.assert_array_equal(top[0].data, expected)


def test_argmax_top_shapes_and_ties_prefer_higher_index():
    _, _, top = run('type: "ArgMax"', np.array([[1.0, 3.0, 3.0, 0.0], [5.0, 5.0, 5.0, 5.0]]))
    assert top[0].shape == (2, 1, 1)
    np.testing.assert_array_equal(top[0].data.ravel(), [2, 3])
    _, _, top = run('type: "ArgMax" argmax_param { out_max_val: true top_k: 2 }',
                    np.array([[1.0, 3.0, 3.0, 0.0]]))
    np.testing.assert_array_equal(top[0].data, [[[2, 1], [3, 3]]])
    _, _, top = run('type: "ArgMax" argmax_param { out_max_val: true }', np.zeros((2, 3, 4, 5)))
    assert top[0].shape == (2, 2, 1, 1)


def test_argmax_float32_and_reshape():
    layer, bottom, top = run('type: "ArgMax" argmax_param { top_k: 2 }',
                             np.random.default_rng(1).normal(size=(4, 5)), dtype=np.float32)
    assert top[0].data.dtype == np.float32
    bottom[0].reshape(2, 5)
    layer.Forward(bottom, top)
    assert top[0].shape == (2, 1, 2)


def test_argmax_errors():
    with pytest.raises(LayerError, match="top_k must be >= 1, got 0"):
        run('type: "ArgMax" argmax_param { top_k: 0 }', np.zeros((2, 3)))
    with pytest.raises(LayerError, match=r"top_k \(7\) must be <= the number of values per "
                                         r"item \(6\)"):
        run('type: "ArgMax" argmax_param { top_k: 7 }', np.zeros((2, 3, 2)))
    with pytest.raises(LayerError, match=r"top_k \(4\) must be <= the size of axis 1 \(3\)"):
        run('type: "ArgMax" argmax_param { top_k: 4 axis: 1 }', np.zeros((2, 3, 2)))
    with pytest.raises(LayerError, match=r"argmax_param.axis -4 is out of range"):
        run('type: "ArgMax" argmax_param { axis: -4 }', np.zeros((2, 3, 2)))
    layer, bottom, top = run('type: "ArgMax"', np.zeros((2, 3)))
    with pytest.raises(LayerError, match="cannot backpropagate"):
        layer.Backward(top, [True], bottom)
