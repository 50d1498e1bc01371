import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs


def naive_filter(x, selector):
    kept = [n for n in range(len(selector)) if selector[n] != 0]
    out = np.zeros((len(kept),) + x.shape[1:])
    for m, n in enumerate(kept):
        out[m] = x[n]
    return out


@pytest.mark.parametrize("selector", [[1, 0, 2, 0], [0, 0, 0, 0.5], [1, 1, 1, 1]])
@pytest.mark.parametrize("sel_shape", [(4,), (4, 1, 1)])
def test_filter_forward_and_gradient(selector, sel_shape):
    rng = np.random.default_rng(0)
    x1, x2 = rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (4, 2, 2))
    sel = np.array(selector, float).reshape(sel_shape)
    layer, bottom, top = check_layer('type: "Filter"', [x1, x2, sel], num_top=2,
                                     check_bottom=[0, 1])
    np.testing.assert_array_equal(top[0].data, naive_filter(x1, selector))
    np.testing.assert_array_equal(top[1].data, naive_filter(x2, selector))


def test_filter_backward_scatters_and_handles_nothing_selected():
    layer = make_layer('type: "Filter"', dtype=np.float32)
    bottom = random_blobs([(3, 2), np.array([0.0, 1.0, 1.0])], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    assert top[0].shape == (3, 2)  # Caffe: all items until the first forward
    layer.Forward(bottom, top)
    assert top[0].shape == (2, 2) and top[0].data.dtype == np.float32
    top[0].diff[...] = [[1, 2], [3, 4]]
    bottom[0].diff[...] = 9
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, [[0, 0], [1, 2], [3, 4]])
    # nothing selected: empty top, all-zero gradient
    bottom[1].data[...] = 0
    layer.Forward(bottom, top)
    assert top[0].shape == (0, 2)
    bottom[0].diff[...] = 9
    layer.Backward(top, [True, False], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.zeros((3, 2)))


def test_filter_errors():
    with pytest.raises(LayerError, match=r"got 3 bottoms and 1 tops, expected 2 tops"):
        make_layer('type: "Filter"').SetUp(random_blobs([(2, 1), (2, 1), (2,)]),
                                           empty_blobs(1))
    with pytest.raises(LayerError, match=r"Selector blob dimensions must be singletons \(1\), "
                                         r"except the first: got shape \(2, 2\)"):
        make_layer('type: "Filter"').SetUp(random_blobs([(2, 3), (2, 2)]), empty_blobs(1))
    with pytest.raises(LayerError, match=r"same 0th dimension as the selector blob: bottom 0 "
                                         r"has shape \(3, 3\), the selector \(2,\)"):
        make_layer('type: "Filter"').SetUp(random_blobs([(3, 3), (2,)]), empty_blobs(1))
    layer = make_layer('type: "Filter"')
    bottom, top = random_blobs([(2, 3), np.array([1.0, 0.0])]), empty_blobs(1)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    with pytest.raises(LayerError, match="cannot backpropagate to the selector"):
        layer.Backward(top, [True, True], bottom)
