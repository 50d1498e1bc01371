"""Datum records and images: decoding to Caffe's BGR CHW layout, encoding, resizing."""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from pycaffe_lite.data import datum as dm
from pycaffe_lite.proto import caffe_pb2


def _png_bytes(rgb):
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="PNG")
    return buf.getvalue()


# A 2 x 3 RGB image with distinct channel values: pixel (y, x) = (R, G, B).
RGB = np.array([[[10, 20, 30], [40, 50, 60], [70, 80, 90]],
                [[11, 21, 31], [41, 51, 61], [71, 81, 91]]], np.uint8)


def test_raw_datum_round_trip():
    arr = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    d = dm.array_to_datum(arr, label=7)
    assert (d.channels, d.height, d.width, d.label) == (2, 3, 4, 7)
    assert d.data == bytes(range(24)) and not d.float_data
    back = dm.datum_to_array(caffe_pb2.Datum.FromString(d.SerializeToString()))
    assert back.dtype == np.uint8 and (back == arr).all()


def test_float_datum_round_trip():
    arr = np.array([[[0.5, -1.25]], [[3.0, 1e-3]]], np.float32)
    d = dm.array_to_datum(arr)
    assert not d.data and list(d.float_data) == pytest.approx([0.5, -1.25, 3.0, 1e-3])
    back = dm.datum_to_array(d)
    assert back.dtype == np.float32 and (back == arr).all()


def test_raw_datum_size_mismatch_is_named():
    d = caffe_pb2.Datum(channels=1, height=2, width=2, data=b"abc")
    with pytest.raises(dm.DataError, match="record 5 holds 3 bytes of pixel data for a 1x2x2 "
                                           "datum"):
        dm.datum_to_array(d, where="record 5")


def test_decode_png_gives_bgr_hwc():
    img = dm.decode_image(_png_bytes(RGB))
    assert img.shape == (2, 3, 3) and img.dtype == np.uint8
    assert img[0, 1].tolist() == [60, 50, 40]  # B, G, R
    assert img[1, 2].tolist() == [91, 81, 71]
    chw = dm.hwc_to_chw(img)
    assert chw[0].tolist() == [[30, 60, 90], [31, 61, 91]]  # the blue plane first


def test_decode_grey_and_forced_modes():
    grey = np.array([[0, 128, 255]], np.uint8)
    data = _png_bytes(grey)
    native = dm.decode_image(data)
    assert native.shape == (1, 3, 1) and native[0, :, 0].tolist() == [0, 128, 255]
    colour = dm.decode_image(data, color=True)
    assert colour.shape == (1, 3, 3) and (colour == grey[..., None]).all()
    # forced grey of a colour PNG: libpng's rgb_to_gray with OpenCV's 0.299 / 0.587, in
    # 15-bit fixed point (9797, 19234, 32768 - 9797 - 19234), truncated
    g = dm.decode_image(_png_bytes(RGB), color=False)
    r, gr, b = (RGB[..., i].astype(int) for i in range(3))
    assert g.shape == (2, 3, 1)
    assert g[..., 0].tolist() == ((9797 * r + 19234 * gr + 3737 * b) >> 15).tolist()
    # pure green: 0.587 * 255 = 149.7, stored as 149 (cvtColor's rounding would give 150)
    green = dm.decode_image(_png_bytes(np.array([[[0, 255, 0]]], np.uint8)), color=False)
    assert green.ravel().tolist() == [149]


def test_decode_rgba_keeps_alpha_as_fourth_channel():
    rgba = np.array([[[1, 2, 3, 4]]], np.uint8)
    img = dm.decode_image(_png_bytes(rgba))
    assert img[0, 0].tolist() == [3, 2, 1, 4]


def test_undecodable_bytes_are_named():
    with pytest.raises(dm.DataError, match=r"cannot decode record 3 \(key b'k'\) as an image "
                                           r"\(9 bytes\)"):
        dm.decode_image(b"not a jpg", where="record 3 (key b'k')")


def test_encode_png_is_lossless_and_jpeg_close():
    bgr = RGB[:, :, ::-1]
    assert (dm.decode_image(dm.encode_image(bgr, "png")) == bgr).all()
    smooth = np.tile(np.linspace(0, 255, 32, dtype=np.uint8)[None, :, None], (32, 1, 3))
    back = dm.decode_image(dm.encode_image(smooth, ".jpg"))
    assert np.abs(back.astype(int) - smooth).max() <= 3
    with pytest.raises(dm.DataError, match="unknown image encoding 'xyz'"):
        dm.encode_image(bgr, "xyz")


def test_resize_by_hand():
    # OpenCV INTER_LINEAR maps output pixel centres: src = (dst + 0.5) * in/out - 0.5,
    # clamped at the borders. 1 x 2 -> 1 x 4 along x: src = -0.25, 0.25, 0.75, 1.25
    # -> weights of pixel 1: 0 (clamped), 0.25, 0.75, 1 (clamped).
    img = np.array([[[0.0], [100.0]]], np.float32)
    out = dm.resize(img, 1, 4)
    np.testing.assert_allclose(out[0, :, 0], [0, 25, 75, 100])
    # the uint8 path rounds the same values
    out8 = dm.resize(img.astype(np.uint8), 1, 4)
    assert out8[0, :, 0].tolist() == [0, 25, 75, 100]
    # shrinking 4 -> 2 averages neighbour pairs (src = 0.5, 2.5)
    img = np.array([[[0], [10], [20], [30]]], np.uint8)
    assert dm.resize(img, 1, 2)[0, :, 0].tolist() == [5, 25]
    # a window: the same as resizing the slice
    big = np.random.default_rng(0).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    np.testing.assert_array_equal(dm.resize(big, 7, 9, window=(3, 4, 10, 12)),
                                  dm.resize(big[3:13, 4:16], 7, 9))
    # CHW axes give the same pixels as HWC
    np.testing.assert_array_equal(
        dm.resize(big.transpose(2, 0, 1), 11, 13, axes=(1, 2)).transpose(1, 2, 0),
        dm.resize(big, 11, 13))


def test_resize_matches_opencv():
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(1)
    for h, w, oh, ow in [(37, 53, 20, 30), (256, 256, 227, 227), (60, 45, 32, 32)]:
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        np.testing.assert_array_equal(dm.resize(img, oh, ow),
                                      cv2.resize(img, (ow, oh), interpolation=cv2.INTER_LINEAR))
    # enlarging: OpenCV's rounding differs by at most one grey level
    img = rng.integers(0, 256, (20, 30, 3), dtype=np.uint8)
    diff = dm.resize(img, 37, 53).astype(int) - cv2.resize(img, (53, 37))
    assert np.abs(diff).max() <= 1


def test_read_image_to_datum_raw_and_encoded(tmp_path):
    path = tmp_path / "a.png"
    data = _png_bytes(RGB)
    path.write_bytes(data)
    d = dm.read_image_to_datum(str(path), 3)
    assert (d.channels, d.height, d.width, d.label, d.encoded) == (3, 2, 3, 3, False)
    chw = np.frombuffer(d.data, np.uint8).reshape(3, 2, 3)
    np.testing.assert_array_equal(chw, RGB[:, :, ::-1].transpose(2, 0, 1))
    # same encoding, no resize, colour: the file's bytes are stored as they are
    e = dm.read_image_to_datum(str(path), 1, encoding="png")
    assert e.encoded and e.data == data and e.channels == 0
    # resized: re-encoded
    r = dm.read_image_to_datum(str(path), 1, 4, 6, encoding="png")
    assert r.encoded and dm.decode_image(r.data).shape == (4, 6, 3)
    g = dm.read_image_to_datum(str(path), 1, is_color=False)
    assert g.channels == 1
    with pytest.raises(dm.DataError, match="image file '.*nope.png' not found"):
        dm.read_image_to_datum(str(tmp_path / "nope.png"), 0)


def _chunk(kind, payload):
    return (struct.pack(">I", len(payload)) + kind + payload
            + struct.pack(">I", zlib.crc32(kind + payload)))


def _with_chunk(png, chunk):
    return png[:33] + chunk + png[33:]  # after the 13-byte IHDR chunk


def test_grey_decode_equals_opencv_imread_grayscale():
    cv2 = pytest.importorskip("cv2")
    rng = np.random.default_rng(7)

    def cv_encode(ext, img, params=()):
        ok, buf = cv2.imencode(ext, img, list(params))
        assert ok
        return buf.tobytes()

    def pil_encode(img, fmt, **options):
        buf = io.BytesIO()
        img.save(buf, format=fmt, **options)
        return buf.getvalue()

    cases = 0
    for i in range(12):
        h, w = (int(v) for v in rng.integers(1, 50, 2))
        bgr = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        bgr[: h // 3, :, 1:] = bgr[: h // 3, :, :1]  # some grey pixels (R = G = B)
        png = cv_encode(".png", bgr)
        palette = Image.fromarray(bgr[:, :, ::-1]).quantize(int(rng.integers(2, 256)))
        gamma = int(rng.choice([45455, 22000, 50000, 96000, 100000, 110000, 220000]))
        encoded = [
            png,
            cv_encode(".png", np.dstack([bgr, bgr[:, :, 0]])),  # alpha is dropped
            cv_encode(".png", rng.integers(0, 65536, (h, w, 3), dtype=np.uint16)),
            cv_encode(".png", rng.integers(0, 65536, (h, w, 4), dtype=np.uint16)),
            cv_encode(".png", rng.integers(0, 65536, (h, w), dtype=np.uint16)),
            pil_encode(palette, "PNG"),
            pil_encode(palette, "PNG", transparency=0),
            pil_encode(Image.fromarray(bgr[:, :, :2], "LA"), "PNG"),
            pil_encode(Image.fromarray(bgr[:, :, 0]), "PNG", bits=4),
            _with_chunk(png, _chunk(b"gAMA", struct.pack(">I", gamma))),
            _with_chunk(png, _chunk(b"sRGB", b"\x00")),
            _with_chunk(pil_encode(palette, "PNG"), _chunk(b"gAMA", struct.pack(">I", 45455))),
            cv_encode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(50, 100))]),
            cv_encode(".jpg", bgr, [cv2.IMWRITE_JPEG_SAMPLING_FACTOR,
                                    cv2.IMWRITE_JPEG_SAMPLING_FACTOR_444]),
            cv_encode(".jpg", bgr, [cv2.IMWRITE_JPEG_PROGRESSIVE, 1]),
            cv_encode(".jpg", bgr[:, :, 0]),
            cv_encode(".bmp", bgr),
            cv_encode(".tif", bgr),
            cv_encode(".ppm", bgr),
        ]
        for n, data in enumerate(encoded):
            ref = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_GRAYSCALE)
            got = dm.decode_image(data, color=False)
            assert got.shape == ref.shape + (1,), (i, n)
            np.testing.assert_array_equal(got[:, :, 0], ref, err_msg="image %d, case %d"
                                          % (i, n))
            cases += 1
    assert cases == 12 * 19


def test_sixteen_bit_grey_png_keeps_the_high_byte():
    cv2 = pytest.importorskip("cv2")
    grey16 = np.array([[0, 255, 256, 0x1234], [0xff00, 0xffff, 0x80ff, 7]], np.uint16)
    data = cv2.imencode(".png", grey16)[1].tobytes()
    high = [[0, 0, 1, 0x12], [0xff, 0xff, 0x80, 0]]
    assert dm.decode_image(data, color=False)[:, :, 0].tolist() == high
    colour = dm.decode_image(data, color=True)
    assert colour.shape == (2, 4, 3) and (colour == np.array(high)[:, :, None]).all()
    np.testing.assert_array_equal(colour, cv2.imdecode(np.frombuffer(data, np.uint8),
                                                       cv2.IMREAD_COLOR))


def test_encode_types_and_labels_are_checked():
    assert {"png", "jpg", "jpeg", "bmp"} <= set(dm.encode_types())
    dm.check_encode_type("JPG")
    dm.check_encode_type("")
    with pytest.raises(dm.DataError, match="--encode_type 'gif' is not an image encoding "
                                           "this tool can write; use one of: bmp, "):
        dm.check_encode_type("gif")
    assert dm.parse_label("-2147483648", "here") == -2147483648
    with pytest.raises(dm.DataError, match="here: label 2147483648 is out of range"):
        dm.parse_label("2147483648", "here")
    with pytest.raises(dm.DataError, match="here: label 'x1' is not an integer"):
        dm.parse_label("x1", "here")
