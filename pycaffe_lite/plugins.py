"""Modules of your own that register layers (or fillers, solvers, ...) before a net is built.

A plugin is a module that calls ``@caffe.register_layer`` (or another registry) when it is
imported. Three ways name one:

- ``--plugin MODULE`` on each command that builds nets (repeat it for several);
- the environment variable ``PYCAFFE_LITE_PLUGINS=mod1,mod2``;
- an installed distribution's entry point in the group ``pycaffe_lite.plugins``
  (``name = module`` or ``name = module:object``).

The command line imports all three before it runs the command; a ``caffe.Net`` built from
Python imports the variable's and the entry points' modules the first time it meets a layer
type nobody registered. A module that cannot be imported is an error naming it and what named
it. Plugins run code, as ``Python`` layers do: where Python layers are turned off
(``--no_python_layers``, ``PYCAFFE_LITE_ALLOW_PYTHON_LAYERS=0``) a plugin named by the flag or
the variable is refused, and the entry points are not loaded.
"""

import importlib
import importlib.util
import logging
import os
import sys
import threading

from . import python_layers
from .errors import CaffeError

log = logging.getLogger("pycaffe_lite")

ENV = "PYCAFFE_LITE_PLUGINS"
GROUP = "pycaffe_lite.plugins"
HOW = ("A layer type of your own is known once its module is imported: --plugin MODULE on the "
       "command line, %s=MODULE, an entry point of the group %s, or an import in your script"
       % (ENV, GROUP))

_lock = threading.RLock()
_configured = []  # True once the variable's and the entry points' modules were imported
_aliased = []  # True once 'caffe' was looked for (and, where none is installed, aliased)
PACKAGE = __name__.rpartition(".")[0]


class PluginError(CaffeError):
    """A plugin module that cannot be imported, or plugins that are turned off."""


def env_modules():
    """The modules named by ``PYCAFFE_LITE_PLUGINS`` (separated by ',')."""
    return [m.strip() for m in os.environ.get(ENV, "").split(",") if m.strip()]


def entry_points():
    """The installed entry points of the group ``pycaffe_lite.plugins``."""
    from importlib.metadata import entry_points as installed

    return sorted(installed(group=GROUP), key=lambda ep: ep.name)


class CaffeAlias:
    """A meta path finder and loader: ``caffe`` and ``caffe.X`` are ``pycaffe_lite`` and
    ``pycaffe_lite.X``, the same module objects (so ``caffe.proto.caffe_pb2`` is not loaded
    a second time, and ``caffe.Layer`` is the class a Python layer must subclass)."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname != "caffe" and not fullname.startswith("caffe."):
            return None
        real = PACKAGE + fullname[len("caffe"):]
        try:
            found = importlib.util.find_spec(real)
        except (ImportError, ValueError):
            return None
        if found is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, cls, is_package=found.submodule_search_locations is not None)

    @staticmethod
    def create_module(spec):
        return None

    @staticmethod
    def exec_module(module):
        # the import system returns what sys.modules holds under the name afterwards
        sys.modules[module.__name__] = importlib.import_module(
            PACKAGE + module.__name__[len("caffe"):])
        if module.__name__ == "caffe":
            log.info("'import caffe' gives %s (no package named caffe is installed)", PACKAGE)


def alias_caffe():
    """Let modules written for pycaffe (``import caffe``, ``class L(caffe.Layer)``,
    ``from caffe.proto import caffe_pb2``) import ``pycaffe_lite`` under that name, where no
    package named ``caffe`` is installed (an installed one is left alone). Done once, before
    the first module of the user's is imported."""
    with _lock:
        if _aliased:
            return
        _aliased.append(True)
        if "caffe" in sys.modules:
            return
        try:
            installed = importlib.util.find_spec("caffe")
        except (ImportError, ValueError):
            installed = None
        # a folder named caffe (a source checkout) is a namespace package, not pycaffe
        if installed is not None and installed.origin not in (None, "namespace"):
            return
        sys.meta_path.insert(0, CaffeAlias)


def import_user_module(name):
    """Import a module of the user's (a plugin, a ``Python`` layer's ``python_param.module``)
    as Caffe users expect: the working directory is on ``sys.path`` first (as it is for
    ``python -m`` and for pycaffe scripts, but not for the installed ``pycaffe-lite`` script,
    whose folder Python puts there instead), modules written since the last import are
    seen, and ``import caffe`` in it gives ``pycaffe_lite`` (:func:`alias_caffe`)."""
    cwd = os.getcwd()
    if "" not in sys.path and cwd not in sys.path:
        sys.path.insert(0, cwd)
    importlib.invalidate_caches()
    alias_caffe()
    return importlib.import_module(name)


def not_found(name, exc):
    """Whether ``exc``, raised importing ``name``, says that ``name`` itself (or a package
    above it) is missing, rather than something the module's own code failed on."""
    missing = getattr(exc, "name", None) or ""
    return isinstance(exc, ModuleNotFoundError) and bool(missing) and (
        missing == name or name.startswith(missing + "."))


def import_failure(name, exc):
    """``exc`` (raised importing ``name``) for an error message: the exception, and, where the
    module was found but its code failed (a typo, a missing dependency), the line of the
    module's file that failed."""
    text = "%s: %s" % (type(exc).__name__, exc)
    if not_found(name, exc):
        return text
    if isinstance(exc, SyntaxError) and exc.filename:
        return text  # its message already names the file and line
    machinery = os.path.dirname(importlib.__file__)
    frames, inside = [], False  # the frames below importlib's: the module's code
    tb = exc.__traceback__
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if filename.startswith("<frozen") or filename.startswith(machinery):
            inside = True
        elif inside:
            frames.append((filename, tb.tb_lineno))
        tb = tb.tb_next
    if frames:  # the first is the module's own code
        text += " (at %s, line %d: the module was found, its code failed)" % frames[0]
    return text


def raised_in(exc, layer):
    """' (at FILE, line N)': the last line of ``layer``'s own module (a layer of the user's)
    that ``exc`` went through, for an error that names the layer on one line; "" when none."""
    path = getattr(sys.modules.get(type(layer).__module__), "__file__", None)
    found, tb = None, exc.__traceback__
    while path and tb is not None:
        if os.path.abspath(tb.tb_frame.f_code.co_filename) == os.path.abspath(path):
            found = tb.tb_lineno
        tb = tb.tb_next
    return " (at %s, line %d)" % (path, found) if found else ""


def import_module(name, where):
    """Import the plugin module ``name``; ``where`` says what named it (for the error)."""
    try:
        return import_user_module(name)
    except Exception as exc:
        raise PluginError("cannot import plugin module '%s' (named by %s): %s"
                          % (name, where, import_failure(name, exc))) from exc


def _load_entry_point(ep):
    dist = getattr(getattr(ep, "dist", None), "name", None)
    where = "entry point '%s = %s' of the group %s%s" % (
        ep.name, ep.value, GROUP, " (distribution %s)" % dist if dist else "")
    alias_caffe()
    try:
        return ep.load()
    except Exception as exc:
        raise PluginError("cannot import plugin module '%s' (named by %s): %s: %s"
                          % (ep.module, where, type(exc).__name__, exc)) from exc


def load(modules=(), flag="--plugin"):
    """Import the ``modules`` named by ``flag``, then the variable's and the entry points'
    (once per process). Returns the names imported. Raises :class:`PluginError` for a module
    that cannot be imported, or for any named module where Python layers are turned off."""
    modules = [m for m in modules if m]
    named = [(m, "%s %s" % (flag, m)) for m in modules]
    named += [(m, "%s=%s" % (ENV, os.environ.get(ENV, ""))) for m in env_modules()]
    if not python_layers.allowed():
        if named:
            name, where = named[0]
            raise PluginError("plugin module '%s' (named by %s) would import and run that "
                              "module's code, and plugins are turned off with Python layers "
                              "(%s)" % (name, where, python_layers.turned_off_by()))
        points = entry_points()
        if points:
            log.warning("Python layers are turned off: plugin entry points not loaded: %s",
                        ", ".join("%s = %s" % (ep.name, ep.value) for ep in points))
        return []
    done = []
    for name, where in named:
        import_module(name, where)
        done.append(name)
    with _lock:
        if not _configured:
            for ep in entry_points():
                _load_entry_point(ep)
                done.append(ep.value)
            _configured.append(True)
    return done


def load_configured():
    """Import the variable's modules and the entry points once, where Python layers are
    allowed (a net meeting an unknown layer type asks). True when this call imported any."""
    with _lock:
        if _configured or not python_layers.allowed():
            return False
        return bool(load())


def refused():
    """Why the variable's modules were not imported, for the error of a layer type nobody
    registered: a sentence where ``PYCAFFE_LITE_PLUGINS`` names modules and Python layers are
    turned off, "" otherwise."""
    modules = env_modules()
    if not modules or python_layers.allowed():
        return ""
    return ("%s=%s names plugin modules, but they were not imported: plugins are turned off "
            "with Python layers (%s); allow them only for modules you trust"
            % (ENV, os.environ.get(ENV, ""), python_layers.turned_off_by()))
