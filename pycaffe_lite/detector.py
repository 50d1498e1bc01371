"""Detector: windowed detection by classifying crops (pycaffe's ``caffe.Detector``).

Each window (ymin, xmin, ymax, xmax) of an image is cropped, optionally with surrounding
context as R-CNN does (``context_pad``), warped to the net's input size, preprocessed and run
through the net. Selective-search proposals are not bundled: pass windows from any proposal
method to :meth:`Detector.detect_windows`.
"""

import numpy as np

from . import io as caffe_io
from .classifier import configure_transformer
from .errors import CaffeError, ShapeError
from .net import TEST, Net

__all__ = ["Detector"]


class Detector(Net):
    """A TEST-phase Net that scores image windows.

    ``mean``, ``input_scale``, ``raw_scale``, ``channel_swap``: the Transformer's steps for the
    first input. ``context_pad``: pixels of context, in the net's input space, kept around each
    window (0 or None: the bare window).
    """

    def __init__(self, model_file, pretrained_file=None, mean=None, input_scale=None,
                 raw_scale=None, channel_swap=None, context_pad=None):
        super().__init__(model_file, phase=TEST, weights=pretrained_file)
        self.transformer = configure_transformer(self, mean, input_scale, raw_scale,
                                                 channel_swap)
        self.configure_crop(context_pad)

    def detect_windows(self, images_windows):
        """Score windows of images: ``images_windows`` is an iterable of
        (image filename or H x W x K array, list of (ymin, xmin, ymax, xmax) windows).

        Returns one dict per window, in order: ``{'window', 'prediction', 'filename'}``.
        """
        images_windows = [(image, [np.asarray(w) for w in windows])
                          for image, windows in images_windows]
        crops = []
        for image, windows in images_windows:
            im = caffe_io.load_image(image) if isinstance(image, (str, bytes)) or \
                hasattr(image, "__fspath__") else np.asarray(image, dtype=np.float32)
            for window in windows:
                crops.append(self.crop(im, window))
        if not crops:
            return []
        in_ = self.inputs[0]
        caffe_in = np.stack([self.transformer.preprocess(in_, c) for c in crops])
        predictions = self.forward_all(**{in_: caffe_in})[self.outputs[0]]
        detections = []
        ix = 0
        for image, windows in images_windows:
            for window in windows:
                detections.append({"window": window, "prediction": predictions[ix],
                                   "filename": image})
                ix += 1
        return detections

    def detect_selective_search(self, image_fnames):
        """Not available: selective search (a MATLAB tool in pycaffe) is not bundled."""
        raise CaffeError("detect_selective_search: selective search proposals are not bundled "
                         "with pycaffe-lite (pycaffe called an external MATLAB tool); compute "
                         "windows with a proposal method of your choice and call "
                         "detect_windows([(image, windows), ...])")

    def crop(self, im, window):
        """The part of ``im`` (H x W x K) that ``window`` (ymin, xmin, ymax, xmax) covers;
        with ``context_pad``, a crop_dims-sized patch holding the window with its context, out
        of bounds parts filled with the mean."""
        window = np.asarray(window)
        if window.shape != (4,):
            raise ShapeError("a window is (ymin, xmin, ymax, xmax), got %r" % (window,))
        y0, x0, y1, x1 = (int(v) for v in window)
        if not self.context_pad:
            crop = im[y0:y1, x0:x1]
            if crop.size == 0:
                raise ShapeError("window %s is empty inside an image of %s"
                                 % (tuple(window), im.shape[:2]))
            return crop
        crop_size = int(self.blobs[self.inputs[0]].shape[3])  # square input assumed, as pycaffe
        scale = crop_size / (1.0 * crop_size - self.context_pad * 2)
        half_h = (y1 - y0 + 1) / 2.0
        half_w = (x1 - x0 + 1) / 2.0
        center = np.array([y0 + half_h, x0 + half_w])
        box = np.round(np.tile(center, 2) + scale * np.array([-half_h, -half_w, half_h, half_w]))
        full_h = box[2] - box[0] + 1  # inclusive extents, as R-CNN and pycaffe count them
        full_w = box[3] - box[1] + 1
        scale_h = crop_size / full_h
        scale_w = crop_size / full_w
        pad_y = int(round(max(0.0, -box[0]) * scale_h))
        pad_x = int(round(max(0.0, -box[1]) * scale_w))
        im_h, im_w = im.shape[:2]
        box = np.clip(box, 0.0, [im_h, im_w, im_h, im_w])
        clip_h = box[2] - box[0] + 1
        clip_w = box[3] - box[1] + 1
        if clip_h <= 0 or clip_w <= 0:
            raise ShapeError("window %s lies outside an image of %s"
                             % (tuple(window), (im_h, im_w)))
        crop_h = min(int(round(clip_h * scale_h)), crop_size - pad_y)
        crop_w = min(int(round(clip_w * scale_w)), crop_size - pad_x)
        by0, bx0, by1, bx1 = (int(v) for v in box)
        context = caffe_io.resize_image(im[by0:by1, bx0:bx1], (crop_h, crop_w))
        out = np.ones(tuple(self.crop_dims), dtype=np.float32) * self.crop_mean
        out[pad_y:pad_y + crop_h, pad_x:pad_x + crop_w] = context
        return out

    def configure_crop(self, context_pad):
        """Set the crop size (the input's H x W x K) and, with ``context_pad``, the mean in
        image space used to fill context that falls outside the image."""
        in_ = self.inputs[0]
        shape = self.blobs[in_].data.shape  # N, K, H, W
        self.crop_dims = np.array([shape[2], shape[3], shape[1]])
        self.context_pad = context_pad
        self.crop_mean = np.zeros(tuple(self.crop_dims), dtype=np.float32)
        if not context_pad:
            return
        mean = self.transformer.mean.get(in_)
        if mean is None:
            return
        # the mean lives in the net's input space: undo transpose, channel swap and raw scale
        crop_mean = np.array(mean, dtype=np.float32)
        swap = self.transformer.channel_swap.get(in_)
        if swap is not None:
            crop_mean = crop_mean[list(np.argsort(swap))]
        transpose = self.transformer.transpose.get(in_)
        crop_mean = crop_mean.transpose(tuple(int(i) for i in np.argsort(transpose)))
        raw_scale = self.transformer.raw_scale.get(in_)
        if raw_scale is not None:
            crop_mean = crop_mean / np.float32(raw_scale)
        self.crop_mean = np.broadcast_to(crop_mean, tuple(self.crop_dims)).astype(np.float32)
