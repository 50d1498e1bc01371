"""WindowData: warped image windows for detection training (R-CNN)."""

import logging
import math

import numpy as np

from ...data.datum import DataError, decode_image, read_file, resize
from ...data.imageset import join_root
from ...data.mean import load_mean
from ...data.transformer import check_fork_fields
from ...registry import register_layer
from .base_data_layer import BasePrefetchingDataLayer, check_source, default_threads

log = logging.getLogger("pycaffe_lite")

F32 = np.float32


def _cround(x):
    """C's round(): halves away from zero."""
    return int(math.copysign(math.floor(abs(float(x)) + 0.5), float(x)))


def read_window_file(path):
    """``[(image_index, path, (C, H, W), [(label, overlap, x1, y1, x2, y2), ...]), ...]``."""
    try:
        with open(path, "r", encoding="utf-8") as f:
            tokens = f.read().split()
    except FileNotFoundError:
        raise DataError("window file '%s' not found" % path) from None
    except OSError as exc:
        raise DataError("cannot read window file '%s': %s" % (path, exc)) from None
    if not tokens:
        raise DataError("window file '%s' is empty" % path)
    images = []
    i = 0

    def take(n, what):
        nonlocal i
        if i + n > len(tokens):
            raise DataError("window file '%s' ends in the middle of %s (image entry %d)"
                            % (path, what, len(images)))
        out = tokens[i:i + n]
        i += n
        return out

    while i < len(tokens):
        tag, index = take(2, "an image header")
        if tag != "#":
            raise DataError("window file '%s': expected '# <image_index>' at image entry %d, "
                            "found '%s %s'" % (path, len(images), tag, index))
        try:
            index = int(index)
            name = take(1, "an image path")[0]
            c, h, w, n = (int(v) for v in take(4, "the image size and window count"))
            windows = []
            for _ in range(n):
                label, overlap, x1, y1, x2, y2 = take(6, "a window")
                windows.append((int(label), float(overlap), int(x1), int(y1), int(x2),
                                int(y2)))
        except ValueError as exc:
            raise DataError("window file '%s', image entry %d: %s" % (path, len(images), exc)) \
                from None
        images.append((index, name, (c, h, w), windows))
    return images


@register_layer("WindowData")
class WindowDataLayer(BasePrefetchingDataLayer):
    """Samples windows of images listed in a window file, warps each to crop_size x crop_size
    (Caffe's R-CNN data layer).

    Bottoms: none.
    Tops: data (batch_size x 3 x crop_size x crop_size) and label (batch_size,).
    Params: ``window_data_param { source (the window file: repeated ``# index``, image path,
    channels, height, width, number of windows, then ``label overlap x1 y1 x2 y2`` per
    window), batch_size, fg_threshold (0.5; windows with overlap >= it are foreground),
    bg_threshold (0.5; overlap < it are background, label 0), fg_fraction (0.25 of each batch
    is foreground, sampled after the background), context_pad (pixels of context around the
    window in the output), crop_mode ("warp" or "square"), cache_images (keep the files in
    memory), root_folder, scale }``, and from ``transform_param``: crop_size (required),
    mirror, mean_file (centre-cropped to crop_size) or mean_value. Outside the warped window
    the output is 0. Windows are drawn at random in both phases, as in Caffe.
    """

    exact_num_top_blobs = 2

    def data_setup(self, top):
        p = self.layer_param.window_data_param
        tp = self.layer_param.transform_param
        check_fork_fields(tp, "transform_param of layer '%s'" % self.name)
        check_source("window_data_param", p, "the window file")
        self.crop = int(tp.crop_size)
        if self.crop <= 0:
            raise DataError("WindowData needs transform_param.crop_size (the warped size)")
        if p.crop_mode not in ("warp", "square"):
            raise DataError("window_data_param.crop_mode must be 'warp' or 'square', got '%s'"
                            % p.crop_mode)
        if 2 * p.context_pad >= self.crop:
            raise DataError("context_pad %d leaves no room in crop_size %d"
                            % (p.context_pad, self.crop))
        self.source = p.source
        self.batch_size = int(p.batch_size)
        self.scale = F32(p.scale)
        self.context_pad = int(p.context_pad)
        self.square = p.crop_mode == "square"
        self.mirror = bool(tp.mirror)
        self.channels = 3
        self.images = {}
        self.fg, self.bg = [], []
        counts = {0: 0}
        for index, name, size, windows in read_window_file(self.source):
            path = join_root(p.root_folder, name)
            self.images[index] = path
            if size[0] != 3:
                log.warning("layer '%s': image '%s' is listed with %d channels; WindowData "
                            "decodes images in colour (3 channels)", self.name, path, size[0])
            for label, overlap, x1, y1, x2, y2 in windows:
                if overlap >= p.fg_threshold:
                    if label <= 0:
                        raise DataError("window file '%s', image %d ('%s'): a foreground "
                                        "window (overlap %g) has label %d; foreground labels "
                                        "must be > 0" % (self.source, index, name, overlap,
                                                         label))
                    self.fg.append((index, label, x1, y1, x2, y2))
                    counts[label] = counts.get(label, 0) + 1
                elif overlap < p.bg_threshold:
                    self.bg.append((index, 0, x1, y1, x2, y2))
                    counts[0] += 1
        log.info("layer '%s': %d images, %s", self.name, len(self.images),
                 ", ".join("class %d has %d samples" % kv for kv in sorted(counts.items())))
        self.num_fg = int(F32(self.batch_size) * F32(p.fg_fraction))
        if self.num_fg > 0 and not self.fg:
            raise DataError("window file '%s' has no foreground windows (overlap >= %g) but "
                            "fg_fraction asks for %d per batch" % (self.source, p.fg_threshold,
                                                                    self.num_fg))
        if self.batch_size - self.num_fg > 0 and not self.bg:
            raise DataError("window file '%s' has no background windows (overlap < %g) but "
                            "the batch needs %d" % (self.source, p.bg_threshold,
                                                    self.batch_size - self.num_fg))
        self.cache = {}
        if p.cache_images:
            for index, path in self.images.items():
                self.cache[index] = read_file(path)
        if tp.HasField("mean_file") and len(tp.mean_value):
            raise DataError("cannot specify mean_file and mean_value at the same time")
        self.mean = None
        self.mean_values = None
        if tp.HasField("mean_file"):
            self.mean = load_mean(tp.mean_file)
            c, mh, mw = self.mean.shape
            off = (mw - self.crop) // 2
            if c != self.channels or off < 0 or off + self.crop > mh:
                raise DataError("mean_file '%s' is %dx%dx%d; WindowData needs 3 channels and "
                                "at least crop_size (%d) in height and width"
                                % (tp.mean_file, c, mh, mw, self.crop))
            self.mean_off = off
        elif len(tp.mean_value):
            if len(tp.mean_value) not in (1, self.channels):
                raise DataError("specify either 1 mean_value or as many as channels (%d)"
                                % self.channels)
            self.mean_values = np.broadcast_to(np.asarray(tp.mean_value, F32),
                                               (self.channels,)).reshape(-1, 1, 1)
        self.prefetch_count = 4
        self.prefetch_threads = default_threads(True)
        return [(self.batch_size, self.channels, self.crop, self.crop), (self.batch_size,)]

    def read_state(self):
        return {"source": self.source, "rng": self._rng_state()}

    def write_state(self, state):
        self.rng.bit_generator.state = state["rng"]

    def plan_batch(self):
        return self._batch_seed(True)

    def _load(self, index):
        path = self.images.get(index)
        if path is None:
            raise DataError("window file '%s' refers to image %d, which it does not list"
                            % (self.source, index))
        data = self.cache[index] if index in self.cache else read_file(path)
        return decode_image(data, True, "image '%s' (window file '%s')" % (path, self.source))

    def fill_batch(self, seed, blobs):
        rng = np.random.default_rng(seed)
        out = blobs[0].data
        out[...] = 0
        labels = np.empty(self.batch_size, F32)
        item = 0
        for is_fg, count in ((False, self.batch_size - self.num_fg), (True, self.num_fg)):
            pool = self.fg if is_fg else self.bg
            for _ in range(count):
                index, label, x1, y1, x2, y2 = pool[int(rng.integers(0, len(pool)))]
                do_mirror = bool(self.mirror and rng.integers(0, 2))
                img = self._load(index)
                self._warp(img, (x1, y1, x2, y2), do_mirror, out[item], index)
                labels[item] = label
                item += 1
        if len(blobs) > 1:
            blobs[1].data[...] = labels

    def _warp(self, img, box, do_mirror, out, index):
        crop = self.crop
        rows, cols = img.shape[:2]
        x1, y1, x2, y2 = box
        pad_w = pad_h = 0
        crop_w = crop_h = crop
        if self.context_pad > 0 or self.square:
            context_scale = F32(crop) / F32(crop - 2 * self.context_pad)
            half_h = F32(y2 - y1 + 1) / F32(2)
            half_w = F32(x2 - x1 + 1) / F32(2)
            cx = F32(x1) + half_w
            cy = F32(y1) + half_h
            if self.square:
                half_h = half_w = max(half_h, half_w)
            x1 = _cround(cx - half_w * context_scale)
            x2 = _cround(cx + half_w * context_scale)
            y1 = _cround(cy - half_h * context_scale)
            y2 = _cround(cy + half_h * context_scale)
            unclipped_h = y2 - y1 + 1
            unclipped_w = x2 - x1 + 1
            pad_x1 = max(0, -x1)
            pad_y1 = max(0, -y1)
            pad_x2 = max(0, x2 - cols + 1)
            pad_y2 = max(0, y2 - rows + 1)
            x1 += pad_x1
            x2 -= pad_x2
            y1 += pad_y1
            y2 -= pad_y2
            scale_x = F32(crop) / F32(unclipped_w)
            scale_y = F32(crop) / F32(unclipped_h)
            crop_w = _cround(F32(x2 - x1 + 1) * scale_x)
            crop_h = _cround(F32(y2 - y1 + 1) * scale_y)
            pad_x1 = _cround(F32(pad_x1) * scale_x)
            pad_x2 = _cround(F32(pad_x2) * scale_x)
            pad_y1 = _cround(F32(pad_y1) * scale_y)
            pad_h = pad_y1
            pad_w = pad_x2 if do_mirror else pad_x1
            crop_h = min(crop_h, crop - pad_h)
            crop_w = min(crop_w, crop - pad_w)
        if not (0 <= x1 <= x2 < cols and 0 <= y1 <= y2 < rows) or crop_w <= 0 or crop_h <= 0:
            raise DataError("window (%d, %d, %d, %d) of image %d ('%s', %dx%d) is empty or "
                            "outside the image" % (box + (index, self.images[index], cols,
                                                          rows)))
        warped = resize(img, crop_h, crop_w, window=(y1, x1, y2 - y1 + 1, x2 - x1 + 1))
        if do_mirror:
            warped = warped[:, ::-1]
        region = out[:, pad_h:pad_h + crop_h, pad_w:pad_w + crop_w]
        region[...] = warped.transpose(2, 0, 1)
        if self.mean is not None:
            o = self.mean_off
            region -= self.mean[:, o + pad_h:o + pad_h + crop_h, o + pad_w:o + pad_w + crop_w]
        elif self.mean_values is not None:
            region -= self.mean_values
        region *= self.scale
