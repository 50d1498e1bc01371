"""DataTransformer: crop, mirror, mean subtraction and scale (``transform_param``).

For each image of a batch, as Caffe's ``DataTransformer``:

1. crop to ``crop_size`` x ``crop_size``: a random window in TRAIN, the centre in TEST;
2. mirror (flip left-right) with probability 1/2 when ``mirror`` is set (any phase);
3. subtract the mean: ``mean_file`` (a C x H x W image the size of the *uncropped* input,
   cropped and mirrored along with it) or ``mean_value`` (one value, or one per channel);
4. multiply by ``scale``.

Pixels are ``(pixel - mean) * scale`` in float32, bit-identical to Caffe. Work is done on
whole batches where it can be: without per-image variation (no mirror, no random crop) the
whole batch is one NumPy expression; otherwise each image is one slice copy and the mean and
scale are still applied to the whole batch.

pycaffe-lite additions (TRAIN only, off by default; fields >= 1000 of TransformationParameter):

- ``random_resized_crop``: a window of random area fraction ``[rrc_min_scale,
  rrc_max_scale]`` and aspect ratio (log-uniform in ``[rrc_min_aspect, rrc_max_aspect]``),
  resized bilinearly to ``crop_size`` (replaces the random crop; a ``mean_file`` is resized
  with the same window);
- colour augmentation as Darknet does it, after crop and mirror and before the mean: in HSV
  space the hue is shifted by ``U(-hue, hue)`` (fraction of the colour circle), saturation
  and value multiplied by factors drawn from ``[1, saturation]`` and ``[1, exposure]``, each
  inverted with probability 1/2, then clipped to the pixel range [0, 255]. Grey images get
  the exposure factor only.

Randomness comes from the ``rng`` (a NumPy Generator) passed to :meth:`transform`; the data
layers hand it one generator per batch, derived from their own seeded generator, so that
batches are reproducible whatever the number of prefetch threads.
"""

import math

import numpy as np

from ..proto import caffe_pb2
from .anno_transform import _cv2, check_resize, warp
from .datum import DataError, resize
from .mean import load_mean

TRAIN = caffe_pb2.TRAIN


def _size(shape):
    return "x".join(str(int(d)) for d in shape)


# The SSD fork's fields of TransformationParameter. The AnnotatedData layer applies those it
# names in ``transform_applied_here``; elsewhere each is an error, never a field quietly ignored.
SSD_FORK_FIELDS = ("resize_param", "noise_param", "distort_param", "expand_param",
                   "emit_constraint", "crop_h", "crop_w")


# NVCaffe's random resize and stretch before the crop (any of them set turns it on, in both
# phases, as in the fork)
NVCAFFE_RESIZE_FIELDS = ("rand_resize_ratio_lower", "rand_resize_ratio_upper",
                         "vertical_stretch_lower", "vertical_stretch_upper",
                         "horizontal_stretch_lower", "horizontal_stretch_upper")


def check_fork_fields(param, where, applies_itself=()):
    """A DataError naming the first SSD fork field of TransformationParameter ``param`` that
    is set and not among ``applies_itself``."""
    for field in SSD_FORK_FIELDS:
        if field not in applies_itself and param.HasField(field):
            what = ("not implemented" if field == "noise_param" else
                    "applied only by the AnnotatedData layer")
            raise DataError("%s sets %s: a field of the SSD fork's transformation, %s; remove "
                            "it" % (where, field, what))


class DataTransformer:
    """Applies a TransformationParameter to batches of (C, H, W) images.

    ``applies_itself`` names the SSD fork's fields that the calling layer applies on its own;
    any other of them that is set raises a DataError naming it.
    """

    def __init__(self, param=None, phase=TRAIN, where="transform_param", applies_itself=()):
        self.param = caffe_pb2.TransformationParameter()
        if param is not None:
            self.param.CopyFrom(param)
        p = self.param
        check_fork_fields(p, where, applies_itself)
        self.phase = phase
        self.where = where
        self.scale = np.float32(p.scale)
        self.crop = int(p.crop_size)
        self.mirror = bool(p.mirror)
        if p.HasField("mean_file") and len(p.mean_value):
            raise DataError("%s: cannot specify mean_file and mean_value at the same time"
                            % where)
        if p.force_color and p.force_gray:
            raise DataError("%s: cannot set both force_color and force_gray" % where)
        self.mean = load_mean(p.mean_file) if p.HasField("mean_file") else None
        self.mean_values = np.asarray(p.mean_value, np.float32) if len(p.mean_value) else None
        train = phase == TRAIN
        self.rrc = bool(p.random_resized_crop) and train
        if p.random_resized_crop:
            if self.crop <= 0:
                raise DataError("%s: random_resized_crop needs crop_size (the output size)"
                                % where)
            if not 0 < p.rrc_min_scale <= p.rrc_max_scale <= 1:
                raise DataError("%s: need 0 < rrc_min_scale <= rrc_max_scale <= 1, got %g and "
                                "%g" % (where, p.rrc_min_scale, p.rrc_max_scale))
            if not 0 < p.rrc_min_aspect <= p.rrc_max_aspect:
                raise DataError("%s: need 0 < rrc_min_aspect <= rrc_max_aspect, got %g and %g"
                                % (where, p.rrc_min_aspect, p.rrc_max_aspect))
        if p.hue < 0 or p.hue > 1:
            raise DataError("%s: hue must be in [0, 1] (a fraction of the colour circle), "
                            "got %g" % (where, p.hue))
        if p.saturation <= 0 or p.exposure <= 0:
            raise DataError("%s: saturation and exposure must be positive (1 = off), got %g "
                            "and %g" % (where, p.saturation, p.exposure))
        self.colour = train and (p.hue != 0 or p.saturation != 1 or p.exposure != 1)
        self.random_crop = train and self.crop > 0 and not self.rrc
        self.nv_resize = nvcaffe_resize_enabled(p)
        self.intel_resize = p.HasField("random_resize_param") or \
            p.HasField("random_aspect_ratio_param")
        if self.intel_resize:
            self._check_intel_resize(where)
        # NVCaffe subtracts a mean_file's centre crop of the output's size after its resize
        # and crop (apply_mean_scale_mirror), wherever the crop was taken
        self.nv_mean = None
        if self.nv_resize:
            if not self.crop or self.rrc:
                raise DataError("%s: NVCaffe's random resize (img_rand_resize_*, "
                                "rand_resize_ratio_*, *_stretch_*) needs crop_size, and does "
                                "not work with random_resized_crop" % where)
            if self.mean is not None:
                c, mh, mw = self.mean.shape
                if mh < self.crop or mw < self.crop:
                    raise DataError("%s: mean_file '%s' is %s (CxHxW), smaller than crop_size "
                                    "%d (NVCaffe's resize subtracts its centre crop)"
                                    % (where, p.mean_file, _size(self.mean.shape), self.crop))
                top, left = (mh - self.crop) // 2, (mw - self.crop) // 2
                self.nv_mean = np.ascontiguousarray(
                    self.mean[:, top:top + self.crop, left:left + self.crop]) * self.scale
                self.mean = None
            lo, hi = p.img_rand_resize_lower, p.img_rand_resize_upper
            if lo > 0 and hi > 0 and hi < lo:
                raise DataError("%s: img_rand_resize_upper %d is below img_rand_resize_lower "
                                "%d" % (where, hi, lo))

    # ---- shapes --------------------------------------------------------------------------
    @property
    def needs_random(self):
        return self.mirror or self.random_crop or self.rrc or self.colour or \
            (self.nv_resize and nvcaffe_resize_random(self.param)) or self.intel_resize

    @property
    def decode_color(self):
        """How encoded images are decoded: True (force_color), False (force_gray) or None
        (their own channels)."""
        if self.param.force_color:
            return True
        if self.param.force_gray:
            return False
        return None

    def output_shape(self, shape, where="the input"):
        """(C, h, w) of the output for a (C, H, W) input; checks crop and mean sizes."""
        c, h, w = (int(d) for d in shape)
        self.check_input(shape, where)
        if self.crop:
            return c, self.crop, self.crop
        return c, h, w

    def check_input(self, shape, where="the input"):
        c, h, w = (int(d) for d in shape)
        if c <= 0:
            raise DataError("%s has no channels (shape %s)" % (where, _size(shape)))
        if self.crop and not (self.rrc or self.nv_resize or self.intel_resize) and \
                (h < self.crop or w < self.crop):
            raise DataError("%s is %s, smaller than crop_size %d: use a smaller crop_size or "
                            "larger images" % (where, _size(shape), self.crop))
        if self.mean is not None and self.mean.shape != (c, h, w):
            raise DataError("mean_file '%s' is %s (CxHxW) but %s is %s: the mean must have the "
                            "size of the uncropped input; recompute it with "
                            "compute_image_mean" % (self.param.mean_file, _size(self.mean.shape),
                                                    where, _size((c, h, w))))
        if self.mean_values is not None and len(self.mean_values) not in (1, c):
            raise DataError("%s: specify either 1 mean_value or as many as channels (%d), got "
                            "%d" % (self.where, c, len(self.mean_values)))

    # ---- random draws --------------------------------------------------------------------
    def _rrc_window(self, h, w, rng):
        p = self.param
        area = h * w
        lo, hi = math.log(p.rrc_min_aspect), math.log(p.rrc_max_aspect)
        for _ in range(10):
            target = area * rng.uniform(p.rrc_min_scale, p.rrc_max_scale)
            ratio = math.exp(rng.uniform(lo, hi))
            cw = int(round(math.sqrt(target * ratio)))
            ch = int(round(math.sqrt(target / ratio)))
            if 0 < cw <= w and 0 < ch <= h:
                return int(rng.integers(0, h - ch + 1)), int(rng.integers(0, w - cw + 1)), ch, cw
        ratio = w / h
        if ratio < p.rrc_min_aspect:
            cw, ch = w, min(h, int(round(w / p.rrc_min_aspect)))
        elif ratio > p.rrc_max_aspect:
            ch, cw = h, min(w, int(round(h * p.rrc_max_aspect)))
        else:
            ch, cw = h, w
        return (h - ch) // 2, (w - cw) // 2, ch, cw

    def _nvcaffe_resize(self, img, rng, index):
        """NVCaffe's image_random_resize of one (C, H, W) image."""
        p = self.param
        h, w = img.shape[1], img.shape[2]
        h_new, w_new = nvcaffe_resized_size(p, h, w, rng)
        if h_new < self.crop or w_new < self.crop:
            raise DataError("%s: image %d is %dx%d after NVCaffe's resize (allow_upscale is "
                            "false), smaller than crop_size %d" % (self.where, index, h_new,
                                                                   w_new, self.crop))
        if (h_new, w_new) == (h, w):
            return img
        down = h_new <= h and w_new <= w
        algo = p.interpolation_algo_down if down else p.interpolation_algo_up
        cv2 = _cv2("NVCaffe's random resize")
        hwc = np.ascontiguousarray(img.transpose(1, 2, 0))
        out = cv2.resize(hwc, (w_new, h_new), interpolation=int(algo))
        return out.reshape(h_new, w_new, -1).transpose(2, 0, 1)

    def _check_intel_resize(self, where):
        p = self.param
        if not self.crop or p.HasField("mean_file") or self.rrc or nvcaffe_resize_enabled(p):
            raise DataError("%s: Intel Caffe's random_resize_param and random_aspect_ratio_param"
                            " need crop_size, and work with mean_value, not mean_file, "
                            "random_resized_crop or NVCaffe's resize" % where)
        for name in ("random_resize_param", "random_aspect_ratio_param"):
            if p.HasField(name):
                rp = caffe_pb2.ResizeParameter()
                rp.CopyFrom(getattr(p, name).resize_param)
                rp.height = rp.width = 1
                check_resize(rp, "%s.%s.resize_param" % (where, name))

    def _intel_resize(self, img, rng, index):
        """Intel Caffe's RandomResizeImage or RandomAlterAspectRatio of one (C, H, W) image."""
        p = self.param
        hwc = np.ascontiguousarray(img.transpose(1, 2, 0))
        if p.HasField("random_resize_param"):
            out = intel_random_resize(hwc, p.random_resize_param, rng)
        else:
            out = intel_random_aspect(hwc, p.random_aspect_ratio_param, self.crop, rng)
        if out.shape[0] < self.crop or out.shape[1] < self.crop:
            raise DataError("%s: image %d is %dx%d after resizing, smaller than crop_size %d"
                            % (self.where, index, out.shape[0], out.shape[1], self.crop))
        return out.transpose(2, 0, 1)

    @staticmethod
    def _rand_scale(limit, n, rng):
        """Darknet's rand_scale: a factor in [1, limit], inverted with probability 1/2."""
        s = rng.uniform(1.0, limit, n) if limit != 1 else np.ones(n)
        flip = rng.integers(0, 2, n).astype(bool)
        return np.where(flip, s, 1.0 / s)

    # ---- the transform -------------------------------------------------------------------
    def transform(self, images, out, rng=None):
        """Transform a batch into ``out`` (N, C, h, w), written in place.

        ``images``: an (N, C, H, W) uint8 or float32 array, or a list of N (C, H, W) arrays
        (any strides; sizes may differ when cropping). Returns the per-image mirror flags.
        """
        if out.dtype != np.float32:
            tmp = np.empty(out.shape, np.float32)
            flags = self.transform(images, tmp, rng)
            out[...] = tmp
            return flags
        flags = self._transform(images, out, rng)
        if self.nv_mean is not None:
            for i, flipped in enumerate(flags):
                out[i] -= self.nv_mean[:, :, ::-1] if flipped else self.nv_mean
        return flags

    def _transform(self, images, out, rng):
        n = len(images)
        if n == 0:
            return np.zeros(0, bool)
        if self.needs_random and rng is None:
            raise DataError("%s: this transformation is random and needs a random generator"
                            % self.where)
        if self.nv_resize:
            images = [self._nvcaffe_resize(np.asarray(images[i]), rng, i) for i in range(n)]
        elif self.intel_resize:
            images = [self._intel_resize(np.asarray(images[i]), rng, i) for i in range(n)]
        uniform = isinstance(images, np.ndarray)
        if uniform:
            heights = np.full(n, images.shape[2])
            widths = np.full(n, images.shape[3])
        else:
            heights = np.array([im.shape[1] for im in images])
            widths = np.array([im.shape[2] for im in images])
        oh, ow = out.shape[2], out.shape[3]
        # draws, in a fixed order: mirror, crop offsets, colour, (rrc windows per image)
        mirror = rng.integers(0, 2, n).astype(bool) if self.mirror else np.zeros(n, bool)
        windows = None
        if self.rrc:
            windows = [self._rrc_window(int(heights[i]), int(widths[i]), rng) for i in range(n)]
            hoff = woff = None
        elif self.crop:
            if self.random_crop:
                hoff = rng.integers(0, heights - self.crop + 1)
                woff = rng.integers(0, widths - self.crop + 1)
            else:
                hoff = (heights - self.crop) // 2
                woff = (widths - self.crop) // 2
        else:
            hoff = np.zeros(n, np.intp)
            woff = np.zeros(n, np.intp)
        colour = None
        if self.colour:
            p = self.param
            colour = (rng.uniform(-p.hue, p.hue, n) if p.hue else np.zeros(n),
                      self._rand_scale(p.saturation, n, rng),
                      self._rand_scale(p.exposure, n, rng))

        same_window = windows is None and (hoff == hoff[0]).all() and (woff == woff[0]).all()
        if uniform and same_window and not mirror.any() and colour is None:
            # one expression for the whole batch
            h0, w0 = int(hoff[0]), int(woff[0])
            src = images[:, :, h0:h0 + oh, w0:w0 + ow]
            if self.mean is not None:
                np.subtract(src, self.mean[:, h0:h0 + oh, w0:w0 + ow], out=out)
            elif self.mean_values is not None:
                np.subtract(src, self.mean_values.reshape(1, -1, 1, 1), out=out)
            else:
                if self.scale != 1:
                    np.multiply(src, self.scale, out=out)
                else:
                    out[...] = src
                return mirror
            if self.scale != 1:
                out *= self.scale
            return mirror

        # one slice copy (or resize) per image; without colour changes the mean is
        # subtracted in the same pass
        fused = colour is None and windows is None
        mean_values = None if self.mean_values is None else self.mean_values.reshape(-1, 1, 1)
        for i in range(n):
            img = images[i]
            if windows is not None:
                img = resize(img, oh, ow, window=windows[i], axes=(1, 2))
            else:
                h0, w0 = int(hoff[i]), int(woff[i])
                img = img[:, h0:h0 + oh, w0:w0 + ow]
            if mirror[i]:
                img = img[:, :, ::-1]
            if fused and self.mean is not None:
                m = self.mean[:, h0:h0 + oh, w0:w0 + ow]
                np.subtract(img, m[:, :, ::-1] if mirror[i] else m, out=out[i])
            elif fused and mean_values is not None:
                np.subtract(img, mean_values, out=out[i])
            else:
                out[i] = img
        if colour is not None:
            distort_colour(out, *colour)
        if fused:
            pass
        elif self.mean is not None:
            if same_window and not mirror.any():
                h0, w0 = int(hoff[0]), int(woff[0])
                out -= self.mean[:, h0:h0 + oh, w0:w0 + ow]
            else:
                for i in range(n):
                    if windows is not None:
                        m = resize(self.mean, oh, ow, window=windows[i], axes=(1, 2))
                    else:
                        h0, w0 = int(hoff[i]), int(woff[i])
                        m = self.mean[:, h0:h0 + oh, w0:w0 + ow]
                    out[i] -= m[:, :, ::-1] if mirror[i] else m
        elif self.mean_values is not None:
            out -= self.mean_values.reshape(1, -1, 1, 1)
        if self.scale != 1:
            out *= self.scale
        return mirror


def distort_colour(x, dhue, dsat, dexp):
    """Darknet's colour distortion of a batch of BGR images in [0, 255], in place.

    ``x`` is (N, C, H, W) float32; ``dhue`` (shift, fraction of the circle), ``dsat`` and
    ``dexp`` (factors) hold one value per image. Images of fewer than 3 channels get the
    exposure factor only; a 4th channel (alpha) is left alone.
    """
    n = x.shape[0]
    if x.shape[1] < 3:
        x *= np.asarray(dexp, np.float32).reshape(n, 1, 1, 1)
        np.clip(x, 0, 255, out=x)
        return x
    shape = (n, 1, 1)
    b = x[:, 0] * np.float32(1 / 255.0)
    g = x[:, 1] * np.float32(1 / 255.0)
    r = x[:, 2] * np.float32(1 / 255.0)
    np.clip(b, 0, 1, out=b)
    np.clip(g, 0, 1, out=g)
    np.clip(r, 0, 1, out=r)
    v = np.maximum(np.maximum(r, g), b)
    mn = np.minimum(np.minimum(r, g), b)
    delta = v - mn
    safe = np.where(delta > 0, delta, 1)
    h = np.where(v == r, (g - b) / safe,
                 np.where(v == g, 2 + (b - r) / safe, 4 + (r - g) / safe))
    h = np.where(delta > 0, h, 0)
    h = np.where(h < 0, h + 6, h) / 6
    s = np.where(v > 0, delta / np.where(v > 0, v, 1), 0)
    s = s * np.asarray(dsat, np.float32).reshape(shape)
    v = v * np.asarray(dexp, np.float32).reshape(shape)
    h = h + np.asarray(dhue, np.float32).reshape(shape)
    h = np.where(h > 1, h - 1, h)
    h = np.where(h < 0, h + 1, h)
    h6 = h * 6
    vs = v * s
    for channel, k0 in ((2, 5.0), (1, 3.0), (0, 1.0)):  # r, g, b
        k = np.mod(k0 + h6, 6)
        c = v - vs * np.clip(np.minimum(k, 4 - k), 0, 1)
        np.clip(c, 0, 1, out=c)
        x[:, channel] = c * np.float32(255)
    return x


def nvcaffe_resize_enabled(p):
    """Whether NVCaffe's random resize runs for TransformationParameter ``p``."""
    return bool(p.img_rand_resize_lower or p.img_rand_resize_upper or
                any(p.HasField(f) for f in NVCAFFE_RESIZE_FIELDS))


def _uniform(rng, low, high):
    return low if low == high else rng.uniform(low, high)


def nvcaffe_resize_random(p):
    """Whether NVCaffe's resize draws random numbers (some range is not a single value)."""
    return (p.img_rand_resize_lower > 0 and p.img_rand_resize_upper > p.img_rand_resize_lower
            or (p.rand_resize_ratio_lower >= 1 and p.rand_resize_ratio_upper > 1)
            or p.vertical_stretch_lower != p.vertical_stretch_upper
            or p.horizontal_stretch_lower != p.horizontal_stretch_upper)


def _round_half_away(x):
    return int(math.floor(x + 0.5))


def nvcaffe_resized_size(p, h, w, rng):
    """The (height, width) NVCaffe's image_random_resize gives an h x w image: the shorter
    side to a random length in [img_rand_resize_lower, img_rand_resize_upper] (kept when
    unset), the longer side to ratio x the shorter with rand_resize_ratio_lower >= 1, each side
    stretched by its random factor, at least crop_size, at most the input without
    allow_upscale. Draws, in the fork's order: the length, the ratio (and a side on a square),
    the vertical then the horizontal stretch. The sides are computed in float32, as the fork
    computes them (a 480 x 720 image to 123: the long side is 184.5 in float32, so 185 as in
    the fork, where float64 gives 184.49999999999997, so 184)."""
    f32 = np.float32
    size = min(h, w)
    lo, hi = p.img_rand_resize_lower, p.img_rand_resize_upper
    if lo > 0 and hi > 0:
        size = lo + (int(rng.integers(0, hi - lo + 1)) if hi > lo else 0)
    scale = f32(size) / f32(h) if w >= h else f32(size) / f32(w)
    fh, fw = scale * f32(h), scale * f32(w)
    if p.rand_resize_ratio_lower >= 1 and p.rand_resize_ratio_upper > 1:
        ratio = f32(_uniform(rng, p.rand_resize_ratio_lower, p.rand_resize_ratio_upper))
        if fw > fh:
            fw = fh * ratio
        elif fw < fh:
            fh = fw * ratio
        elif rng.integers(0, 2) > 0:
            fw = fh * ratio
        else:
            fh = fw * ratio
    if p.vertical_stretch_lower > 0 and p.vertical_stretch_upper > 0:
        fh = fh * f32(_uniform(rng, p.vertical_stretch_lower, p.vertical_stretch_upper))
    if p.horizontal_stretch_lower > 0 and p.horizontal_stretch_upper > 0:
        fw = fw * f32(_uniform(rng, p.horizontal_stretch_lower, p.horizontal_stretch_upper))
    h_new = max(int(p.crop_size), _round_half_away(float(fh)))
    w_new = max(int(p.crop_size), _round_half_away(float(fw)))
    if not p.allow_upscale:
        h_new, w_new = min(h_new, h), min(w_new, w)
    return h_new, w_new


def _per_shorter_side(img, shorter, resize_param, rng):
    """Intel Caffe's ResizeImagePerShorterSize of an (H, W, C) image: the longer side in
    proportion, rounded down (float32 arithmetic, as the fork)."""
    h, w = img.shape[:2]
    rp = caffe_pb2.ResizeParameter()
    rp.CopyFrom(resize_param)
    rp.height = rp.width = shorter
    if h < w:
        rp.width = int(np.float32(w) / np.float32(h) * np.float32(shorter))
    else:
        rp.height = int(np.float32(h) / np.float32(w) * np.float32(shorter))
    return warp(img, rp, rng)


def intel_random_resize(img, p, rng):
    """Intel Caffe's random_resize_param on an (H, W, C) image."""
    h, w = img.shape[:2]
    lo = p.min_size or min(h, w)
    hi = p.max_size or max(h, w)
    shorter = lo + (int(rng.integers(0, hi - lo + 1)) if hi > lo else 0)
    return _per_shorter_side(img, shorter, p.resize_param, rng)


def _rand_ratio(rng, low, high):
    """Intel Caffe's RandRatio: a multiple of 1/1000 in [low, high]."""
    return (int(rng.integers(0, int((high - low) * 1000 + 1))) + low * 1000) / 1000


def intel_random_aspect(img, p, crop, rng):
    """Intel Caffe's random_aspect_ratio_param on an (H, W, C) image."""
    h, w = img.shape[:2]
    area = np.float32(h * w)
    for _ in range(p.max_attempt):
        area_ratio = _rand_ratio(rng, p.min_area_ratio, p.max_area_ratio)
        change = _rand_ratio(rng, p.aspect_ratio_change, 1 / p.aspect_ratio_change)
        side = math.sqrt(area_ratio * area)
        new_h, new_w = int(side * change), int(side / change)
        if _rand_ratio(rng, 0, 1) < 0.5:
            new_h, new_w = new_w, new_h
        if new_h <= h and new_w <= w:
            y = int(rng.integers(0, h - new_h + 1))
            x = int(rng.integers(0, w - new_w + 1))
            rp = caffe_pb2.ResizeParameter()
            rp.CopyFrom(p.resize_param)
            rp.height = rp.width = crop
            return warp(np.ascontiguousarray(img[y:y + new_h, x:x + new_w]), rp, rng)
    return _per_shorter_side(img, crop, p.resize_param, rng)
