"""The Data layer over hand-made LMDB (and LevelDB) databases."""

import io
import os
import pickle

import lmdb
import numpy as np
import pytest
from PIL import Image

import pycaffe_lite
from pycaffe_lite.proto import protoio
from pycaffe_lite.data.mean import mean_to_blobproto
from pycaffe_lite.data.mnist import convert_mnist
from pycaffe_lite.errors import LayerError
from pycaffe_lite.proto import caffe_pb2
from pycaffe_lite.testing import empty_blobs, make_layer

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST
MNIST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "lenet",
                     "mnist5k", "")


def _datum(arr, label, encoded=None):
    if encoded is not None:
        return caffe_pb2.Datum(data=encoded, label=label, encoded=True)
    if arr.dtype == np.uint8:
        return caffe_pb2.Datum(channels=arr.shape[0], height=arr.shape[1], width=arr.shape[2],
                               data=arr.tobytes(), label=label)
    d = caffe_pb2.Datum(channels=arr.shape[0], height=arr.shape[1], width=arr.shape[2],
                        label=label)
    d.float_data.extend(arr.ravel())
    return d


def write_lmdb(path, datums, keys=None):
    """Records written with the lmdb package itself, under keys %08d."""
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, d in enumerate(datums):
            key = keys[i] if keys else b"%08d" % i
            txn.put(key, d if isinstance(d, bytes) else d.SerializeToString())
    env.close()
    return str(path)


def _images(n, shape=(2, 3, 4), seed=0):
    return np.random.default_rng(seed).integers(0, 256, (n,) + shape, dtype=np.uint8)


def _layer(source, batch, phase=TRAIN, transform="", extra="", tops=2, backend="LMDB"):
    text = ('name: "data" type: "Data" data_param { source: "%s" batch_size: %d backend: %s '
            '%s } transform_param { %s }' % (source, batch, backend, extra, transform))
    layer = make_layer(text, dtype=np.float32, phase=phase)
    top = empty_blobs(tops, np.float32)
    layer.SetUp([], top)
    return layer, top


def _run(layer, top, n):
    out = []
    for _ in range(n):
        layer.Forward([], top)
        out.append((top[0].data.copy(), top[1].data.copy() if len(top) > 1 else None))
    return out


def test_raw_records_in_key_order_with_wraparound(tmp_path):
    imgs = _images(5)
    src = write_lmdb(tmp_path / "db", [_datum(im, 10 + i) for i, im in enumerate(imgs)])
    layer, top = _layer(src, 3, transform="scale: 0.5")
    assert top[0].shape == (3, 2, 3, 4) and top[1].shape == (3,)
    batches = _run(layer, top, 3)
    order = [[0, 1, 2], [3, 4, 0], [1, 2, 3]]
    for (data, label), idx in zip(batches, order):
        np.testing.assert_array_equal(data, imgs[idx].astype(np.float32) * 0.5)
        assert label.tolist() == [10 + i for i in idx]
    assert top[0].data.dtype == np.float32
    layer.close()


def test_the_label_top_is_optional(tmp_path):
    imgs = _images(2)
    src = write_lmdb(tmp_path / "db", [_datum(im, 1) for im in imgs])
    layer, top = _layer(src, 2, tops=1)
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, imgs)
    layer.close()


def test_float_data_records(tmp_path):
    arrs = np.random.default_rng(1).normal(size=(4, 1, 2, 3)).astype(np.float32)
    src = write_lmdb(tmp_path / "db", [_datum(a, i) for i, a in enumerate(arrs)])
    layer, top = _layer(src, 4, transform="mean_value: 0.25 scale: 2")
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, (arrs - np.float32(0.25)) * np.float32(2))
    layer.close()


def _png(rgb):
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


def test_encoded_records_are_decoded_to_bgr(tmp_path):
    rgb = np.random.default_rng(2).integers(0, 256, (3, 5, 6, 3), dtype=np.uint8)
    grey = rgb[0, :, :, 0]
    datums = [_datum(None, i, encoded=_png(im)) for i, im in enumerate(rgb)]
    src = write_lmdb(tmp_path / "db", datums)
    layer, top = _layer(src, 3)
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, rgb[:, :, :, ::-1].transpose(0, 3, 1, 2))
    layer.close()
    src2 = write_lmdb(tmp_path / "grey", [_datum(None, 0, encoded=_png(grey))])
    layer, top = _layer(src2, 1)
    assert top[0].shape == (1, 1, 5, 6)
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data[0, 0], grey)
    layer.close()
    layer, top = _layer(src2, 1, transform="force_color: true")
    assert top[0].shape == (1, 3, 5, 6)
    layer.close()


def test_jpeg_records_with_centre_crop_and_mean_value(tmp_path):
    rng = np.random.default_rng(6)
    jpegs, refs = [], []
    for _ in range(2):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)).save(buf, "JPEG")
        jpegs.append(buf.getvalue())
        refs.append(np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB")))
    src = write_lmdb(tmp_path / "db", [_datum(None, i, encoded=j) for i, j in enumerate(jpegs)])
    layer, top = _layer(src, 2, TEST, "crop_size: 8 mean_value: 100 mean_value: 50 "
                        "mean_value: 25")
    layer.Forward([], top)
    mean = np.array([100, 50, 25], np.float32).reshape(3, 1, 1)
    for i, ref in enumerate(refs):
        bgr = ref[1:9, 2:10, ::-1].transpose(2, 0, 1).astype(np.float32)
        np.testing.assert_array_equal(top[0].data[i], bgr - mean)
    layer.close()


def test_random_crop_in_train_and_centre_crop_in_test(tmp_path):
    # each record holds 0..35 in a 6x6 grid: the top-left value gives the crop offset
    grid = np.arange(36, dtype=np.uint8).reshape(1, 6, 6)
    src = write_lmdb(tmp_path / "db", [_datum(grid, 0)] * 8)
    pycaffe_lite.set_random_seed(3)
    layer, top = _layer(src, 8, TRAIN, "crop_size: 4")
    offsets = set()
    for data, _ in _run(layer, top, 4):
        for item in data:
            h, w = divmod(int(item[0, 0, 0]), 6)
            np.testing.assert_array_equal(item[0], grid[0, h:h + 4, w:w + 4])
            offsets.add((h, w))
    assert len(offsets) > 4
    layer.close()
    layer, top = _layer(src, 8, TEST, "crop_size: 4")
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, np.broadcast_to(grid[:, 1:5, 1:5], (8, 1, 4, 4)))
    layer.close()


def test_mean_file_from_a_binaryproto(tmp_path):
    imgs = _images(3, (1, 4, 4))
    mean = np.random.default_rng(4).uniform(0, 255, (1, 4, 4)).astype(np.float32)
    path = str(tmp_path / "mean.binaryproto")
    protoio.write_binary(mean_to_blobproto(mean), path)
    src = write_lmdb(tmp_path / "db", [_datum(im, 0) for im in imgs])
    layer, top = _layer(src, 3, TEST, 'mean_file: "%s" scale: 0.1' % path)
    layer.Forward([], top)
    expected = (imgs.astype(np.float32) - mean) * np.float32(0.1)
    np.testing.assert_array_equal(top[0].data, expected)
    layer.close()
    protoio.write_binary(mean_to_blobproto(np.zeros((1, 5, 5), np.float32)), path)
    with pytest.raises(LayerError, match=r"mean_file '.*' is 1x5x5 \(CxHxW\) but record 0 "
                                         r"\(key b'00000000'\) of source '.*db' is 1x4x4"):
        _layer(src, 3, TEST, 'mean_file: "%s"' % path)


def test_rand_skip_starts_at_a_random_record(tmp_path):
    imgs = _images(10, (1, 1, 1))
    src = write_lmdb(tmp_path / "db", [_datum(im, i) for i, im in enumerate(imgs)])
    starts = set()
    for seed in range(12):
        pycaffe_lite.set_random_seed(seed)
        layer, top = _layer(src, 2, extra="rand_skip: 5")
        layer.Forward([], top)
        first = int(top[1].data[0])
        assert 0 <= first < 5 and top[1].data[1] == first + 1
        starts.add(first)
        layer.close()
    assert len(starts) > 2


def test_tops_adopt_the_prefetched_batches_without_copying(tmp_path):
    src = write_lmdb(tmp_path / "db", [_datum(im, 0) for im in _images(4)])
    layer, top = _layer(src, 2)
    for _ in range(3):
        layer.Forward([], top)
        batch = layer._prefetcher._current.blobs
        assert np.shares_memory(top[0].data, batch[0].data)
        assert np.shares_memory(top[1].data, batch[1].data)
    layer.close()


def test_prefetch_zero_loads_in_forward(tmp_path):
    imgs = _images(3)
    src = write_lmdb(tmp_path / "db", [_datum(im, i) for i, im in enumerate(imgs)])
    layer, top = _layer(src, 2, extra="prefetch: 0")
    assert not layer._prefetcher.running
    batches = _run(layer, top, 2)
    np.testing.assert_array_equal(batches[1][0], imgs[[2, 0]])
    layer.close()


def test_gpu_mode_reads_each_new_batch_on_the_device(tmp_path):
    from pycaffe_lite import backend
    from pycaffe_lite.testing.simdevice import DeviceArray, simulated_device

    imgs = _images(6)
    src = write_lmdb(tmp_path / "db", [_datum(im, i) for i, im in enumerate(imgs)])
    layer, top = _layer(src, 2)
    try:
        with simulated_device():
            backend.set_mode_gpu()
            for k in range(8):  # more batches than buffers (5): buffers are reused
                layer.Forward([], top)
                dev = top[0].read_data()
                assert isinstance(dev, DeviceArray)
                idx = [(2 * k) % 6, (2 * k + 1) % 6]
                np.testing.assert_array_equal(backend.to_host(dev), imgs[idx])
                assert backend.to_host(top[1].read_data()).tolist() == idx
    finally:
        backend.set_mode_cpu()
        layer.close()


# ---- errors -------------------------------------------------------------------------------
def test_missing_source_and_empty_database(tmp_path):
    with pytest.raises(LayerError, match=r"layer 'data' \(type Data\): database '.*nowhere' "
                                         r"not found \(backend LMDB\)"):
        _layer(str(tmp_path / "nowhere"), 2)
    src = write_lmdb(tmp_path / "empty", [])
    with pytest.raises(LayerError, match=r"database '.*empty' \(LMDB\) is empty"):
        _layer(src, 2)
    with pytest.raises(LayerError, match="looks like a LMDB database, not LEVELDB"):
        _layer(src, 2, backend="LEVELDB")


def test_a_record_of_another_size_is_named(tmp_path):
    datums = [_datum(im, 0) for im in _images(2, (1, 4, 4))] + [_datum(_images(1, (1, 5, 5))[0],
                                                                       0)]
    src = write_lmdb(tmp_path / "db", datums)
    layer, top = _layer(src, 3)
    with pytest.raises(LayerError, match=r"record 2 \(key b'00000002'\) of source '.*db' has "
                                         r"size 1x5x5 \(CxHxW\) but the batch's first record "
                                         r"\(record 0 .*\) has 1x4x4"):
        layer.Forward([], top)
    layer.close()


def test_a_corrupt_record_reaches_forward_with_its_message(tmp_path):
    datums = [_datum(im, 0) for im in _images(5)]
    datums[3] = b"\xff\xff\xff garbage"
    src = write_lmdb(tmp_path / "db", datums)
    layer, top = _layer(src, 2)
    layer.Forward([], top)  # records 0, 1
    with pytest.raises(LayerError, match=r"layer 'data' \(type Data\): record 3 \(key "
                                         r"b'00000003'\) of source '.*db' is not a Datum"):
        layer.Forward([], top)
    with pytest.raises(LayerError, match="record 3"):
        layer.Forward([], top)  # the layer stays failed
    layer.close()


def test_an_undecodable_image_is_named(tmp_path):
    datums = [_datum(None, 0, encoded=_png(np.zeros((4, 4, 3), np.uint8))),
              _datum(None, 0, encoded=b"JFIF but truncated")]
    src = write_lmdb(tmp_path / "db", datums)
    layer, top = _layer(src, 2)
    with pytest.raises(LayerError, match=r"cannot decode record 1 \(key b'00000001'\) of "
                                         r"source '.*db' as an image"):
        layer.Forward([], top)
    layer.close()


# ---- reproducibility and resume -------------------------------------------------------------
def test_snapshot_and_resume_give_the_batches_of_an_uninterrupted_run(tmp_path, monkeypatch):
    imgs = _images(13, (1, 6, 6))
    src = write_lmdb(tmp_path / "db", [_datum(im, i) for i, im in enumerate(imgs)])
    transform = "crop_size: 4 mirror: true scale: 0.5"
    monkeypatch.setenv("PYCAFFE_LITE_DATA_THREADS", "2")
    pycaffe_lite.set_random_seed(11)
    straight, top = _layer(src, 5, TRAIN, transform)
    reference = _run(straight, top, 8)
    straight.close()

    pycaffe_lite.set_random_seed(11)
    first, top = _layer(src, 5, TRAIN, transform)
    part1 = _run(first, top, 4)
    state = pickle.loads(pickle.dumps(first.get_state()))
    first.close()
    assert state["type"] == "Data" and state["position"] == (4 * 5) % 13

    pycaffe_lite.set_random_seed(999)  # a new process: whatever seed, the state decides
    resumed, top = _layer(src, 5, TRAIN, transform)
    resumed.Forward([], top)  # consume something first: set_state must discard it
    resumed.set_state(state)
    part2 = _run(resumed, top, 4)
    resumed.close()
    for (a, la), (b, lb) in zip(reference, part1 + part2):
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(la, lb)


def test_batches_do_not_depend_on_the_thread_count(tmp_path, monkeypatch):
    src = write_lmdb(tmp_path / "db", [_datum(im, i) for i, im in enumerate(_images(7))])
    runs = []
    for threads in ("1", "3"):
        monkeypatch.setenv("PYCAFFE_LITE_DATA_THREADS", threads)
        pycaffe_lite.set_random_seed(5)
        layer, top = _layer(src, 3, TRAIN, "crop_size: 2 mirror: true")
        assert layer._prefetcher.threads == int(threads)
        runs.append(_run(layer, top, 6))
        layer.close()
    for (a, _), (b, _) in zip(*runs):
        np.testing.assert_array_equal(a, b)


def test_leveldb_backend(tmp_path):
    plyvel = pytest.importorskip("plyvel")
    imgs = _images(3)
    db = plyvel.DB(str(tmp_path / "ldb"), create_if_missing=True)
    for i, im in enumerate(imgs):
        db.put(b"%08d" % i, _datum(im, i).SerializeToString())
    db.close()
    layer, top = _layer(str(tmp_path / "ldb"), 3, backend="LEVELDB")
    layer.Forward([], top)
    np.testing.assert_array_equal(top[0].data, imgs)
    assert top[1].data.tolist() == [0, 1, 2]
    layer.close()


# ---- LeNet in Caffe's standard form -------------------------------------------------------
LENET = """name: "LeNet"
layer {
  name: "mnist"
  type: "Data"
  top: "data"
  top: "label"
  include { phase: TRAIN }
  transform_param { scale: 0.00390625 }
  data_param { source: "%(train)s" batch_size: 64 backend: LMDB }
}
layer {
  name: "mnist"
  type: "Data"
  top: "data"
  top: "label"
  include { phase: TEST }
  transform_param { scale: 0.00390625 }
  data_param { source: "%(test)s" batch_size: 100 backend: LMDB }
}
layer {
  name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 20 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer {
  name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  param { lr_mult: 1 } param { lr_mult: 2 }
  convolution_param { num_output: 50 kernel_size: 5 stride: 1
    weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer {
  name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 500
    weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer {
  name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  param { lr_mult: 1 } param { lr_mult: 2 }
  inner_product_param { num_output: 10
    weight_filler { type: "xavier" } bias_filler { type: "constant" } }
}
layer { name: "accuracy" type: "Accuracy" bottom: "ip2" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
"""


def _close_net(net):
    for layer in net.layers:
        if hasattr(layer, "close"):
            layer.close()


def test_lenet_train_test_over_convert_mnist_lmdbs(tmp_path):
    train = str(tmp_path / "mnist_train_lmdb")
    test = str(tmp_path / "mnist_test_lmdb")
    convert_mnist(MNIST + "train-images-idx3-ubyte.gz", MNIST + "train-labels-idx1-ubyte.gz",
                  train, limit=300, progress=False)
    convert_mnist(MNIST + "t10k-images-idx3-ubyte.gz", MNIST + "t10k-labels-idx1-ubyte.gz",
                  test, limit=200, progress=False)
    proto = tmp_path / "lenet_train_test.prototxt"
    proto.write_text(LENET % {"train": train, "test": test})
    pycaffe_lite.set_random_seed(1)
    net = pycaffe_lite.Net(str(proto), pycaffe_lite.TRAIN)
    assert net.blobs["data"].shape == (64, 1, 28, 28) and net.blobs["label"].shape == (64,)
    out = net.forward()
    data = net.blobs["data"].data
    assert 0 <= data.min() and data.max() <= 255 / 256 and data.max() > 0.9
    labels = net.blobs["label"].data
    assert set(np.unique(labels)) <= set(range(10)) and len(np.unique(labels)) > 5
    assert 1.5 < float(out["loss"]) < 4
    net.backward()
    for name in ("conv1", "conv2", "ip1", "ip2"):
        assert np.abs(net.params[name][0].diff).sum() > 0
    _close_net(net)
    tnet = pycaffe_lite.Net(str(proto), pycaffe_lite.TEST)
    result = tnet.forward()
    assert tnet.blobs["data"].shape == (100, 1, 28, 28)
    assert 0 <= float(result["accuracy"]) <= 1
    _close_net(tnet)
