"""Grey decoding as OpenCV's ``imread(path, IMREAD_GRAYSCALE)`` does it (Caffe's
``ReadImageToCVMat`` with ``is_color = false``), for a Pillow image.

OpenCV does not convert every format the same way:

- JPEG: libjpeg decodes the luma (Y) channel directly. :func:`~.datum.decode_image` asks
  Pillow's decoder for the same (``Image.draft("L")``), so the image arrives here as ``L``.
- PNG: libpng converts while decoding. Alpha is dropped (not composed), palettes are
  expanded, 16-bit samples keep their high byte (``png_set_strip_16``), and colour becomes
  grey with ``png_set_rgb_to_gray(0.299, 0.587)``: 15-bit weights R 9797, G 19234, B 3737.
  Without a significant file gamma an 8-bit pixel is ``(R*9797 + G*19234 + B*3737) >> 15``
  (truncated); a 16-bit one is rounded at 16 bits, then its high byte kept. With an sRGB
  chunk, or a gAMA chunk more than 0.05 away from 1, libpng works in linear light through
  its 8-bit gamma tables (:func:`_png_gamma_grey`). Pixels with R = G = B stay as they are.
- Other formats (BMP, TIFF, PPM/PGM, ...) decode in colour and convert with OpenCV's
  ``BGR -> grey``: 14-bit weights R 4899, G 9617, B 1868, rounded.

Not equal to OpenCV: a 16-bit colour PNG with an sRGB or significant gAMA chunk (libpng's
16-bit gamma tables are not reproduced; this gives the no-gamma result), a CMYK JPEG
(converted to RGB by Pillow, then weighted as above) and WebP, which recent OpenCV converts
with ``cvtColor`` (15-bit weights; a few pixels differ by one grey level).
"""

import io
import math

import numpy as np

#: libpng's fixed-point weights for png_set_rgb_to_gray(0.299, 0.587): value * 32768 / 100000
PNG_RED = 29900 * 32768 // 100000
PNG_GREEN = 58700 * 32768 // 100000
PNG_BLUE = 32768 - PNG_RED - PNG_GREEN

#: OpenCV's BGR -> grey weights (imgcodecs' converters), 14-bit fixed point
CV_RED, CV_GREEN, CV_BLUE, CV_SHIFT = 4899, 9617, 1868, 14

#: libpng's gamma of an sRGB file, and its threshold for a gamma "significantly" off 1
_SRGB_GAMMA = 45455
_GAMMA_THRESHOLD = 5000

_SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N", "I")


def _reciprocal(gamma):
    """libpng's png_reciprocal of a gamma in 1/100000 units."""
    return int(math.floor(1e10 / gamma + 0.5))


def _significant(gamma):
    return gamma < 100000 - _GAMMA_THRESHOLD or gamma > 100000 + _GAMMA_THRESHOLD


def _gamma_table(gamma):
    """libpng's 8-bit gamma table: 255 * (i / 255) ** gamma, rounded; 0 and 255 kept."""
    table = np.arange(256, dtype=np.int64)
    if _significant(gamma):
        i = np.arange(1, 255, dtype=np.float64)
        table[1:255] = np.floor(255.0 * np.power(i / 255.0, gamma * 1e-5) + 0.5)
    return table


def png_file_gamma(img):
    """The file gamma libpng uses for a PNG (1/100000 units): sRGB's when there is an sRGB
    chunk, else the gAMA chunk's; None without either."""
    if "srgb" in img.info:
        return _SRGB_GAMMA
    gamma = img.info.get("gamma")
    if gamma is None:
        return None
    gamma = int(round(float(gamma) * 100000))
    return gamma if gamma > 0 else None


def _png_gamma_grey(r, g, b, file_gamma):
    """libpng's 8-bit rgb_to_gray in linear light: each channel through gamma_to_1
    (exponent 1/file_gamma), the weighted sum rounded at 15 bits, back through gamma_from_1."""
    to_linear = _gamma_table(_reciprocal(file_gamma))
    from_linear = _gamma_table(_reciprocal(_reciprocal(file_gamma)))
    total = PNG_RED * to_linear[r] + PNG_GREEN * to_linear[g] + PNG_BLUE * to_linear[b]
    return from_linear[(total + 16384) >> 15]


def png_grey(rgb, file_gamma=None):
    """libpng's rgb_to_gray (as OpenCV sets it up) of an (H, W, 3) RGB array: uint8, or
    uint16 samples (the result is the rounded 16-bit grey's high byte)."""
    r, g, b = (rgb[..., i].astype(np.int64) for i in range(3))
    same = (r == g) & (g == b)
    if rgb.dtype == np.uint16:
        grey = (PNG_RED * r + PNG_GREEN * g + PNG_BLUE * b + 16384) >> 15
        return (np.where(same, r, grey) >> 8).astype(np.uint8)
    if file_gamma is not None and _significant(file_gamma):
        grey = _png_gamma_grey(r, g, b, file_gamma)
    else:
        grey = (PNG_RED * r + PNG_GREEN * g + PNG_BLUE * b) >> 15
    return np.where(same, r, grey).astype(np.uint8)


def cv_grey(rgb):
    """OpenCV's BGR -> grey of an (H, W, 3) uint8 RGB array."""
    r, g, b = (rgb[..., i].astype(np.int32) for i in range(3))
    total = CV_RED * r + CV_GREEN * g + CV_BLUE * b + (1 << (CV_SHIFT - 1))
    return (total >> CV_SHIFT).astype(np.uint8)


def _png_rgb16(img, data):
    """The 16-bit RGB samples of a 16-bit colour PNG: Pillow's own decode keeps each
    sample's high byte; decoding the same stream again with the little-endian raw mode
    gives the low bytes."""
    from PIL import Image
    high = np.asarray(img)[..., :3].astype(np.uint16)
    again = Image.open(io.BytesIO(data))
    tiles = []
    for tile in again.tile:
        args = tile[3]
        if not (isinstance(args, str) and args.endswith(";16B")):
            raise ValueError("unexpected PNG layout %r" % (args,))
        tiles.append(tuple(tile[:3]) + (args[:-1] + "L",))
    again.tile = tiles
    again.load()
    low = np.asarray(again)[..., :3].astype(np.uint16)
    return (high << 8) | low


def _png_sixteen_bit_colour(img):
    return any(isinstance(t[3], str) and t[3] in ("RGB;16B", "RGBA;16B") for t in img.tile)


def high_bytes(img):
    """(H, W) uint8: a 16-bit grey Pillow image's samples as OpenCV's 8-bit reads keep
    them, their high byte."""
    return (np.asarray(img).astype(np.uint32) >> 8).astype(np.uint8)


def grey_array(img, data):
    """(H, W) uint8: what ``cv2.imdecode(data, IMREAD_GRAYSCALE)`` gives, for ``img``, the
    Pillow image opened (not yet loaded) from ``data``."""
    is_png = img.format == "PNG"
    rgb16 = is_png and img.mode in ("RGB", "RGBA") and _png_sixteen_bit_colour(img)
    img.load()
    mode = img.mode
    if mode == "L":
        return np.asarray(img)
    if mode in _SIXTEEN_BIT:
        return high_bytes(img)
    if mode in ("LA", "La"):
        return np.ascontiguousarray(np.asarray(img)[:, :, 0])
    if mode == "1":
        return np.asarray(img.convert("L"))
    if is_png:
        if rgb16:
            return png_grey(_png_rgb16(img, data))
        gamma = png_file_gamma(img)
        if mode not in ("RGB", "RGBA"):
            img = img.convert("RGB")
        return png_grey(np.asarray(img)[..., :3], gamma)
    if mode not in ("RGB", "RGBA"):
        img = img.convert("RGB")
    return cv_grey(np.asarray(img)[..., :3])
