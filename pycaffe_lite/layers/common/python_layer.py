"""Python: a layer written by the user in Python, named by module and class in the prototxt.

::

    layer {
      name: "mine" type: "Python" bottom: "x" top: "y"
      python_param { module: "my_layers" layer: "MyLayer" param_str: "anything" }
    }

``my_layers`` is imported (the current working directory is put on ``sys.path`` first, as
Caffe users expect; ``PYTHONPATH`` works too) and ``MyLayer`` must subclass
``pycaffe_lite.Layer`` (``caffe.Layer`` after ``import pycaffe_lite as caffe``), overriding
``setup``, ``reshape``, ``forward`` and ``backward`` with pycaffe's signatures.

A few modules that published nets name are built in and used when the module cannot be
imported: ``rpn.proposal_layer.ProposalLayer`` (py-faster-rcnn and R-FCN's region proposals,
:mod:`pycaffe_lite.layers.detection.proposal_layer`) and ENet's
``spatial_dropout.SpatialDropoutLayer`` (:mod:`.spatial_dropout_layer`) and CTPN's
``layers.text_proposal_layer.ProposalLayer``
(:mod:`pycaffe_lite.layers.detection.text_proposal_layer`).
"""

import inspect
import os

import numpy as np

from ... import plugins
from ...errors import LayerError
from ...layer import BlobVec, Layer
from ...registry import register_layer
from ..detection.proposal_layer import ProposalLayer
from ..detection.text_proposal_layer import TextProposalLayer
from .spatial_dropout_layer import SpatialDropoutLayer

TYPE = "Python"

# (python_param.module, python_param.layer) -> the built-in class used when that module
# cannot be imported
BUILT_IN = {("rpn.proposal_layer", "ProposalLayer"): ProposalLayer,
            ("spatial_dropout", "SpatialDropoutLayer"): SpatialDropoutLayer,
            ("layers.text_proposal_layer", "ProposalLayer"): TextProposalLayer}


def load_layer_class(layer_param):
    """The user's Layer subclass that ``layer_param.python_param`` names (a LayerError
    naming the module, the class and the layer when it cannot be had)."""
    name = layer_param.name
    p = layer_param.python_param
    if not p.module:
        raise LayerError("python_param.module is required (the Python module that defines "
                         "the layer class)", name, TYPE)
    if not p.layer:
        raise LayerError("python_param.layer is required (the name of the layer class in "
                         "module '%s')" % p.module, name, TYPE)
    try:
        module = plugins.import_user_module(p.module)
    except Exception as exc:
        built_in = BUILT_IN.get((p.module, p.layer))
        if built_in is not None and plugins.not_found(p.module, exc):
            return built_in
        where = ("looked in the current directory %s and sys.path" % os.getcwd()
                 if plugins.not_found(p.module, exc) else None)
        raise LayerError("cannot import python_param.module '%s'%s: %s"
                         % (p.module, " (%s)" % where if where else "",
                            plugins.import_failure(p.module, exc)),
                         name, TYPE) from exc
    cls = getattr(module, p.layer, None)
    where = getattr(module, "__file__", None) or p.module
    if cls is None:
        raise LayerError("module '%s' (%s) has no class '%s' (python_param.layer)"
                         % (p.module, where, p.layer), name, TYPE)
    if not (isinstance(cls, type) and issubclass(cls, Layer)):
        raise LayerError("python_param.layer '%s' in module '%s' is %r, not a subclass of "
                         "pycaffe_lite.Layer (caffe.Layer)" % (p.layer, p.module, cls),
                         name, TYPE)
    return cls


@register_layer(TYPE)
class PythonLayer(Layer):
    """A creator for ``type: "Python"``: constructing it returns an instance of the user's class.

    ``PythonLayer(layer_param, dtype)`` imports ``python_param.module``, takes its class
    ``python_param.layer`` (a subclass of :class:`pycaffe_lite.Layer`), instantiates it with
    ``(layer_param, dtype=dtype)`` (``(layer_param)`` alone, as pycaffe, when the class has an
    ``__init__`` of its own without ``dtype``) and sets ``param_str``
    (``python_param.param_str``) on it, and ``param_str_`` (the same string, under the name
    py-faster-rcnn's layers read). ``phase`` is the Layer's own (the layer parameter's phase,
    which the Net sets: ``TRAIN`` or ``TEST``, ints whose ``str()`` is the name).

    The user's layer sees pycaffe-style blobs (``bottom[0].data``, ``top[0].reshape(*shape)``,
    ``top[0].data[...] = ...``, ``bottom[0].diff[...] = ...``) and may create learnable
    params in ``setup`` with ``self.blobs.add_blob(*shape)`` (solvers update them and snapshots
    save them; a layer built from a saved net already holds them in ``self.blobs``, so create
    them only ``if not self.blobs``).

    Bottoms / Tops: whatever the user's layer declares (no constraint by default).
    Params: ``python_param { module (required), layer (required), param_str (""),
    share_in_parallel (false; accepted and ignored: there is no multi-GPU training) }``.
    """

    def __new__(cls, layer_param=None, dtype=np.float32):
        if cls is not PythonLayer:  # a user class deriving from this one: build it normally
            return super().__new__(cls)
        if layer_param is None:
            raise LayerError("a Python layer needs a LayerParameter with python_param",
                             None, TYPE)
        user_cls = load_layer_class(layer_param)
        if _takes_dtype(user_cls):
            layer = user_cls(layer_param, dtype=dtype)
        else:  # pycaffe's contract: an __init__ of one's own that takes the LayerParameter only
            layer = user_cls(layer_param)
            _use_dtype(layer, dtype)
        # param_str_: the name py-faster-rcnn's fork (caffe-fast-rcnn) gives it
        layer.param_str = layer.param_str_ = layer_param.python_param.param_str
        return layer


def _takes_dtype(cls):
    """Whether ``cls(layer_param, dtype=...)`` is accepted: the Layer's own __init__, or one of
    the user's with a ``dtype`` or ``**kwargs`` parameter."""
    init = getattr(cls, "__init__", None)
    if init is Layer.__init__:
        return True
    try:
        params = inspect.signature(init).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.name == "dtype" or p.kind is p.VAR_KEYWORD for p in params)


def _use_dtype(layer, dtype):
    """Give a layer built without ``dtype`` the net's (its saved blobs converted)."""
    dtype = np.dtype(dtype)
    if getattr(layer, "dtype", None) == dtype:
        return
    layer.dtype = dtype
    blobs = BlobVec(dtype)
    for blob in layer.blobs:
        blobs.add_blob(*blob.shape).data[...] = blob.data
    layer.blobs = blobs
