"""Classifier: a Net that classifies images (pycaffe's ``caffe.Classifier``).

Images (H x W x K, as :func:`pycaffe_lite.io.load_image` gives them) are resized to
``image_dims``, cropped to the net's input size (the center crop, or the ten crops of
:func:`pycaffe_lite.io.oversample` whose predictions are averaged), preprocessed by a
:class:`pycaffe_lite.io.Transformer` and run through the net in batches.
"""

import numpy as np

from . import io as caffe_io
from .errors import CaffeError, ShapeError
from .net import TEST, Net

__all__ = ["Classifier"]


def configure_transformer(net, mean=None, input_scale=None, raw_scale=None, channel_swap=None):
    """A Transformer for the net's first input: H x W x K -> K x H x W plus the given steps."""
    if not net.inputs:
        raise CaffeError("the net has no inputs (Input layers or net-level 'input'); a "
                         "Classifier or Detector needs one to feed images to")
    in_ = net.inputs[0]
    shape = net.blobs[in_].data.shape
    if len(shape) != 4:
        raise ShapeError("input '%s' has shape %s; images need a 4-D (N, K, H, W) input"
                         % (in_, shape))
    transformer = caffe_io.Transformer({in_: shape})
    transformer.set_transpose(in_, (2, 0, 1))
    if mean is not None:
        transformer.set_mean(in_, mean)
    if input_scale is not None:
        transformer.set_input_scale(in_, input_scale)
    if raw_scale is not None:
        transformer.set_raw_scale(in_, raw_scale)
    if channel_swap is not None:
        transformer.set_channel_swap(in_, channel_swap)
    return transformer


class Classifier(Net):
    """A TEST-phase Net with image preprocessing and :meth:`predict`.

    ``image_dims``: (height, width) images are resized to before cropping; default the net's
    input size (whole-image crop). ``mean``, ``input_scale``, ``raw_scale``, ``channel_swap``:
    the Transformer's steps for the first input.
    """

    def __init__(self, model_file, pretrained_file=None, image_dims=None, mean=None,
                 input_scale=None, raw_scale=None, channel_swap=None):
        super().__init__(model_file, phase=TEST, weights=pretrained_file)
        self.transformer = configure_transformer(self, mean, input_scale, raw_scale,
                                                 channel_swap)
        self.crop_dims = np.array(self.blobs[self.inputs[0]].data.shape[2:])
        if image_dims is None or len(image_dims) == 0:
            image_dims = self.crop_dims
        self.image_dims = np.array([int(d) for d in image_dims])
        if len(self.image_dims) != 2:
            raise ShapeError("image_dims must be (height, width), got %r" % (image_dims,))
        if np.any(self.image_dims < self.crop_dims):
            raise ShapeError("image_dims %s are smaller than the net's input %s: crops would "
                             "not fit" % (tuple(self.image_dims), tuple(self.crop_dims)))

    def predict(self, inputs, oversample=True):
        """Class scores (N x C) of N images (H x W x K arrays): the average over the ten
        oversampled crops (each image's scores flattened into one row, as pycaffe), or the
        center crop's output as the net gives it when ``oversample`` is False."""
        inputs = [np.asarray(im) for im in inputs]
        if not inputs:
            raise CaffeError("predict needs at least one image")
        for i, im in enumerate(inputs):
            if im.ndim != 3:
                raise ShapeError("predict needs H x W x K images: image %d has shape %s (a grey "
                                 "image is H x W x 1: image[:, :, None], as "
                                 "caffe.io.load_image(path, color=False) gives it)"
                                 % (i, im.shape))
        channels = inputs[0].shape[2]
        for i, im in enumerate(inputs):
            if im.shape[2] != channels:
                raise ShapeError("predict needs images with one channel count: image %d has "
                                 "shape %s, image 0 %s" % (i, im.shape, inputs[0].shape))
        wanted = self.blobs[self.inputs[0]].shape
        if len(wanted) == 4 and wanted[1] != channels:
            raise ShapeError("the images have %d channel%s (H x W x %d), the net's input "
                             "'%s' takes %d (%s)" % (channels, "s" if channels != 1 else "",
                                                     channels, self.inputs[0], wanted[1],
                                                "load them with caffe.io.load_image(path, "
                                                "color=False)" if wanted[1] == 1 else
                                                "load them in colour: caffe.io.load_image(path)"
                                                if wanted[1] == 3 else "as many as the net's"))
        h, w = (int(d) for d in self.image_dims)
        resized = np.zeros((len(inputs), h, w, channels), dtype=np.float32)
        for i, im in enumerate(inputs):
            resized[i] = caffe_io.resize_image(im, (h, w))
        if oversample:
            crops = caffe_io.oversample(resized, self.crop_dims)
        else:
            y, x = caffe_io.crop_positions((h, w), self.crop_dims)[4]
            ch, cw = (int(d) for d in self.crop_dims)
            crops = resized[:, y:y + ch, x:x + cw, :]
        in_ = self.inputs[0]
        caffe_in = np.stack([self.transformer.preprocess(in_, c) for c in crops])
        out = self.forward_all(**{in_: caffe_in})
        predictions = out[self.outputs[0]]
        if oversample:  # one row per image, flattened as pycaffe's (N x C for N x C x 1 x 1)
            predictions = predictions.reshape((len(inputs), 10, -1)).mean(axis=1)
        return predictions
