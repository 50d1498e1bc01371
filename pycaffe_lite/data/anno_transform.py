"""The SSD fork's image-and-box augmentation for ``AnnotatedData``: distortion, expansion,
cropping to a sampled patch, then resize, crop, mirror, mean and scale, each applied to the
image and its boxes together.

Images are (H, W, C) uint8 arrays in BGR order; boxes are :class:`~.annotation.Boxes`.
Order and semantics are the fork's (``DataTransformer`` of weiliu89/caffe):

1. ``distort_param``: with probability 1/2 brightness, contrast, saturation, hue, channel
   order; otherwise brightness, saturation, hue, contrast, channel order; each step happens
   with its own probability. Brightness adds ``U(-delta, delta)``; contrast multiplies by
   ``U(lower, upper)``; saturation scales S and hue shifts H in OpenCV's 8-bit HSV.
2. ``expand_param``: with probability ``prob`` the image is placed at a random integer offset
   on a canvas ``ratio ~ U(1, max_expand_ratio)`` times larger, filled with the mean values
   (else 0).
3. ``batch_sampler`` (see :mod:`.sampler`): the image is cropped to one sampled patch.
4. ``resize_param`` (WARP) to ``height`` x ``width``; ``crop_size`` (random offset in TRAIN,
   centred in TEST); mirror with probability 1/2; ``(pixel - mean) * scale``.

After steps 2-4 each box is kept when it meets ``emit_constraint`` (if set) for the window
and overlaps it, and is re-expressed in the window's frame, clipped to [0, 1]; a mirror
swaps ``xmin``/``xmax`` as ``1 - x``. Unlike the fork, raw (not encoded) records are resized
too (the fork resizes only encoded ones, and fails on raw ones).
"""

import numpy as np

from ..proto import caffe_pb2
from . import sampler
from .datum import DataError, resize, resize_nearest

TRAIN = caffe_pb2.TRAIN
RP = caffe_pb2.ResizeParameter


def _cv2(what):
    try:
        import cv2
    except ImportError:
        raise DataError("%s needs OpenCV (cv2): pip install "
                        "opencv-python-headless" % what) from None
    return cv2


def _saturate(img):
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _brightness(img, p, rng):
    if rng.uniform() < p.brightness_prob:
        if p.brightness_delta < 0:
            raise DataError("distort_param.brightness_delta must be non-negative")
        delta = rng.uniform(-p.brightness_delta, p.brightness_delta)
        if delta != 0:
            img = _saturate(img.astype(np.float32) + np.float32(delta))
    return img


def _contrast(img, p, rng):
    if rng.uniform() < p.contrast_prob:
        if not 0 <= p.contrast_lower <= p.contrast_upper:
            raise DataError("distort_param: need 0 <= contrast_lower <= contrast_upper")
        delta = rng.uniform(p.contrast_lower, p.contrast_upper)
        if abs(delta - 1) > 1e-3:
            img = _saturate(img.astype(np.float32) * np.float32(delta))
    return img


def _hsv_channel(img, channel, scale, shift, what):
    if img.shape[2] != 3:
        return img
    cv2 = _cv2(what)
    hsv = cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_BGR2HSV)
    hsv[:, :, channel] = _saturate(hsv[:, :, channel].astype(np.float32) * np.float32(scale)
                                   + np.float32(shift))
    return cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)


def _saturation(img, p, rng):
    if rng.uniform() < p.saturation_prob:
        if not 0 <= p.saturation_lower <= p.saturation_upper:
            raise DataError("distort_param: need 0 <= saturation_lower <= saturation_upper")
        delta = rng.uniform(p.saturation_lower, p.saturation_upper)
        img = _hsv_channel(img, 1, delta, 0.0, "distort_param's saturation")
    return img


def _hue(img, p, rng):
    if rng.uniform() < p.hue_prob:
        if p.hue_delta < 0:
            raise DataError("distort_param.hue_delta must be non-negative")
        delta = rng.uniform(-p.hue_delta, p.hue_delta)
        if delta != 0:
            img = _hsv_channel(img, 0, 1.0, delta, "distort_param's hue")
    return img


def _order(img, p, rng):
    if rng.uniform() < p.random_order_prob and img.shape[2] == 3:
        img = img[:, :, rng.permutation(3)]
    return img


def distort(img, p, rng):
    """The fork's ``ApplyDistort`` on an (H, W, C) uint8 image."""
    if rng.uniform() > 0.5:
        steps = (_brightness, _contrast, _saturation, _hue, _order)
    else:
        steps = (_brightness, _saturation, _hue, _contrast, _order)
    for step in steps:
        img = step(img, p, rng)
    return np.ascontiguousarray(img)


def transform_boxes(boxes, window, emit=None, mirror=False):
    """Boxes seen in ``window`` (normalized, in the boxes' frame): emit constraint, projection
    with clipping, mirror (the fork's ``TransformAnnotation``)."""
    if not len(boxes):
        return boxes
    keep = sampler.meet_emit_constraint(window, boxes.boxes, emit)
    kept = boxes.take(keep, boxes.boxes[keep])
    inside, proj = sampler.project(window, kept.boxes)
    if mirror and len(proj):
        proj = proj.copy()
        proj[:, 0], proj[:, 2] = 1 - proj[:, 2], 1 - proj[:, 0]
    return kept.take(inside, proj)


def expand(img, boxes, p, fill, rng, emit=None):
    """The fork's ``ExpandImage``: returns (image, boxes)."""
    if rng.uniform() > p.prob:
        return img, boxes
    if abs(p.max_expand_ratio - 1.0) < 1e-2:
        return img, boxes
    if p.max_expand_ratio < 1:
        raise DataError("expand_param.max_expand_ratio must be at least 1, got %g"
                        % p.max_expand_ratio)
    ratio = rng.uniform(1.0, p.max_expand_ratio)
    h, w, c = img.shape
    height = int(np.float32(h) * np.float32(ratio))
    width = int(np.float32(w) * np.float32(ratio))
    h_off = float(np.floor(rng.uniform(0.0, height - h)))
    w_off = float(np.floor(rng.uniform(0.0, width - w)))
    window = np.array([-w_off / w, -h_off / h, (width - w_off) / w, (height - h_off) / h])
    out = np.empty((height, width, c), np.uint8)
    out[...] = fill
    y, x = int(h_off), int(w_off)
    out[y:y + h, x:x + w] = img
    return out, transform_boxes(boxes, window, emit)


def crop_to(img, boxes, patch, emit=None):
    """Crop to a normalized ``patch`` (the fork's ``CropImage`` of an AnnotatedDatum)."""
    patch = sampler.clip(patch)
    h, w = img.shape[:2]
    x0 = patch[0] * w
    y0 = patch[1] * h
    w_off, h_off = int(x0), int(y0)
    width = int(patch[2] * w - x0)
    height = int(patch[3] * h - y0)
    out = np.ascontiguousarray(img[h_off:h_off + height, w_off:w_off + width])
    return out, transform_boxes(boxes, patch, emit)


def check_resize(p, where):
    if p.resize_mode != RP.WARP:
        raise DataError("%s: resize_mode %s is not supported (WARP is)"
                        % (where, RP.Resize_mode.Name(p.resize_mode)))
    if p.height <= 0 or p.width <= 0:
        raise DataError("%s: resize_param needs a positive height and width, got %dx%d"
                        % (where, p.height, p.width))
    for mode in p.interp_mode:
        if mode not in (RP.LINEAR, RP.NEAREST, RP.AREA, RP.CUBIC, RP.LANCZOS4):
            raise DataError("%s: unknown interp_mode %d" % (where, mode))


def warp(img, p, rng):
    """Resize to ``p.height`` x ``p.width`` with a uniformly chosen ``interp_mode``
    (LINEAR when none is given)."""
    mode = RP.LINEAR
    if len(p.interp_mode):
        mode = p.interp_mode[int(rng.integers(len(p.interp_mode)))]
    if img.shape[:2] == (p.height, p.width) and mode in (RP.LINEAR, RP.NEAREST):
        return img  # both are the identity at the same size
    if mode == RP.LINEAR:
        return resize(img, p.height, p.width)
    if mode == RP.NEAREST:
        return resize_nearest(img, int(p.height), int(p.width))
    cv2 = _cv2("resize_param interp_mode %s" % RP.Interp_mode.Name(mode))
    flag = {RP.AREA: cv2.INTER_AREA, RP.CUBIC: cv2.INTER_CUBIC,
            RP.LANCZOS4: cv2.INTER_LANCZOS4}[mode]
    out = cv2.resize(np.ascontiguousarray(img), (int(p.width), int(p.height)),
                     interpolation=flag)
    return out.reshape(int(p.height), int(p.width), img.shape[2])


def output_size(tp, height, width):
    """(h, w) of the transformed image for an input of ``height`` x ``width``."""
    if tp.HasField("resize_param"):
        height, width = tp.resize_param.height, tp.resize_param.width
    crop_h = tp.crop_size or tp.crop_h
    crop_w = tp.crop_size or tp.crop_w
    if (crop_h and height < crop_h) or (crop_w and width < crop_w):
        raise DataError("the image is %dx%d, smaller than the crop %dx%d"
                        % (height, width, crop_h, crop_w))
    return (crop_h or height), (crop_w or width)


def final_transform(img, boxes, tp, phase, mean, rng, out):
    """Resize, crop, mirror, mean and scale into ``out`` (C, h, w) float; returns the boxes
    (the fork's ``Transform`` of an AnnotatedDatum)."""
    mirror = bool(tp.mirror) and bool(rng.integers(2))
    if tp.HasField("resize_param"):
        img = warp(img, tp.resize_param, rng)
    ih, iw = img.shape[:2]
    _, height, width = out.shape
    h_off = w_off = 0
    if (height, width) != (ih, iw):
        if phase == TRAIN:
            h_off = int(rng.integers(ih - height + 1))
            w_off = int(rng.integers(iw - width + 1))
        else:
            h_off = (ih - height) // 2
            w_off = (iw - width) // 2
    window = np.array([w_off / iw, h_off / ih, (w_off + width) / iw, (h_off + height) / ih])
    crop = img[h_off:h_off + height, w_off:w_off + width]
    if mirror:
        crop = crop[:, ::-1]
    chw = crop.transpose(2, 0, 1).astype(out.dtype)
    if mean is not None and mean.shape[1:] == (1, 1):
        chw -= mean
    elif mean is not None:
        if mean.shape[1:] != (ih, iw):
            raise DataError("mean_file is %dx%d but the image it applies to (after resize) is "
                            "%dx%d" % (mean.shape[1], mean.shape[2], ih, iw))
        m = mean[:, h_off:h_off + height, w_off:w_off + width]
        chw -= m[:, :, ::-1] if mirror else m
    out[...] = chw
    if tp.scale != 1:
        out *= out.dtype.type(tp.scale)
    emit = tp.emit_constraint if tp.HasField("emit_constraint") else None
    if len(boxes):
        # WARP keeps normalized coordinates; the fork clamps them to the image first
        boxes = boxes.take(slice(None), sampler.clip(boxes.boxes))
    return transform_boxes(boxes, window, emit, mirror)
