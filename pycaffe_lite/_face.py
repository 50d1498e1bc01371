"""How ``import pycaffe_lite`` stays light: the face's names load on first use.

``pycaffe_lite/__init__.py`` imports only this module and ``errors``; each other name of the
face (``caffe.Net``, ``caffe.SGDSolver``, ``caffe.io``, ...) imports its module the first time
it is read (PEP 562's module ``__getattr__``, :func:`resolve`), and every submodule is an
attribute of the package as soon as it is read. ``caffe.layers`` (pycaffe's net_spec
pseudo-module, which also reaches the built-in layers' package of the same name) is a property
of the package's module class (:class:`Face`): the import system's own binding of the
subpackage ``pycaffe_lite.layers`` to the package's attribute, whenever that subpackage is
first imported, cannot replace it.

The environment variables that some modules read at their import (the kernels' switches and
thread count) used to be read at ``import pycaffe_lite``, and a value they ignore was named in
a warning then: :func:`warn_now_for_ignored_settings` imports such a module at once where one
of its variables holds such a value, so the warning still comes at ``import pycaffe_lite``.
"""

import importlib
import importlib.util
import os
import sys
import types

_MISSING = object()


def resolve(module, name, table):
    """The face's attribute ``name`` of the package ``module``: the one ``table`` says where to
    find (``{name: relative module}``: the module's attribute, or its submodule of that name),
    or the package's submodule ``name``; kept in the package's namespace from then on."""
    target = table.get(name)
    if target is not None:
        value = getattr(importlib.import_module(target, module.__name__), name, _MISSING)
        if value is _MISSING:
            value = importlib.import_module(target + "." + name, module.__name__)
    elif _is_submodule(module, name):
        value = importlib.import_module("." + name, module.__name__)
    else:
        raise AttributeError("module %r has no attribute %r" % (module.__name__, name))
    setattr(module, name, value)
    return value


def _is_submodule(module, name):
    if not name.isidentifier() or name.startswith("_"):
        return False
    full = module.__name__ + "." + name
    return full in sys.modules or importlib.util.find_spec(full) is not None


def submodule_names(path):
    """The public submodules and subpackages of a package's ``__path__``."""
    import pkgutil

    return [info.name for info in pkgutil.iter_modules(path) if not info.name.startswith("_")]


class Face(types.ModuleType):
    """The package's module class: ``layers`` is pycaffe's ``caffe.layers``
    (:class:`pycaffe_lite.net_spec.Layers` over the built-in layers' package)."""

    @property
    def layers(self):
        found = self.__dict__.get("_layers_face")
        if found is None:
            from . import net_spec
            package = importlib.import_module(self.__name__ + ".layers")
            found = self.__dict__["_layers_face"] = net_spec.Layers(package=package)
        return found

    @layers.setter
    def layers(self, value):
        # the import system binds the subpackage pycaffe_lite.layers here when it first loads;
        # the package stays in sys.modules and behind caffe.layers
        if value is not sys.modules.get(self.__name__ + ".layers"):
            self.__dict__["_layers_face"] = value


# ---- the environment variables read at a module's import --------------------------------------
# Where a variable holds a value its reader ignores with a warning, that reader loads at once.

def _switch_ignored(value):
    from .switches import OFF, ON

    value = value.strip().lower()
    return bool(value) and value not in ON + OFF


def _threads_ignored(name, value):
    from .switches import MAX_THREADS, thread_count

    n = thread_count(name, value)
    return bool(value.strip()) and not (n is not None and 1 <= n <= MAX_THREADS)


def _blas_threads_ignored(name, value):
    from .switches import thread_count

    n = thread_count(name, value)
    return bool(value.strip()) and not (n is not None and n >= 1)


def _isa_ignored(value):
    from .switches import BLOCKED_ISAS

    value = value.strip().lower()
    return bool(value) and value not in BLOCKED_ISAS


READ_AT_IMPORT = [
    # (variable, is a value ignored, the module that reads it at its import)
    ("PYCAFFE_LITE_CPU_KERNELS", _switch_ignored, ".ops.cpu"),
    ("PYCAFFE_LITE_GEMM_SPLIT", _switch_ignored, ".ops.cpu"),
    ("PYCAFFE_LITE_CPU_THREADS",
     lambda v: _threads_ignored("PYCAFFE_LITE_CPU_THREADS", v), ".ops.cpu"),
    ("OMP_NUM_THREADS", lambda v: _threads_ignored("OMP_NUM_THREADS", v), ".ops.cpu"),
    # OpenBLAS's own counts: any positive whole number is its choice (OpenBLAS caps it)
    ("OPENBLAS_NUM_THREADS", lambda v: _blas_threads_ignored("OPENBLAS_NUM_THREADS", v),
     ".ops.cpu"),
    ("GOTO_NUM_THREADS", lambda v: _blas_threads_ignored("GOTO_NUM_THREADS", v), ".ops.cpu"),
    ("PYCAFFE_LITE_BLOCKED_ISA", _isa_ignored, ".ops.cpu.blocked"),
    ("PYCAFFE_LITE_GPU_KERNELS", _switch_ignored, ".ops.gpu._util"),
    ("PYCAFFE_LITE_CUDA_GRAPH", _switch_ignored, ".cuda_graphs"),
]


def warn_now_for_ignored_settings(package="pycaffe_lite"):
    """Import each module of :data:`READ_AT_IMPORT` one of whose variables holds a value it
    ignores (its warning then comes now); the rest load when first used."""
    for name, ignored, module in READ_AT_IMPORT:
        value = os.environ.get(name)
        if value is not None and ignored(value):
            importlib.import_module(module, package)
