"""BVLC Caffe's examples/ folder, run as a Caffe user would: its Python layers, tools and
nets on small local data, checked against hand computations and Caffe's documented
behaviour."""

import sys

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import plugins

# A loss layer written for BVLC's pycaffe, as examples/pycaffe/layers/pyloss.py is: it imports
# `caffe` (not pycaffe_lite) and subclasses caffe.Layer.
PYCAFFE_LOSS = '''
import caffe
import numpy as np
from caffe.proto import caffe_pb2

PB2 = caffe_pb2


class HalfSquaredDistance(caffe.Layer):
    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise Exception("two bottoms")

    def reshape(self, bottom, top):
        self.diff = np.zeros_like(bottom[0].data, dtype=np.float32)
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.diff[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = np.sum(self.diff ** 2) / bottom[0].num / 2.0

    def backward(self, top, propagate_down, bottom):
        for i, sign in enumerate((1, -1)):
            if propagate_down[i]:
                bottom[i].diff[...] = sign * self.diff / bottom[i].num
'''

# examples/pycaffe/linreg.prototxt's shape: two DummyData inputs, an InnerProduct on each, the
# Python loss between them (loss_weight 1, as a Python layer is not known to be a loss).
LINREG = '''
name: "linreg"
layer { name: "x" type: "DummyData" top: "x"
  dummy_data_param { shape { dim: 4 dim: 3 dim: 2 } data_filler { type: "gaussian" } } }
layer { name: "y" type: "DummyData" top: "y"
  dummy_data_param { shape { dim: 4 dim: 3 dim: 2 } data_filler { type: "gaussian" } } }
layer { name: "ipx" type: "InnerProduct" bottom: "x" top: "ipx"
  inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "ipy" type: "InnerProduct" bottom: "y" top: "ipy"
  inner_product_param { num_output: 5 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "Python" bottom: "ipx" bottom: "ipy" top: "loss"
  python_param { module: "%s" layer: "HalfSquaredDistance" } loss_weight: 1 }
'''


@pytest.fixture
def caffe_alias_undone(monkeypatch):
    """Whatever a test does to 'caffe' (the alias of pycaffe_lite), undone afterwards."""
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.setattr(plugins, "_aliased", [], raising=False)
    before = {k for k in sys.modules if k == "caffe" or k.startswith("caffe.")}
    yield
    for name in [k for k in sys.modules if k == "caffe" or k.startswith("caffe.")]:
        if name not in before:
            del sys.modules[name]


def test_pycaffe_python_layer_that_imports_caffe_runs(tmp_path, monkeypatch, caffe_alias_undone):
    module = "bvlc_style_pyloss_%d" % id(tmp_path)
    (tmp_path / (module + ".py")).write_text(PYCAFFE_LOSS)
    monkeypatch.syspath_prepend(str(tmp_path))
    # run beside a folder named caffe (a source checkout: a namespace package, not pycaffe)
    (tmp_path / "caffe").mkdir()
    monkeypatch.chdir(tmp_path)
    model = tmp_path / "linreg.prototxt"
    model.write_text(LINREG % module)

    net = caffe.Net(str(model), caffe.TRAIN)
    loss = net.forward()["loss"]
    ipx, ipy = net.blobs["ipx"].data.copy(), net.blobs["ipy"].data.copy()
    # the Euclidean loss by hand: sum of squared differences / (2 N), N = 4
    assert loss.shape == (1,)
    np.testing.assert_allclose(loss[0], np.sum((ipx - ipy) ** 2) / 4 / 2, rtol=1e-5)
    net.backward()
    np.testing.assert_allclose(net.blobs["ipx"].diff, (ipx - ipy) / 4, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(net.blobs["ipy"].diff, (ipy - ipx) / 4, rtol=1e-5, atol=1e-7)
    # 'caffe' is pycaffe_lite itself: one Layer class, one generated schema module
    user = sys.modules[module]
    assert user.caffe is caffe and user.PB2 is caffe.caffe_pb2
    net.close()


# examples/feature_extraction: `extract_features WEIGHTS NET BLOBS DATASETS BATCHES DB_TYPE`.
FEATURE_NET = '''
name: "features"
layer { name: "data" type: "HDF5Data" top: "data" top: "label"
  hdf5_data_param { source: "%s" batch_size: 2 } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
  inner_product_param { num_output: 4 } }
'''


def test_extract_features_writes_one_datum_per_item(tmp_path, monkeypatch):
    h5py = pytest.importorskip("h5py")
    lmdb = pytest.importorskip("lmdb")
    from pycaffe_lite import cli
    from pycaffe_lite.proto import caffe_pb2

    rng = np.random.default_rng(3)
    x = rng.normal(size=(5, 2, 1, 3)).astype(np.float32)
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["data"] = x
        f["label"] = np.zeros(5, np.float32)
    (tmp_path / "list.txt").write_text(str(tmp_path / "d.h5") + "\n")
    model = tmp_path / "net.prototxt"
    model.write_text(FEATURE_NET % (tmp_path / "list.txt"))
    w = rng.normal(size=(4, 6)).astype(np.float32)
    b = rng.normal(size=4).astype(np.float32)
    net = caffe.Net(str(model), caffe.TEST)
    net.params["fc"][0].data[...] = w
    net.params["fc"][1].data[...] = b
    net.save(str(tmp_path / "w.caffemodel"))
    net.close()
    monkeypatch.chdir(tmp_path)

    assert cli.main(["extract_features", "w.caffemodel", str(model), "fc,data",
                     "fc_db,data_db", "3", "lmdb"]) == 0

    rows = x[[0, 1, 2, 3, 4, 0]]  # 3 batches of 2 from 5 rows: the file starts over
    for name, expected, legacy in (("fc_db", rows.reshape(6, 6) @ w.T + b, (4, 1, 1)),
                                   ("data_db", rows.reshape(6, 6), (2, 1, 3))):
        env = lmdb.open(str(tmp_path / name), readonly=True, lock=False)
        with env.begin() as txn:
            items = list(txn.cursor())
        env.close()
        assert [k for k, _ in items] == [b"%010d" % i for i in range(6)]
        for (_, value), want in zip(items, expected):
            datum = caffe_pb2.Datum.FromString(value)
            assert (datum.channels, datum.height, datum.width) == legacy
            assert datum.data == b""
            np.testing.assert_allclose(datum.float_data, want, rtol=1e-5, atol=1e-6)


def test_extract_features_names_a_blob_the_net_lacks(tmp_path, capsys):
    from pycaffe_lite import cli

    model = tmp_path / "net.prototxt"
    model.write_text('layer { name: "x" type: "Input" top: "x" '
                     'input_param { shape { dim: 1 dim: 2 } } }')
    caffe.Net(str(model), caffe.TEST).save(str(tmp_path / "w.caffemodel"))
    assert cli.main(["extract_features", str(tmp_path / "w.caffemodel"), str(model), "fc7",
                     str(tmp_path / "out"), "1", "lmdb"]) == 1
    err = capsys.readouterr().err
    assert "Unknown feature blob name fc7 in the network %s" % model in err
    assert not (tmp_path / "out").exists()


# examples/cifar10/train_full.sh resumes from cifar10_full_iter_60000.solverstate, but its
# solver (snapshot_format: HDF5) writes cifar10_full_iter_60000.solverstate.h5.
TINY_NET = '''
layer { name: "x" type: "DummyData" top: "x" top: "y"
  dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 1 }
                     data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
  inner_product_param { num_output: 1 weight_filler { type: "constant" value: 0.5 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "y" top: "loss" }
'''


def test_resuming_from_the_binary_name_of_an_hdf5_state_says_which_file_exists(
        tmp_path, monkeypatch, capsys):
    from pycaffe_lite import cli

    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    (tmp_path / "solver.prototxt").write_text(
        'net: "net.prototxt" base_lr: 0.1 lr_policy: "fixed" max_iter: 2 display: 0 '
        'snapshot_format: HDF5 snapshot_prefix: "full"\n')
    assert cli.main(["train", "--solver", "solver.prototxt"]) == 0
    assert (tmp_path / "full_iter_2.solverstate.h5").is_file()
    capsys.readouterr()

    assert cli.main(["train", "--solver", "solver.prototxt",
                     "--snapshot", "full_iter_2.solverstate"]) == 1
    err = capsys.readouterr().err
    assert "full_iter_2.solverstate: solver state file not found" in err
    assert "full_iter_2.solverstate.h5 exists" in err


def _read_lmdb(path):
    lmdb = pytest.importorskip("lmdb")
    from pycaffe_lite.proto import caffe_pb2

    env = lmdb.open(str(path), readonly=True, lock=False)
    with env.begin() as txn:
        items = [(k, caffe_pb2.Datum.FromString(v)) for k, v in txn.cursor()]
    env.close()
    return items


def test_convert_cifar_data_as_create_cifar10_sh_runs_it(tmp_path, monkeypatch):
    """examples/cifar10/create_cifar10.sh: convert_cifar_data.bin $DATA $EXAMPLE $DBTYPE."""
    from pycaffe_lite import cli

    rng = np.random.default_rng(4)
    data = tmp_path / "data"
    data.mkdir()
    batches = {}
    for name in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
        labels = rng.integers(0, 10, 3).astype(np.uint8)
        images = rng.integers(0, 256, (3, 3072), dtype=np.uint8)
        # the binary version: per record one label byte, then 1024 R, 1024 G, 1024 B bytes
        (data / name).write_bytes(np.hstack([labels[:, None], images]).tobytes())
        batches[name] = (labels, images)
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.chdir(tmp_path)
    assert cli.main(["convert_cifar_data", "data", "out", "lmdb"]) == 0

    train = _read_lmdb(out / "cifar10_train_lmdb")
    expected = [(lab, img) for i in range(1, 6)
                for lab, img in zip(*batches["data_batch_%d.bin" % i])]
    assert [k for k, _ in train] == [b"%05d" % i for i in range(15)]
    for (_, datum), (label, image) in zip(train, expected):
        assert (datum.channels, datum.height, datum.width) == (3, 32, 32)
        assert datum.label == label and datum.data == image.tobytes()
    test = _read_lmdb(out / "cifar10_test_lmdb")
    assert [k for k, _ in test] == [b"00000", b"00001", b"00002"]
    assert [d.label for _, d in test] == list(batches["test_batch.bin"][0])


def test_convert_mnist_siamese_data_pairs_images_and_labels_sameness(tmp_path):
    """examples/siamese/create_mnist_siamese.sh: one record per image, each a random pair."""
    from pycaffe_lite import cli

    n = 40
    images = np.arange(n * 4, dtype=np.uint8).reshape(n, 2, 2)  # every image distinct
    labels = np.arange(n, dtype=np.uint8) % 3
    (tmp_path / "img").write_bytes(np.array([2051, n, 2, 2], ">u4").tobytes()
                                   + images.tobytes())
    (tmp_path / "lab").write_bytes(np.array([2049, n], ">u4").tobytes() + labels.tobytes())
    assert cli.main(["convert_mnist_siamese_data", str(tmp_path / "img"), str(tmp_path / "lab"),
                     str(tmp_path / "pairs"), "--backend", "lmdb", "--seed", "7"]) == 0

    items = _read_lmdb(tmp_path / "pairs")
    assert [k for k, _ in items] == [b"%08d" % i for i in range(n)]
    index = {images[i].tobytes(): i for i in range(n)}
    seen = set()
    for _, datum in items:
        assert (datum.channels, datum.height, datum.width) == (2, 2, 2)
        i, j = index[datum.data[:4]], index[datum.data[4:]]
        assert datum.label == int(labels[i] == labels[j])
        seen.add(datum.label)
    assert seen == {0, 1}


# examples/finetune_pascal_detection's loss layer names no top; Caffe's LossLayer makes one
# (AutoTopBlobs): an anonymous blob whose loss counts with weight 1 but is no net output.
NO_TOP_LOSS = '''
force_backward: true
layer { name: "in" type: "Input" top: "x" top: "y"
  input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "x" bottom: "y" }
'''


def test_a_loss_layer_without_a_top_gets_one_that_counts_in_the_loss(tmp_path):
    model = tmp_path / "net.prototxt"
    model.write_text(NO_TOP_LOSS)
    net = caffe.Net(str(model), caffe.TRAIN)
    x = np.array([[1.0, 2.0, 0.5], [0.1, -1.0, 3.0], [2.0, 2.0, 2.0], [-1.0, 0.0, 1.0]],
                 np.float32)
    y = np.array([0, 2, 1, 2], np.float32)
    net.blobs["x"].data[...] = x
    net.blobs["y"].data[...] = y
    assert net.outputs == []  # the anonymous top is no output, as in Caffe
    assert "(automatic)" not in net.blobs

    loss = net._forward(0, len(net.layers) - 1)
    # softmax cross-entropy by hand, averaged over the 4 rows
    p = np.exp(x) / np.exp(x).sum(axis=1, keepdims=True)
    rows = np.arange(4), y.astype(int)
    np.testing.assert_allclose(loss, -np.log(p[rows]).mean(), rtol=1e-5)
    net.backward()
    expected = p.copy()
    expected[rows] -= 1
    np.testing.assert_allclose(net.blobs["x"].diff, expected / 4, rtol=1e-5, atol=1e-7)
