"""Datum records and images: decoding, encoding and resizing as Caffe (OpenCV) does them.

Images are NumPy arrays in Caffe's layout and channel order:

- a *datum array* is ``(C, H, W)``: uint8 for raw pixel bytes or decoded images, float32 for
  ``float_data`` records;
- a decoded image is ``(H, W, C)`` uint8 with channels in OpenCV's order (B, G, R, [A]) and
  C = 1 for grey images. :func:`decode_image` returns a view on Pillow's RGB pixels, so the
  channel reversal costs no copy.

Decoding uses Pillow. ``color=None`` keeps the stored channels (OpenCV's ``IMREAD_UNCHANGED``,
Caffe's ``DecodeDatumToCVMatNative``), ``True`` forces 3-channel BGR (``IMREAD_COLOR``) and
``False`` forces grey (``IMREAD_GRAYSCALE``, computed per format as OpenCV does: see
:mod:`.grey`). Resizing is bilinear with OpenCV's ``INTER_LINEAR`` pixel mapping and
fixed-point rounding (see :func:`resize`).
"""

import io
import os

import numpy as np

from google.protobuf.unknown_fields import UnknownFieldSet

from ..errors import CaffeError, ProtoError
from ..proto import caffe_pb2, fork_fields, protoio, tolerant
from .grey import grey_array, high_bytes


class DataError(CaffeError):
    """A record, image or dataset file that cannot be used."""


def _pil():
    try:
        from PIL import Image
    except ImportError:
        raise DataError("decoding and encoding images needs Pillow: pip install Pillow") from None
    return Image


# ---- Datum <-> arrays -------------------------------------------------------------------
def parse_datum(value, where="record"):
    """A Datum from serialized bytes (``where`` names the record in errors)."""
    datum = caffe_pb2.Datum()
    try:
        protoio.parse_binary(value, datum, where, RECORD_FIELDS_REPORTED)
    except ProtoError as exc:
        raise DataError("%s is not a Datum (%d bytes, corrupt or another format): %s"
                        % (where, len(value), exc.reason)) from None
    return datum


#: the unread fields of records already reported (one warning per field, not per record)
RECORD_FIELDS_REPORTED = set()


def parse_datums(values, where_of):
    """The Datums of a batch of serialized records, as :func:`parse_datum` gives them;
    ``where_of(i)`` names record ``i`` and is called only for a record with something to
    report (a field nothing here reads) or broken bytes.

    A Datum has no message fields, so a record that protobuf parses leaving no unknown field
    is what the tolerant reader would make of it: such records (nearly all) are parsed
    directly; the others are parsed again by :func:`tolerant.parse`."""
    out = []
    for i, value in enumerate(values):
        if type(value) is not bytes:
            value = bytes(value)  # a buffer from a database
        datum = caffe_pb2.Datum()
        try:
            datum.ParseFromString(value)
            if not len(UnknownFieldSet(datum)):
                out.append(datum)
                continue
        except tolerant.DECODE_ERRORS:
            pass
        datum = caffe_pb2.Datum()
        try:
            tolerant.parse(value, datum)
        except ProtoError:
            parse_datum(value, where_of(i))  # raises, naming the record
        if len(UnknownFieldSet(datum)):
            fork_fields.report_unknown(datum, where_of(i), RECORD_FIELDS_REPORTED)
        out.append(datum)
    return out


def _raw_shape_problem(datum):
    """What is wrong with a non-encoded Datum's shape or payload (None: nothing), as the end
    of a sentence that starts with the record's name."""
    c, h, w = datum.channels, datum.height, datum.width
    if c <= 0 or h <= 0 or w <= 0:
        return "has shape %dx%dx%d (channels x height x width must be positive)" % (c, h, w)
    n = c * h * w
    if datum.data:
        if len(datum.data) != n:
            return ("holds %d bytes of pixel data for a %dx%dx%d datum (%d expected)"
                    % (len(datum.data), c, h, w, n))
    elif len(datum.float_data) != n:
        return ("holds %d float_data values for a %dx%dx%d datum (%d expected)"
                % (len(datum.float_data), c, h, w, n))
    return None


def raw_shapes(datums, where_of):
    """:func:`raw_shape` of each non-encoded Datum of a batch; ``where_of(i)`` names record
    ``i``, called only for a record whose shape or payload is wrong."""
    shapes = []
    for i, d in enumerate(datums):
        c, h, w = shape = d.channels, d.height, d.width
        if c <= 0 or h <= 0 or w <= 0 or (len(d.data) or len(d.float_data)) != c * h * w:
            problem = _raw_shape_problem(d)  # what exactly, in words
            if problem is not None:
                raise DataError("%s %s" % (where_of(i), problem))
        shapes.append(shape)
    return shapes


def raw_shape(datum, where="record"):
    """(C, H, W) of a non-encoded Datum, checked against its payload size."""
    return raw_shapes([datum], lambda i: where)[0]


def datum_to_array(datum, color=None, where="record"):
    """The (C, H, W) array a Datum holds (decoded when ``encoded``)."""
    if datum.encoded:
        return hwc_to_chw(decode_image(datum.data, color, where))
    shape = raw_shape(datum, where)
    if datum.data:
        return np.frombuffer(datum.data, np.uint8).reshape(shape)
    return np.asarray(datum.float_data, np.float32).reshape(shape)


def array_to_datum(arr, label=None):
    """A raw Datum from a (C, H, W) array: uint8 goes to ``data``, anything else to
    ``float_data`` (as pycaffe's ``caffe.io.array_to_datum``)."""
    arr = np.asarray(arr)
    if arr.ndim == 2:
        arr = arr[np.newaxis]
    if arr.ndim != 3:
        raise DataError("array_to_datum needs a (C, H, W) array, got shape %s" % (arr.shape,))
    datum = caffe_pb2.Datum(channels=arr.shape[0], height=arr.shape[1], width=arr.shape[2])
    if arr.dtype == np.uint8:
        datum.data = np.ascontiguousarray(arr).tobytes()
    else:
        datum.float_data.extend(arr.astype(np.float32).ravel())
    if label is not None:
        if isinstance(label, bool) or not float(label).is_integer():
            raise DataError("a Datum's label is an integer, got %r" % (label,))
        datum.label = _in_label_range(int(label), "array_to_datum", label)
    return datum


def hwc_to_chw(img):
    return img.transpose(2, 0, 1)


def chw_to_hwc(arr):
    return arr.transpose(1, 2, 0)


# ---- decoding / encoding ----------------------------------------------------------------
_SIXTEEN_BIT_GREY = ("I;16", "I;16B", "I;16L", "I;16N")


def _to_array(img, color, where):
    """Pillow image -> (H, W, C) uint8 in OpenCV channel order (colour or native)."""
    mode = img.mode
    if color is True:
        if mode in _SIXTEEN_BIT_GREY:  # OpenCV keeps the high byte of each sample
            return np.repeat(high_bytes(img)[:, :, np.newaxis], 3, axis=2)
        if mode != "RGB":
            img = img.convert("RGB")
    elif mode in ("1", "I;16", "I;16B", "I;16L", "I", "F"):
        if mode == "1":
            img = img.convert("L")
        else:
            raise DataError("%s is a %s image (16-bit or float pixels); Caffe's data layers "
                            "take 8-bit images: convert it to 8 bits" % (where, mode))
    elif mode == "P":
        img = img.convert("RGBA" if "transparency" in img.info else "RGB")
    elif mode in ("LA", "PA", "La", "RGBa"):
        img = img.convert("RGBA")
    elif mode not in ("L", "RGB", "RGBA"):
        img = img.convert("RGB")
    arr = np.asarray(img)
    if arr.ndim == 2:
        return arr[:, :, np.newaxis]
    # RGB(A) -> BGR(A): a view, no copy.
    if arr.shape[2] == 4:
        return arr[:, :, [2, 1, 0, 3]]
    return arr[:, :, ::-1]


def decode_image(data, color=None, where="image"):
    """Decode JPEG/PNG/... bytes to an (H, W, C) uint8 array in BGR order (C = 1 with
    ``color=False``: the grey image OpenCV's ``IMREAD_GRAYSCALE`` gives, see :mod:`.grey`)."""
    Image = _pil()
    try:
        img = Image.open(io.BytesIO(data))
        if color is False:
            if img.format == "JPEG" and img.mode != "L":
                img.draft("L", img.size)  # the decoder's own luma channel, as libjpeg gives
            return grey_array(img, data)[:, :, np.newaxis]
        img.load()
    except Exception as exc:
        raise DataError("cannot decode %s as an image (%d bytes): %s"
                        % (where, len(data), exc)) from None
    return _to_array(img, color, where)


#: file extensions (OpenCV's names of encodings) and the Pillow formats they stand for
_FORMATS = {"jpg": "JPEG", "jpeg": "JPEG", "jpe": "JPEG", "png": "PNG", "bmp": "BMP",
            "tif": "TIFF", "tiff": "TIFF", "ppm": "PPM", "pgm": "PPM", "pbm": "PPM",
            "webp": "WEBP"}


def image_format(path_or_ext):
    ext = os.path.basename(str(path_or_ext)).rsplit(".", 1)[-1].lower()
    return _FORMATS.get(ext)


def encode_types():
    """The encodings :func:`encode_image` can write here (the Pillow build may lack WebP)."""
    Image = _pil()
    Image.init()
    return sorted(ext for ext, fmt in _FORMATS.items() if fmt in Image.SAVE)


def check_encode_type(encode_type, flag="--encode_type"):
    """Refuse an encoding :func:`encode_image` cannot write, naming ``flag`` and the
    accepted values."""
    if encode_type and image_format(encode_type) not in [_FORMATS[e] for e in encode_types()]:
        raise DataError("%s '%s' is not an image encoding this tool can write; use one of: %s"
                        % (flag, encode_type, ", ".join(encode_types())))


#: the values a Datum's label (int32) can hold
LABEL_MIN, LABEL_MAX = -2 ** 31, 2 ** 31 - 1


def parse_label(text, where):
    """The integer label of a list file line; ``where`` (e.g. "line 3 of list file 'x'")
    starts the error message for text that is not an integer or does not fit a Datum."""
    try:
        label = int(text)
    except ValueError:
        raise DataError("%s: label '%s' is not an integer" % (where, text)) from None
    return _in_label_range(label, where, text)


def _in_label_range(label, where, shown):
    """``label`` (an int) where a Datum's int32 label holds it; a DataError naming ``where``
    and the label as given (``shown``) otherwise."""
    if not LABEL_MIN <= label <= LABEL_MAX:
        raise DataError("%s: label %s is out of range: a Datum label is a 32-bit integer "
                        "(%d to %d)" % (where, shown, LABEL_MIN, LABEL_MAX))
    return label


def encode_image(img, ext="jpg"):
    """Encode an (H, W, C) BGR(A) or (H, W) uint8 image (OpenCV's ``imencode``); JPEG at
    quality 95, OpenCV's default."""
    Image = _pil()
    fmt = image_format(ext)
    if fmt is None:
        raise DataError("unknown image encoding '%s' (use jpg, png, bmp, ...)" % ext)
    img = np.asarray(img)
    if img.dtype != np.uint8:
        raise DataError("can only encode uint8 images, got %s" % img.dtype)
    if img.ndim == 3 and img.shape[2] == 1:
        img = img[:, :, 0]
    if img.ndim == 3 and img.shape[2] == 3:
        pil = Image.fromarray(np.ascontiguousarray(img[:, :, ::-1]), "RGB")
    elif img.ndim == 3 and img.shape[2] == 4:
        pil = Image.fromarray(np.ascontiguousarray(img[:, :, [2, 1, 0, 3]]), "RGBA")
    elif img.ndim == 2:
        pil = Image.fromarray(np.ascontiguousarray(img), "L")
    else:
        raise DataError("cannot encode an image of shape %s" % (img.shape,))
    buf = io.BytesIO()
    options = {"quality": 95} if fmt == "JPEG" else {}
    pil.save(buf, format=fmt, **options)
    return buf.getvalue()


# ---- resizing -----------------------------------------------------------------------------
_COEF_BITS = 11
_COEF_SCALE = 1 << _COEF_BITS


def _coeffs(in_size, out_size, start=0):
    """Source indices and weights of OpenCV's INTER_LINEAR along one axis, for a window of
    ``in_size`` pixels starting at ``start`` resized to ``out_size``."""
    scale = in_size / out_size
    f = ((np.arange(out_size) + 0.5) * scale - 0.5).astype(np.float32)
    i0 = np.floor(f).astype(np.intp)
    frac = f - i0.astype(np.float32)
    low = i0 < 0
    high = i0 >= in_size - 1
    frac[low | high] = 0
    i0[low] = 0
    i0[high] = in_size - 1
    i1 = np.minimum(i0 + 1, in_size - 1)
    return i0 + start, i1 + start, frac


def resize(img, height, width, window=None, axes=(0, 1)):
    """Bilinear resize to ``height`` x ``width`` (OpenCV's ``cv::resize`` with INTER_LINEAR).

    ``img`` is (H, W, ...) by default (``axes`` names the height and width axes, e.g. (1, 2)
    for CHW). ``window = (y, x, h, w)`` resizes only that window (as resizing ``img[roi]``).
    uint8 images use OpenCV's 11-bit fixed-point weights and its vectorised rounding (equal to
    OpenCV when shrinking; within one grey level when enlarging); float images are
    interpolated in float32.
    """
    img = np.asarray(img)
    ha, wa = axes
    if window is None:
        window = (0, 0, img.shape[ha], img.shape[wa])
    y, x, h, w = (int(v) for v in window)
    y0, y1, fy = _coeffs(h, int(height), y)
    x0, x1, fx = _coeffs(w, int(width), x)
    wshape = [1] * img.ndim
    wshape[wa] = -1
    hshape = [1] * img.ndim
    hshape[ha] = -1
    if img.dtype == np.uint8:
        ax1 = np.rint((1 - fx) * _COEF_SCALE).astype(np.int32)
        ax = (ax1.reshape(wshape), (_COEF_SCALE - ax1).reshape(wshape))
        by1 = np.rint((1 - fy) * _COEF_SCALE).astype(np.int32)
        by = (by1.reshape(hshape), (_COEF_SCALE - by1).reshape(hshape))
        # only the source rows that are used are widened to int32
        uniq = np.unique(np.concatenate([y0, y1]))
        rows = np.take(img, uniq, axis=ha).astype(np.int32)
        r0 = np.searchsorted(uniq, y0)
        r1 = np.searchsorted(uniq, y1)
        horiz = np.take(rows, x0, axis=wa) * ax[0] + np.take(rows, x1, axis=wa) * ax[1]
        horiz >>= 4
        # OpenCV's vectorised vertical pass: 16-bit high products, then a rounding shift
        out = (np.take(horiz, r0, axis=ha) * by[0]) >> 16
        out += (np.take(horiz, r1, axis=ha) * by[1]) >> 16
        out += 2
        out >>= 2
        return out.astype(np.uint8)
    src = img.astype(np.float32, copy=False)
    fxr = fx.reshape(wshape)
    fyr = fy.reshape(hshape)
    a = np.take(src, x0, axis=wa)
    horiz = a + (np.take(src, x1, axis=wa) - a) * fxr
    top = np.take(horiz, y0, axis=ha)
    return top + (np.take(horiz, y1, axis=ha) - top) * fyr



def resize_nearest(img, height, width):
    """Nearest-neighbour resize of an (H, W, ...) array to ``height`` x ``width``, picking the
    source pixels as OpenCV's ``cv::resize`` with INTER_NEAREST does (SegNet's and ENet's label
    images, the SSD fork's NEAREST warp): row ``i`` is ``floor(i * (1 / (height / H)))``, the
    inverse of the scale taken in double, then capped at ``H - 1`` (and so for the columns).
    ``i * H / height`` is not the same: at an exact multiple the inverse can round below it
    (H = 6, height = 34: row 17 is 2, not 3). No new values appear (labels stay labels)."""
    h, w = img.shape[:2]
    rows = np.minimum(np.floor(np.arange(height) * (1.0 / (height / h))).astype(np.int64), h - 1)
    cols = np.minimum(np.floor(np.arange(width) * (1.0 / (width / w))).astype(np.int64), w - 1)
    return img[rows[:, None], cols[None, :]]

# ---- files --------------------------------------------------------------------------------
def read_file(path, what="image file"):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        raise DataError("%s '%s' not found" % (what, path)) from None
    except OSError as exc:
        raise DataError("cannot read %s '%s': %s" % (what, path, exc.strerror or exc)) from None


def read_image(path, height=0, width=0, is_color=True, where=None):
    """An image file as (H, W, C) BGR uint8, resized when ``height`` and ``width`` are set
    (Caffe's ``ReadImageToCVMat``)."""
    data = read_file(path)
    img = decode_image(data, bool(is_color), where or "image file '%s'" % path)
    if height > 0 and width > 0:
        img = resize(img, height, width)
    return img


def read_image_to_datum(path, label, height=0, width=0, is_color=True, encoding=""):
    """A Datum for an image file (Caffe's ``ReadImageToDatum``): raw CHW pixels, or encoded
    bytes when ``encoding`` (jpg, png, ...) is given. A file already in that encoding, not
    resized and with the requested colour, is stored as it is."""
    data = read_file(path)
    img = decode_image(data, bool(is_color), "image file '%s'" % path)
    if height > 0 and width > 0:
        img = resize(img, height, width)
    datum = caffe_pb2.Datum()
    if encoding:
        same_ext = image_format(path) == image_format(encoding)
        if (img.shape[2] == 3) == bool(is_color) and not height and not width and same_ext:
            datum.data = data
        else:
            datum.data = encode_image(img, encoding)
        datum.encoded = True
        datum.label = int(label)
        return datum
    datum.channels, datum.height, datum.width = img.shape[2], img.shape[0], img.shape[1]
    datum.data = np.ascontiguousarray(hwc_to_chw(img)).tobytes()
    datum.label = int(label)
    return datum
