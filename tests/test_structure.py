"""The package's shape, read from its source: no import cycle, the command line on top, small
modules.

Every ``import`` statement of every module under ``pycaffe_lite`` counts, the ones inside
functions too (a function-local import is still a dependency; it only runs later). An import
of ``pycaffe_lite.a.b`` is an edge to ``a.b`` alone: the parent package's ``__init__`` runs as
well, but counting it would put every module in a cycle with the top-level face, which imports
everything by design.
"""

import ast
import os

PACKAGE = "pycaffe_lite"
ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), PACKAGE)
MAX_LINES = 600
# Generated from proto/caffe.proto; never edited by hand.
LINE_LIMIT_EXEMPT = {"pycaffe_lite/proto/caffe_pb2.py"}
# The command line sits on top; only these may import it.
COMMAND_LINE = ("pycaffe_lite.cli", "pycaffe_lite.commands")
COMMAND_LINE_USERS = ("pycaffe_lite", "pycaffe_lite.__main__")


def _modules():
    """{dotted module name: path} for every .py file of the package."""
    found = {}
    for dirpath, dirnames, filenames in os.walk(ROOT):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for fn in sorted(filenames):
            if not fn.endswith(".py"):
                continue
            path = os.path.join(dirpath, fn)
            rel = os.path.relpath(path, os.path.dirname(ROOT))[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join(rel)] = path
    return found


MODULES = _modules()


def _is_package(name):
    return MODULES[name].endswith("__init__.py")


def _resolve(importer, level, module):
    """The absolute name a (possibly relative) import statement refers to."""
    if level == 0:
        return module or ""
    base = importer.split(".")
    if not _is_package(importer):
        base = base[:-1]
    if level > 1:
        base = base[:len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _known(name):
    """The deepest module of the package that ``name`` names (a name inside a module maps to
    the module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(name):
    """{imported module: first line} for one module, function-local imports included."""
    with open(MODULES[name], encoding="utf-8") as f:
        tree = ast.parse(f.read(), MODULES[name])
    found = {}
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(name, node.level, node.module)
            # ``from pkg import sub`` imports the submodule when there is one.
            targets = [base + "." + a.name if base + "." + a.name in MODULES else base
                       for a in node.names]
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                known = _known(target)
                if known and known != name:
                    found.setdefault(known, node.lineno)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _cycles(graph):
    """The strongly connected components with more than one module (Tarjan)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _describe_cycle(comp):
    members = set(comp)
    return "; ".join("%s -> %s (line %d)" % (a, b, line)
                     for a in comp for b, line in sorted(GRAPH[a].items()) if b in members)


def test_the_scan_sees_the_package():
    # Guard against a scan that finds nothing and so passes everything.
    assert "pycaffe_lite.net" in MODULES and "pycaffe_lite.layers.neuron.relu_layer" in MODULES
    assert "pycaffe_lite.layer" in GRAPH["pycaffe_lite.layers.neuron.relu_layer"]
    assert "pycaffe_lite.layers" in GRAPH["pycaffe_lite.net"]


def test_cycle_detection_finds_a_known_cycle():
    graph = {"a": {"b": 1}, "b": {"c": 2}, "c": {"a": 3}, "d": {"a": 4}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b": 1}, "b": {}}) == []


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles inside the package:\n" + "\n".join(
        _describe_cycle(c) for c in cycles)


def test_nothing_below_the_command_line_imports_it():
    def on_top(name):
        return any(name == c or name.startswith(c + ".") for c in COMMAND_LINE)

    wrong = ["%s imports %s (line %d)" % (name, target, line)
             for name, targets in sorted(GRAPH.items())
             if not on_top(name) and name not in COMMAND_LINE_USERS
             for target, line in sorted(targets.items()) if on_top(target)]
    assert not wrong, "\n".join(wrong)


def test_no_module_over_the_line_limit():
    over = []
    for name, path in sorted(MODULES.items()):
        rel = os.path.relpath(path, os.path.dirname(ROOT)).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            lines = sum(1 for _ in f)
        if lines > MAX_LINES and rel not in LINE_LIMIT_EXEMPT:
            over.append("%s has %d lines" % (rel, lines))
    assert not over, "modules over %d lines (split them along a seam): %s" % (
        MAX_LINES, "; ".join(over))
