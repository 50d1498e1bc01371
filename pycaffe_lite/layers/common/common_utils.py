"""Helpers shared by the common layers.

- axes: :func:`canonical_axis` (an ``axis`` parameter against a bottom),
  :func:`check_axis_or_legacy` and :func:`legacy_axis` (Concat's ``concat_dim`` / Slice's
  ``slice_dim``, the legacy form of ``axis``);
- broadcast parameters (Bias, Scale): :func:`broadcast_param_shape` (the shape of a learned blob
  covering ``num_axes`` axes from ``axis``) and :func:`broadcast_dims` (outer, dim, inner of a
  bottom around such a blob);
- :func:`setup_weight_and_bias`: the learned weight and optional bias of InnerProduct and Embed,
  checked when given with the layer, else created and filled;
- :class:`ViewLayer`: the base of Flatten and Reshape, whose top is a view of the bottom.
"""

import math

from ...errors import ShapeError
from ...fillers import fill
from ...layer import Layer


# ---- axes ------------------------------------------------------------------------------------
def canonical_axis(layer, x, axis):
    """``axis`` (negative counts from the end) as an index into the axes of blob ``x``; out of
    range, ``layer.error`` naming the axis and x's shape."""
    try:
        return x.canonical_axis_index(axis)
    except ShapeError:
        raise layer.error("axis %d out of range for a bottom of shape %s"
                          % (axis, x.shape)) from None


def check_axis_or_legacy(layer, param, legacy):
    """Refuse a layer parameter ``param`` that sets both ``axis`` and its legacy field
    ``legacy`` (e.g. ``"concat_dim"``)."""
    if param.HasField("axis") and param.HasField(legacy):
        raise layer.error("Either axis or %s should be specified; not both (got axis: %d, "
                          "%s: %d)" % (legacy, param.axis, legacy, getattr(param, legacy)))


def legacy_axis(layer, x, param, legacy):
    """The axis of blob ``x`` that ``param`` names: its legacy field ``legacy`` when set
    (non-negative, below x's number of axes), else its ``axis`` (see :func:`canonical_axis`)."""
    if param.HasField(legacy):
        dim = getattr(param, legacy)
        n = x.num_axes
        if dim >= n:
            raise layer.error("%s %d out of range for a bottom of shape %s (expected 0 <= %s < %d)"
                              % (legacy, dim, x.shape, legacy, n))
        return int(dim)
    return canonical_axis(layer, x, param.axis)


# ---- parameters broadcast along the other axes (Bias, Scale) ---------------------------------
def broadcast_param_shape(layer, x, axis, num_axes, what):
    """The shape of a learned ``what`` blob (e.g. ``"bias"``) covering ``num_axes`` axes of the
    bottom ``x`` from ``axis`` on (``num_axes`` -1: all remaining axes)."""
    axis = canonical_axis(layer, x, axis)
    if num_axes < -1:
        raise layer.error("num_axes must be non-negative, or -1 to extend to the end of "
                          "bottom[0], got %d" % num_axes)
    if num_axes >= 0 and x.num_axes < axis + num_axes:
        raise layer.error("%s blob's shape extends past bottom[0]'s shape %s when applied "
                          "starting with bottom[0] axis = %d (num_axes %d)"
                          % (what, x.shape, axis, num_axes))
    end = x.num_axes if num_axes == -1 else axis + num_axes
    return x.shape[axis:end]


def broadcast_dims(layer, x, axis, param, what):
    """``(outer, dim, inner)`` of the bottom ``x`` around the axes that the blob ``param`` (the
    ``what``, e.g. ``"bias"``) covers from ``axis`` on (from axis 0 when ``param`` is a scalar),
    after checking that its shape matches x's there."""
    axis = 0 if param.num_axes == 0 else canonical_axis(layer, x, axis)
    if x.num_axes < axis + param.num_axes or \
            x.shape[axis:axis + param.num_axes] != param.shape:
        raise layer.error("%s of shape %s does not match bottom[0] of shape %s from axis %d "
                          "(expected shape %s)" % (what, param.shape, x.shape, axis,
                                                   x.shape[axis:axis + param.num_axes]))
    return (x.count_range(0, axis), param.count, x.count_range(axis + param.num_axes))


# ---- learned weight and bias (InnerProduct, Embed) --------------------------------------------
def setup_weight_and_bias(layer, param, weight_shape):
    """Give ``layer`` its weight blob of ``weight_shape`` and, with ``param.bias_term``, a bias
    of shape ``(param.num_output,)``.

    Blobs that came with the layer (a saved net) must be these, in number and in count (they
    are reshaped to the expected shapes); otherwise the blobs are created and filled with
    ``param.weight_filler`` and ``param.bias_filler``.
    """
    bias_term = param.bias_term
    expected = [tuple(weight_shape)] + ([(int(param.num_output),)] if bias_term else [])
    blobs = layer.blobs
    if len(blobs) > 0:
        if len(blobs) != len(expected):
            raise layer.error("expected %d parameter blob(s) (bias_term: %s), got %d"
                              % (len(expected), bias_term, len(blobs)))
        for i, (blob, shape) in enumerate(zip(blobs, expected)):
            if blob.count != math.prod(shape):
                raise layer.error("parameter blob %d has shape %s, expected %s"
                                  % (i, blob.shape, shape))
            if blob.shape != shape:
                blob.reshape(shape)
        return
    fill(blobs.add_blob(*expected[0]), param.weight_filler)
    if bias_term:
        fill(blobs.add_blob(*expected[1]), param.bias_filler)


# ---- views -----------------------------------------------------------------------------------
class ViewLayer(Layer):
    """Base of layers whose top is the bottom with another shape: the top shares the bottom's
    data and diff, so neither pass has anything to compute."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    @staticmethod
    def share_as_view(top, x, shape):
        """Shape ``top`` as ``shape`` (of x's count) and make it share x's data and diff."""
        top.reshape(shape)
        top.share_data(x)
        top.share_diff(x)

    def forward(self, bottom, top):
        pass  # the top is a view of the bottom

    def backward(self, top, propagate_down, bottom):
        pass  # the top's diff is the bottom's diff
