"""Helpers shared by the loss layers: the normalisation mode and integer class labels.

``normalization_mode`` and ``get_normalizer`` follow Caffe's ``LossParameter`` rules (also used by
SigmoidCrossEntropyLoss); ``check_labels`` turns a float label array into class indices, refusing
labels that are not integers in ``[0, num_classes)`` (other than the ignore label).
"""

import numpy as np

from ...backend import get_array_module, to_host
from ...layer import defer_check
from ...proto import caffe_pb2

LossParameter = caffe_pb2.LossParameter

NORMALIZATION_NAMES = {
    LossParameter.FULL: "FULL",
    LossParameter.VALID: "VALID",
    LossParameter.BATCH_SIZE: "BATCH_SIZE",
    LossParameter.NONE: "NONE",
}


def normalization_mode(loss_param):
    """The effective normalisation of a ``LossParameter``.

    The legacy ``normalize`` flag applies only when ``normalization`` is not set explicitly:
    ``normalize: true`` means VALID and ``normalize: false`` means BATCH_SIZE. Otherwise the value
    of ``normalization`` (default VALID) is used.
    """
    if loss_param.HasField("normalize") and not loss_param.HasField("normalization"):
        return LossParameter.VALID if loss_param.normalize else LossParameter.BATCH_SIZE
    return loss_param.normalization


def get_normalizer(mode, outer_num, inner_num, valid_count=-1, layer=None):
    """The number a summed loss is divided by, never below 1.

    FULL: ``outer_num * inner_num``; VALID: ``valid_count`` (the number of non-ignored labels, or
    ``outer_num * inner_num`` when ``valid_count`` is -1); BATCH_SIZE: ``outer_num``; NONE: 1.
    The floor of 1 keeps a batch where every label is ignored from giving NaN.
    """
    if mode == LossParameter.FULL:
        normalizer = outer_num * inner_num
    elif mode == LossParameter.VALID:
        normalizer = outer_num * inner_num if valid_count == -1 else valid_count
    elif mode == LossParameter.BATCH_SIZE:
        normalizer = outer_num
    elif mode == LossParameter.NONE:
        normalizer = 1
    else:
        message = (f"unknown loss normalization mode {mode!r}; expected one of "
                   f"{', '.join(NORMALIZATION_NAMES.values())}")
        raise layer.error(message) if layer is not None else ValueError(message)
    return max(1.0, float(normalizer))


def _ignore_hint(layer, bad, ignore_label):
    """A hint for a layer without an ignore_label whose invalid labels are all one integer
    value: segmentation labels mark the pixels to skip so (255 in VOC's and ENet's files)."""
    values = np.unique(np.asarray(bad))
    if ignore_label is not None or len(values) != 1 or values[0] != np.trunc(values[0]):
        return ""
    field = "accuracy_param" if layer.type == "Accuracy" else "loss_param"
    return (f"; if {values[0]:g} marks labels to skip, set {field} {{ ignore_label: "
            f"{values[0]:g} }} in the layer")


def check_labels(layer, labels, num_classes, ignore_label=None):
    """Class indices and a validity mask for a float array of labels.

    Returns ``(index, valid)``: ``index`` holds the labels as int64 (ignored positions set to 0,
    so that they can be used to gather), ``valid`` is True where the label is not
    ``ignore_label``. A label that is not an integer, or lies outside ``[0, num_classes)``
    without being the ignore label, raises ``layer.error`` naming the value.
    """
    xp = get_array_module(labels)
    truncated = xp.trunc(labels)
    # Caffe casts labels to int before comparing them to the ignore label.
    if ignore_label is None:
        valid = xp.ones(labels.shape, dtype=bool)
    else:
        valid = truncated != ignore_label
    bad = (truncated != labels) | (valid & ((labels < 0) | (labels >= num_classes)))
    failed = bad.any()
    if xp is not np and defer_check(failed, lambda: check_labels(
            layer, to_host(labels), num_classes, ignore_label)):
        # read after the captured iteration, whose re-check raises the error below; until
        # then a bad label gathers class 0 (the iteration's result is not used)
        return xp.where(valid & ~bad, truncated, 0).astype(xp.int64), valid
    if bool(failed):
        value = float(to_host(labels[bad])[0])
        n_bad = int(bad.sum())
        what = "not an integer" if value != np.trunc(value) else "out of range"
        extra = "" if ignore_label is None else f" (or the ignore_label {ignore_label})"
        raise layer.error(f"label value {value:g} is {what}: labels must be integers in "
                          f"[0, {num_classes}){extra}; {n_bad} of {labels.size} labels are "
                          "invalid" + _ignore_hint(layer, to_host(labels[bad]), ignore_label))
    index = xp.where(valid, truncated, 0).astype(xp.int64)
    return index, valid
