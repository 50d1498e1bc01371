"""Coordinate maps between the tops of a NetSpec (pycaffe's ``caffe.coord_map``).

A map ``(axis, a, b)`` says where a position lands from one top to another: coordinate ``x`` of
the first is ``a * x + b`` of the second, on the spatial axes from ``axis + 1`` on (``axis``
None: any axes, as for pointwise layers). ``a`` and ``b`` hold one value per spatial axis, or a
single one for all. Fully convolutional nets use :func:`crop` to cut an upsampled score map back
to the input's size (FCN's ``crop(n.upscore, n.data)``)::

    from pycaffe_lite.coord_map import crop
    n.score = crop(n.upscore, n.data)

The maps are read from the layers' NetSpec arguments (``kernel_size``, ``stride``, ``pad``,
``dilation``, or the same inside ``convolution_param`` / ``pooling_param``; Crop's ``axis`` and
``offset``).
"""

import numpy as np

from .errors import CaffeError
from .net_spec import layers as L

__all__ = ["PASS_THROUGH_LAYERS", "conv_params", "crop_params", "coord_map", "compose",
           "inverse", "coord_map_from_to", "crop", "UndefinedMapException",
           "AxisMismatchException", "CoordMapError", "CropError"]

# layers whose tops keep their bottoms' coordinates
PASS_THROUGH_LAYERS = ["AbsVal", "BatchNorm", "Bias", "BNLL", "Dropout", "Eltwise", "ELU", "Log",
                       "LRN", "Exp", "MVN", "Power", "ReLU", "PReLU", "Scale", "Sigmoid",
                       "Split", "TanH", "Threshold"]

_IDENTITY = (None, 1, 0)


class UndefinedMapException(CaffeError):
    """A layer whose tops have no coordinate map to its bottoms (InnerProduct, ...)."""


class AxisMismatchException(CaffeError):
    """Two maps over different axes cannot be composed."""


class CoordMapError(CaffeError, RuntimeError):
    """Two tops that no chain of spatial layers connects, or a spatial layer whose arguments
    give no map (a RuntimeError too, as pycaffe's error for unconnected tops)."""


class CropError(CaffeError, AssertionError):
    """A crop that cannot be made: scales differ, or the offset is negative or fractional (an
    AssertionError too, as pycaffe's checks)."""


def _spatial_args(fn, nested):
    args = fn.params.get(nested)
    return dict(args) if isinstance(args, dict) else fn.params


def conv_params(fn):
    """``(axis, stride, kernel extent, pad)`` of a Convolution (the forks' depthwise types
    too), Deconvolution, Im2col or Pooling layer's arguments; the kernel extent counts the
    dilation."""
    nested = "pooling_param" if fn.type_name == "Pooling" else "convolution_param"
    args = _spatial_args(fn, nested)
    legacy = sorted({"kernel_h", "kernel_w", "stride_h", "stride_w", "pad_h", "pad_w"}
                    & (set(args) | set(fn.params)))
    if legacy:
        raise CoordMapError("%s layer: coordinate maps need kernel_size / stride / pad, not "
                            "the _h/_w forms (%s)" % (fn.type_name, ", ".join(legacy)))
    if "kernel_size" not in args:
        raise CoordMapError("%s layer: no kernel_size to map coordinates through"
                            % fn.type_name)
    kernel = np.array(args["kernel_size"], ndmin=1)
    dilation = np.array(args.get("dilation", 1), ndmin=1)
    return (args.get("axis", 1), np.array(args.get("stride", 1), ndmin=1),
            (kernel - 1) * dilation + 1, np.array(args.get("pad", 0), ndmin=1))


def crop_params(fn):
    """``(axis, offset)`` of a Crop layer's arguments (axis 2 by default)."""
    args = _spatial_args(fn, "crop_param")
    return args.get("axis", 2), np.array(args.get("offset", 0), ndmin=1)


def coord_map(fn):
    """The map ``(axis, a, b)`` from a layer's bottom coordinates to its top's; an
    :class:`UndefinedMapException` for layers without one."""
    kind = fn.type_name
    if kind in ("Convolution", "ConvolutionDepthwise", "DepthwiseConvolution", "Pooling",
                "Im2col"):
        axis, stride, extent, pad = conv_params(fn)
        # output i looks at inputs stride * i - pad .. + extent - 1, centred on the middle
        return axis, 1 / stride, (pad - (extent - 1) / 2) / stride
    if kind == "Deconvolution":
        axis, stride, extent, pad = conv_params(fn)
        return axis, stride, (extent - 1) / 2 - pad
    if kind in PASS_THROUGH_LAYERS:
        return _IDENTITY
    if kind == "Crop":
        axis, offset = crop_params(fn)
        return axis - 1, 1, -offset  # the map's axis is the one before the first cropped
    raise UndefinedMapException("no coordinate map through a %s layer" % kind)


def compose(base_map, next_map):
    """The map that applies ``next_map`` and then ``base_map``: scales multiply, and
    ``next_map``'s shift is scaled by ``base_map``'s scale."""
    ax1, a1, b1 = base_map
    ax2, a2, b2 = next_map
    if ax1 is not None and ax2 is not None and ax1 != ax2:
        raise AxisMismatchException("cannot compose coordinate maps over axis %s and axis %s"
                                    % (ax1, ax2))
    return (ax2 if ax1 is None else ax1), a1 * a2, a1 * b2 + b1


def inverse(coord_map):
    """The map back: ``x = (y - b) / a``."""
    ax, a, b = coord_map
    return ax, 1 / a, -b / a


def _bottoms(top):
    # every bottom of a layer shares its map, except Crop's second (the reference shape)
    inputs = top.fn.inputs
    return inputs[:1] if top.fn.type_name == "Crop" else inputs


def _walk(start, found=None):
    """The maps from ``start`` back to each top it depends on through mappable layers; with
    ``found``, stops at the first top in it and returns (that top, maps)."""
    maps = {start: _IDENTITY}
    frontier = [start]
    while frontier:
        top = frontier.pop()
        if found is not None and top in found:
            return top, maps
        try:
            step = coord_map(top.fn)
        except UndefinedMapException:
            continue
        for bottom in _bottoms(top):
            maps[bottom] = compose(maps[top], step)
            frontier.append(bottom)
    return None, maps


def coord_map_from_to(top_from, top_to):
    """The map from ``top_from``'s coordinates to ``top_to``'s, through a top both depend
    on (a :class:`CoordMapError` when there is none)."""
    _, from_maps = _walk(top_from)
    common, to_maps = _walk(top_to, found=from_maps)
    if common is None:
        raise CoordMapError("Could not compute map between tops; are they connected by "
                            "spatial layers? (no top reached from both through convolution, "
                            "Pooling, Deconvolution, Crop or pointwise layers)")
    return compose(to_maps[common], inverse(from_maps[common]))


def crop(top_from, top_to):
    """A Crop layer that cuts ``top_from`` to ``top_to``'s extent where the coordinates line
    up: ``layers.Crop(top_from, top_to, crop_param=dict(axis=..., offset=[...]))``."""
    ax, a, b = coord_map_from_to(top_from, top_to)
    a, b = np.asarray(a), np.asarray(b)
    if not (a == 1).all():
        raise CropError("scale mismatch on crop (a = %s): the two tops are not at the same "
                        "resolution" % (a,))
    if not (b <= 0).all():
        raise CropError("cannot crop negative offset (b = %s): the top to crop is smaller "
                        "than the reference" % (b,))
    if not (np.round(b) == b).all():
        raise CropError("cannot crop noninteger offset (b = %s)" % (b,))
    offset = [int(v) for v in np.atleast_1d(-np.round(b))]
    return L.Crop(top_from, top_to, crop_param=dict(axis=ax + 1, offset=offset))
