"""One registry mechanism for everything chosen by a type string.

Layers, fillers, solvers, learning-rate policies and database backends each have a
:class:`Registry`. Registering a name twice is refused; asking for an unknown name answers with
the known names and the closest match.
"""

import difflib

from .errors import CaffeError


class UnknownTypeError(CaffeError):
    """A type string that no registered class answers to."""


class Registry:
    def __init__(self, kind):
        self.kind = kind
        self._entries = {}

    def register(self, name, obj=None):
        """Register ``obj`` under ``name``; usable as a decorator when ``obj`` is omitted."""
        if obj is None:
            return lambda o: self.register(name, o)
        if not isinstance(name, str) or not name:
            raise CaffeError("a %s type must be a non-empty string, got %r" % (self.kind, name))
        if name in self._entries and self._entries[name] is not obj:
            raise CaffeError("%s type '%s' is already registered (by %s)"
                             % (self.kind, name, _describe(self._entries[name])))
        self._entries[name] = obj
        return obj

    def unregister(self, name):
        self._entries.pop(name, None)

    def get(self, name, context=""):
        try:
            return self._entries[name]
        except KeyError:
            raise UnknownTypeError(self.unknown_message(name, context)) from None

    def unknown_message(self, name, context=""):
        known = sorted(self._entries)
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
        lowered = [k for k in known if k.lower() == str(name).lower()]
        guess = lowered or close
        msg = "unknown %s type '%s'" % (self.kind, name)
        if context:
            msg += " (%s)" % context
        if guess:
            msg += "; did you mean %s?" % " or ".join("'%s'" % g for g in guess)
        msg += " Known types: %s" % ", ".join(known)
        return msg

    def __contains__(self, name):
        return name in self._entries

    def names(self):
        return sorted(self._entries)

    def items(self):
        return sorted(self._entries.items())


def _describe(obj):
    return "%s.%s" % (getattr(obj, "__module__", "?"), getattr(obj, "__qualname__", repr(obj)))


LAYERS = Registry("layer")
FILLERS = Registry("filler")
SOLVERS = Registry("solver")
LR_POLICIES = Registry("lr_policy")
DB_BACKENDS = Registry("db backend")


def register_layer(type_name):
    """Class decorator: make a Layer subclass available as ``type: "<type_name>"``."""

    def deco(cls):
        LAYERS.register(type_name, cls)
        cls.type = type_name
        return cls

    return deco


def layer_type_list():
    return LAYERS.names()

