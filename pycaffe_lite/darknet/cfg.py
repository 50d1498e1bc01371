"""Reading Darknet's ``.cfg`` network files.

Darknet's format: a section starts with a line ``[name]``; every other line is ``key=value``.
All whitespace on a line is removed before it is read (Darknet strips spaces and tabs
everywhere, so ``size = 3`` and ``anchors = 10,14,  23,27`` are ``size=3`` and
``anchors=10,14,23,27``); empty lines and lines starting with ``#`` or ``;`` are comments. The
first section must be ``[net]`` (or ``[network]``); the others are the layers, numbered from 0
in file order (the numbers ``[route] layers`` and ``[shortcut] from`` refer to).

Every option remembers its line, so that errors and warnings name ``file:line``. Numbers are
read as Darknet reads them (``atoi``/``atof``: the longest numeric prefix); a value with text
after the number gives a warning, one with no number at all an error. Darknet keeps integers in
a C ``int``, so an integer outside -2147483648..2147483647 is an error (every integer field of
the converted prototxt and solver holds that range, or the non-negative part of it).
"""

import os
import re
import warnings

from ..errors import ProtoError


class DarknetError(ProtoError):
    """A Darknet ``.cfg`` or ``.weights`` file that cannot be read or converted; the message
    names the file and, where there is one, the line."""


class DarknetWarning(UserWarning):
    """Something in a Darknet file that the conversion ignores (it names the file and line)."""


def warn(message):
    warnings.warn(DarknetWarning(message), stacklevel=3)


# Sections spelled more than one way in Darknet, by their canonical name.
SECTION_ALIASES = {
    "network": "net", "conv": "convolutional", "conn": "connected", "max": "maxpool",
    "avg": "avgpool", "soft": "softmax", "normalization": "lrn",
}

_INT = re.compile(r"[+-]?\d+")
INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1  # Darknet's int (atoi)
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[+-]?(?:inf|nan)", re.I)


class CfgOption:
    """One ``key=value`` line."""

    __slots__ = ("key", "value", "line")

    def __init__(self, key, value, line):
        self.key, self.value, self.line = key, value, line

    def __repr__(self):
        return "CfgOption(%r, %r, line %d)" % (self.key, self.value, self.line)


class CfgSection:
    """One ``[section]`` of a ``.cfg`` file with typed accessors that follow Darknet's
    defaults. Each accessor marks its key as read; :meth:`unread` lists the others."""

    def __init__(self, name, line, path, index):
        self.header = name                       # as written, without the brackets
        self.name = SECTION_ALIASES.get(name, name)
        self.line = line
        self.path = path
        self.index = index                       # Darknet's layer number; -1 for [net]
        self.options = {}
        self.read = set()

    # ---- identity and errors ---------------------------------------------------------------
    def where(self, key=None):
        """``file:line`` of the option ``key`` (or of the section header)."""
        opt = self.options.get(key) if key is not None else None
        return "%s:%d" % (self.path, opt.line if opt else self.line)

    def describe(self):
        if self.index < 0:
            return "[%s]" % self.header
        return "layer %d [%s]" % (self.index, self.header)

    def error(self, message, key=None):
        """A DarknetError naming this section (and the line of ``key`` if given)."""
        opt = self.options.get(key) if key is not None else None
        return DarknetError("%s: %s" % (self.describe(), message), self.path,
                            opt.line if opt else self.line)

    def warn(self, message, key=None):
        warn("%s: %s: %s" % (self.where(key), self.describe(), message))

    # ---- raw access ------------------------------------------------------------------------
    def add(self, key, value, line):
        if key in self.options:
            warn("%s:%d: %s: %s is given again (first at line %d); Darknet uses the first "
                 "value, %r, and so does the conversion"
                 % (self.path, line, self.describe(), key, self.options[key].line,
                    self.options[key].value))
            return
        self.options[key] = CfgOption(key, value, line)

    def has(self, key):
        return key in self.options

    def raw(self, key):
        self.read.add(key)
        opt = self.options.get(key)
        return None if opt is None else opt.value

    def unread(self):
        """The options no accessor has read, in file order."""
        return [o for o in self.options.values() if o.key not in self.read]

    # ---- typed access (Darknet's atoi / atof) ----------------------------------------------
    def _number(self, key, value, pattern, convert, kind):
        m = pattern.match(value)
        if not m:
            raise self.error("%s=%s: expected %s" % (key, value, kind), key)
        if m.end() != len(value):
            self.warn("%s=%s: the text after %s is ignored (as Darknet ignores it)"
                      % (key, value, m.group(0)), key)
        return self._in_range(key, "%s=%s" % (key, value), convert(m.group(0)))

    def _in_range(self, key, what, number):
        if isinstance(number, int) and not INT_MIN <= number <= INT_MAX:
            raise self.error("%s is out of range: allowed %d..%d (Darknet reads integers as "
                             "a C int)" % (what, INT_MIN, INT_MAX), key)
        return number

    def get_int(self, key, default=None):
        value = self.raw(key)
        if value is None:
            if default is None:
                raise self.error("%s is required" % key)
            return default
        return self._number(key, value, _INT, int, "an integer")

    def get_float(self, key, default=None):
        value = self.raw(key)
        if value is None:
            if default is None:
                raise self.error("%s is required" % key)
            return default
        return self._number(key, value, _FLOAT, float, "a number")

    def get_str(self, key, default=None):
        value = self.raw(key)
        if value is None:
            if default is None:
                raise self.error("%s is required" % key)
            return default
        return value

    def _list(self, key, pattern, convert, kind):
        value = self.raw(key)
        if value is None:
            return None
        items = value.split(",")
        if items and items[-1] == "" and len(items) > 1:
            items.pop()  # a trailing comma: Darknet would read a 0 there
            self.warn("%s ends with a comma; the empty last entry is ignored" % key, key)
        out = []
        for item in items:
            m = pattern.match(item)  # each entry through atoi / atof, as Darknet reads it
            if not m:
                raise self.error("%s=%s: entry %r is not %s" % (key, value, item, kind), key)
            if m.end() != len(item):
                self.warn("%s=%s: the text after %s in entry %r is ignored (as Darknet "
                          "ignores it)" % (key, value, m.group(0), item), key)
            out.append(self._in_range(key, "%s=%s: entry %s" % (key, value, m.group(0)),
                                      convert(m.group(0))))
        return out

    def get_ints(self, key, default=None):
        got = self._list(key, _INT, int, "an integer")
        return list(default) if got is None and default is not None else got

    def get_floats(self, key, default=None):
        got = self._list(key, _FLOAT, float, "a number")
        return list(default) if got is None and default is not None else got

    def __repr__(self):
        return "<CfgSection %s at %s>" % (self.describe(), self.where())


class DarknetCfg:
    """A parsed ``.cfg``: ``net`` (the ``[net]`` section) and ``layers`` (the others)."""

    def __init__(self, path, net, layers):
        self.path = path
        self.net = net
        self.layers = layers

    @property
    def name(self):
        base = os.path.basename(self.path)
        return os.path.splitext(base)[0] if base and not base.startswith("<") else "darknet"

    def __repr__(self):
        return "<DarknetCfg %s: %d layers>" % (self.path, len(self.layers))


def parse_cfg(text, path="<string>"):
    """A :class:`DarknetCfg` from the text of a ``.cfg`` file."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    sections = []
    current = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = "".join(raw.split())
        if not line or line[0] in "#;":
            continue
        if line[0] == "[":
            if not line.endswith("]") or len(line) < 3:
                raise DarknetError("malformed section header %r; expected [name]" % raw.strip(),
                                   path, number)
            current = CfgSection(line[1:-1], number, path, len(sections) - 1)
            sections.append(current)
            continue
        if current is None:
            raise DarknetError("option %r comes before the first section; a .cfg file starts "
                               "with [net]" % raw.strip(), path, number)
        key, sep, value = line.partition("=")
        if not sep or not key:
            raise DarknetError("cannot read %r: expected key=value, a [section] header or a "
                               "comment (# or ;)" % raw.strip(), path, number)
        current.add(key, value, number)
    if not sections:
        raise DarknetError("no sections: a Darknet .cfg file starts with [net]", path, 1)
    if sections[0].name != "net":
        raise DarknetError("the first section is [%s]; Darknet's first section must be [net] "
                           "(or [network])" % sections[0].header, path, sections[0].line)
    for s in sections[1:]:
        if s.name == "net":
            raise DarknetError("a second [%s] section (the first is at line %d); there can be "
                               "only one" % (s.header, sections[0].line), path, s.line)
    return DarknetCfg(path, sections[0], sections[1:])


def read_file(path):
    """``(path, data)``: ``path`` as a string and the bytes of that file (a ``.cfg`` or
    ``.weights`` file); a :class:`DarknetError` naming the file when it cannot be read."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            return path, f.read()
    except FileNotFoundError:
        raise DarknetError("file not found", path) from None
    except OSError as exc:
        raise DarknetError("cannot read file: %s" % (exc.strerror or exc), path) from None


def read_cfg(path):
    """A :class:`DarknetCfg` from a ``.cfg`` file."""
    path, data = read_file(path)
    return parse_cfg(data, path)
