"""pycaffe_lite.io: preprocessing, images, crops and message conversions, against values
worked out by hand."""

import io as stdio

import numpy as np
import pytest

import pycaffe_lite as caffe
from pycaffe_lite import io as cio
from pycaffe_lite.errors import CaffeError, ShapeError
from pycaffe_lite.proto import caffe_pb2

Image = pytest.importorskip("PIL.Image", reason="Pillow is a test dependency")

MEAN_BGR = np.array([104.0, 117.0, 123.0], dtype=np.float32)


def small_image():
    """A 2 x 3 RGB image whose every value is distinct: img[y, x, c] = (6y + 2x + c) / 16."""
    y, x, c = np.meshgrid(np.arange(2), np.arange(3), np.arange(3), indexing="ij")
    return ((6 * y + 2 * x + c) / 16.0).astype(np.float32)


def imagenet_transformer(shape=(1, 3, 2, 3)):
    t = cio.Transformer({"data": shape})
    t.set_transpose("data", (2, 0, 1))
    t.set_channel_swap("data", (2, 1, 0))
    t.set_raw_scale("data", 255)
    t.set_mean("data", MEAN_BGR)
    return t


# ---- Transformer ----------------------------------------------------------------------------

def test_preprocess_transpose_swap_scale_mean_by_hand():
    img = small_image()
    out = imagenet_transformer().preprocess("data", img)
    assert out.shape == (3, 2, 3) and out.dtype == np.float32
    for c in range(3):            # BGR channel c holds RGB channel 2 - c
        for y in range(2):
            for x in range(3):
                expected = (6 * y + 2 * x + (2 - c)) / 16.0 * 255.0 - MEAN_BGR[c]
                assert out[c, y, x] == pytest.approx(expected, abs=1e-4)
    # the caller's image is left alone
    np.testing.assert_array_equal(img, small_image())


def test_preprocess_input_scale_applies_after_mean():
    t = imagenet_transformer()
    t.set_input_scale("data", 0.5)
    img = small_image()
    out = t.preprocess("data", img)
    # pixel (1, 2): R = 10/16, G = 11/16, B = 12/16
    expected_bgr = (np.array([12, 11, 10]) / 16.0 * 255.0 - MEAN_BGR) * 0.5
    np.testing.assert_allclose(out[:, 1, 2], expected_bgr, rtol=1e-6)


def test_deprocess_inverts_preprocess():
    img = small_image()
    t = imagenet_transformer()
    t.set_input_scale("data", 0.017)
    back = t.deprocess("data", t.preprocess("data", img)[np.newaxis])  # batch axis squeezed
    assert back.shape == img.shape
    np.testing.assert_allclose(back, img, atol=1e-5)


def test_deprocess_uses_true_inverses_of_permutations():
    # (1, 2, 0) is not its own inverse; a 3-cycle swap is not either
    img = small_image()
    t = cio.Transformer({"data": (1, 3, 2, 3)})
    t.set_transpose("data", (2, 0, 1))
    t.set_channel_swap("data", (1, 2, 0))
    pre = t.preprocess("data", img)
    np.testing.assert_array_equal(pre[0], img[:, :, 1])
    np.testing.assert_array_equal(pre[1], img[:, :, 2])
    np.testing.assert_array_equal(pre[2], img[:, :, 0])
    np.testing.assert_array_equal(t.deprocess("data", pre), img)


def test_full_mean_is_subtracted_elementwise():
    mean = np.arange(18, dtype=np.float32).reshape(3, 2, 3)
    t = cio.Transformer({"data": (1, 3, 2, 3)})
    t.set_transpose("data", (2, 0, 1))
    t.set_mean("data", mean)
    out = t.preprocess("data", small_image())
    np.testing.assert_allclose(out, small_image().transpose(2, 0, 1) - mean, rtol=1e-6)


def test_two_d_mean_for_a_single_channel_input():
    t = cio.Transformer({"data": (1, 1, 2, 2)})
    t.set_transpose("data", (2, 0, 1))
    t.set_mean("data", np.array([[1.0, 2.0], [3.0, 4.0]]))
    out = t.preprocess("data", np.full((2, 2, 1), 10.0))
    np.testing.assert_array_equal(out, [[[9.0, 8.0], [7.0, 6.0]]])


def test_a_full_mean_of_another_size_is_resized_bilinearly():
    # pycaffe resizes a K x H' x W' mean to the input's H x W (classify.py gives the 256 x 256
    # ImageNet mean to a 227 x 227 net). Doubling 2 x 2 by bilinear interpolation with pixel
    # centres at (i + 0.5) / 2 - 0.5 takes [a, b] to [a, .75a + .25b, .25a + .75b, b].
    mean = np.array([[[1, 2], [3, 5]], [[0, 10], [20, 40]], [[7, 7], [1, 1]]], np.float32)
    rows = np.array([[1, 0], [0.75, 0.25], [0.25, 0.75], [0, 1]])
    expected = np.stack([rows @ m @ rows.T for m in mean])
    t = cio.Transformer({"data": (1, 3, 4, 4)})
    t.set_transpose("data", (2, 0, 1))
    t.set_mean("data", mean)
    np.testing.assert_allclose(t.mean["data"], expected, rtol=1e-6)
    img = np.full((4, 4, 3), 100.0, np.float32)
    np.testing.assert_allclose(t.preprocess("data", img), 100.0 - expected, rtol=1e-6)
    # smaller: a mean constant per channel stays those constants; an H' x W' mean for one
    # channel is resized too
    t.set_mean("data", np.ones((3, 9, 7), np.float32) * np.float32([[[104]], [[117]], [[123]]]))
    np.testing.assert_allclose(t.mean["data"], np.broadcast_to([[[104]], [[117]], [[123]]],
                                                                (3, 4, 4)))
    g = cio.Transformer({"data": (1, 1, 4, 4)})
    g.set_mean("data", mean[1])
    np.testing.assert_allclose(g.mean["data"], expected[1:2], rtol=1e-6)


def test_set_mean_shape_checks():
    t = cio.Transformer({"data": (1, 3, 4, 5)})
    with pytest.raises(ShapeError, match="per-channel mean has 4 values, the input has 3"):
        t.set_mean("data", np.zeros(4))
    with pytest.raises(ShapeError, match=r"mean shape \(2, 4, 5\) does not match .*\(3, 4, 5\)"):
        t.set_mean("data", np.zeros((2, 4, 5)))
    with pytest.raises(ShapeError, match="must be"):
        t.set_mean("data", np.zeros((1, 3, 4, 5)))
    t.set_mean("data", np.zeros((3, 4, 5)))
    assert t.mean["data"].shape == (3, 4, 5)
    t.set_mean("data", np.zeros(3))
    assert t.mean["data"].shape == (3, 1, 1)


def test_transpose_and_channel_swap_checks():
    t = cio.Transformer({"data": (1, 3, 4, 5)})
    with pytest.raises(ShapeError, match="has 2 axes, the input has 3"):
        t.set_transpose("data", (1, 0))
    with pytest.raises(CaffeError, match="not a permutation"):
        t.set_transpose("data", (0, 0, 1))
    with pytest.raises(ShapeError, match="has 2 entries, the input has 3 channels"):
        t.set_channel_swap("data", (1, 0))
    with pytest.raises(CaffeError, match="'label' is not one of the net inputs: data"):
        t.set_raw_scale("label", 2.0)
    with pytest.raises(CaffeError, match="not one of the net inputs"):
        t.preprocess("label", small_image())


def test_preprocess_resizes_to_the_input_size():
    t = cio.Transformer({"data": (1, 3, 4, 6)})
    t.set_transpose("data", (2, 0, 1))
    img = np.zeros((2, 3, 3), dtype=np.float32)
    img[..., 0], img[..., 1], img[..., 2] = 0.25, 0.5, 0.75  # constant per channel
    out = t.preprocess("data", img)
    assert out.shape == (3, 4, 6)
    np.testing.assert_allclose(out[:, 0, 0], [0.25, 0.5, 0.75])
    np.testing.assert_allclose(out, np.broadcast_to([[[0.25]], [[0.5]], [[0.75]]], (3, 4, 6)),
                               rtol=1e-6)


def test_transformer_from_a_net():
    net = caffe.Net("""layer { name: "data" type: "Input" top: "data"
                             input_param { shape { dim: 2 dim: 3 dim: 2 dim: 3 } } }""",
                    caffe.TEST)
    t = cio.Transformer({"data": net.blobs["data"].data.shape})
    t.set_transpose("data", (2, 0, 1))
    net.blobs["data"].data[0] = t.preprocess("data", small_image())
    np.testing.assert_array_equal(net.blobs["data"].data[0, 2], small_image()[:, :, 2])


# ---- resize_image ---------------------------------------------------------------------------

def test_resize_bilinear_upsampling_by_hand():
    a, b = 0.2, 1.0
    im = np.array([[[a], [b]]], dtype=np.float32)             # 1 x 2 x 1
    out = cio.resize_image(im, (1, 4))
    # pixel centers: output x -> input (x + 0.5) / 2 - 0.5, clamped at the borders
    np.testing.assert_allclose(out[0, :, 0], [a, 0.75 * a + 0.25 * b, 0.25 * a + 0.75 * b, b],
                               rtol=1e-6)
    assert out.dtype == np.float32


def test_resize_three_channels_each_channel_separately():
    im = np.zeros((2, 1, 3), dtype=np.float32)
    im[:, 0, 0] = [0.0, 1.0]
    im[:, 0, 1] = [4.0, 0.0]
    im[:, 0, 2] = [-1.0, 3.0]   # values outside [0, 1] are kept as they are
    out = cio.resize_image(im, (4, 2))
    assert out.shape == (4, 2, 3)
    for c in range(3):
        a, b = im[0, 0, c], im[1, 0, c]
        col = [a, 0.75 * a + 0.25 * b, 0.25 * a + 0.75 * b, b]
        np.testing.assert_allclose(out[:, 0, c], col, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(out[:, 1, c], col, rtol=1e-6, atol=1e-6)


def test_resize_downsampling_averages():
    im = np.array([[[0.0], [1.0], [2.0], [3.0]]], dtype=np.float32)
    out = cio.resize_image(im, (1, 2))
    # halving: each output pixel's triangle filter covers its two source pixels equally
    # (weights 1/4, 3/4, 3/4, 1/4 over four taps, clipped at the borders)
    np.testing.assert_allclose(out[0, :, 0], [(0 * 3 + 1 * 3 + 2 * 1) / 7.0,
                                              (1 * 1 + 2 * 3 + 3 * 3) / 7.0], rtol=1e-5)


def test_resize_constant_image_stays_constant():
    out = cio.resize_image(np.full((3, 5, 3), 7.5), (10, 2))
    assert out.shape == (10, 2, 3)
    assert np.all(out == 7.5)


def test_resize_other_channel_counts_with_zoom():
    im = np.zeros((1, 2, 2), dtype=np.float32)
    im[0, :, 0] = [0.0, 1.0]
    im[0, :, 1] = [2.0, 4.0]
    out = cio.resize_image(im, (1, 3))
    # ndimage.zoom maps the end pixels onto the end pixels: the middle is the midpoint
    np.testing.assert_allclose(out[0, :, 0], [0.0, 0.5, 1.0], atol=1e-6)
    np.testing.assert_allclose(out[0, :, 1], [2.0, 3.0, 4.0], atol=1e-6)
    assert cio.resize_image(np.random.rand(5, 7, 4), (3, 11)).shape == (3, 11, 4)


def test_resize_nearest():
    im = np.array([[[1.0], [2.0]], [[3.0], [4.0]]], dtype=np.float32)
    out = cio.resize_image(im, (4, 4), interp_order=0)
    np.testing.assert_array_equal(out[:, :, 0], [[1, 1, 2, 2], [1, 1, 2, 2],
                                                 [3, 3, 4, 4], [3, 3, 4, 4]])


def test_resize_rejects_bad_arguments():
    with pytest.raises(ShapeError, match="H x W x K"):
        cio.resize_image(np.zeros((3, 3)), (2, 2))
    with pytest.raises(ShapeError, match="positive"):
        cio.resize_image(np.zeros((3, 3, 1)), (0, 2))
    with pytest.raises(ShapeError, match="with values, got shape \\(0, 4, 3\\)"):
        cio.resize_image(np.zeros((0, 4, 3)), (2, 2))


# ---- load_image -----------------------------------------------------------------------------

def _save(tmp_path, name, array, mode):
    path = tmp_path / name
    Image.fromarray(array, mode).save(path)
    return str(path)


def test_load_image_rgb_as_floats_in_unit_range(tmp_path):
    pixels = np.array([[[0, 128, 255], [10, 20, 30]]], dtype=np.uint8)
    img = cio.load_image(_save(tmp_path, "rgb.png", pixels, "RGB"))
    assert img.shape == (1, 2, 3) and img.dtype == np.float32
    np.testing.assert_allclose(img, pixels / 255.0, rtol=1e-6)


def test_load_image_grayscale(tmp_path):
    pixels = np.array([[0, 51], [102, 255]], dtype=np.uint8)
    path = _save(tmp_path, "gray.png", pixels, "L")
    color = cio.load_image(path)
    assert color.shape == (2, 2, 3)
    for c in range(3):
        np.testing.assert_allclose(color[:, :, c], pixels / 255.0, rtol=1e-6)
    gray = cio.load_image(path, color=False)
    assert gray.shape == (2, 2, 1)
    np.testing.assert_allclose(gray[:, :, 0], pixels / 255.0, rtol=1e-6)


def test_load_image_drops_alpha_and_makes_luma(tmp_path):
    pixels = np.array([[[255, 0, 0, 10], [0, 255, 0, 200]]], dtype=np.uint8)
    path = _save(tmp_path, "rgba.png", pixels, "RGBA")
    img = cio.load_image(path)
    np.testing.assert_allclose(img, pixels[:, :, :3] / 255.0, rtol=1e-6)
    gray = cio.load_image(path, color=False)
    assert gray.shape == (1, 2, 1)
    # scikit-image's rgb2gray, which BVLC's load_image uses: 0.2125 R + 0.7154 G + 0.0721 B
    np.testing.assert_allclose(gray[0, :, 0], [0.2125, 0.7154], rtol=1e-6)


def test_load_image_sixteen_bit(tmp_path):
    pixels = np.array([[0, 1000, 65535]], dtype=np.uint16)
    path = tmp_path / "deep.png"
    Image.fromarray(pixels).save(path)
    img = cio.load_image(str(path), color=False)
    np.testing.assert_allclose(img[0, :, 0], pixels[0] / 65535.0, rtol=1e-6)


def test_load_image_errors(tmp_path):
    with pytest.raises(CaffeError, match="file not found"):
        cio.load_image(str(tmp_path / "missing.jpg"))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"not an image")
    with pytest.raises(CaffeError, match="cannot read"):
        cio.load_image(str(bad))


# ---- oversample -----------------------------------------------------------------------------

def test_oversample_crop_positions_and_mirrors():
    images = [np.arange(5 * 6 * 2, dtype=np.float32).reshape(5, 6, 2) + 1000 * i
              for i in range(2)]
    crops = cio.oversample(images, (3, 4))
    assert crops.shape == (20, 3, 4, 2) and crops.dtype == np.float32
    # corners: (0,0) (0,2) (2,0) (2,2); center: ((5-3)//2, (6-4)//2) = (1, 1)
    corners = [(0, 0), (0, 2), (2, 0), (2, 2), (1, 1)]
    for i, im in enumerate(images):
        for k, (y, x) in enumerate(corners):
            np.testing.assert_array_equal(crops[10 * i + k], im[y:y + 3, x:x + 4])
            np.testing.assert_array_equal(crops[10 * i + 5 + k], im[y:y + 3, x:x + 4][:, ::-1])


def test_center_crop_position_of_an_imagenet_image():
    # 256 -> 227: center 128, crop from 128 - 113.5 = 14.5, truncated to 14 (as pycaffe)
    assert cio.crop_positions((256, 256), (227, 227))[4] == (14, 14)
    assert cio.crop_positions((255, 256), (227, 227))[4] == (14, 14)


def test_oversample_errors():
    with pytest.raises(ShapeError, match="does not fit"):
        cio.oversample([np.zeros((4, 4, 3))], (5, 4))
    with pytest.raises(ShapeError, match="one shape"):
        cio.oversample([np.zeros((4, 4, 3)), np.zeros((5, 4, 3))], (2, 2))


# ---- messages -------------------------------------------------------------------------------

def test_blobproto_round_trip_with_the_shape_field():
    arr = np.arange(24, dtype=np.float32).reshape(1, 2, 3, 4)
    diff = -arr
    proto = cio.array_to_blobproto(arr, diff)
    # pycaffe's array_to_blobproto fills shape.dim for every rank, never the legacy fields
    assert list(proto.shape.dim) == [1, 2, 3, 4]
    assert not any(proto.HasField(f) for f in ("num", "channels", "height", "width"))
    assert list(proto.data) == list(range(24))
    np.testing.assert_array_equal(cio.blobproto_to_array(proto), arr)
    np.testing.assert_array_equal(cio.blobproto_to_array(proto, return_diff=True), diff)
    # float64, as pycaffe's np.array(blob.data) of the repeated float field
    assert cio.blobproto_to_array(proto).dtype == np.float64
    # other ranks too
    vec = cio.array_to_blobproto(np.array([1.5, 2.5]))
    assert list(vec.shape.dim) == [2] and not vec.HasField("num")
    np.testing.assert_array_equal(cio.blobproto_to_array(vec), [1.5, 2.5])
    # a BlobProto written with the legacy fields (old mean files) still reads
    legacy = caffe_pb2.BlobProto(num=1, channels=2, height=3, width=4, data=arr.ravel())
    np.testing.assert_array_equal(cio.blobproto_to_array(legacy), arr)


def test_blobproto_vector_string_round_trip():
    arrays = [np.full((1, 1, 2, 2), 3.0), np.arange(6.0).reshape(1, 2, 3, 1)]
    data = cio.arraylist_to_blobprotovector_str(arrays)
    assert cio.arraylist_to_blobprotovecor_str is cio.arraylist_to_blobprotovector_str
    vec = caffe_pb2.BlobProtoVector()
    vec.ParseFromString(data)
    assert len(vec.blobs) == 2 and list(vec.blobs[1].shape.dim) == [1, 2, 3, 1]
    back = cio.blobprotovector_str_to_arraylist(data)
    for a, b in zip(arrays, back):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(CaffeError, match="BlobProtoVector"):
        cio.blobprotovector_str_to_arraylist(b"\xff\xff\xff")


def test_datum_label_must_be_a_32_bit_integer():
    raw = np.zeros((1, 2, 2), np.uint8)
    assert cio.array_to_datum(raw, np.int64(-3)).label == -3
    assert cio.array_to_datum(raw, 4.0).label == 4
    for bad, match in ((2.7, "label is an integer, got 2.7"), (True, "got True"),
                       (2 ** 31, "32-bit integer")):
        with pytest.raises(CaffeError, match=match):
            cio.array_to_datum(raw, bad)


def test_datum_round_trips():
    raw = np.arange(24, dtype=np.uint8).reshape(2, 3, 4)
    datum = cio.array_to_datum(raw, label=7)
    assert (datum.channels, datum.height, datum.width, datum.label) == (2, 3, 4, 7)
    assert datum.data == bytes(range(24)) and not len(datum.float_data)
    back = cio.datum_to_array(datum)
    assert back.dtype == np.uint8
    np.testing.assert_array_equal(back, raw)

    floats = np.linspace(-1, 1, 6).reshape(1, 2, 3)
    datum = cio.array_to_datum(floats)
    assert not datum.data and len(datum.float_data) == 6 and datum.label == 0
    back = cio.datum_to_array(datum)
    assert back.dtype == np.float64
    np.testing.assert_allclose(back, floats, rtol=1e-6)

    assert cio.array_to_datum(np.zeros((2, 3), np.uint8)).channels == 1  # one channel
    with pytest.raises(CaffeError, match=r"\(C, H, W\) array, got shape \(1, 2, 2, 2\)"):
        cio.array_to_datum(np.zeros((1, 2, 2, 2)))


def test_encoded_datum_decodes_to_bgr():
    rgb = np.array([[[10, 20, 30], [40, 50, 60]]], dtype=np.uint8)
    buf = stdio.BytesIO()
    Image.fromarray(rgb, "RGB").save(buf, format="PNG")
    datum = caffe_pb2.Datum(channels=3, height=1, width=2, encoded=True, data=buf.getvalue())
    arr = cio.datum_to_array(datum)
    assert arr.shape == (3, 1, 2)
    np.testing.assert_array_equal(arr[:, 0, 0], [30, 20, 10])
    np.testing.assert_array_equal(arr[:, 0, 1], [60, 50, 40])


def test_deprocess_of_a_single_channel_keeps_its_channel_axis():
    # a grey 1 x 1 x H x W batch: only the batch axis goes, the image is H x W x 1 (the
    # shape load_image(color=False) gives), with the scale and mean undone
    rng = np.random.default_rng(4)
    img = rng.uniform(0, 1, (4, 5, 1)).astype(np.float32)
    t = cio.Transformer({"data": (1, 1, 4, 5)})
    t.set_transpose("data", (2, 0, 1))
    t.set_raw_scale("data", 255.0)
    t.set_mean("data", np.array([100.0]))
    pre = t.preprocess("data", img)
    np.testing.assert_allclose(pre[0], img[:, :, 0] * 255.0 - 100.0, rtol=1e-6)
    for batch in (pre, pre[np.newaxis]):
        back = t.deprocess("data", batch)
        assert back.shape == (4, 5, 1)
        np.testing.assert_allclose(back, img, atol=1e-6)
