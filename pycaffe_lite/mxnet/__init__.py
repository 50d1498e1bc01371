"""MXNet models in: a symbol file (``NAME-symbol.json``) and its parameters
(``NAME-0000.params``) as a Caffe prototxt and ``.caffemodel``, with MXNet's numerics. No MXNet
is needed: both files are read here (:mod:`.symbol`, :mod:`.params`).

::

    from pycaffe_lite import mxnet
    prototxt, caffemodel, outputs = mxnet.to_caffe("model-symbol.json", "model-0000.params",
                                                   "model", {"data": (1, 3, 112, 112)})
    net = mxnet.load("model-symbol.json", "model-0000.params", {"data": (1, 3, 112, 112)})

The command line: ``pycaffe-lite import_mxnet --symbol model-symbol.json --params
model-0000.params --output-prefix model [--input-shape data=1,3,112,112]``. The operator
table and what does not convert: ``docs/mxnet.md``.
"""

import os

from ..errors import CaffeError
from .context import CONVERTERS
from .convert import convert_symbol, fill_weights
from .params import parse_params, read_params
from .symbol import parse_symbol, read_symbol


def _shapes(input_shapes):
    out = {}
    for name, shape in (input_shapes or {}).items():
        try:
            dims = tuple(int(d) for d in shape)
        except (TypeError, ValueError):
            raise CaffeError("input_shapes['%s'] = %r is not a tuple of sizes"
                             % (name, shape)) from None
        if not dims or any(d <= 0 for d in dims):
            raise CaffeError("input_shapes['%s'] = %r: sizes must be positive" % (name, shape))
        out[name] = dims
    return out


def convert(symbol_path, params_path, input_shapes=None):
    """``(net, outputs)``: the NetParameter (TEST net; Input layers named after the
    symbol's data variables; the weights in its layers) and the output blob names."""
    net, weights, outputs = _convert(symbol_path, params_path, input_shapes)
    return fill_weights(net, weights), outputs


def _convert(symbol_path, params_path, input_shapes):
    symbol = read_symbol(symbol_path)
    args, aux = read_params(params_path) if params_path is not None else ({}, {})
    name = os.path.basename(os.fspath(symbol_path))
    for suffix in ("-symbol.json", ".json"):
        if name.endswith(suffix):
            name = name[:-len(suffix)]
            break
    return convert_symbol(symbol, args, aux, _shapes(input_shapes), name=name or "net")


def to_caffe(symbol_path, params_path, prefix, input_shapes=None):
    """Convert and write ``prefix.prototxt`` (no weights) and ``prefix.caffemodel``.
    ``input_shapes``: a dict variable name -> shape tuple (needed where the symbol file does
    not give a variable's shape, as Gluon's exports do not). Returns ``(prototxt path,
    caffemodel path, output blob names)``."""
    from ..proto.protoio import atomic_write_all, binary_bytes, text_bytes

    net, weights, outputs = _convert(symbol_path, params_path, input_shapes)
    prototxt = os.fspath(prefix) + ".prototxt"
    caffemodel = os.fspath(prefix) + ".caffemodel"
    atomic_write_all([(prototxt, text_bytes(net), "the prototxt"),
                      (caffemodel, binary_bytes(fill_weights(net, weights)), "the caffemodel")])
    return prototxt, caffemodel, outputs


def load(symbol_path, params_path, input_shapes=None, phase=None, fold=None):
    """The converted model as a built :class:`pycaffe_lite.Net` with its weights (TEST
    phase unless ``phase`` is given; a TEST net folded as ``Net(prototxt, weights, TEST)``
    folds, unless ``fold=False``); nothing is written to disk."""
    from .. import net_fold
    from ..net import Net
    from ..proto import caffe_pb2

    deploy, weights, _ = _convert(symbol_path, params_path, input_shapes)
    phase = caffe_pb2.TEST if phase is None else phase
    net = Net(deploy, phase=phase)
    layers = net.layer_dict
    for name, arrays in weights.items():  # shapes checked by the conversion
        for blob, arr in zip(layers[name].blobs, arrays):
            blob.data[...] = arr
    if phase == caffe_pb2.TEST and (net_fold.enabled_by_default() if fold is None else fold):
        net_fold.fold(net, True)
    return net


__all__ = ["CONVERTERS", "convert", "convert_symbol", "load", "parse_params", "parse_symbol",
           "read_params", "read_symbol", "to_caffe"]
