"""Run an SSD detector (a net ending in DetectionOutput) on one image.

>>> import pycaffe_lite as caffe
>>> from pycaffe_lite.detection import detect
>>> net = caffe.Net("deploy.prototxt", "res10_300x300_ssd_iter_140000.caffemodel", caffe.TEST)
>>> found = detect(net, image_bgr, mean=(104, 177, 123), confidence_threshold=0.5)
>>> found.boxes, found.labels, found.scores   # pixels (xmin, ymin, xmax, ymax), ints, floats

The preprocessing is OpenCV's ``cv2.dnn.blobFromImage``: the image is resized (bilinear, as
``cv2.resize`` does it: a uint8 image in OpenCV's fixed point, before the float conversion)
to the net's input size, optionally its first and third channels are swapped, ``mean``
(given in the net's channel order) is subtracted and the result multiplied by ``scale``.
R-CNN-style window detection stays in :class:`pycaffe_lite.Detector`.
"""

import collections

import numpy as np

from .data import datum
from .errors import CaffeError, ShapeError

Detections = collections.namedtuple("Detections", "boxes labels scores")


def preprocess(image, size, mean=None, scale=1.0, swap_rb=False):
    """An ``H x W x C`` (or ``H x W``) image as a ``1 x C x height x width`` float32 blob."""
    im = np.asarray(image)
    if im.ndim == 2:
        im = im[:, :, None]
    if im.ndim != 3 or not im.size:
        raise ShapeError("detect needs an H x W x C (or H x W) image, got shape %s"
                         % (np.shape(image),))
    height, width = size
    if im.shape[:2] != (height, width):  # as cv2.resize (INTER_LINEAR) on the image's pixels
        im = datum.resize(im if im.dtype == np.uint8 else im.astype(np.float32), height, width)
    im = im.astype(np.float32)
    if swap_rb:
        if im.shape[2] < 3:
            raise ShapeError("swap_rb needs at least 3 channels, the image has %d"
                             % im.shape[2])
        im = im[:, :, [2, 1, 0] + list(range(3, im.shape[2]))]
    if mean is not None:
        mean = np.asarray(mean, dtype=np.float32).reshape(-1)
        if mean.size not in (1, im.shape[2]):
            raise ShapeError("mean has %d values for %d channels" % (mean.size, im.shape[2]))
        im = im - mean
    im = im * np.float32(scale)
    return np.ascontiguousarray(im.transpose(2, 0, 1)[None])


def _last_output(net):
    """The output blob the net makes last (net.outputs lists them in name order)."""
    outputs, tops = set(net.outputs), net.top_names
    return next((t for layer in reversed(net.layer_names) for t in reversed(tops[layer])
                 if t in outputs), None)


def detect(net, image, mean=None, scale=1.0, swap_rb=False, confidence_threshold=0.0,
           input_blob=None, output_blob=None, clip=True):
    """Detections of an SSD ``net`` on ``image`` (``H x W x C``, uint8 or float).

    ``input_blob`` defaults to the net's first input, ``output_blob`` to the output made by
    the last layer that makes one (DetectionOutput's ``[1, 1, K, 7]`` rows). Returns
    ``Detections(boxes, labels, scores)``: boxes ``(K, 4)`` as xmin, ymin, xmax, ymax in the
    image's pixels (clipped to the image unless ``clip`` is false), labels ``(K,)`` ints and
    scores ``(K,)``, best first, keeping scores of at least ``confidence_threshold``."""
    input_blob = input_blob or (net.inputs[0] if net.inputs else None)
    output_blob = output_blob or _last_output(net)
    if input_blob not in net.blobs:
        raise CaffeError("detect: the net has no input blob %r" % (input_blob,))
    if output_blob not in net.blobs:
        raise CaffeError("detect: the net has no output blob %r" % (output_blob,))
    shape = net.blobs[input_blob].shape
    if len(shape) != 4:
        raise ShapeError("detect: input blob %r has shape %s, not N x C x H x W"
                         % (input_blob, shape))
    blob = preprocess(image, shape[2:], mean, scale, swap_rb)
    if blob.shape[1] != shape[1]:
        raise ShapeError("detect: the image has %d channels, the net's input %d"
                         % (blob.shape[1], shape[1]))
    if shape[0] != 1:
        net.blobs[input_blob].reshape(1, *shape[1:])
        net.reshape()
    rows = net.forward(blobs=[output_blob], **{input_blob: blob})[output_blob]
    if rows.ndim != 4 or rows.shape[-1] != 7:
        raise ShapeError("detect: output %r has shape %s, not DetectionOutput's rows of 7"
                         % (output_blob, rows.shape))
    rows = rows.reshape(-1, 7)
    rows = rows[(rows[:, 1] >= 0) & (rows[:, 2] >= confidence_threshold)]
    rows = rows[np.argsort(-rows[:, 2], kind="stable")]
    height, width = np.shape(image)[:2]
    boxes = rows[:, 3:7] * np.array([width, height, width, height], dtype=np.float32)
    if clip:
        boxes = np.clip(boxes, 0, [width, height, width, height])
    return Detections(boxes.astype(np.float32), rows[:, 1].astype(np.int64),
                      rows[:, 2].astype(np.float32))
