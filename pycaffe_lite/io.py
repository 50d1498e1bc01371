"""Image and message helpers with pycaffe's ``caffe.io`` surface.

- :class:`Transformer` turns H x W x K images (floats in [0, 1], RGB, as :func:`load_image`
  gives them) into the K x H x W arrays a net takes: resize, transpose, channel swap, raw
  scale, mean subtraction, input scale; :meth:`Transformer.deprocess` undoes it.
- :func:`load_image`, :func:`resize_image` and :func:`oversample` (the ten-crop scheme).
- Conversions between arrays and ``BlobProto`` / ``BlobProtoVector`` / ``Datum`` messages.

Pillow is needed only by :func:`load_image`, :func:`resize_image` and encoded datums, and SciPy
only to resize images whose channel count is not 1 or 3; both are imported when first used.
"""

import os

import numpy as np

from . import blob as _blob
from .errors import CaffeError, ShapeError
from .proto import caffe_pb2, protoio

__all__ = [
    "Transformer", "load_image", "resize_image", "oversample", "blobproto_to_array",
    "array_to_blobproto", "array_to_datum", "datum_to_array", "arraylist_to_blobprotovector_str",
    "blobprotovector_str_to_arraylist",
]


def _pillow():
    try:
        from PIL import Image
    except ImportError:
        raise CaffeError("reading and resizing images needs Pillow, which is not installed: "
                         "pip install pillow") from None
    return Image


# ---- messages <-> arrays ---------------------------------------------------------------------

def blobproto_to_array(blob, return_diff=False):
    """The values of a ``BlobProto`` as an array (its diff with ``return_diff``).

    Both the legacy ``num/channels/height/width`` fields and ``shape`` are understood. The
    values come as float64, as pycaffe's ``np.array(blob.data)`` gives them.
    """
    return _blob.blobproto_to_array(blob, return_diff=return_diff).astype(np.float64)


def array_to_blobproto(arr, diff=None):
    """A ``BlobProto`` holding ``arr`` (and ``diff`` when given, which must match in size).

    The shape goes into ``shape.dim`` for every rank, as pycaffe writes it (and as Caffe's
    own Blob::ToProto does); :func:`blobproto_to_array` reads the legacy
    ``num/channels/height/width`` fields too.
    """
    arr = np.asarray(arr)
    if diff is not None:
        diff = np.asarray(diff)
        if diff.size != arr.size:
            raise ShapeError("array_to_blobproto: diff has shape %s but the data has shape %s"
                             % (diff.shape, arr.shape))
    proto = caffe_pb2.BlobProto()
    proto.shape.dim.extend(int(d) for d in arr.shape)
    proto.data.extend(arr.astype(np.float32).ravel())
    if diff is not None:
        proto.diff.extend(diff.astype(np.float32).ravel())
    return proto


def arraylist_to_blobprotovector_str(arraylist):
    """Serialize a list of arrays as a binary ``BlobProtoVector``."""
    vec = caffe_pb2.BlobProtoVector()
    for arr in arraylist:
        vec.blobs.add().CopyFrom(array_to_blobproto(arr))
    return vec.SerializeToString()


# pycaffe's own spelling of the name
arraylist_to_blobprotovecor_str = arraylist_to_blobprotovector_str


def blobprotovector_str_to_arraylist(data):
    """The arrays of a serialized ``BlobProtoVector``."""
    vec = caffe_pb2.BlobProtoVector()
    protoio.parse_binary(bytes(data), vec, "BlobProtoVector bytes")
    return [blobproto_to_array(b) for b in vec.blobs]


def _datum_module():
    # the data pipeline's Datum helpers, imported when first needed (keeps ``import`` light)
    from .data import datum
    return datum


def array_to_datum(arr, label=None):
    """A ``Datum`` holding a C x H x W array (an H x W array is one channel).

    ``uint8`` arrays are stored as raw bytes in ``data``; any other dtype as ``float_data``.
    """
    return _datum_module().array_to_datum(arr, label)


def datum_to_array(datum):
    """The C x H x W array of a ``Datum`` (the label stays in ``datum.label``).

    Raw byte data gives ``uint8``, ``float_data`` gives float64 (as pycaffe). Encoded datums
    (``encoded: true``, an image file in ``data``) are decoded with their own channels, in the
    order Caffe's data layers use (BGR).
    """
    arr = _datum_module().datum_to_array(datum, where="datum")
    if arr.dtype != np.uint8:
        return arr.astype(np.float64)
    return np.array(arr)  # a writable copy


# ---- images ------------------------------------------------------------------------------------

_INT_MODES_MAX = {"I;16": 65535.0, "I;16B": 65535.0, "I;16L": 65535.0, "I;16N": 65535.0}


def load_image(filename, color=True):
    """Read an image file (a path, or a file object open for reading in binary) as float32
    in [0, 1], H x W x 3 (RGB) or H x W x 1 when ``color=False``.

    Grayscale images are repeated over three channels for ``color=True``; colour images are
    reduced to their luminance for ``color=False`` (0.2125 R + 0.7154 G + 0.0721 B, as BVLC's
    ``load_image`` gets it from scikit-image); alpha channels are dropped (not composed).
    """
    Image = _pillow()
    # a file-like object (BVLC's web demo passes the bytes of a downloaded image in one), as
    # scikit-image's imread takes, or a path
    try:
        source = filename if hasattr(filename, "read") else os.fspath(filename)
    except TypeError:
        raise CaffeError("load_image: expected a file name or a file object to read the image "
                         "from, got a %s" % type(filename).__name__) from None
    try:
        img = Image.open(source)
        img.load()
    except FileNotFoundError:
        raise CaffeError("load_image: file not found: %s" % filename) from None
    except OSError as exc:
        raise CaffeError("load_image: cannot read %s as an image: %s" % (filename, exc)) from None
    mode = img.mode
    if mode in _INT_MODES_MAX or mode == "I":
        arr = np.asarray(img, dtype=np.float64)
        top = _INT_MODES_MAX.get(mode)
        if top is None:
            # 32-bit integer mode: PNG uses it for 16-bit samples, others for full int32
            top = 65535.0 if img.format == "PNG" else float(2 ** 31 - 1)
        arr = (arr / top).astype(np.float32)
    elif mode == "F":
        arr = np.asarray(img, dtype=np.float32)
    else:
        if mode not in ("L", "LA", "La", "RGB", "RGBA", "RGBa", "RGBX"):
            img = img.convert("RGB")
        arr = np.asarray(img, dtype=np.float32) / np.float32(255.0)
        if arr.ndim == 3:
            # drop alpha (or padding) channels: LA keeps L, RGBA keeps RGB
            arr = arr[:, :, :1] if arr.shape[2] == 2 else arr[:, :, :3]
            if arr.shape[2] == 1:
                arr = arr[:, :, 0]
    if arr.ndim == 2:
        arr = arr[:, :, np.newaxis]
        if color:
            arr = np.repeat(arr, 3, axis=2)
    elif not color:
        # BVLC's load_image reads with skimage's as_grey: its rgb2gray (Rec. 709 luminance),
        # in double precision
        weights = np.array([0.2125, 0.7154, 0.0721])
        arr = (arr[:, :, :3].astype(np.float64) @ weights)[:, :, np.newaxis]
    return np.ascontiguousarray(arr, dtype=np.float32)


_PIL_FILTERS = {0: "NEAREST", 1: "BILINEAR", 3: "BICUBIC"}


def resize_image(im, new_dims, interp_order=1):
    """Resize an H x W x K image to ``new_dims`` (height, width), keeping K.

    ``interp_order`` is the spline order: 0 nearest, 1 bilinear (default), 3 bicubic. Images
    with 1 or 3 channels are resized channel by channel with Pillow in floating point (no
    rescaling to 8 bits; downsizing filters over the whole source footprint); other channel
    counts, or other orders, use ``scipy.ndimage.zoom``. A constant image stays constant.
    """
    im = np.asarray(im)
    if im.ndim != 3 or not im.size:
        raise ShapeError("resize_image needs an H x W x K array with values, got shape %s"
                         % (im.shape,))
    try:
        new_h, new_w = (int(d) for d in new_dims)
    except (TypeError, ValueError):
        raise CaffeError("resize_image: new_dims must be (height, width), got %r"
                         % (new_dims,)) from None
    if new_h <= 0 or new_w <= 0:
        raise ShapeError("resize_image: new_dims must be positive, got (%d, %d)" % (new_h, new_w))
    channels = im.shape[2]
    if im.min() == im.max():
        return np.full((new_h, new_w, channels), im.flat[0], dtype=np.float32)
    if (new_h, new_w) == im.shape[:2]:
        return im.astype(np.float32)
    if channels in (1, 3) and interp_order in _PIL_FILTERS:
        Image = _pillow()
        resample = getattr(Image.Resampling, _PIL_FILTERS[interp_order])
        out = np.empty((new_h, new_w, channels), dtype=np.float32)
        for c in range(channels):
            plane = Image.fromarray(np.ascontiguousarray(im[:, :, c], dtype=np.float32), "F")
            out[:, :, c] = np.asarray(plane.resize((new_w, new_h), resample=resample))
        return out
    try:
        from scipy.ndimage import zoom
    except ImportError:
        raise CaffeError("resize_image of a %d-channel image (or interp_order %d) needs SciPy, "
                         "which is not installed: pip install scipy"
                         % (channels, interp_order)) from None
    factors = (new_h / im.shape[0], new_w / im.shape[1], 1.0)
    out = zoom(im.astype(np.float32), factors, order=interp_order)
    if out.shape[:2] != (new_h, new_w):  # zoom rounds the output size; trim or pad the edge
        fixed = np.empty((new_h, new_w, channels), dtype=np.float32)
        h, w = min(new_h, out.shape[0]), min(new_w, out.shape[1])
        fixed[:h, :w] = out[:h, :w]
        fixed[h:, :w] = out[h - 1:h, :w]
        fixed[:, w:] = fixed[:, w - 1:w]
        out = fixed
    return out.astype(np.float32)


def crop_positions(image_dims, crop_dims):
    """The (top, left) corners of :func:`oversample`'s five crops: the four corners, then
    the center."""
    h, w = (int(d) for d in image_dims)
    ch, cw = (int(d) for d in crop_dims)
    if ch > h or cw > w:
        raise ShapeError("crop of %dx%d does not fit in an image of %dx%d" % (ch, cw, h, w))
    return [(0, 0), (0, w - cw), (h - ch, 0), (h - ch, w - cw),
            ((h - ch) // 2, (w - cw) // 2)]


def oversample(images, crop_dims):
    """Ten crops of each H x W x K image: the four corners and the center, then the same five
    mirrored left-right. Returns a (10 * N) x crop_h x crop_w x K float32 array, image by
    image."""
    images = [np.asarray(im) for im in images]
    if not images:
        raise CaffeError("oversample needs at least one image")
    shape = images[0].shape
    if len(shape) != 3:
        raise ShapeError("oversample needs H x W x K images, got shape %s" % (shape,))
    for i, im in enumerate(images):
        if im.shape != shape:
            raise ShapeError("oversample needs images of one shape: image 0 is %s, image %d "
                             "is %s" % (shape, i, im.shape))
    ch, cw = (int(d) for d in crop_dims)
    corners = crop_positions(shape[:2], (ch, cw))
    crops = np.empty((10 * len(images), ch, cw, shape[2]), dtype=np.float32)
    for n, im in enumerate(images):
        for k, (y, x) in enumerate(corners):
            crop = im[y:y + ch, x:x + cw, :]
            crops[10 * n + k] = crop
            crops[10 * n + 5 + k] = crop[:, ::-1, :]
    return crops


# ---- preprocessing ------------------------------------------------------------------------------

class Transformer:
    """Prepares images for a net's inputs and turns net data back into images.

    ``inputs`` maps input blob names to their shapes (N, K, H, W), e.g.
    ``{name: net.blobs[name].data.shape}``. Per input, the steps of :meth:`preprocess` are,
    in order: resize to H x W, transpose, channel swap, multiply by raw scale, subtract the
    mean, multiply by input scale. Unset steps are skipped.
    """

    def __init__(self, inputs):
        self.inputs = {name: tuple(int(d) for d in shape) for name, shape in dict(inputs).items()}
        self.transpose = {}
        self.channel_swap = {}
        self.raw_scale = {}
        self.mean = {}
        self.input_scale = {}

    def _check_input(self, in_):
        if in_ not in self.inputs:
            raise CaffeError("'%s' is not one of the net inputs: %s"
                             % (in_, ", ".join(sorted(self.inputs)) or "(none)"))

    def preprocess(self, in_, data):
        """An H' x W' x K image -> the K x H x W float32 array for input ``in_``."""
        self._check_input(in_)
        out = np.array(data, dtype=np.float32)  # a copy: the caller's array is never modified
        in_dims = self.inputs[in_][2:]
        if out.ndim == 3 and tuple(out.shape[:2]) != tuple(in_dims):
            out = resize_image(out, in_dims)
        transpose = self.transpose.get(in_)
        if transpose is not None:
            if out.ndim != len(transpose):
                raise ShapeError("preprocess '%s': data has %d axes, the transpose %s needs %d"
                                 % (in_, out.ndim, tuple(transpose), len(transpose)))
            out = out.transpose(transpose)
        swap = self.channel_swap.get(in_)
        if swap is not None:
            if out.shape[0] != len(swap):
                raise ShapeError("preprocess '%s': %d channels after transpose, the channel "
                                 "swap %s needs %d" % (in_, out.shape[0], tuple(swap), len(swap)))
            out = out[list(swap), :, :]
        raw_scale = self.raw_scale.get(in_)
        if raw_scale is not None:
            out = out * np.float32(raw_scale)
        mean = self.mean.get(in_)
        if mean is not None:
            try:
                out = out - mean
            except ValueError:
                raise ShapeError(
                    "preprocess '%s': the data is %s after resize%s, the mean %s (the input "
                    "is %s): an H x W x K image needs set_transpose('%s', (2, 0, 1))"
                    % (in_, out.shape, " and transpose" if transpose is not None else "",
                       mean.shape, tuple(self.inputs[in_][1:]), in_)) from None
        input_scale = self.input_scale.get(in_)
        if input_scale is not None:
            out = out * np.float32(input_scale)
        return np.ascontiguousarray(out, dtype=np.float32)

    def deprocess(self, in_, data):
        """Undo :meth:`preprocess` (except the resize): K x H x W data -> H x W x K image.

        Leading axes of size 1 (a batch of one) are squeezed away, as pycaffe does, down to
        the K x H x W image (a single channel stays: its image is H x W x 1, as
        :func:`load_image` gives a grey one). The transpose and channel swap are undone with
        their true inverses.
        """
        self._check_input(in_)
        out = np.array(data, dtype=np.float32)
        while out.ndim > 3 and out.shape[0] == 1:
            out = out[0]
        input_scale = self.input_scale.get(in_)
        if input_scale is not None:
            out = out / np.float32(input_scale)
        mean = self.mean.get(in_)
        if mean is not None:
            out = out + mean
        raw_scale = self.raw_scale.get(in_)
        if raw_scale is not None:
            out = out / np.float32(raw_scale)
        swap = self.channel_swap.get(in_)
        if swap is not None:
            out = out[list(np.argsort(swap)), :, :]
        transpose = self.transpose.get(in_)
        if transpose is not None:
            out = out.transpose(tuple(int(i) for i in np.argsort(transpose)))
        return out

    def set_transpose(self, in_, order):
        """Axis order taking the image (H x W x K) to the blob layout, e.g. (2, 0, 1)."""
        self._check_input(in_)
        order = tuple(int(i) for i in order)
        expected = len(self.inputs[in_]) - 1
        if len(order) != expected:
            raise ShapeError("set_transpose '%s': order %s has %d axes, the input has %d "
                             "(excluding the batch axis)" % (in_, order, len(order), expected))
        if sorted(order) != list(range(expected)):
            raise CaffeError("set_transpose '%s': order %s is not a permutation of %s"
                             % (in_, order, tuple(range(expected))))
        self.transpose[in_] = order

    def set_channel_swap(self, in_, order):
        """Channel order to take after the transpose, e.g. (2, 1, 0) for RGB -> BGR."""
        self._check_input(in_)
        order = tuple(int(i) for i in order)
        channels = self.inputs[in_][1]
        if len(order) != channels:
            raise ShapeError("set_channel_swap '%s': order %s has %d entries, the input has %d "
                             "channels" % (in_, order, len(order), channels))
        if sorted(order) != list(range(channels)):
            raise CaffeError("set_channel_swap '%s': order %s is not a permutation of %s"
                             % (in_, order, tuple(range(channels))))
        self.channel_swap[in_] = order

    def set_raw_scale(self, in_, scale):
        """Factor applied before mean subtraction (255 for models trained on [0, 255])."""
        self._check_input(in_)
        self.raw_scale[in_] = scale

    def set_mean(self, in_, mean):
        """Mean to subtract: one value per channel (shape (K,)) or a full K x H' x W' (or
        H' x W' for one channel) array. A full mean of another height and width than the
        input is resized to the input's with :func:`resize_image` (bilinear), as pycaffe
        does: ImageNet's 3 x 256 x 256 mean file serves a 227 x 227 input."""
        self._check_input(in_)
        mean = np.asarray(mean, dtype=np.float32)
        shape = self.inputs[in_]
        if mean.ndim == 1:
            if mean.shape[0] != shape[1]:
                raise ShapeError("set_mean '%s': a per-channel mean has %d values, the input "
                                 "has %d channels" % (in_, mean.shape[0], shape[1]))
            mean = mean[:, np.newaxis, np.newaxis]
        else:
            ms = mean.shape if mean.ndim != 2 else (1,) + mean.shape
            if len(ms) != 3:
                raise ShapeError("set_mean '%s': mean must be (K,), (H, W) or (K, H, W), got "
                                 "shape %s" % (in_, mean.shape))
            if len(shape) != 4 or ms[0] != shape[1]:
                raise ShapeError("set_mean '%s': mean shape %s does not match the input shape "
                                 "%s (a full mean needs the input's channels; its height and "
                                 "width are resized)" % (in_, mean.shape, tuple(shape[1:])))
            mean = mean.reshape(ms)
            if tuple(ms[1:]) != tuple(shape[2:]):
                if not mean.size:
                    raise ShapeError("set_mean '%s': the mean of shape %s is empty"
                                     % (in_, ms))
                mean = resize_image(mean.transpose(1, 2, 0), shape[2:]).transpose(2, 0, 1)
        self.mean[in_] = mean

    def set_input_scale(self, in_, scale):
        """Factor applied after mean subtraction."""
        self._check_input(in_)
        self.input_scale[in_] = scale
