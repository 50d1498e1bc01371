"""Published training nets, read unchanged from tests/fixtures/real (sources in its README):
the Places365 AlexNet and SqueezeNet 1.1 train_val files (with SqueezeNet's solver), BVLC's
MNIST autoencoder (two TEST stages, two layers named "loss") and siamese net (a LevelDB of
image pairs, weights shared by name, the contrastive loss), and NVCaffe's AlexNet with its
random resize before the crop and a mean file.

Only the data sources (and the batch size) are replaced, by small databases written here; every
other line is the file's. What comes out is checked against NumPy written from Caffe's
definitions: the data layer's mean subtraction, crop and scale against the records written,
the losses and accuracies from the blobs they read, gradients against central differences.
"""

import os
import re

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.data import db as dbmod
from pycaffe_lite.io import array_to_blobproto, array_to_datum

HERE = os.path.dirname(os.path.abspath(__file__))
REAL = os.path.join(HERE, "fixtures", "real")


def write_db(path, images, labels, backend="lmdb"):
    with dbmod.open_db(str(path), backend, dbmod.NEW) as db:
        txn = db.transaction()
        for i, (image, label) in enumerate(zip(images, labels)):
            txn.put(b"%08d" % i, array_to_datum(image, int(label)).SerializeToString())
        txn.commit()
    return str(path)


def with_sources(name, folder, sources, batch, **files):
    """The published file with each data layer's source (in order of appearance) and batch
    size replaced, and the named file fields (``mean_file``) pointing into ``folder``."""
    text = open(os.path.join(REAL, name)).read()
    found = re.findall(r'source: "[^"]*"', text)
    assert len(found) == len(sources), found
    for old, new in zip(found, sources):
        text = text.replace(old, 'source: "%s"' % new, 1)
    text = re.sub(r"batch_size: \d+", "batch_size: %d" % batch, text)
    for field, value in files.items():
        text, n = re.subn(r'%s: "[^"]*"' % field, '%s: "%s"' % (field, value), text)
        assert n
    out = folder / name
    out.write_text(text)
    return str(out)


def softmax_loss(logits, labels):
    z = logits.reshape(len(labels), -1).astype(np.float64)
    z = z - z.max(axis=1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=1, keepdims=True))
    return -logp[np.arange(len(labels)), labels.astype(int)].mean()


def top_k_accuracy(logits, labels, k):
    """BVLC's AccuracyLayer: a hit when fewer than k other classes score at least as high as
    the true one (ties count against it)."""
    z = logits.reshape(len(labels), -1)
    hits = [(z[i] >= z[i, int(labels[i])]).sum() - 1 < k for i in range(len(labels))]
    return float(np.mean(hits))


def float64_twin(path):
    """The file built in float64 (its fillers' weights) after a forward of its first batch."""
    net = caffe.Net(path, caffe.TRAIN, dtype=np.float64)
    net.forward()
    return net


def gradients_agree(net, loss, param, start, indices, eps=1e-6, rtol=1e-4):
    """d loss / d param at ``indices`` by central differences (forward from ``start``, which
    leaves the data layer's batch and any dropout mask as they are) against the net's
    backward, the param diffs zeroed first (Caffe's Backward adds to them)."""
    for blobs in net.params.values():
        for blob in blobs:
            blob.diff[...] = 0
    net.forward(start=start)
    net.backward()
    blob = net.params[param][0]
    analytic = blob.diff.copy()
    assert np.abs(analytic).max() > 0, param
    for idx in indices:
        keep = blob.data[idx].copy()
        blob.data[idx] = keep + eps
        up = float(net.forward(start=start)[loss])
        blob.data[idx] = keep - eps
        down = float(net.forward(start=start)[loss])
        blob.data[idx] = keep
        numeric = (up - down) / (2 * eps)
        assert abs(numeric - analytic[idx]) <= rtol * abs(numeric) + 1e-7, (
            param, idx, numeric, analytic[idx])


@pytest.mark.slow
def test_places365_alexnet_train_val_mean_file_crop_loss_and_accuracy(tmp_path):
    """CSAILVision/places365's train_val_alexnet.prototxt: 256 x 256 records, a mean_file, a
    227 crop (centred in TEST), 365 classes. The TEST data is each record minus the mean image,
    both cut at offset (256 - 227) / 2 = 14 (Caffe's DataTransformer subtracts the mean at the
    crop's position); the loss and accuracy are those of fc8 and the labels."""
    caffe.set_random_seed(1)
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (4, 3, 256, 256)).astype(np.uint8)
    labels = np.array([3, 364, 0, 200])
    mean = rng.uniform(80, 150, (1, 3, 256, 256)).astype(np.float32)
    (tmp_path / "mean.binaryproto").write_bytes(array_to_blobproto(mean).SerializeToString())
    train = write_db(tmp_path / "train_lmdb", images, labels)
    val = write_db(tmp_path / "val_lmdb", images[::-1], labels[::-1])
    path = with_sources("places365_alexnet_train_val.prototxt", tmp_path, [train, val], 2,
                        mean_file=str(tmp_path / "mean.binaryproto"))

    net = caffe.Net(path, caffe.TEST)
    out = net.forward()
    expected = images[::-1][:2].astype(np.float32) - mean
    np.testing.assert_allclose(net.blobs["data"].data, expected[:, :, 14:241, 14:241],
                               rtol=1e-6, atol=1e-4)
    np.testing.assert_array_equal(net.blobs["label"].data, labels[::-1][:2])
    fc8 = net.blobs["fc8"].data
    assert fc8.shape == (2, 365)
    assert float(out["loss"]) == pytest.approx(softmax_loss(fc8, labels[::-1][:2]), rel=1e-5)
    assert float(out["accuracy"]) == pytest.approx(
        top_k_accuracy(fc8, labels[::-1][:2], 1), abs=1e-6)

    net = caffe.Net(path, caffe.TRAIN)
    caffe.set_random_seed(3)
    out = net.forward()
    assert sorted(out) == ["loss"]  # the accuracy is TEST only
    np.testing.assert_array_equal(net.blobs["label"].data, labels[:2])
    assert float(out["loss"]) == pytest.approx(
        softmax_loss(net.blobs["fc8"].data, labels[:2]), rel=1e-5)
    gradients_agree(float64_twin(path), "loss", "fc8", "fc8", [(3, 0), (364, 5), (200, 17)])


@pytest.mark.slow
def test_squeezenet_v1_1_train_val_and_its_solver(tmp_path):
    """DeepScale's SqueezeNet_v1.1 train_val.prototxt (mean_value, a 227 crop, top-1 and
    top-5 accuracy in both phases) and its solver.prototxt (iter_size 16, poly)."""
    caffe.set_random_seed(1)
    rng = np.random.default_rng(1)
    images = rng.integers(0, 256, (5, 3, 231, 231)).astype(np.uint8)
    labels = np.array([7, 999, 0, 512, 3])
    train = write_db(tmp_path / "train_lmdb", images, labels)
    val = write_db(tmp_path / "val_lmdb", images, labels)
    path = with_sources("squeezenet_v1.1_train_val.prototxt", tmp_path, [train, val], 3)

    net = caffe.Net(path, caffe.TEST)
    out = net.forward()
    # mean_value 104, 117, 123 (BGR) and the centred crop at (231 - 227) / 2 = 2
    mean = np.array([104, 117, 123], np.float32).reshape(1, 3, 1, 1)
    np.testing.assert_allclose(net.blobs["data"].data,
                               images[:3, :, 2:229, 2:229].astype(np.float32) - mean)
    pool10 = net.blobs["pool10"].data
    assert pool10.shape == (3, 1000, 1, 1)
    assert float(out["loss"]) == pytest.approx(softmax_loss(pool10, labels[:3]), rel=1e-5)
    assert float(out["accuracy"]) == pytest.approx(
        top_k_accuracy(pool10, labels[:3], 1), abs=1e-6)
    assert float(out["accuracy_top5"]) == pytest.approx(
        top_k_accuracy(pool10, labels[:3], 5), abs=1e-6)

    net = caffe.Net(path, caffe.TRAIN)
    out = net.forward()
    assert float(out["loss"]) == pytest.approx(
        softmax_loss(net.blobs["pool10"].data, labels[:3]), rel=1e-5)
    # the gradient through conv10 (after the dropout, whose mask the restart keeps)
    gradients_agree(float64_twin(path), "loss", "conv10", "conv10",
                    [(7, 0, 0, 0), (999, 100, 0, 0), (0, 511, 0, 0)])

    solver_text = open(os.path.join(REAL, "squeezenet_v1.1_solver.prototxt")).read()
    solver_text = solver_text.replace('net: "train_val.prototxt"', 'net: "%s"' % path)
    solver_path = tmp_path / "solver.prototxt"
    solver_path.write_text(solver_text)
    solver = caffe.get_solver(str(solver_path))
    param = solver.param
    assert (param.iter_size, param.lr_policy, param.base_lr, param.power) == (
        16, "poly", pytest.approx(0.04), 1.0)
    before = solver.net.params["conv10"][0].data.copy()
    solver.step(1)
    assert solver.iter == 1
    assert not np.array_equal(solver.net.params["conv10"][0].data, before)


MNIST_SCALE = np.float32(0.0039215684)


def test_mnist_autoencoder_stages_and_losses(tmp_path):
    """BVLC's examples/mnist/mnist_autoencoder.prototxt: the TEST net takes its data from the
    stage's database ("test-on-train" the training LMDB, "test-on-test" the test one); its two
    loss layers, both named "loss", give Caffe's SigmoidCrossEntropyLoss (summed over the
    784 pixels, divided by the batch: the layer's default BATCH_SIZE normalisation) and
    EuclideanLoss (sum of squares over 2N, loss_weight 0)."""
    caffe.set_random_seed(1)
    rng = np.random.default_rng(2)
    train_images = rng.integers(0, 256, (4, 1, 28, 28)).astype(np.uint8)
    test_images = rng.integers(0, 256, (4, 1, 28, 28)).astype(np.uint8)
    train = write_db(tmp_path / "train_lmdb", train_images, [0] * 4)
    test = write_db(tmp_path / "test_lmdb", test_images, [0] * 4)
    path = with_sources("bvlc_mnist_autoencoder.prototxt", tmp_path, [train, train, test], 2)

    for stage, images in (("test-on-train", train_images), ("test-on-test", test_images)):
        net = caffe.Net(path, caffe.TEST, stages=[stage])
        assert [name for name in net._layer_names].count("loss") == 2
        out = net.forward()
        x = images[:2].reshape(2, 784).astype(np.float32) * MNIST_SCALE
        np.testing.assert_allclose(net.blobs["flatdata"].data, x, rtol=1e-6)
        z = net.blobs["decode1"].data.astype(np.float64)
        cross_entropy = (np.maximum(z, 0) - z * x + np.log1p(np.exp(-np.abs(z)))).sum() / 2
        assert float(out["cross_entropy_loss"]) == pytest.approx(cross_entropy, rel=1e-5)
        l2 = ((1 / (1 + np.exp(-z)) - x) ** 2).sum() / 4
        assert float(out["l2_error"]) == pytest.approx(l2, rel=1e-5)

    gradients_agree(float64_twin(path), "cross_entropy_loss", "encode1", "encode1",
                    [(0, 300), (999, 400), (500, 10)])


def test_mnist_siamese_train_test_shares_weights_by_name(tmp_path):
    """BVLC's examples/siamese/mnist_siamese_train_test.prototxt reads pairs from a LevelDB
    (no backend given: Caffe's default), slices them into two LeNets whose params share by
    name (conv1_w, ...), and ends in ContrastiveLoss with margin 1: the sum over the batch of
    d^2 for a similar pair and max(1 - d, 0)^2 otherwise, over 2N. The shared weights get the
    sum of both branches' gradients."""
    caffe.set_random_seed(1)
    rng = np.random.default_rng(4)
    pairs = rng.integers(0, 256, (6, 2, 28, 28)).astype(np.uint8)
    similar = np.array([1, 0, 0, 1, 0, 1])
    train = write_db(tmp_path / "train_leveldb", pairs, similar, backend="leveldb")
    test = write_db(tmp_path / "test_leveldb", pairs[::-1], similar[::-1], backend="leveldb")
    path = with_sources("bvlc_mnist_siamese_train_test.prototxt", tmp_path, [train, test], 4)

    net = caffe.Net(path, caffe.TRAIN)
    for a, b in (("conv1", "conv1_p"), ("conv2", "conv2_p"), ("ip1", "ip1_p"),
                 ("ip2", "ip2_p"), ("feat", "feat_p")):
        for i in range(2):  # the xavier weights and a bias, written through one name
            net.params[a][i].data[...] += rng.normal(0, 0.05, net.params[a][i].shape)
            np.testing.assert_array_equal(net.params[b][i].data, net.params[a][i].data)
    loss = float(net.forward()["loss"])
    np.testing.assert_allclose(net.blobs["data"].data,
                               pairs[:4, :1].astype(np.float32) * np.float32(0.00390625))
    np.testing.assert_allclose(net.blobs["data_p"].data,
                               pairs[:4, 1:].astype(np.float32) * np.float32(0.00390625))
    d = np.linalg.norm(net.blobs["feat"].data.astype(np.float64)
                       - net.blobs["feat_p"].data, axis=1)
    expected = np.where(similar[:4] == 1, d ** 2, np.maximum(1 - d, 0) ** 2).sum() / 8
    assert loss == pytest.approx(expected, rel=1e-5)
    assert ((similar[:4] == 0) & (d < 1)).any()  # the margin's term is not all zero
    # the loss's backward as Caffe's contrastive_loss_layer.cpp writes it: alpha = 1 / N,
    # alpha (a - b) for a similar pair, for a dissimilar one closer than the margin
    # -alpha (1 - d) / (d + 1e-4) (a - b), where the forward's derivative has d
    net.backward()
    a, b = (net.blobs[n].data.astype(np.float64) for n in ("feat", "feat_p"))
    factor = np.where(similar[:4] == 1, 0.25,
                      np.where(d < 1, -0.25 * (1 - d) / (d + 1e-4), 0.0))[:, None]
    np.testing.assert_allclose(net.blobs["feat"].diff, factor * (a - b), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(net.blobs["feat_p"].diff, -factor * (a - b), rtol=1e-5,
                               atol=1e-8)
    # each shared param's diff is the sum over both branches: against central differences,
    # up to that 1e-4 (2 %)
    twin = float64_twin(path)
    for name, indices in (("feat", [(0, 0), (1, 3), (0, 9)]), ("ip1", [(0, 0), (499, 799)]),
                          ("conv1", [(0, 0, 2, 2), (7, 0, 1, 3), (19, 0, 3, 0)])):
        gradients_agree(twin, "loss", name, "slice_pair", indices, rtol=2e-2)
        np.testing.assert_array_equal(twin.params[name + "_p"][0].diff,
                                      twin.params[name][0].diff)

    test_net = caffe.Net(path, caffe.TEST)
    test_net.forward()
    np.testing.assert_array_equal(test_net.blobs["sim"].data, similar[::-1][:4])


@pytest.mark.slow
def test_nvcaffe_alexnet_train_val_augment_random_resize_with_a_mean_file(tmp_path):
    """NVCaffe's models/bvlc_alexnet/train_val_augment.prototxt: img_rand_resize_lower/upper
    with a mean_file and crop 227 (TEST: 256 / 256). NVCaffe resizes the shorter side to 256
    (a 300 x 280 record: 274 x 256, nearest neighbour when shrinking), takes the centre
    227 x 227 (offsets 23 and 14) and subtracts the mean image's own centre 227 x 227
    (offsets 14 and 14 of its 256 x 256). The file was refused."""
    caffe.set_random_seed(1)
    cv2 = pytest.importorskip("cv2", reason="NVCaffe resizes with OpenCV")
    rng = np.random.default_rng(5)
    images = rng.integers(0, 256, (3, 3, 300, 280)).astype(np.uint8)
    labels = np.array([5, 999, 40])
    mean = rng.uniform(80, 150, (1, 3, 256, 256)).astype(np.float32)
    (tmp_path / "mean.binaryproto").write_bytes(array_to_blobproto(mean).SerializeToString())
    train = write_db(tmp_path / "train_lmdb", images, labels)
    val = write_db(tmp_path / "val_lmdb", images, labels)
    path = with_sources("nvcaffe_alexnet_train_val_augment.prototxt", tmp_path, [train, val],
                        2, mean_file=str(tmp_path / "mean.binaryproto"))

    net = caffe.Net(path, caffe.TEST)
    out = net.forward()
    for i in range(2):
        small = cv2.resize(images[i].transpose(1, 2, 0), (256, 274),
                           interpolation=cv2.INTER_NEAREST).transpose(2, 0, 1)
        expected = small[:, 23:250, 14:241].astype(np.float32) - mean[0, :, 14:241, 14:241]
        np.testing.assert_allclose(net.blobs["data"].data[i], expected, rtol=1e-6, atol=1e-4)
    fc8 = net.blobs["fc8"].data
    assert float(out["loss"]) == pytest.approx(softmax_loss(fc8, labels[:2]), rel=1e-5)
    assert float(out["accuracy/top-5"]) == pytest.approx(
        top_k_accuracy(fc8, labels[:2], 5), abs=1e-6)

    net = caffe.Net(path, caffe.TRAIN)
    out = net.forward()  # a resize to 240-272 and a random 227 crop, mirrored or not
    assert net.blobs["data"].shape == (2, 3, 227, 227)
    assert float(out["loss"]) == pytest.approx(
        softmax_loss(net.blobs["fc8"].data, labels[:2]), rel=1e-5)
