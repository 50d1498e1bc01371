"""DeepLab v2's layers (ImageSegData, SegAccuracy, MatWrite, DenseCRF) against the fork's C++
(image_seg_data_layer.cpp with DataTransformer::TransformImgAndSeg, seg_accuracy_layer.cpp
with ConfusionMatrix, mat_write_layer.cpp with WriteBlobToMat) written out in NumPy here."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError

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
