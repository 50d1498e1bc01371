"""DeepLab v2's layers (ImageSegData, SegAccuracy, MatWrite, DenseCRF) against the fork's C++
(image_seg_data_layer.cpp with DataTransformer::TransformImgAndSeg, seg_accuracy_layer.cpp
with ConfusionMatrix, mat_write_layer.cpp with WriteBlobToMat) written out in NumPy here."""

import numpy as np
import pytest
from helpers.wire_bytes import fork_layer, length_delimited, string, tag, varint

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError
from pycaffe_lite.proto import protoio

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

MEAN = (104.008, 116.669, 122.675)

DATA = """
name: "deeplab_data"
layer { name: "data" type: "ImageSegData" top: "data" %s
  transform_param { %s }
  image_data_param { source: "%s" root_folder: "%s/" batch_size: %d %s } }
"""


def write_images(tmp_path, sizes, labels=True, seed=0):
    """Random BGR images of the given (H, W) and label images of values 0-20 and 255."""
    rng = np.random.default_rng(seed)
    images, segs = [], []
    for i, size in enumerate(sizes):
        img = rng.integers(0, 256, size + (3,), dtype=np.uint8)
        seg = rng.choice(np.array([0, 1, 2, 15, 20, 255], np.uint8), size)
        cv2.imwrite(str(tmp_path / ("img%d.png" % i)), img)
        if labels:
            cv2.imwrite(str(tmp_path / ("seg%d.png" % i)), seg)
        images.append(img)
        segs.append(seg)
    return images, segs


def build(tmp_path, lines, tops=("label", "data_dim"), transform="", params="", batch=1,
          phase=caffe.TEST):
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    proto = tmp_path / "net.prototxt"
    proto.write_text(DATA % (" ".join('top: "%s"' % t for t in tops), transform,
                             tmp_path / "list.txt", tmp_path, batch, params))
    return caffe.Net(str(proto), phase)


def fork_transform(img, seg, crop, mean, scale, ignore, train_offsets=None, mirror=False):
    """TransformImgAndSeg: pad bottom/right with the mean pixel (label: ignore), crop (centre
    in TEST), mirror, then (pixel - mean) * scale, written pixel by pixel as the fork loops."""
    h, w = img.shape[:2]
    ch, cw = crop
    ph, pw = max(ch - h, 0), max(cw - w, 0)
    padded = np.empty((h + ph, w + pw, 3))
    padded[...] = mean
    padded[:h, :w] = img
    pseg = np.full((h + ph, w + pw), ignore, np.uint8)
    pseg[:h, :w] = seg
    H, W = padded.shape[:2]
    h_off, w_off = train_offsets or ((H - ch) // 2, (W - cw) // 2)
    data = np.zeros((3, ch, cw))
    label = np.zeros((ch, cw))
    for y in range(ch):
        for x in range(cw):
            tx = cw - 1 - x if mirror else x
            for c in range(3):
                data[c, y, tx] = (padded[h_off + y, w_off + x, c] - mean[c]) * scale
            label[y, tx] = pseg[h_off + y, w_off + x]
    return data, label


def test_pixel_labels_padded_and_centre_cropped_in_test(tmp_path):
    images, segs = write_images(tmp_path, [(5, 9), (7, 4)])
    transform = "crop_size: 6 scale: 0.5 " + " ".join("mean_value: %s" % m for m in MEAN)
    net = build(tmp_path, ["img0.png seg0.png", "img1.png seg1.png"], transform=transform,
                params="label_type: PIXEL ignore_label: 250", batch=2)
    net.forward()
    assert net.blobs["data"].data.shape == (2, 3, 6, 6)
    assert net.blobs["label"].data.shape == (2, 1, 6, 6)
    for i in range(2):
        data, label = fork_transform(images[i], segs[i], (6, 6), MEAN, 0.5, 250)
        np.testing.assert_allclose(net.blobs["data"].data[i], data, rtol=1e-6, atol=1e-4)
        np.testing.assert_array_equal(net.blobs["label"].data[i, 0], label)
    # data_dim: each image's height and width, at most the crop's
    np.testing.assert_array_equal(net.blobs["data_dim"].data[:, 0, 0], [[5, 6], [6, 4]])


def test_label_type_none_reads_images_alone_and_fills_ignore_label(tmp_path):
    images, _ = write_images(tmp_path, [(4, 5), (4, 5)], labels=False)
    net = build(tmp_path, ["img0.png", "img1.png extra"], params="label_type: NONE", batch=2)
    net.forward()
    np.testing.assert_array_equal(net.blobs["data"].data,
                                  np.stack(images).transpose(0, 3, 1, 2).astype(np.float32))
    np.testing.assert_array_equal(net.blobs["label"].data, np.full((2, 1, 4, 5), 255))
    np.testing.assert_array_equal(net.blobs["data_dim"].data[:, 0, 0], [[4, 5], [4, 5]])


def test_label_type_image_one_label_per_image_and_one_top(tmp_path):
    write_images(tmp_path, [(3, 3)], labels=False)
    net = build(tmp_path, ["img0.png 7"], params="label_type: IMAGE")
    net.forward()
    np.testing.assert_array_equal(net.blobs["label"].data, np.full((1, 1, 3, 3), 7))
    only_data = build(tmp_path, ["img0.png 7"], tops=())
    only_data.forward()
    assert list(only_data.blobs) == ["data"]


def test_train_crop_and_mirror_move_image_and_label_together(tmp_path):
    images, segs = write_images(tmp_path, [(8, 10)])
    transform = "mirror: true crop_height: 4 crop_width: 6 mean_value: 10"
    net = build(tmp_path, ["img0.png seg0.png"], transform=transform,
                params="label_type: PIXEL", phase=caffe.TRAIN)
    seen = set()
    for _ in range(12):
        net.forward()
        got, lab = net.blobs["data"].data[0], net.blobs["label"].data[0, 0]
        found = [(y, x, m) for y in range(5) for x in range(5) for m in (False, True)
                 if np.allclose(got, fork_transform(images[0], segs[0], (4, 6), (10,) * 3, 1,
                                                    255, (y, x), m)[0])]
        assert len(found) == 1
        y, x, m = found[0]
        np.testing.assert_array_equal(
            lab, fork_transform(images[0], segs[0], (4, 6), (10,) * 3, 1, 255, (y, x), m)[1])
        seen.add(found[0])
    assert len(seen) > 2 and {m for _, _, m in seen} == {False, True}


@pytest.mark.parametrize("transform, params, message", [
    ('mean_file: "m.binaryproto"', "", "mean_file"),
    ("crop_size: 4 crop_height: 4 crop_width: 4", "", "crop_size or both"),
    ("crop_height: 4", "", "crop_size or both"),
    ("", "label_type: PIXEL", "without its label image"),
])
def test_refusals_name_the_layer(tmp_path, transform, params, message):
    write_images(tmp_path, [(3, 3)], labels=False)
    with pytest.raises(CaffeError) as info:
        build(tmp_path, ["img0.png"], transform=transform, params=params)
    text = str(info.value)
    assert message in text and "layer 'data' (type ImageSegData)" in text
    if "label image" in message:
        assert "line 1 of" not in text and "list.txt': line 1" in text


# ---- SegAccuracy ---------------------------------------------------------------------------

ACC = """
name: "seg_accuracy"
input: "score" input_shape { dim: %d dim: %d dim: %d dim: %d }
input: "label" input_shape { dim: %d dim: 1 dim: %d dim: %d }
layer { name: "accuracy" type: "SegAccuracy" bottom: "score" bottom: "label" top: "accuracy"
  seg_accuracy_param { %s } }
"""


def fork_seg_accuracy(scores, labels, ignore, matrix):
    """seg_accuracy_layer.cpp's loops: per pixel, std::partial_sort of (score, channel) pairs
    with std::greater (the top pair: the highest score, of equal scores the highest channel),
    then ConfusionMatrix::accuracy, avgRecall(false), avgJaccard."""
    n, c, h, w = scores.shape
    for i in range(n):
        for y in range(h):
            for x in range(w):
                best = max((float(scores[i, k, y, x]), k) for k in range(c))
                gt = int(labels[i, 0, y, x])
                if gt in ignore:
                    continue
                matrix[gt][best[1]] += 1
    total = sum(sum(row) for row in matrix)
    diag = sum(matrix[k][k] for k in range(c))
    accuracy = diag / total if total else 0.0
    recalls = [matrix[k][k] / sum(matrix[k]) for k in range(c) if sum(matrix[k]) > 0]
    recall = sum(recalls) / len(recalls) if recalls else 0.0
    jaccard = 0.0
    for k in range(c):
        inter = matrix[k][k]
        union = sum(matrix[k]) + sum(matrix[r][k] for r in range(c)) - inter
        jaccard += 1.0 if inter == union else inter / union
    return [accuracy, recall, jaccard / c]


def accuracy_net(tmp_path, shape, params):
    n, c, h, w = shape
    proto = tmp_path / "acc.prototxt"
    proto.write_text(ACC % (n, c, h, w, n, h, w, params))
    return caffe.Net(str(proto), caffe.TEST)


def test_seg_accuracy_against_the_forks_confusion_matrix(tmp_path):
    rng = np.random.default_rng(3)
    shape = (2, 4, 5, 6)
    scores = rng.integers(0, 3, shape).astype(np.float32)  # many ties between channels
    labels = rng.choice([0, 1, 2, 255], (2, 1, 5, 6)).astype(np.float32)
    labels[0, 0, 0, :4] = 3  # class 3 labelled at a few pixels only
    net = accuracy_net(tmp_path, shape, "ignore_label: 255")
    net.blobs["score"].data[...] = scores
    net.blobs["label"].data[...] = labels
    net.forward()
    matrix = [[0] * 4 for _ in range(4)]
    expected = fork_seg_accuracy(scores, labels, {255}, matrix)
    np.testing.assert_allclose(net.blobs["accuracy"].data.reshape(3), expected, rtol=1e-6)
    assert net.blobs["accuracy"].data.shape == (1, 1, 1, 3)
    # reset (the default): the next forward counts its own pixels only
    net.forward()
    np.testing.assert_allclose(net.blobs["accuracy"].data.reshape(3), expected, rtol=1e-6)


def test_seg_accuracy_by_hand_and_accumulating_without_reset(tmp_path):
    # 1 image, 2 classes, 1 x 4 pixels: labels 0 0 1 1, predictions 0 1 1 1 (the last pixel
    # ties, and the tie goes to class 1)
    scores = np.array([[[[5, 0, 0, 2]]], [[[1, 3, 4, 2]]]], np.float32).transpose(1, 0, 2, 3)
    labels = np.array([0, 0, 1, 1], np.float32).reshape(1, 1, 1, 4)
    net = accuracy_net(tmp_path, (1, 2, 1, 4), "reset: false")
    net.blobs["score"].data[...] = scores
    net.blobs["label"].data[...] = labels
    net.forward()
    # matrix [[1, 1], [0, 2]]: accuracy 3/4; recalls 1/2 and 1; IoU 1/2 and 2/3
    np.testing.assert_allclose(net.blobs["accuracy"].data.reshape(3),
                               [0.75, 0.75, (0.5 + 2 / 3) / 2], rtol=1e-6)
    net.blobs["label"].data[...] = 1  # accumulates: matrix [[1, 1], [1, 5]]
    net.forward()
    np.testing.assert_allclose(net.blobs["accuracy"].data.reshape(3),
                               [6 / 8, (0.5 + 5 / 6) / 2, (1 / 3 + 5 / 7) / 2], rtol=1e-6)


def test_seg_accuracy_unexpected_label_names_the_pixel(tmp_path):
    net = accuracy_net(tmp_path, (1, 3, 2, 2), "ignore_label: 255")
    net.blobs["label"].data[...] = 0
    net.blobs["label"].data[0, 0, 1, 0] = 7
    with pytest.raises(CaffeError, match="unexpected label 7 at image 0, row 1, column 0"):
        net.forward()


def test_seg_accuracy_param_at_the_forks_number_in_a_binary_file(tmp_path):
    """DeepLab v2 writes seg_accuracy_param as field 144 (BVLC's crop_param), with ignore_label
    (2) and reset (3) inside."""
    layer = fork_layer("accuracy", "SegAccuracy", ["score", "label"], ["accuracy"],
                       length_delimited(144, tag(2, 0) + varint(255) + tag(3, 0) + varint(0)))
    path = tmp_path / "deeplab.caffemodel"
    path.write_bytes(length_delimited(100, layer))
    param = protoio.read_net_param(str(path))
    p = param.layer[0].seg_accuracy_param
    assert (list(p.ignore_label), p.reset) == ([255], False)
    assert not param.layer[0].HasField("crop_param")


# ---- MatWrite ------------------------------------------------------------------------------

WRITE = """
name: "mat_write"
input: "score" input_shape { dim: 2 dim: 3 dim: 4 dim: 5 }
input: "dim" input_shape { dim: 2 dim: 2 }
layer { name: "fc8_mat" type: "MatWrite" bottom: "score" bottom: "dim"
  mat_write_param { prefix: "%s/" %s } }
"""


def write_net(tmp_path, params):
    proto = tmp_path / "write.prototxt"
    proto.write_text(WRITE % (tmp_path / "out", params))
    (tmp_path / "out").mkdir(exist_ok=True)
    return caffe.Net(str(proto), caffe.TEST)


def test_mat_write_names_files_from_the_source_list_and_stores_matio_layout(tmp_path):
    sio = pytest.importorskip("scipy.io")
    (tmp_path / "ids.txt").write_text("2007_000033.jpg x\n2007_000042.jpg\n")
    net = write_net(tmp_path, 'source: "%s" strip: 4' % (tmp_path / "ids.txt"))
    rng = np.random.default_rng(5)
    written = []
    for _ in range(2):
        score = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
        net.blobs["score"].data[...] = score
        net.blobs["dim"].data[...] = [[1, 2], [3, 4]]
        net.forward()
        written.append(score)
    for name, score in zip(("2007_000033", "2007_000042"), written):
        got = sio.loadmat(str(tmp_path / "out" / (name + "_blob_0.mat")))["data"]
        # matio writes the C-order buffer with dims {W, H, C, N}, read back column-major
        expected = np.reshape(score.ravel(), (5, 4, 3, 2), order="F")
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected)
        assert got[4, 3, 2, 1] == score[1, 2, 3, 4]
        dim = sio.loadmat(str(tmp_path / "out" / (name + "_blob_1.mat")))["data"]
        assert dim.shape == (1, 1, 2, 2)  # a 2-axis blob is N x C x 1 x 1
        np.testing.assert_array_equal(dim[0, 0], [[1, 3], [2, 4]])
    with pytest.raises(CaffeError, match="more iterations than the list has lines"):
        net.forward()


def test_mat_write_without_source_every_period(tmp_path):
    pytest.importorskip("scipy.io")
    net = write_net(tmp_path, "period: 2")
    for _ in range(5):
        net.forward()
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert names == ["iter_%d_blob_%d.mat" % (k, i) for k in (0, 2, 4) for i in (0, 1)]


def test_mat_write_without_scipy_is_refused_clearly(tmp_path, monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_scipy(name, *args, **kwargs):
        if name.startswith("scipy"):
            raise ImportError("no scipy")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_scipy)
    with pytest.raises(CaffeError, match="MatWrite layer 'fc8_mat' needs the optional SciPy"):
        write_net(tmp_path, "")


def test_mat_write_param_at_the_forks_number_in_a_binary_file(tmp_path):
    """DeepLab v2 writes mat_write_param as field 145 (BVLC's parameter_param)."""
    layer = fork_layer("fc8_mat", "MatWrite", ["score"], [],
                       length_delimited(145, string(1, "out/") + tag(4, 0) + varint(3)))
    path = tmp_path / "deeplab.caffemodel"
    path.write_bytes(length_delimited(100, layer))
    param = protoio.read_net_param(str(path))
    p = param.layer[0].mat_write_param
    assert (p.prefix, p.period) == ("out/", 3)
    assert not param.layer[0].HasField("parameter_param")


# ---- DenseCRF ------------------------------------------------------------------------------

def test_dense_crf_is_refused_naming_the_layer(tmp_path):
    proto = tmp_path / "crf.prototxt"
    proto.write_text("""
name: "crf"
input: "fc8_interp" input_shape { dim: 1 dim: 21 dim: 4 dim: 4 }
input: "data_dim" input_shape { dim: 1 dim: 1 dim: 1 dim: 2 }
input: "data" input_shape { dim: 1 dim: 3 dim: 4 dim: 4 }
layer { bottom: "fc8_interp" bottom: "data_dim" bottom: "data" top: "crf_inf" name: "crf"
  type: "DenseCRF"
  dense_crf_param { max_iter: 10 pos_w: 3 pos_xy_std: 3 bi_w: 4 bi_xy_std: 121 bi_rgb_std: 5 }
}
""")
    with pytest.raises(CaffeError) as info:
        caffe.Net(str(proto), caffe.TEST)
    text = str(info.value)
    assert "layer 'crf' (type DenseCRF)" in text and "is not supported" in text
    assert "'crf_inf'" in text


def test_dense_crf_param_at_the_forks_number_in_a_binary_file(tmp_path):
    """DeepLab v2 writes dense_crf_param as field 146 (BVLC's recurrent_param)."""
    layer = fork_layer("crf", "DenseCRF", ["s"], ["crf_inf"],
                       length_delimited(146, tag(1, 0) + varint(5)))
    path = tmp_path / "deeplab.caffemodel"
    path.write_bytes(length_delimited(100, layer))
    param = protoio.read_net_param(str(path))
    assert param.layer[0].dense_crf_param.max_iter == 5
    assert not param.layer[0].HasField("recurrent_param")


# ---- a test.prototxt in the form DeepLab v2 publishes --------------------------------------

TEST_PROTOTXT = """
name: "deeplab_test"
layer { name: "data" type: "ImageSegData" top: "data" top: "label" top: "data_dim"
  include { phase: TEST }
  transform_param { mirror: false crop_size: 6
    mean_value: 104.008 mean_value: 116.669 mean_value: 122.675 }
  image_data_param { root_folder: "%(root)s/" source: "%(root)s/test.txt" batch_size: 1
    label_type: NONE } }
layer { name: "fc8" type: "Convolution" bottom: "data" top: "fc8"
  convolution_param { num_output: 1 kernel_size: 1
    weight_filler { type: "constant" value: 0.5 } bias_filler { type: "constant" value: 1 } } }
layer { name: "fc8_mat" type: "MatWrite" bottom: "fc8" include { phase: TEST }
  mat_write_param { prefix: "%(root)s/fc8/" source: "%(root)s/test_id.txt" strip: 0
    period: 1 } }
layer { name: "silence" type: "Silence" bottom: "label" bottom: "data_dim"
  include { phase: TEST } }
"""


def test_a_deeplab_test_prototxt_reads_scores_and_writes_mat_files(tmp_path):
    sio = pytest.importorskip("scipy.io")
    images, _ = write_images(tmp_path, [(4, 7), (6, 5)], labels=False)
    (tmp_path / "test.txt").write_text("img0.png\nimg1.png\n")
    (tmp_path / "test_id.txt").write_text("img0\nimg1\n")
    (tmp_path / "fc8").mkdir()
    proto = tmp_path / "test.prototxt"
    proto.write_text(TEST_PROTOTXT % {"root": tmp_path})
    net = caffe.Net(str(proto), caffe.TEST)
    for i in range(2):
        net.forward()
        data, _ = fork_transform(images[i], np.zeros(images[i].shape[:2], np.uint8), (6, 6),
                                 MEAN, 1, 255)
        expected = 0.5 * data.sum(axis=0) + 1  # the 1x1 convolution, N x 1 x 6 x 6
        got = sio.loadmat(str(tmp_path / "fc8" / ("img%d_blob_0.mat" % i)))["data"]
        assert got.shape == (6, 6, 1, 1)  # W x H x C x N
        np.testing.assert_allclose(got[:, :, 0, 0], expected.T, rtol=1e-5, atol=1e-3)
