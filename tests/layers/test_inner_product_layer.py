import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import check_layer, empty_blobs, make_layer, random_blobs

FILLERS = ('weight_filler { type: "gaussian" std: 0.5 } '
           'bias_filler { type: "uniform" min: -1 max: 1 }')


def ip_text(extra=""):
    return 'type: "InnerProduct" inner_product_param { num_output: 4 %s %s }' % (FILLERS, extra)


def naive_ip(x, w, b, axis, transpose):
    m = int(np.prod(x.shape[:axis]))
    flat = x.reshape(m, -1)
    n = w.shape[1] if transpose else w.shape[0]
    out = np.zeros((m, n))
    for i in range(m):
        for j in range(n):
            for k in range(flat.shape[1]):
                wjk = w[k, j] if transpose else w[j, k]
                out[i, j] += flat[i, k] * wjk
            if b is not None:
                out[i, j] += b[j]
    return out.reshape(x.shape[:axis] + (n,))


@pytest.mark.parametrize("extra,axis,transpose,bias", [
    ("", 1, False, True),
    ("bias_term: false", 1, False, False),
    ("transpose: true", 1, True, True),
    ("axis: 2", 2, False, True),
    ("axis: -1 transpose: true bias_term: false", 3, True, False),
])
def test_inner_product_forward_and_gradient(extra, axis, transpose, bias):
    layer, bottom, top = check_layer(ip_text(extra), [(2, 3, 2, 2)])
    x = bottom[0].data
    k = int(np.prod(x.shape[axis:]))
    w = layer.blobs[0].data
    assert w.shape == ((k, 4) if transpose else (4, k))
    assert len(layer.blobs) == (2 if bias else 1)
    b = layer.blobs[1].data if bias else None
    if bias:
        assert b.shape == (4,)
    assert top[0].shape == x.shape[:axis] + (4,)
    np.testing.assert_allclose(top[0].data, naive_ip(x, w, b, axis, transpose), rtol=1e-10)


def test_inner_product_float32_and_param_diff_accumulates():
    layer = make_layer(ip_text(), dtype=np.float32)
    bottom = random_blobs([(3, 5)], dtype=np.float32)
    top = empty_blobs(1, np.float32)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    assert top[0].data.dtype == np.float32
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    w_diff = layer.blobs[0].diff.copy()
    b_diff = layer.blobs[1].diff.copy()
    np.testing.assert_allclose(b_diff, np.full(4, 3.0))
    np.testing.assert_allclose(w_diff, np.tile(bottom[0].data.sum(0), (4, 1)), rtol=1e-6)
    np.testing.assert_allclose(bottom[0].diff, np.tile(layer.blobs[0].data.sum(0), (3, 1)),
                               rtol=1e-6)
    assert bottom[0].diff.dtype == np.float32 and layer.blobs[0].diff.dtype == np.float32
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * w_diff, rtol=1e-6)
    np.testing.assert_allclose(layer.blobs[1].diff, 2 * b_diff, rtol=1e-6)
    # param_propagate_down False leaves the param diffs alone
    layer.param_propagate_down = [False, False]
    layer.Backward(top, [True], bottom)
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * w_diff, rtol=1e-6)


def test_inner_product_default_fillers_are_constant_zero():
    layer = make_layer('type: "InnerProduct" inner_product_param { num_output: 3 }')
    bottom, top = random_blobs([(2, 4)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    assert layer.blobs[0].shape == (3, 4) and layer.blobs[1].shape == (3,)
    assert not layer.blobs[0].data.any() and not layer.blobs[1].data.any()


def test_inner_product_input_size_change_is_an_error():
    layer = make_layer(ip_text())
    bottom, top = random_blobs([(2, 3, 2)]), empty_blobs(1)
    layer.SetUp(bottom, top)
    bottom[0].reshape(2, 3, 3)
    with pytest.raises(LayerError, match=r"Input size incompatible.*9.*expected 6"):
        layer.Forward(bottom, top)


def test_inner_product_bad_num_output_and_axis():
    with pytest.raises(LayerError, match="num_output must be > 0, got 0"):
        make_layer('type: "InnerProduct"').SetUp(random_blobs([(2, 3)]), empty_blobs(1))
    with pytest.raises(LayerError, match="axis 4 is out of range"):
        make_layer(ip_text("axis: 4")).SetUp(random_blobs([(2, 3)]), empty_blobs(1))
