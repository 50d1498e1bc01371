"""The HDF5Data layer over hand-made HDF5 files."""

import builtins
import pickle

import numpy as np
import pytest

import pycaffe_lite
from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import empty_blobs, make_layer

h5py = pytest.importorskip("h5py", reason="h5py is a test dependency (and the hdf5 extra)")


def _files(tmp_path, sizes=(4, 3)):
    """HDF5 files whose rows are numbered globally: data[r] = r (in every element)."""
    names, start = [], 0
    for i, n in enumerate(sizes):
        path = tmp_path / ("part%d.h5" % i)
        rows = np.arange(start, start + n, dtype=np.float64)
        with h5py.File(path, "w") as f:
            f["data"] = np.broadcast_to(rows[:, None, None], (n, 2, 3)).copy()
            f["label"] = rows.astype(np.int32)  # integers are converted
        names.append(str(path))
        start += n
    listing = tmp_path / "list.txt"
    listing.write_text("\n".join(names) + "\n")
    return str(listing)


def _layer(listing, batch, extra="", tops=("data", "label")):
    text = 'name: "h5" type: "HDF5Data" %s hdf5_data_param { source: "%s" batch_size: %d %s }' \
        % (" ".join('top: "%s"' % t for t in tops), listing, batch, extra)
    layer = make_layer(text, dtype=np.float32)
    top = empty_blobs(len(tops), np.float32)
    layer.SetUp([], top)
    return layer, top


def _rows(layer, top, n):
    out = []
    for _ in range(n):
        layer.Forward([], top)
        assert (top[0].data == top[1].data[:, None, None]).all()  # data and label rows agree
        out.extend(int(v) for v in top[1].data)
    return out


def test_rows_in_file_order_across_files_with_wraparound(tmp_path):
    layer, top = _layer(_files(tmp_path), 3)
    assert top[0].shape == (3, 2, 3) and top[1].shape == (3,)
    assert top[0].data.dtype == np.float32
    assert _rows(layer, top, 4) == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4]


def test_shuffle_covers_every_row_each_pass_and_resumes(tmp_path):
    listing = _files(tmp_path, (5, 4, 3))
    pycaffe_lite.set_random_seed(4)
    layer, top = _layer(listing, 4, "shuffle: true")
    rows = _rows(layer, top, 6)
    assert sorted(rows[:12]) == sorted(rows[12:]) == list(range(12))
    assert rows[:12] != list(range(12))

    pycaffe_lite.set_random_seed(4)
    a, top = _layer(listing, 4, "shuffle: true")
    _rows(a, top, 2)
    state = pickle.loads(pickle.dumps(a.get_state()))
    b, top2 = _layer(listing, 4, "shuffle: true")
    b.set_state(state)
    assert _rows(b, top2, 4) == rows[8:24]


def test_relative_names_are_found_next_to_the_list(tmp_path, monkeypatch):
    _files(tmp_path)
    (tmp_path / "rel.txt").write_text("part1.h5 part0.h5")  # whitespace separated
    monkeypatch.chdir("/")
    layer, top = _layer(str(tmp_path / "rel.txt"), 2)
    assert _rows(layer, top, 2) == [4, 5, 6, 0]


def test_errors(tmp_path):
    listing = _files(tmp_path)
    with pytest.raises(LayerError, match=r"HDF5 file '.*part0.h5' \(listed in '.*list.txt'\) "
                                         r"has no dataset 'weights' \(needed for top 'weights'\); "
                                         r"datasets present: data, label"):
        _layer(listing, 2, tops=("data", "weights"))
    with pytest.raises(LayerError, match=r"list file '.*none.txt' not found"):
        _layer(str(tmp_path / "none.txt"), 2)
    (tmp_path / "empty.txt").write_text("  \n")
    with pytest.raises(LayerError, match="names no HDF5 files"):
        _layer(str(tmp_path / "empty.txt"), 2)
    with h5py.File(tmp_path / "odd.h5", "w") as f:
        f["data"] = np.zeros((3, 2))
        f["label"] = np.zeros(4)
    (tmp_path / "odd.txt").write_text(str(tmp_path / "odd.h5"))
    with pytest.raises(LayerError, match="dataset 'label' has 4 rows but 'data' has 3"):
        _layer(str(tmp_path / "odd.txt"), 2)
    (tmp_path / "junk.h5").write_bytes(b"not hdf5")
    (tmp_path / "junk.txt").write_text(str(tmp_path / "junk.h5"))
    with pytest.raises(LayerError, match=r"cannot open HDF5 file '.*junk.h5'"):
        _layer(str(tmp_path / "junk.txt"), 2)
    with h5py.File(tmp_path / "words.h5", "w") as f:
        f["data"] = np.array([b"a", b"b"])
        f["label"] = np.zeros(2)
    (tmp_path / "words.txt").write_text(str(tmp_path / "words.h5"))
    with pytest.raises(LayerError, match=r"dataset 'data' of HDF5 file '.*words.h5' \(listed "
                                         r"in '.*words.txt'\) holds \|S1 values, not numbers"):
        _layer(str(tmp_path / "words.txt"), 2)


def test_a_transform_param_is_refused_as_caffe_refuses_it(tmp_path):
    # Caffe's HDF5DataLayer checks there is none: the values are read as stored, and a
    # scale or mean meant for them would otherwise be dropped without a word
    layer = make_layer('name: "h5" type: "HDF5Data" top: "data" top: "label" '
                       'transform_param { scale: 0.00390625 } '
                       'hdf5_data_param { source: "%s" batch_size: 2 }' % _files(tmp_path),
                       dtype=np.float32)
    with pytest.raises(LayerError, match="layer 'h5' \\(type HDF5Data\\): HDF5Data does not "
                                         "transform data: remove transform_param"):
        layer.SetUp([], empty_blobs(2, np.float32))


def test_missing_h5py_says_how_to_install(tmp_path, monkeypatch):
    listing = _files(tmp_path)
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "h5py":
            raise ImportError("No module named 'h5py'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    with pytest.raises(Exception, match=r"pip install h5py"):
        _layer(listing, 2)
