"""Classifier and Detector on a net whose outputs are plain arithmetic: global average pooling
and an inner product with chosen weights, so every prediction can be worked out by hand."""

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite.errors import CaffeError, ShapeError

Image = pytest.importorskip("PIL.Image", reason="Pillow is a test dependency")

DEPLOY = """
name: "average"
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 4 dim: 3 dim: 4 dim: 4 } } }
layer { name: "pool" type: "Pooling" bottom: "data" top: "pool"
        pooling_param { pool: AVE global_pooling: true } }
layer { name: "score" type: "InnerProduct" bottom: "pool" top: "score"
        inner_product_param { num_output: 2 } }
"""

MEAN = np.array([10.0, 20.0, 30.0], dtype=np.float32)  # per net channel (B, G, R)


@pytest.fixture
def model(tmp_path):
    """(prototxt, caffemodel): score0 = mean of net channel 0, score1 = mean of channel 2 + .5"""
    proto = tmp_path / "deploy.prototxt"
    proto.write_text(DEPLOY)
    net = caffe.Net(str(proto), caffe.TEST)
    w, b = net.params["score"]
    w.data[...] = [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]
    b.data[...] = [0.0, 0.5]
    weights = tmp_path / "deploy.caffemodel"
    net.save(str(weights))
    return str(proto), str(weights)


def expected_scores(crop):
    """Scores of one H x W x 3 RGB crop in [0, 1] after channel swap, raw scale 255 and the
    mean: net channel 0 is blue (image channel 2), net channel 2 is red (image channel 0)."""
    return np.array([255.0 * crop[:, :, 2].mean() - MEAN[0],
                     255.0 * crop[:, :, 0].mean() - MEAN[2] + 0.5])


def classifier(model, **kw):
    proto, weights = model
    return caffe.Classifier(proto, weights, mean=MEAN, raw_scale=255.0,
                            channel_swap=(2, 1, 0), **kw)


def images():
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 1, (6, 6, 3)).astype(np.float32)
    b = rng.uniform(0, 1, (6, 6, 3)).astype(np.float32)
    c = np.empty((9, 7, 3), dtype=np.float32)   # another size, constant per channel: resizing
    c[:] = [0.2, 0.5, 0.9]                       # to 6 x 6 keeps the values
    return [a, b, c]


def test_predict_center_crop(model):
    clf = classifier(model, image_dims=(6, 6))
    assert tuple(clf.crop_dims) == (4, 4) and tuple(clf.image_dims) == (6, 6)
    ims = images()
    pred = clf.predict(ims, oversample=False)
    assert pred.shape == (3, 2)
    for i, im in enumerate(ims[:2]):
        np.testing.assert_allclose(pred[i], expected_scores(im[1:5, 1:5]), rtol=1e-5)
    np.testing.assert_allclose(pred[2], [255 * 0.9 - 10, 255 * 0.2 - 30 + 0.5], rtol=1e-5)


def test_predict_oversample_averages_ten_crops(model):
    clf = classifier(model, image_dims=(6, 6))
    ims = images()
    pred = clf.predict(ims)  # oversample is the default; 30 crops in batches of 4 (padded)
    assert pred.shape == (3, 2)
    for i, im in enumerate(ims[:2]):
        # corners (0,0) (0,2) (2,0) (2,2) and center (1,1); mirrors do not change a mean
        crops = [im[y:y + 4, x:x + 4] for y, x in [(0, 0), (0, 2), (2, 0), (2, 2), (1, 1)]]
        expected = np.mean([expected_scores(c) for c in crops], axis=0)
        np.testing.assert_allclose(pred[i], expected, rtol=1e-5)
    np.testing.assert_allclose(pred[2], [255 * 0.9 - 10, 255 * 0.2 - 30 + 0.5], rtol=1e-5)
    # oversampled and center predictions differ on a non-constant image
    assert not np.allclose(pred[0], clf.predict(ims[:1], oversample=False)[0])


def test_a_full_mean_larger_than_the_input_is_resized(model):
    # as pycaffe's classify.py: a K x 256 x 256 mean file for a 227 x 227 input; here a
    # 3 x 9 x 9 mean, constant per channel, for the 4 x 4 input gives MEAN's scores
    proto, weights = model
    full = np.ones((3, 9, 9), np.float32) * MEAN[:, np.newaxis, np.newaxis]
    clf = caffe.Classifier(proto, weights, image_dims=(6, 6), mean=full, raw_scale=255.0,
                           channel_swap=(2, 1, 0))
    assert clf.transformer.mean["data"].shape == (3, 4, 4)
    im = images()[0]
    np.testing.assert_allclose(clf.predict([im], oversample=False)[0],
                               expected_scores(im[1:5, 1:5]), rtol=1e-5)


def test_oversampled_scores_of_a_convolutional_output_are_one_row_per_image(tmp_path):
    # pycaffe averages the ten crops' outputs reshaped to (N, 10, -1): an N x C x 1 x 1 score
    # map becomes N x C, while the center crop keeps the net's shape
    proto = tmp_path / "conv.prototxt"
    proto.write_text(DEPLOY.replace('type: "InnerProduct"', 'type: "Convolution"').replace(
        "inner_product_param { num_output: 2 }", "convolution_param { num_output: 2 "
        "kernel_size: 1 }"))
    net = caffe.Net(str(proto), caffe.TEST)
    w, b = net.params["score"]
    w.data[...] = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]]).reshape(2, 3, 1, 1)
    b.data[...] = [0.0, 0.5]
    weights = tmp_path / "conv.caffemodel"
    net.save(str(weights))
    clf = classifier((str(proto), str(weights)), image_dims=(6, 6))
    ims = images()
    center = clf.predict(ims, oversample=False)
    assert center.shape == (3, 2, 1, 1)
    np.testing.assert_allclose(center[0, :, 0, 0], expected_scores(ims[0][1:5, 1:5]), rtol=1e-5)
    pred = clf.predict(ims)
    assert pred.shape == (3, 2)
    np.testing.assert_allclose(pred[2], [255 * 0.9 - 10, 255 * 0.2 - 30 + 0.5], rtol=1e-5)


def test_default_image_dims_is_the_input_size(model):
    clf = classifier(model)
    assert tuple(clf.image_dims) == (4, 4)
    im = images()[0][:4, :4]
    np.testing.assert_allclose(clf.predict([im], oversample=False)[0], expected_scores(im),
                               rtol=1e-5)
    np.testing.assert_allclose(clf.predict([im])[0], expected_scores(im), rtol=1e-5)


def test_classifier_checks(model):
    proto, weights = model
    with pytest.raises(ShapeError, match="does not match the input shape"):
        caffe.Classifier(proto, weights, mean=np.zeros((2, 4, 4)))
    with pytest.raises(ShapeError, match="smaller than the net's input"):
        caffe.Classifier(proto, weights, image_dims=(3, 8))
    clf = classifier(model)
    with pytest.raises(ShapeError, match="H x W x K"):
        clf.predict([np.zeros((4, 4))])
    with pytest.raises(CaffeError, match="at least one image"):
        clf.predict([])


def test_images_of_another_channel_count_than_the_net_are_named(model):
    """Grey images (H x W x 1, as caffe.io.load_image(path, color=False) gives) for a net
    whose input takes 3 channels: the error says both counts instead of naming a batch shape
    the caller never made; a 2-D image says how to give a grey one."""
    clf = caffe.Classifier(*model, image_dims=(6, 6))
    with pytest.raises(ShapeError) as err:
        clf.predict([np.zeros((6, 6, 1), np.float32)])
    assert str(err.value) == ("the images have 1 channel (H x W x 1), the net's input 'data' "
                              "takes 3 (load them in colour: caffe.io.load_image(path))")
    with pytest.raises(ShapeError, match=r"image 0 has shape \(6, 6\) \(a grey image is "
                                         r"H x W x 1: image\[:, :, None\]"):
        clf.predict([np.zeros((6, 6), np.float32)])
    with pytest.raises(ShapeError, match=r"image 1 has shape \(6, 6, 1\), image 0 \(6, 6, 3\)"):
        clf.predict([np.zeros((6, 6, 3)), np.zeros((6, 6, 1))])


# ---- Detector -------------------------------------------------------------------------------

def detector(model, **kw):
    proto, weights = model
    return caffe.Detector(proto, weights, mean=MEAN, raw_scale=255.0, channel_swap=(2, 1, 0),
                          **kw)


def test_detect_windows_from_a_file_and_an_array(model, tmp_path):
    rng = np.random.default_rng(5)
    pixels = rng.integers(0, 256, (10, 12, 3), dtype=np.uint8)
    path = tmp_path / "scene.png"
    Image.fromarray(pixels, "RGB").save(path)
    im = pixels / np.float32(255.0)
    windows = [np.array([0, 0, 4, 4]), np.array([3, 2, 7, 6]), np.array([6, 8, 10, 12])]
    det = detector(model)
    found = det.detect_windows([(str(path), windows), (im, windows[:2])])
    assert len(found) == 5
    assert [d["filename"] for d in found[:3]] == [str(path)] * 3
    for d, w in zip(found, windows + windows[:2]):
        np.testing.assert_array_equal(d["window"], w)
        crop = im[w[0]:w[2], w[1]:w[3]]
        np.testing.assert_allclose(d["prediction"], expected_scores(crop), rtol=1e-4)


def test_crop_with_context_padding(model):
    det = detector(model, context_pad=1)
    # the mean in image space: R, G, B = mean[2], mean[1], mean[0], divided by the raw scale
    np.testing.assert_allclose(det.crop_mean[0, 0], [30 / 255.0, 20 / 255.0, 10 / 255.0])
    im = np.empty((10, 10, 3), dtype=np.float32)
    im[:] = [0.3, 0.6, 0.7]
    crop = det.crop(im, np.array([0, 0, 4, 4]))
    # input 4 wide, 1 pixel of context: scale 4 / 2 = 2; the 5-pixel window centred at 2.5
    # grows to the box -2 .. 8 (rounded), 11 pixels counted inclusively as pycaffe's crop does,
    # mapped onto 4 (4/11 per pixel); the 2 pixels above/left of the image become
    # round(8/11) = 1 row/col of mean; the rest, image rows/cols 0..8 (9 pixels ->
    # round(36/11) = 3), fills 3 x 3
    assert crop.shape == (4, 4, 3)
    np.testing.assert_allclose(crop[0], np.broadcast_to(det.crop_mean[0, 0], (4, 3)))
    np.testing.assert_allclose(crop[:, 0], np.broadcast_to(det.crop_mean[0, 0], (4, 3)))
    np.testing.assert_allclose(crop[1:, 1:], np.broadcast_to([0.3, 0.6, 0.7], (3, 3, 3)),
                               rtol=1e-6)
    pred = det.detect_windows([(im, [np.array([0, 0, 4, 4])])])[0]["prediction"]
    # after preprocessing the mean-filled border is exactly 0: 9 of 16 pixels carry the image
    np.testing.assert_allclose(pred, [9 / 16.0 * (255 * 0.7 - 10),
                                      9 / 16.0 * (255 * 0.3 - 30) + 0.5], rtol=1e-5)


def test_context_crop_counts_the_box_inclusively(model):
    # pycaffe's Detector.crop (after R-CNN): the window 2 .. 7 (half size 3, centre 5) grows by
    # the scale 2 to the box -1 .. 11, whose size is 11 - (-1) + 1 = 13 pixels mapped onto 4;
    # round(1 * 4/13) = 0 rows of padding above, the clipped box 0 .. 10 (11 pixels) becomes
    # round(44/13) = 3 rows, and the last row and column stay the mean
    det = detector(model, context_pad=1)
    im = np.empty((10, 10, 3), dtype=np.float32)
    im[:] = [0.3, 0.6, 0.7]
    crop = det.crop(im, np.array([2, 2, 7, 7]))
    np.testing.assert_allclose(crop[:3, :3], np.broadcast_to([0.3, 0.6, 0.7], (3, 3, 3)),
                               rtol=1e-6)
    np.testing.assert_allclose(crop[3], np.broadcast_to(det.crop_mean[0, 0], (4, 3)))
    np.testing.assert_allclose(crop[:, 3], np.broadcast_to(det.crop_mean[0, 0], (4, 3)))


def test_selective_search_is_not_bundled(model):
    with pytest.raises(CaffeError, match="selective search .*not bundled.*detect_windows"):
        detector(model).detect_selective_search(["a.jpg"])


def test_face_exports():
    assert caffe.Classifier.__mro__[1] is caffe.Net
    assert issubclass(caffe.Detector, caffe.Net)


def test_detect_reads_the_output_the_net_makes_last(tmp_path):
    # net.outputs are in name order ("aa_rows" < "zz_side"): detect's default is the output of
    # the last layer that makes one, the detection rows here (their scores are 1 + x)
    from pycaffe_lite.detection import detect

    proto = tmp_path / "two.prototxt"
    proto.write_text("""
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 1 dim: 1 dim: 2 dim: 7 } } }
layer { name: "side" type: "Power" bottom: "data" top: "zz_side" power_param { scale: -1 } }
layer { name: "rows" type: "Power" bottom: "data" top: "aa_rows" power_param { shift: 1 } }
""")
    net = caffe.Net(str(proto), caffe.TEST)
    assert net.outputs == ["aa_rows", "zz_side"]
    image = np.array([[0, 2, 0.5, 0, 0, 1, 1], [0, 3, 0.25, 0, 0, 0.5, 0.5]], np.float32)
    found = detect(net, image, clip=False)
    np.testing.assert_array_equal(found.labels, [3, 4])  # label column + 1
    np.testing.assert_allclose(found.scores, [1.5, 1.25])
    np.testing.assert_allclose(found.boxes, [[7, 2, 14, 4], [7, 2, 10.5, 3]])
