"""BVLC Caffe's own C++ tests of its data layers, transformer, I/O and fillers
(``src/caffe/test/test_*.cpp``), as checks of pycaffe-lite: BVLC's inputs and expected values
as data, the references computed here by hand."""

import math

import lmdb
import numpy as np
import pytest
from PIL import Image

import pycaffe_lite
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


# ---- Data (LMDB) ------------------------------------------------------------------------------

def _lmdb(path, datums):
    env = lmdb.open(str(path), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i, d in enumerate(datums):
            txn.put(str(i).encode(), d.SerializeToString())
    env.close()
    return str(path)


def _bvlc_fill(path):
    """BVLC test_data_layer.cpp Fill(unique_pixels=true): 5 records labelled 0 .. 4, each a
    2 x 3 x 4 image of the pixels 0 .. 23, under the keys "0" .. "4"."""
    pixels = bytes(range(24))
    return _lmdb(path, [caffe_pb2.Datum(channels=2, height=3, width=4, data=pixels, label=i)
                        for i in range(5)])


def _data_layer(source, batch, phase, transform=""):
    text = ('type: "Data" data_param { source: "%s" batch_size: %d backend: LMDB } '
            'transform_param { %s }' % (source, batch, transform))
    layer = make_layer(text, dtype=np.float32, phase=phase)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    return layer, top


def test_data_layer_reshapes_to_each_record_at_batch_size_one(tmp_path):
    # BVLC test_data_layer.cpp TestReshapeLMDB: record i is 2 x (i % 2 + 1) x (i % 4 + 1),
    # its pixels 0, 1, 2, ...; with batch_size 1 each forward has that record's shape
    datums = []
    for i in range(5):
        h, w = i % 2 + 1, i % 4 + 1
        datums.append(caffe_pb2.Datum(channels=2, height=h, width=w, label=i,
                                      data=bytes(range(2 * h * w))))
    layer, top = _data_layer(_lmdb(tmp_path / "db", datums), 1, TEST)
    assert top[0].shape[:2] == (1, 2) and top[1].shape == (1,)
    for i in range(5):
        layer.Forward([], top)
        h, w = i % 2 + 1, i % 4 + 1
        assert top[0].shape == (1, 2, h, w) and top[1].data[0] == i
        np.testing.assert_array_equal(top[0].data.ravel(), np.arange(2 * h * w))
    layer.close()


def test_data_layer_crop_one_pixel_is_the_centre_in_test_and_random_in_train(tmp_path):
    # BVLC test_data_layer.cpp TestReadCropTestLMDB / TestReadCropTrainLMDB: scale 3,
    # crop_size 1 of a 3 x 4 image: the centre crop starts at ((3 - 1) / 2, (4 - 1) / 2) =
    # (1, 1), pixel 5 of channel 0 and 12 + 5 = 17 of channel 1
    source = _bvlc_fill(tmp_path / "db")
    pycaffe_lite.set_random_seed(1701)
    test_layer, top = _data_layer(source, 5, TEST, "scale: 3 crop_size: 1")
    train_layer, train_top = _data_layer(source, 5, TRAIN, "scale: 3 crop_size: 1")
    assert top[0].shape == (5, 2, 1, 1)
    centre = np.tile([3 * 5.0, 3 * 17.0], 5)
    for _ in range(2):
        test_layer.Forward([], top)
        np.testing.assert_array_equal(top[0].data.ravel(), centre)
        np.testing.assert_array_equal(top[1].data, np.arange(5))
        train_layer.Forward([], train_top)
        np.testing.assert_array_equal(train_top[1].data, np.arange(5))
        got = train_top[0].data.reshape(5, 2) / 3
        assert (got[:, 1] - got[:, 0] == 12).all()  # one window for both channels
        assert (got != centre.reshape(5, 2) / 3).any()  # not the centre all 10 times
    test_layer.close()
    train_layer.close()


def test_data_layer_crop_and_mirror_sequence_follows_the_seed(tmp_path):
    # BVLC test_data_layer.cpp TestReadCropTrainSequenceSeededLMDB / ...UnseededLMDB: crop 1
    # with mirror in TRAIN; a new layer after reseeding with 1701 repeats the sequence, one
    # made without reseeding does not
    source = _bvlc_fill(tmp_path / "db")

    def two_batches():
        layer, top = _data_layer(source, 5, TRAIN, "crop_size: 1 mirror: true")
        out = []
        for _ in range(2):
            layer.Forward([], top)
            np.testing.assert_array_equal(top[1].data, np.arange(5))
            out.append(top[0].data.copy())
        layer.close()
        return np.array(out)

    pycaffe_lite.set_random_seed(1701)
    first = two_batches()
    pycaffe_lite.set_random_seed(1701)
    np.testing.assert_array_equal(two_batches(), first)
    assert (two_batches() != first).any()


# ---- MemoryData -------------------------------------------------------------------------------

def test_memory_data_set_batch_size_after_the_added_data_is_consumed():
    # BVLC test_memory_data_layer.cpp TestSetBatchSize: 4-channel 7 x 11 images (OpenCV's
    # H x W x C), 5 batches of 8, then set_batch_size(16) and 5 batches of 16
    layer = make_layer('type: "MemoryData" memory_data_param { batch_size: 8 channels: 4 '
                       'height: 7 width: 11 }', dtype=np.float32)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    rng = np.random.default_rng(0)
    for batch in (8, 16):
        mats = rng.integers(0, 255, (5 * batch, 7, 11, 4), dtype=np.uint8)
        layer.add_mat_vector(list(mats), list(range(5 * batch)))
        for it in range(5):
            layer.Forward([], top)
            assert top[0].shape == (batch, 4, 7, 11) and top[1].shape == (batch,)
            np.testing.assert_array_equal(top[1].data, it * batch + np.arange(batch))
            np.testing.assert_array_equal(
                top[0].data, mats[it * batch:(it + 1) * batch].transpose(0, 3, 1, 2))
        layer.set_batch_size(16)


# ---- ImageData --------------------------------------------------------------------------------

def test_image_data_batch_of_one_follows_each_image_and_reads_grey_as_colour(tmp_path):
    # BVLC test_image_data_layer.cpp TestReshape (cat.jpg 360 x 480, then fish-bike.jpg
    # 323 x 481, batch_size 1) and TestSpace ("cat gray.jpg 1": the name up to the last space,
    # a grey image read as 3 equal BGR channels since is_color defaults to true)
    rng = np.random.default_rng(0)
    colour = rng.integers(0, 256, (6, 8, 3), dtype=np.uint8)  # BGR
    grey = rng.integers(0, 256, (5, 9), dtype=np.uint8)
    Image.fromarray(colour[:, :, ::-1].copy()).save(tmp_path / "cat.png")
    Image.fromarray(grey).save(tmp_path / "cat gray.png")
    listing = tmp_path / "list.txt"
    listing.write_text("%s 0\n%s 1\n" % (tmp_path / "cat.png", tmp_path / "cat gray.png"))
    layer = make_layer('type: "ImageData" image_data_param { source: "%s" batch_size: 1 }'
                       % listing, dtype=np.float32, phase=TEST)
    top = empty_blobs(2, np.float32)
    layer.SetUp([], top)
    for expected, label in ((colour.transpose(2, 0, 1), 0),
                            (np.broadcast_to(grey, (3, 5, 9)), 1)):
        layer.Forward([], top)
        assert top[0].shape == (1,) + expected.shape and top[1].data[0] == label
        np.testing.assert_array_equal(top[0].data[0], expected)
    layer.close()
