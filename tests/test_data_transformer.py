"""DataTransformer against element-by-element references written from Caffe's definition:
top[c, h, w'] = (x[c, h_off + h, w_off + w] - mean[c, h_off + h, w_off + w]) * scale, in
float32, with w' = width - 1 - w when mirrored."""

import math

import numpy as np
import pytest

from pycaffe_lite.proto import protoio
from pycaffe_lite.data.datum import DataError
from pycaffe_lite.data.mean import mean_to_blobproto
from pycaffe_lite.data.transformer import DataTransformer, distort_colour
from pycaffe_lite.proto import caffe_pb2

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def _param(**kw):
    p = caffe_pb2.TransformationParameter()
    for k, v in kw.items():
        if k == "mean_value":
            p.mean_value.extend(v)
        else:
            setattr(p, k, v)
    return p


def _reference(x, crop, h_off, w_off, mirror, scale, mean=None, mean_values=None):
    """Caffe's transform loop for one (C, H, W) image, element by element in float32."""
    c_, h_, w_ = x.shape
    oh = crop or h_
    ow = crop or w_
    out = np.empty((c_, oh, ow), np.float32)
    s = np.float32(scale)
    for c in range(c_):
        for h in range(oh):
            for w in range(ow):
                v = np.float32(x[c, h_off + h, w_off + w])
                if mean is not None:
                    v = np.float32(v - np.float32(mean[c, h_off + h, w_off + w]))
                elif mean_values is not None:
                    mv = mean_values[0] if len(mean_values) == 1 else mean_values[c]
                    v = np.float32(v - np.float32(mv))
                out[c, h, ow - 1 - w if mirror else w] = np.float32(v * s)
    return out


def _mean_file(tmp_path, mean):
    path = str(tmp_path / "mean.binaryproto")
    protoio.write_binary(mean_to_blobproto(mean), path)
    return path


def test_scale_and_mean_values_are_bit_identical():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (3, 3, 5, 6), dtype=np.uint8)
    tf = DataTransformer(_param(scale=0.017, mean_value=[104.0, 116.7, 122.68]), TRAIN)
    assert not tf.needs_random
    out = np.empty((3, 3, 5, 6), np.float32)
    tf.transform(x, out)
    for i in range(3):
        ref = _reference(x[i], 0, 0, 0, False, 0.017, mean_values=[104.0, 116.7, 122.68])
        np.testing.assert_array_equal(out[i], ref)
    # one mean_value is used for every channel; scale alone
    tf = DataTransformer(_param(scale=0.00390625, mean_value=[3.5]), TEST)
    tf.transform(x, out)
    np.testing.assert_array_equal(out[1], _reference(x[1], 0, 0, 0, False, 0.00390625,
                                                     mean_values=[3.5]))
    tf = DataTransformer(_param(scale=0.00390625), TEST)
    tf.transform(x, out)
    np.testing.assert_array_equal(out, x.astype(np.float32) * np.float32(0.00390625))


def test_mean_file_with_center_crop_in_test(tmp_path):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 256, (2, 2, 7, 8), dtype=np.uint8)
    mean = rng.uniform(0, 255, (2, 7, 8)).astype(np.float32)
    tf = DataTransformer(_param(crop_size=4, mean_file=_mean_file(tmp_path, mean), scale=0.5),
                         TEST)
    assert tf.output_shape((2, 7, 8)) == (2, 4, 4)
    out = np.empty((2, 2, 4, 4), np.float32)
    tf.transform(x, out)
    for i in range(2):  # centre: ((7 - 4) // 2, (8 - 4) // 2) = (1, 2)
        np.testing.assert_array_equal(out[i], _reference(x[i], 4, 1, 2, False, 0.5, mean))


def _offsets(out_item, width, mirror):
    """Where a crop of an image holding 0, 1, 2, ... in row-major order came from."""
    first = out_item[0, 0, -1] if mirror else out_item[0, 0, 0]
    return int(first) // width, int(first) % width


def test_random_crop_and_mirror_in_train(tmp_path):
    n, c, h, w, crop = 64, 2, 6, 7, 3
    x = np.tile(np.arange(c * h * w, dtype=np.float32).reshape(1, c, h, w), (n, 1, 1, 1))
    mean = np.random.default_rng(2).uniform(0, 10, (c, h, w)).astype(np.float32)
    tf = DataTransformer(_param(crop_size=crop, mirror=True, scale=0.25,
                                mean_file=_mean_file(tmp_path, mean)), TRAIN)
    out = np.empty((n, c, crop, crop), np.float32)
    plain = np.empty_like(out)
    mirror = tf.transform(x, out, np.random.default_rng(5))
    DataTransformer(_param(crop_size=crop, mirror=True), TRAIN).transform(
        x, plain, np.random.default_rng(5))
    seen = set()
    for i in range(n):
        h_off, w_off = _offsets(plain[i], w, mirror[i])
        seen.add((h_off, w_off))
        np.testing.assert_array_equal(out[i], _reference(x[i], crop, h_off, w_off, mirror[i],
                                                         0.25, mean))
    # every offset is reachable and mirroring happens about half of the time
    assert {a for a, _ in seen} == set(range(h - crop + 1))
    assert {b for _, b in seen} == set(range(w - crop + 1))
    assert 16 < mirror.sum() < 48
    # the same generator state gives the same batch
    again = np.empty_like(out)
    tf.transform(x, again, np.random.default_rng(5))
    np.testing.assert_array_equal(again, out)


def test_images_of_different_sizes_with_crop():
    imgs = [np.arange(1 * 4 * 5, dtype=np.uint8).reshape(1, 4, 5),
            np.arange(1 * 6 * 3, dtype=np.uint8).reshape(1, 6, 3)]
    tf = DataTransformer(_param(crop_size=3), TEST)
    out = np.empty((2, 1, 3, 3), np.float32)
    tf.transform(imgs, out)
    np.testing.assert_array_equal(out[0], _reference(imgs[0], 3, 0, 1, False, 1))
    np.testing.assert_array_equal(out[1], _reference(imgs[1], 3, 1, 0, False, 1))


def test_mirror_applies_in_test_and_random_crop_only_in_train():
    tf = DataTransformer(_param(mirror=True, crop_size=2), TEST)
    assert tf.needs_random and not tf.random_crop
    assert DataTransformer(_param(crop_size=2), TRAIN).random_crop
    assert not DataTransformer(_param(crop_size=2), TEST).needs_random


def test_errors_name_what_to_fix(tmp_path):
    mean = np.zeros((3, 4, 4), np.float32)
    tf = DataTransformer(_param(mean_file=_mean_file(tmp_path, mean)), TRAIN)
    with pytest.raises(DataError, match=r"mean_file '.*mean.binaryproto' is 3x4x4 \(CxHxW\) "
                                        r"but record 9 is 3x5x5"):
        tf.output_shape((3, 5, 5), "record 9")
    with pytest.raises(DataError, match="cannot specify mean_file and mean_value"):
        DataTransformer(_param(mean_file="m", mean_value=[1.0]))
    with pytest.raises(DataError, match="cannot set both force_color and force_gray"):
        DataTransformer(_param(force_color=True, force_gray=True))
    with pytest.raises(DataError, match="smaller than crop_size 5"):
        DataTransformer(_param(crop_size=5)).output_shape((1, 4, 9), "the image")
    with pytest.raises(DataError, match="1 mean_value or as many as channels \\(3\\)"):
        DataTransformer(_param(mean_value=[1, 2])).output_shape((3, 4, 4))
    with pytest.raises(DataError, match="missing.binaryproto"):
        DataTransformer(_param(mean_file=str(tmp_path / "missing.binaryproto")))


def test_additions_off_by_default_and_inactive_in_test():
    p = caffe_pb2.TransformationParameter()
    assert (p.hue, p.saturation, p.exposure, p.random_resized_crop) == (0, 1, 1, False)
    for f in ("hue", "saturation", "exposure", "random_resized_crop", "rrc_min_scale"):
        assert p.DESCRIPTOR.fields_by_name[f].number >= 1000
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, (4, 3, 8, 8), dtype=np.uint8)
    base = np.empty((4, 3, 6, 6), np.float32)
    DataTransformer(_param(crop_size=6, scale=0.1), TEST).transform(x, base)
    other = np.empty_like(base)
    DataTransformer(_param(crop_size=6, scale=0.1, hue=0.3, saturation=1.5, exposure=1.5,
                           random_resized_crop=True), TEST).transform(x, other)
    np.testing.assert_array_equal(base, other)


def _darknet_pixel(r, g, b, dhue, dsat, dexp):
    """Darknet's rgb_to_hsv / distort / hsv_to_rgb / constrain for one pixel in [0, 1]."""
    mx, mn = max(r, g, b), min(r, g, b)
    delta = mx - mn
    v = mx
    if mx == 0 or delta == 0:
        s, h = (0.0 if mx == 0 else delta / mx), 0.0
    else:
        s = delta / mx
        if r == mx:
            h = (g - b) / delta
        elif g == mx:
            h = 2 + (b - r) / delta
        else:
            h = 4 + (r - g) / delta
        if h < 0:
            h += 6
        h /= 6
    s *= dsat
    v *= dexp
    h += dhue
    if h > 1:
        h -= 1
    if h < 0:
        h += 1
    if s == 0:
        r = g = b = v
    else:
        h *= 6
        i = math.floor(h)
        f = h - i
        p, q, t = v * (1 - s), v * (1 - s * f), v * (1 - s * (1 - f))
        r, g, b = [(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][min(i, 5)]
    return [min(max(c, 0.0), 1.0) for c in (r, g, b)]


def test_colour_distortion_matches_darknet():
    rng = np.random.default_rng(4)
    x = rng.integers(0, 256, (3, 3, 4, 5)).astype(np.float32)
    x[0, :, 0, 0] = 77  # a grey pixel (no hue)
    params = (np.array([0.1, -0.05, 0.4]), np.array([1.3, 0.6, 2.0]), np.array([0.8, 1.2, 1.0]))
    out = distort_colour(x.copy(), *params)
    for n in range(3):
        for yy in range(4):
            for xx in range(5):
                b, g, r = x[n, :, yy, xx] / 255.0
                ref = _darknet_pixel(r, g, b, params[0][n], params[1][n], params[2][n])
                np.testing.assert_allclose(out[n, ::-1, yy, xx], np.array(ref) * 255, atol=2e-3)


def test_colour_augmentation_in_train_scales_value_per_image():
    x = np.full((40, 3, 2, 2), 100, np.uint8)
    x[:, 2] = 200  # one colour, so exposure scales every channel alike
    tf = DataTransformer(_param(exposure=1.5), TRAIN)
    assert tf.colour and tf.needs_random
    out = np.empty((40, 3, 2, 2), np.float32)
    tf.transform(x, out, np.random.default_rng(0))
    ratio = out[:, 0, 0, 0] / 100
    np.testing.assert_allclose(out[:, 2, 0, 0] / 200, np.minimum(ratio, 255 / 200), rtol=1e-5)
    assert ratio.min() >= 1 / 1.5 - 1e-5 and ratio.max() <= 1.5 + 1e-5
    assert (ratio < 1).sum() > 5 and (ratio > 1).sum() > 5


def test_random_resized_crop_windows():
    crop = 16
    h, w = 40, 60
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.stack([xx * 2, yy * 2])  # linear ramps: bilinear resizing keeps them exact
    tf = DataTransformer(_param(crop_size=crop, random_resized_crop=True, rrc_min_scale=0.2,
                                rrc_max_scale=0.6, rrc_min_aspect=0.5, rrc_max_aspect=2.0),
                         TRAIN)
    n = 30
    out = np.empty((n, 2, crop, crop), np.float32)
    tf.transform([img] * n, out, np.random.default_rng(7))
    for i in range(n):
        # interior samples: value = 2 * (x0 + (j + 0.5) * cw / crop - 0.5)
        cw = (out[i, 0, 0, crop - 2] - out[i, 0, 0, 1]) / 2 / (crop - 3) * crop
        ch = (out[i, 1, crop - 2, 0] - out[i, 1, 1, 0]) / 2 / (crop - 3) * crop
        x0 = out[i, 0, 0, 1] / 2 - 1.5 * cw / crop + 0.5
        y0 = out[i, 1, 1, 0] / 2 - 1.5 * ch / crop + 0.5
        assert -0.01 <= x0 and x0 + cw <= w + 0.01 and -0.01 <= y0 and y0 + ch <= h + 0.01
        assert 0.2 * 0.9 <= cw * ch / (h * w) <= 0.6 * 1.1
        assert 0.5 * 0.9 <= cw / ch <= 2.0 * 1.1
    # with a mean file the same window is taken from the mean: x - x = 0 everywhere
    tf.mean = img.copy()
    tf.transform([img] * 4, out[:4], np.random.default_rng(8))
    np.testing.assert_allclose(out[:4], 0, atol=1e-3)


def test_random_resized_crop_needs_crop_size():
    with pytest.raises(DataError, match="random_resized_crop needs crop_size"):
        DataTransformer(_param(random_resized_crop=True))
