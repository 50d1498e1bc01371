"""The HDF5Output layer: what it writes, read back with h5py."""

import numpy as np
import pytest

from pycaffe_lite.errors import LayerError
from pycaffe_lite.testing import make_layer, random_blobs

h5py = pytest.importorskip("h5py", reason="h5py is a test dependency (and the hdf5 extra)")


def _layer(path):
    layer = make_layer('name: "out" type: "HDF5Output" bottom: "data" bottom: "label" '
                       'hdf5_output_param { file_name: "%s" }' % path, dtype=np.float32)
    return layer


def test_batches_are_written_as_data_and_label(tmp_path):
    path = tmp_path / "out.h5"
    layer = _layer(path)
    x1, y1 = np.arange(24, dtype=np.float32).reshape(2, 3, 4), np.array([1, 0], np.float32)
    bottom = random_blobs([x1, y1], dtype=np.float32)
    layer.SetUp(bottom, [])
    layer.Forward(bottom, [])
    with h5py.File(path, "r") as f:  # readable while the layer is open
        assert f["data"].shape == (2, 3, 4, 1)  # Caffe's 4-axis legacy shape
        np.testing.assert_array_equal(f["data"][..., 0], x1)
        assert f["label"].shape == (2, 1, 1, 1) and f["data"].dtype == np.float32
    bottom2 = random_blobs([x1 + 100, y1 + 5], dtype=np.float32)
    layer.Forward(bottom2, [])
    layer.close()
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["data"][2:, ..., 0], x1 + 100)
        np.testing.assert_array_equal(f["label"][:, 0, 0, 0], [1, 0, 6, 5])


def test_errors(tmp_path):
    layer = _layer(tmp_path / "out.h5")
    bottom = random_blobs([(2, 3), (3,)], dtype=np.float32)
    layer.SetUp(bottom, [])
    with pytest.raises(LayerError, match="same first dimension"):
        layer.Forward(bottom, [])
    layer.close()
    with pytest.raises(LayerError, match="cannot create HDF5 file '.*nodir/out.h5'"):
        _layer(tmp_path / "nodir" / "out.h5").SetUp(bottom, [])
    with pytest.raises(LayerError, match="takes exactly 2 bottom blobs"):
        _layer(tmp_path / "x.h5").SetUp(bottom[:1], [])
