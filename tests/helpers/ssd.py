"""Small SSD problems shared by the SSD layer tests: priors from a real PriorBox layer,
random predictions and ground-truth rows."""

import numpy as np

from pycaffe_lite.blob import Blob
from pycaffe_lite.testing import empty_blobs, make_layer


def priors(height=3, width=3, img=30, dtype=np.float64, text=None):
    """PriorBox top for a ``height`` x ``width`` map on an ``img`` x ``img`` image."""
    text = text or ('type: "PriorBox" prior_box_param { min_size: 9 max_size: 18 '
                    'aspect_ratio: 2 flip: true variance: 0.1 variance: 0.1 variance: 0.2 '
                    'variance: 0.2 }')
    layer = make_layer(text, dtype=dtype)
    bottom = [Blob((1, 1, height, width), dtype), Blob((1, 3, img, img), dtype)]
    top = empty_blobs(1, dtype)
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return top[0].data.copy()


def gt_rows(boxes, dtype=np.float64):
    """A label blob (1, 1, G, 8) from rows (image, label, xmin, ymin, xmax, ymax[, difficult])."""
    rows = []
    for k, b in enumerate(boxes):
        difficult = b[6] if len(b) > 6 else 0
        rows.append([b[0], b[1], k, b[2], b[3], b[4], b[5], difficult])
    blob = Blob((1, 1, len(rows), 8), dtype)
    blob.data[...] = np.asarray(rows, dtype=dtype).reshape(blob.shape)
    return blob


def blob_of(array, dtype=np.float64):
    blob = Blob(array.shape, dtype)
    blob.data[...] = array
    return blob
