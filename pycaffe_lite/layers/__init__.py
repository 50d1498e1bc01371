"""Built-in layers. Every module of this package registers its layer types on import.

A net imports only the modules of the types it uses (:func:`load_type`): which module
registers which type is read from the modules' source (their ``@register_layer(...)`` lines,
:func:`built_in_modules`) without importing them. A type that reading does not place (or that
its module did not register after all) loads every module, as :func:`load_all` always does.
"""

import importlib
import os
import pkgutil
import re
import sys

import numpy as np

from .. import plugins
from ..registry import LAYERS, UnknownTypeError

_loaded = False
_built_in = {}
# a class decorated at a module's top level: @register_layer("Type") or @register_layer(NAME)
# with NAME = "Type" assigned at the top level of the same module
_REGISTERS = re.compile(r'^@register_layer\((?:"([^"\\]+)"|([A-Za-z_]\w*))\)\s*$', re.M)


def load_all():
    """Import every layer module of this package (each registers its types)."""
    global _loaded
    if _loaded:
        return
    for info in pkgutil.walk_packages(__path__, __name__ + "."):
        importlib.import_module(info.name)
    _loaded = True


def built_in_modules():
    """{layer type: the module of this package that registers it}, read from the source of
    the modules (never imported for it); empty where the package is not plain files."""
    if not _built_in:
        root = os.path.dirname(os.path.abspath(__file__))
        found = {}
        for folder, subfolders, files in os.walk(root):
            subfolders[:] = sorted(d for d in subfolders if d.isidentifier())
            for name in sorted(f for f in files if f.endswith(".py")):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                if "@register_layer(" not in text:
                    continue
                parts = os.path.relpath(path, root)[:-3].split(os.sep)
                module = ".".join([__name__] + parts[:-1 if parts[-1] == "__init__" else None])
                for literal, constant in _REGISTERS.findall(text):
                    if constant:
                        value = re.search(r'^%s = "([^"\\]+)"\s*$' % constant, text, re.M)
                        literal = value.group(1) if value else ""
                    if literal:
                        found.setdefault(literal, module)
        _built_in.update(found)
    return _built_in


def load_type(type_name):
    """Import the built-in module that registers ``type_name`` (and those of the built-in
    types already registered by another module, a plugin's, so that the clash is reported as
    when every module loaded), or every module where no one module is known to register it."""
    if _loaded:
        return
    modules = built_in_modules()
    wanted = {modules[t] for t in [type_name] + LAYERS.names() if t in modules}
    for module in sorted(wanted):
        if module not in sys.modules:
            importlib.import_module(module)
    if type_name not in modules or type_name not in LAYERS:
        load_all()


def create_layer(layer_param, dtype=np.float32):
    """A layer object for ``layer_param`` (a LayerParameter), chosen by its type."""
    load_type(layer_param.type)
    context = "layer '%s'" % layer_param.name if layer_param.name else ""
    if layer_param.type not in LAYERS:
        plugins.load_configured()  # PYCAFFE_LITE_PLUGINS and installed plugins, once
        if layer_param.type not in LAYERS:
            from ..proto import fork_layer_fields

            fork = fork_layer_fields.not_provided_message(layer_param.type)
            if fork:
                raise UnknownTypeError(
                    "layer '%s' has type %s, %s. %s"
                    % (layer_param.name, layer_param.type, fork,
                       plugins.refused() or plugins.HOW))
            raise UnknownTypeError(LAYERS.unknown_message(layer_param.type, context)
                                   + ". " + (plugins.refused() or plugins.HOW))
    cls = LAYERS.get(layer_param.type, context)
    return cls(layer_param, dtype=dtype)
