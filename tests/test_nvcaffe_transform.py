"""NVCaffe's random resize before the crop (img_rand_resize_*, *_stretch_*): the fork's sizes
by hand, the image through OpenCV's resize as the fork calls it, then the crop."""

import numpy as np
import pytest

from pycaffe_lite.data.datum import DataError
from pycaffe_lite.data.transformer import DataTransformer, nvcaffe_resized_size
from pycaffe_lite.proto import caffe_pb2

cv2 = pytest.importorskip("cv2", reason="the fork resizes with OpenCV")


def param(**fields):
    p = caffe_pb2.TransformationParameter()
    for name, value in fields.items():
        setattr(p, name, value)
    return p


def image(h=10, w=16, c=3):
    return np.random.default_rng(0).integers(0, 256, (c, h, w)).astype(np.uint8)


def transformed(p, img, crop, phase=caffe_pb2.TEST):
    out = np.empty((1, img.shape[0], crop, crop), np.float32)
    DataTransformer(p, phase).transform([img], out, np.random.default_rng(0))
    return out[0]


def test_test_phase_resize_then_centre_crop():
    """Shorter side 10 -> 8: 8 x 12.8 -> 8 x 13 (rounded half away from zero), shrinking with
    INTER_NEAREST (the default), then the centre 6 x 6."""
    p = param(img_rand_resize_lower=8, img_rand_resize_upper=8, crop_size=6)
    assert nvcaffe_resized_size(p, 10, 16, np.random.default_rng(0)) == (8, 13)
    img = image()
    resized = cv2.resize(img.transpose(1, 2, 0), (13, 8), interpolation=cv2.INTER_NEAREST)
    np.testing.assert_array_equal(transformed(p, img, 6),
                                  resized[1:7, 3:9].transpose(2, 0, 1))


def test_stretch_and_upscale_with_the_up_interpolation():
    """Shorter side 10 -> 12: 12 x 19.2; vertical stretch 1.5: 18 x 19.2 -> 18 x 19, larger
    than the input: interpolation_algo_up (INTER_LINEAR here), allowed by allow_upscale."""
    p = param(img_rand_resize_lower=12, img_rand_resize_upper=12, vertical_stretch_lower=1.5,
              vertical_stretch_upper=1.5, allow_upscale=True, crop_size=18,
              interpolation_algo_up=caffe_pb2.TransformationParameter.INTER_LINEAR)
    assert nvcaffe_resized_size(p, 10, 16, np.random.default_rng(0)) == (18, 19)
    img = image(c=1)
    resized = cv2.resize(img[0], (19, 18), interpolation=cv2.INTER_LINEAR)
    np.testing.assert_array_equal(transformed(p, img, 18)[0], resized[:, 0:18])


def test_no_upscale_keeps_the_input_size_and_crop_bounds():
    p = param(img_rand_resize_lower=12, img_rand_resize_upper=12, crop_size=4)
    assert nvcaffe_resized_size(p, 10, 16, None) == (10, 16)
    p = param(rand_resize_ratio_lower=1.0, rand_resize_ratio_upper=2.0, crop_size=9)
    rng = np.random.default_rng(3)
    for _ in range(20):  # the longer side becomes ratio x the shorter, within the input
        h, w = nvcaffe_resized_size(p, 10, 30, rng)
        assert h == 10 and 10 <= w <= 20


def test_training_draws_stay_in_range():
    p = param(img_rand_resize_lower=6, img_rand_resize_upper=9, horizontal_stretch_lower=0.8,
              horizontal_stretch_upper=1.0, crop_size=5)
    t = DataTransformer(p, caffe_pb2.TRAIN)
    out = np.empty((4, 3, 5, 5), np.float32)
    t.transform([image(), image(12, 12), image(9, 20), image(20, 9)], out,
                np.random.default_rng(1))
    assert out.min() >= 0 and out.max() <= 255


def test_mean_file_is_centre_cropped_to_the_crop(tmp_path):
    """NVCaffe's own files (models/bvlc_alexnet/train_val_augment.prototxt,
    models/resnet50/train_val_augment.prototxt) give the random resize a mean_file. The fork's
    apply_mean_scale_mirror (src/caffe/data_transformer.cpp) subtracts the mean image's centre
    crop of the cropped image's size, both scaled, then mirrors; such a transform was refused.
    Here a 3 x 11 x 10 mean: its centre 6 x 6 starts at (2, 2), whatever the image's size."""
    from pycaffe_lite.io import array_to_blobproto
    mean = np.random.default_rng(1).uniform(0, 255, (1, 3, 11, 10)).astype(np.float32)
    path = tmp_path / "mean.binaryproto"
    path.write_bytes(array_to_blobproto(mean).SerializeToString())
    p = param(img_rand_resize_lower=8, img_rand_resize_upper=8, crop_size=6,
              mean_file=str(path), scale=0.5)
    img = image()
    resized = cv2.resize(img.transpose(1, 2, 0), (13, 8), interpolation=cv2.INTER_NEAREST)
    centre = mean[0, :, 2:8, 2:8]
    expected = (resized[1:7, 3:9].transpose(2, 0, 1) - centre) * np.float32(0.5)
    np.testing.assert_allclose(transformed(p, img, 6), expected, rtol=1e-6, atol=1e-4)

    # training: a random crop, then the centre of the mean subtracted and the result mirrored
    p.mirror = True
    t = DataTransformer(p, caffe_pb2.TRAIN)
    out = np.empty((8, 3, 6, 6), np.float32)
    flags = t.transform([img] * 8, out, np.random.default_rng(2))
    assert 0 < flags.sum() < 8
    for i, flipped in enumerate(flags):
        x = out[i][:, :, ::-1] if flipped else out[i]
        window = x / np.float32(0.5) + centre  # the crop of the resized image
        rows = [(r, c) for r in range(3) for c in range(8)
                if np.allclose(resized[r:r + 6, c:c + 6].transpose(2, 0, 1), window,
                               atol=1e-3)]
        assert rows, i

    with pytest.raises(DataError, match="mean_file.*3x11x10.*smaller than crop_size 12"):
        DataTransformer(param(img_rand_resize_lower=16, img_rand_resize_upper=16,
                              crop_size=12, mean_file=str(path)))


def test_needs_a_crop_size():
    with pytest.raises(DataError, match="needs crop_size"):
        DataTransformer(param(img_rand_resize_lower=8, img_rand_resize_upper=9))


# ---- Intel Caffe's random_resize_param and random_aspect_ratio_param ----------------------
def intel_param(text):
    from google.protobuf import text_format
    return text_format.Parse(text, caffe_pb2.TransformationParameter())


def test_intel_random_resize_shorter_side_then_centre_crop():
    """Intel's accuracy files: min_size = max_size = 8 with CUBIC: 10 x 16 -> 8 x int(12.8)
    = 8 x 12, then the centre 6 x 6."""
    p = intel_param("crop_size: 6 random_resize_param { min_size: 8 max_size: 8 "
                    "resize_param { interp_mode: CUBIC } }")
    img = image()
    resized = cv2.resize(img.transpose(1, 2, 0), (12, 8), interpolation=cv2.INTER_CUBIC)
    np.testing.assert_array_equal(transformed(p, img, 6),
                                  resized[1:7, 3:9].transpose(2, 0, 1))


def test_intel_aspect_ratio_window_of_the_whole_square_image():
    """Area ratio 1 and aspect change 1 on a 12 x 12 image: the window is the whole image,
    resized to crop_size."""
    p = intel_param("crop_size: 5 random_aspect_ratio_param { min_area_ratio: 1 "
                    "max_area_ratio: 1 aspect_ratio_change: 1 resize_param { interp_mode: AREA } }")
    img = image(12, 12)
    resized = cv2.resize(img.transpose(1, 2, 0), (5, 5), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(transformed(p, img, 5, caffe_pb2.TRAIN),
                                  resized.transpose(2, 0, 1))


def test_intel_binary_transform_fields_map_past_nvcaffes():
    from pycaffe_lite.proto import fork_fields
    from pycaffe_lite.proto.fork_fields import encode_varint as v

    def ld(n, payload):
        return v(n << 3 | 2) + v(len(payload)) + payload
    transform = v(3 << 3) + v(6) + ld(15, v(1 << 3) + v(8) + v(2 << 3) + v(9))
    layer = ld(1, b"data") + ld(2, b"Data") + ld(100, transform)
    net = caffe_pb2.NetParameter.FromString(ld(100, layer))
    assert fork_fields.restore(net) == 1
    tp = net.layer[0].transform_param
    assert (tp.random_resize_param.min_size, tp.random_resize_param.max_size) == (8, 9)
    assert not tp.HasField("vertical_stretch_upper")
