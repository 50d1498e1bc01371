import numpy as np
import pytest

from pycaffe_lite import backend, syncedmem
from pycaffe_lite.blob import Blob, array_to_blobproto, blobproto_to_array
from pycaffe_lite.errors import ShapeError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing.simdevice import DeviceArray, simulated_device


def test_shape_accessors():
    b = Blob((2, 3, 4, 5))
    assert b.shape == (2, 3, 4, 5) and b.count == 120 and b.num_axes == 4
    assert (b.num, b.channels, b.height, b.width) == (2, 3, 4, 5)
    assert b.shape_at(-1) == 5 and b.shape_at(1) == 3
    assert b.count_range(1) == 60 and b.count_range(1, 3) == 12
    assert b.canonical_axis_index(-3) == 1
    with pytest.raises(ShapeError, match="axis 4 out of range"):
        b.shape_at(4)
    v = Blob((7, 8))
    assert (v.num, v.channels, v.height, v.width) == (7, 8, 1, 1)
    assert Blob(()).count == 1
    assert b.data.dtype == np.float32 and b.diff.dtype == np.float32


def test_reshape_reuses_storage_when_it_fits():
    b = Blob((4, 5))
    b.data[...] = np.arange(20).reshape(4, 5)
    store = b._data
    b.reshape(2, 5)
    assert b._data is store and b.data.shape == (2, 5)
    np.testing.assert_array_equal(b.data, np.arange(10).reshape(2, 5))
    b.reshape((30,))
    assert b._data is not store and b.count == 30
    with pytest.raises(ShapeError, match=">= 0"):
        b.reshape(-1, 3)


def test_data_is_a_live_view():
    b = Blob((2, 2))
    d = b.data
    d[0, 0] = 7
    assert b.data[0, 0] == 7
    b.data = np.ones((2, 2))
    assert d.sum() == 4


def test_update_asum_sumsq_scale():
    b = Blob((3,))
    b.data[...] = [1, -2, 3]
    b.diff[...] = [0.5, 0.5, -1]
    assert b.asum_data() == 6 and b.sumsq_data() == 14
    assert b.asum_diff() == 2 and b.sumsq_diff() == 1.5
    b.update()
    np.testing.assert_allclose(b.data, [0.5, -2.5, 4])
    b.scale_diff(2)
    np.testing.assert_allclose(b.diff, [1, 1, -2])
    b.scale_data(0.5)
    np.testing.assert_allclose(b.data, [0.25, -1.25, 2])


def test_share_data_and_diff():
    a, b = Blob((2, 3)), Blob((6,))
    b.share_data(a)
    a.data[...] = 5
    assert (b.data == 5).all()
    b.share_diff(a)
    b.diff[...] = 2
    assert (a.diff == 2).all()
    with pytest.raises(ShapeError):
        Blob((5,)).share_data(a)


def test_proto_round_trip_float_and_double():
    b = Blob((2, 3))
    b.data[...] = np.arange(6).reshape(2, 3) / 7
    b.diff[...] = -1
    p = b.to_proto(write_diff=True)
    assert list(p.shape.dim) == [2, 3] and len(p.data) == 6 and len(p.diff) == 6
    c = Blob().from_proto(p)
    np.testing.assert_array_equal(c.data, b.data)
    np.testing.assert_array_equal(c.diff, b.diff)
    d = Blob((2, 3), np.float64)
    d.data[...] = np.arange(6).reshape(2, 3) / 7
    pd = d.to_proto()
    assert len(pd.double_data) == 6 and len(pd.data) == 0
    e = Blob((), np.float64).from_proto(pd)
    np.testing.assert_array_equal(e.data, np.arange(6).reshape(2, 3) / 7)


def test_legacy_4d_proto_matches_nd_blob():
    p = caffe_pb2.BlobProto(num=1, channels=1, height=10, width=20)
    p.data.extend(np.arange(200, dtype=np.float32))
    ip_weights = Blob((10, 20))
    assert ip_weights.shape_equals(p)
    ip_weights.from_proto(p, reshape=False)
    assert ip_weights.data[9, 19] == 199
    assert not Blob((20, 10)).shape_equals(p)
    assert not Blob((1, 1, 1, 10, 20)).shape_equals(p)
    fresh = Blob().from_proto(p)
    assert fresh.shape == (1, 1, 10, 20)
    with pytest.raises(ShapeError, match="does not match"):
        Blob((3, 3)).from_proto(p, reshape=False)


def test_from_proto_wrong_count():
    p = caffe_pb2.BlobProto()
    p.shape.dim.extend([2, 2])
    p.data.extend([1, 2, 3])
    with pytest.raises(ShapeError, match="holds 3 data values"):
        Blob().from_proto(p)


def test_array_blobproto_helpers():
    a = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(blobproto_to_array(array_to_blobproto(a)), a)


def test_sync_state_machine_with_simulated_device():
    with simulated_device() as dev:
        b = Blob((2, 3))
        assert b.data_state == syncedmem.UNINITIALIZED
        b.data[...] = 1                      # host write
        assert b.data_state == syncedmem.HEAD_AT_CPU
        backend.set_mode_gpu()               # read_/write_ now reach the device side
        try:
            g = b.read_data()                # read on device: copies up, both current
            assert isinstance(g, DeviceArray) and dev.to_device == 1
            assert b.data_state == syncedmem.SYNCED
            b.read_data()                    # no second copy
            assert dev.to_device == 1
            b.write_data()[...] = 4          # device write: host stale
            assert b.data_state == syncedmem.HEAD_AT_GPU and dev.to_host == 0
            assert (b.cpu_data() == 4).all()  # host read copies down
            assert dev.to_host == 1 and b.data_state == syncedmem.SYNCED
            b.data[0, 0] = 9                 # pycaffe's .data is a write
            assert b.data_state == syncedmem.HEAD_AT_CPU
            assert b.read_data()[0, 0] == 9 and dev.to_device == 2
            fresh = Blob((4,))
            assert isinstance(fresh.write_diff(), DeviceArray)   # allocated on device
            assert fresh.diff_state == syncedmem.HEAD_AT_GPU and dev.to_device == 2
        finally:
            backend.set_mode_cpu()


def test_update_runs_on_the_device_in_gpu_mode():
    with simulated_device() as dev:
        b = Blob((3,))
        b.data[...] = [1, 2, 3]
        b.diff[...] = [1, 1, 1]
        backend.set_mode_gpu()
        b.update()
        assert b.data_state == syncedmem.HEAD_AT_GPU
        backend.set_mode_cpu()
        np.testing.assert_allclose(b.data, [0, 1, 2])
        assert dev.to_host == 1
