"""MXNet's symbol JSON (``NAME-symbol.json``), read without MXNet.

The file lists ``nodes`` in topological order (each with ``op``, ``name``, ``inputs`` as
``[node, output(, version)]`` triples and its operator's attributes as strings), the
``arg_nodes`` (the variables: op ``"null"``) and the ``heads`` (the outputs). MXNet 1.x puts
the attributes under ``attrs``; files of MXNet before 1.0 have them under ``param`` (and user
attributes under ``attr``). Attributes that start and end with ``__`` (``__shape__``,
``__init__``, ``__dtype__``, ...) are annotations, not operator parameters.
"""

import json
import os

from ..errors import CaffeError


class Node:
    """One node: ``op`` (``"null"`` for a variable), ``name``, ``attrs`` (operator
    parameters, strings), ``annotations`` (the ``__x__`` attributes) and ``inputs``
    (``(node index, output index)`` pairs)."""

    def __init__(self, index, op, name, attrs, annotations, inputs):
        self.index = index
        self.op = op
        self.name = name
        self.attrs = attrs
        self.annotations = annotations
        self.inputs = inputs

    def __repr__(self):
        return "Node(%d, %s, %r)" % (self.index, self.op, self.name)


class Symbol:
    """A parsed symbol file: ``nodes`` (list of :class:`Node`), ``heads`` (``(node index,
    output index)`` pairs) and ``path``."""

    def __init__(self, nodes, heads, path):
        self.nodes = nodes
        self.heads = heads
        self.path = path

    def variables(self):
        return [n for n in self.nodes if n.op == "null"]


def _pair(entry, where, count):
    if not isinstance(entry, list) or len(entry) < 2 or \
            not all(isinstance(v, int) for v in entry[:2]):
        raise CaffeError("%s: expected [node, output, ...], got %r" % (where, entry))
    node, out = entry[0], entry[1]
    if not 0 <= node < count:
        raise CaffeError("%s: refers to node %d; the file has nodes 0..%d"
                         % (where, node, count - 1))
    return node, out


def parse_symbol(doc, path="<symbol>"):
    """A :class:`Symbol` from the decoded JSON ``doc``."""
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list) or \
            not isinstance(doc.get("heads"), list):
        raise CaffeError("%s: not an MXNet symbol file (no 'nodes' and 'heads' lists)" % path)
    raw = doc["nodes"]
    nodes = []
    for i, nd in enumerate(raw):
        if not isinstance(nd, dict) or "op" not in nd or "name" not in nd:
            raise CaffeError("%s: node %d has no 'op' and 'name'" % (path, i))
        merged = {}
        for key in ("param", "attr", "attrs"):
            part = nd.get(key) or {}
            if not isinstance(part, dict):
                raise CaffeError("%s: node %d ('%s'): '%s' is not an object"
                                 % (path, i, nd["name"], key))
            merged.update({str(k): str(v) for k, v in part.items()})
        attrs = {k: v for k, v in merged.items() if not (k.startswith("__") and
                                                          k.endswith("__"))}
        notes = {k: v for k, v in merged.items() if k not in attrs}
        where = "%s: node %d ('%s')" % (path, i, nd["name"])
        inputs = []
        for entry in nd.get("inputs", []):
            src, out = _pair(entry, where + " input", len(raw))
            if src >= i:
                raise CaffeError("%s reads node %d, which does not come before it" % (where, src))
            inputs.append((src, out))
        nodes.append(Node(i, str(nd["op"]), str(nd["name"]), attrs, notes, inputs))
    heads = [_pair(h, "%s: heads" % path, len(nodes)) for h in doc["heads"]]
    if not heads:
        raise CaffeError("%s: the symbol has no outputs ('heads' is empty)" % path)
    return Symbol(nodes, heads, path)


def read_symbol(path):
    """Read and parse ``NAME-symbol.json``."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
    except OSError as exc:
        raise CaffeError("%s: cannot read the MXNet symbol file: %s"
                         % (path, exc.strerror or exc)) from None
    except UnicodeDecodeError as exc:
        raise CaffeError("%s: byte offset %d: not UTF-8 text (not a symbol JSON file)"
                         % (path, exc.start)) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CaffeError("%s:%d:%d: not valid JSON: %s" % (path, exc.lineno, exc.colno,
                                                           exc.msg)) from None
    return parse_symbol(doc, path)


# ---- attribute values (strings as MXNet writes them) --------------------------------------
class Attrs:
    """Typed access to a node's attributes; a bad value is an error naming the node."""

    def __init__(self, node, raw=None):
        self.node = node
        self.raw = node.attrs if raw is None else raw

    def error(self, message):
        return CaffeError("MXNet node '%s' (op %s): %s" % (self.node.name, self.node.op,
                                                          message))

    def has(self, key):
        return key in self.raw and self.raw[key] not in ("None", "")

    def str(self, key, default=None):
        return self.raw[key] if self.has(key) else default

    def bool(self, key, default=False):
        if not self.has(key):
            return default
        v = self.raw[key].strip().lower()
        if v in ("true", "1"):
            return True
        if v in ("false", "0"):
            return False
        raise self.error("%s=%r is not a boolean" % (key, self.raw[key]))

    def float(self, key, default=None):
        if not self.has(key):
            return default
        try:
            return float(self.raw[key])
        except ValueError:
            raise self.error("%s=%r is not a number" % (key, self.raw[key])) from None

    def int(self, key, default=None):
        value = self.float(key, None)
        if value is None:
            return default
        if value != int(value):
            raise self.error("%s=%r is not an integer" % (key, self.raw[key]))
        return int(value)

    def tuple(self, key, default=None):
        """``"(3, 3)"``, ``"[3,3]"`` or ``"3"`` as a tuple of ints (``None`` kept as None)."""
        if not self.has(key):
            return default
        text = self.raw[key].strip().strip("()[]")
        out = []
        for part in text.split(","):
            part = part.strip()
            if not part:
                continue
            if part == "None":
                out.append(None)
                continue
            try:
                value = float(part.rstrip("L"))
            except ValueError:
                raise self.error("%s=%r is not a tuple of integers"
                                 % (key, self.raw[key])) from None
            out.append(int(value))
        return tuple(out)
