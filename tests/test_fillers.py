import math

import numpy as np
import pytest

from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.fillers import fill
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.registry import UnknownTypeError


def filled(shape, rng_seed=0, **kw):
    b = Blob(shape)
    fill(b, caffe_pb2.FillerParameter(**kw), np.random.default_rng(rng_seed))
    return b.data


def test_constant_and_default():
    assert (filled((2, 3), type="constant", value=2.5) == 2.5).all()
    b = Blob((4,))
    b.data[...] = 9
    fill(b)  # Caffe's default filler is constant 0
    assert (b.data == 0).all()


def test_uniform_range_and_mean():
    d = filled((100, 100), type="uniform", min=-2, max=3)
    assert d.min() >= -2 and d.max() <= 3
    assert abs(d.mean() - 0.5) < 0.05


def test_gaussian_moments_and_sparse():
    d = filled((200, 100), type="gaussian", mean=1, std=2)
    assert abs(d.mean() - 1) < 0.05 and abs(d.std() - 2) < 0.05
    s = filled((50, 2000), type="gaussian", std=1, sparse=10)
    # each output row keeps each input with probability sparse / num_outputs = 10/50
    assert abs((s != 0).mean() - 0.2) < 0.01


def test_positive_unitball_rows_sum_to_one():
    d = filled((5, 3, 2, 2), type="positive_unitball")
    assert (d >= 0).all()
    np.testing.assert_allclose(d.reshape(5, -1).sum(axis=1), 1, rtol=1e-6)


@pytest.mark.parametrize("norm,n", [(0, 3 * 4 * 4), (1, 6 * 4 * 4), (2, (48 + 96) / 2)])
def test_xavier_bounds(norm, n):
    d = filled((6, 3, 4, 4), type="xavier", variance_norm=norm)
    bound = math.sqrt(3.0 / n)
    assert d.min() >= -bound and d.max() <= bound and d.max() > 0.9 * bound


@pytest.mark.parametrize("norm,n", [(0, 64 * 9), (1, 128 * 9), (2, (64 * 9 + 128 * 9) / 2)])
def test_msra_std(norm, n):
    d = filled((128, 64, 3, 3), type="msra", variance_norm=norm)
    assert abs(d.std() / math.sqrt(2.0 / n) - 1) < 0.02 and abs(d.mean()) < 0.005


def test_bilinear_kernel_by_hand():
    d = filled((1, 1, 3, 3), type="bilinear")
    # k = 3: f = 2, c = (3 - 1) / 4 = 0.5; weights 1 - |x/2 - 0.5| = .5 1 .5
    w = np.array([0.5, 1.0, 0.5])
    np.testing.assert_allclose(d[0, 0], np.outer(w, w))
    with pytest.raises(CaffeError, match="square"):
        filled((1, 1, 3, 4), type="bilinear")


def test_sparse_only_for_gaussian_and_unknown_type():
    with pytest.raises(CaffeError, match="does not support sparse"):
        filled((3, 3), type="xavier", sparse=2)
    with pytest.raises(UnknownTypeError, match="did you mean 'gaussian'"):
        filled((3, 3), type="gausian")


def test_uniform_with_min_above_max_is_refused():
    with pytest.raises(CaffeError, match="uniform filler: min \\(3\\) must not be greater than "
                                         "max \\(-2\\)"):
        filled((2, 2), type="uniform", min=3, max=-2)
    assert (filled((2, 2), type="uniform", min=1.5, max=1.5) == 1.5).all()  # min = max: allowed


@pytest.mark.parametrize("kind", ["xavier", "msra", "gaussian", "positive_unitball"])
def test_a_blob_with_no_values_is_left_as_it_is(kind):
    # a zero-sized axis: nothing to fill, and no fan to scale by (it divided by zero)
    assert filled((0, 3), type=kind).shape == (0, 3)
    assert filled((4, 0, 2), type=kind).shape == (4, 0, 2)
