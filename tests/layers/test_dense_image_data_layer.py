"""SegNet's and ENet's DenseImageData layer on small image files written here."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.layers.data.dense_image_data_layer import resize_nearest

cv2 = pytest.importorskip("cv2", reason="opencv-python-headless is a test dependency")

NET = """
name: "segnet_data"
layer { name: "data" type: "DenseImageData" top: "data" top: "label"
        dense_image_data_param { source: "%s" batch_size: 2 %s } %s }
"""


def write_pairs(tmp_path, count=3, size=(6, 8)):
    rng = np.random.default_rng(0)
    lines, images, labels = [], [], []
    for i in range(count):
        img = rng.integers(0, 256, size + (3,), dtype=np.uint8)
        lab = rng.integers(0, 5, size, dtype=np.uint8)
        cv2.imwrite(str(tmp_path / ("img%d.png" % i)), img)
        cv2.imwrite(str(tmp_path / ("lab%d.png" % i)), lab)
        lines.append("img%d.png lab%d.png" % (i, i))
        images.append(img)
        labels.append(lab)
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    return images, labels


def build(tmp_path, params="", transform=""):
    proto = tmp_path / "net.prototxt"
    proto.write_text(NET % (tmp_path / "list.txt", 'root_folder: "%s/" %s' % (tmp_path, params),
                            transform))
    return caffe.Net(str(proto), caffe.TRAIN)


def test_images_and_labels_in_order_with_scale(tmp_path):
    images, labels = write_pairs(tmp_path)
    net = build(tmp_path, transform="transform_param { scale: 0.5 }")
    net.forward()
    np.testing.assert_array_equal(net.blobs["data"].data,
                                  0.5 * np.stack(images[:2]).transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(net.blobs["label"].data, np.stack(labels[:2])[:, None])
    net.forward()  # wraps around: images 2, 0
    np.testing.assert_array_equal(net.blobs["label"].data[:, 0], [labels[2], labels[0]])


def test_resize_and_label_divide_factor_use_nearest_labels(tmp_path):
    images, labels = write_pairs(tmp_path)
    net = build(tmp_path, "new_height: 12 new_width: 10 label_divide_factor: 2")
    net.forward()
    assert net.blobs["data"].data.shape == (2, 3, 12, 10)
    expected = cv2.resize(labels[0], (5, 6), interpolation=cv2.INTER_NEAREST)
    np.testing.assert_array_equal(net.blobs["label"].data[0, 0], expected)
    np.testing.assert_array_equal(resize_nearest(labels[1], 6, 5),
                                  cv2.resize(labels[1], (5, 6), interpolation=cv2.INTER_NEAREST))


def test_mirror_and_crop_move_image_and_label_together(tmp_path):
    rng = np.random.default_rng(1)
    lines = []
    for i in range(2):  # the label is the image's grey level: they must stay aligned
        grey = rng.integers(0, 256, (7, 9), dtype=np.uint8)
        cv2.imwrite(str(tmp_path / ("g%d.png" % i)), grey)
        lines.append("g%d.png g%d.png" % (i, i))
    (tmp_path / "list.txt").write_text("\n".join(lines))
    caffe.set_random_seed(3)
    net = build(tmp_path, "is_color: false mirror: true crop_height: 4 crop_width: 5")
    for _ in range(4):
        net.forward()
        assert net.blobs["data"].data.shape == (2, 1, 4, 5)
        np.testing.assert_array_equal(net.blobs["data"].data, net.blobs["label"].data)


def test_transform_crop_is_refused(tmp_path):
    write_pairs(tmp_path)
    with pytest.raises(caffe.CaffeError,
                       match="crop_height, crop_width"):
        build(tmp_path, transform="transform_param { crop_size: 4 }")
