"""Built-in layers. Every module of this package registers its layer types on import."""

import importlib
import pkgutil

import numpy as np

from .. import plugins
from ..registry import LAYERS, UnknownTypeError

_loaded = False


def load_all():
    """Import every layer module of this package (each registers its types)."""
    global _loaded
    if _loaded:
        return
    for info in pkgutil.walk_packages(__path__, __name__ + "."):
        importlib.import_module(info.name)
    _loaded = True


def create_layer(layer_param, dtype=np.float32):
    """A layer object for ``layer_param`` (a LayerParameter), chosen by its type."""
    load_all()
    context = "layer '%s'" % layer_param.name if layer_param.name else ""
    if layer_param.type not in LAYERS:
        plugins.load_configured()  # PYCAFFE_LITE_PLUGINS and installed plugins, once
        if layer_param.type not in LAYERS:
            raise UnknownTypeError(LAYERS.unknown_message(layer_param.type, context)
                                   + ". " + plugins.HOW)
    cls = LAYERS.get(layer_param.type, context)
    return cls(layer_param, dtype=dtype)
