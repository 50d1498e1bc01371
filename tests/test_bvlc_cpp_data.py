"""BVLC Caffe's own C++ tests of its data layers, transformer, I/O and fillers
(``src/caffe/test/test_*.cpp``), as checks of pycaffe-lite: BVLC's inputs and expected values
as data, the references computed here by hand."""

import math

import numpy as np
import pytest

from pycaffe_lite import ranks
from pycaffe_lite.blob import Blob
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.fillers import fill
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import empty_blobs, make_layer

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def _filled(shape, seed=0, **kw):
    b = Blob(shape, np.float32)
    fill(b, caffe_pb2.FillerParameter(**kw), np.random.default_rng(seed))
    return b.data


# ---- fillers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("k", [6, 7])
def test_bilinear_filler_odd_and_even_kernels(k):
    # BVLC test_filler.cpp BilinearFillerTest TestFillOdd (7) and TestFillEven (6): every
    # K x K kernel of a (1000, 2, K, K) blob is the product of w(x) = 1 - |x / f - c|, with
    # f = ceil(K / 2) and c = (K - 1) / (2 f): a kernel symmetric about its centre
    f = math.ceil(k / 2)
    c = (k - 1) / (2.0 * f)
    w = 1 - np.abs(np.arange(k) / f - c)
    d = _filled((1000, 2, k, k), type="bilinear")
    np.testing.assert_allclose(d, np.broadcast_to(np.outer(w, w), d.shape), atol=1e-6)
    np.testing.assert_allclose(d[0, 0], d[0, 0, ::-1, ::-1], atol=1e-6)


def test_gaussian_filler_sparse_below_minus_one_is_refused():
    # BVLC filler.hpp GaussianFiller: CHECK_GE(sparse, -1) (-1 is dense, the default)
    with pytest.raises(CaffeError, match="gaussian filler: sparse must be -1 .* got -3"):
        _filled((3, 4), type="gaussian", sparse=-3)
    assert (_filled((3, 4), type="gaussian", sparse=-1) != 0).all()


# ---- HDF5Data ---------------------------------------------------------------------------------

def _sample_data(tmp_path):
    """BVLC's src/caffe/test/test_data/generate_sample_data.py: sample_data.h5 (data 0 ..
    2399 as 10 x 8 x 6 x 5 float32, label 1 .. 10 as 10 x 1, label2 = label + 1) and
    sample_data_2_gzip.h5 (data + 2400; the labels gzip-compressed uint8), and the list."""
    h5py = pytest.importorskip("h5py")
    data = np.arange(2400, dtype=np.float32).reshape(10, 8, 6, 5)
    label = (1 + np.arange(10)[:, None]).astype(np.float32)
    with h5py.File(tmp_path / "sample_data.h5", "w") as f:
        f["data"], f["label"], f["label2"] = data, label, label + 1
    with h5py.File(tmp_path / "sample_data_2_gzip.h5", "w") as f:
        for name, values, dtype in (("data", data + 2400, None), ("label", label, "uint8"),
                                    ("label2", label + 1, "uint8")):
            f.create_dataset(name, data=values, compression="gzip", compression_opts=1,
                             dtype=dtype)
    listing = tmp_path / "sample_data_list.txt"
    listing.write_text("%s\n%s\n" % (tmp_path / "sample_data.h5",
                                      tmp_path / "sample_data_2_gzip.h5"))
    return str(listing)


def _hdf5_layer(listing, tops):
    text = 'type: "HDF5Data" %s hdf5_data_param { source: "%s" batch_size: 5 }' % (
        " ".join('top: "%s"' % t for t in tops), listing)
    layer = make_layer(text, dtype=np.float32, phase=TRAIN)
    top = empty_blobs(len(tops), np.float32)
    layer.SetUp([], top)
    return layer, top


def test_hdf5_data_reads_the_sample_files_in_order(tmp_path):
    # BVLC test_hdf5data_layer.cpp TestRead: three tops; labels keep their (rows, 1) shape;
    # batch t holds rows 5 (t % 2) .. of file (t // 2) % 2, whose data is offset by 2400
    layer, top = _hdf5_layer(_sample_data(tmp_path), ("data", "label", "label2"))
    assert [t.shape for t in top] == [(5, 8, 6, 5), (5, 1), (5, 1)]
    for it in range(10):
        layer.Forward([], top)
        first = 5 * (it % 2)
        offset = 2400 * ((it % 4) // 2) + first * 240
        np.testing.assert_array_equal(top[0].data.ravel(), offset + np.arange(1200))
        np.testing.assert_array_equal(top[1].data[:, 0], 1 + first + np.arange(5))
        np.testing.assert_array_equal(top[2].data[:, 0], 2 + first + np.arange(5))


def test_hdf5_data_gives_rank_r_the_rows_r_plus_n_times_k(tmp_path):
    # BVLC test_hdf5data_layer.cpp TestSkip: with 8 solvers, the first batch of rank r holds
    # the rows r, r + 8, r + 16, ... of the 20 rows of both files (labels 1 + row % 10)
    listing = _sample_data(tmp_path)
    ranks.reset()
    try:
        ranks.set_solver_count(8)
        for rank in range(8):
            ranks.set_solver_rank(rank)
            layer, top = _hdf5_layer(listing, ("data", "label"))
            layer.Forward([], top)
            rows = (rank + 8 * np.arange(5)) % 20
            np.testing.assert_array_equal(top[1].data[:, 0], 1 + rows % 10)
            np.testing.assert_array_equal(top[0].data[:, 0, 0, 0], 240 * rows)
            layer.close()
    finally:
        ranks.reset()
