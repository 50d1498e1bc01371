"""The package's shape, read from its source: ARCHITECTURE.md's table of layers and the import
directions it allows, no import cycle, the command line on top, small modules.

Every ``import`` statement of every module under ``pycaffe_lite`` counts, the ones inside
functions too (a function-local import is still a dependency; it only runs later). For the
layer table, an import of ``pycaffe_lite.a.b.c`` is also an edge to ``pycaffe_lite.a`` and
``pycaffe_lite.a.b``, whose ``__init__`` runs first (the top-level face aside: every import
runs it, and its names may load any module, on first use). The cycle check counts the named
module alone, for the same reason.
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

# ARCHITECTURE.md's table, top row first: a module may import its own row and the rows below
# it, never a row above. Each entry names a module or a package (and all it holds).
LAYERS = [
    ("command line", ["pycaffe_lite", "pycaffe_lite._face", "pycaffe_lite.cli",
                      "pycaffe_lite.commands",
                      "pycaffe_lite.net_spec", "pycaffe_lite.coord_map", "pycaffe_lite.draw",
                      "pycaffe_lite.detection",
                      "pycaffe_lite.tensorboard"]),
    ("training", ["pycaffe_lite.solvers", "pycaffe_lite.parallel"]),
    ("net", ["pycaffe_lite.net", "pycaffe_lite.net_graph", "pycaffe_lite.net_batches",
             "pycaffe_lite.weights", "pycaffe_lite.net_fold", "pycaffe_lite.net_train_fuse",
             "pycaffe_lite.net_memory", "pycaffe_lite.classifier",
             "pycaffe_lite.detector", "pycaffe_lite.io", "pycaffe_lite.onnx",
             "pycaffe_lite.darknet", "pycaffe_lite.testing", "pycaffe_lite.summary",
             "pycaffe_lite.evaluate", "pycaffe_lite.pytorch", "pycaffe_lite.mxnet",
             "pycaffe_lite.cuda_graphs", "pycaffe_lite.net_int8", "pycaffe_lite.net_int8_sum",
             "pycaffe_lite.net_int8_bn",
             "pycaffe_lite.net_int8_layers", "pycaffe_lite.net_int8_engine",
             "pycaffe_lite.quantization",
             "pycaffe_lite.net_blocked", "pycaffe_lite.net_types"]),
    ("layers", ["pycaffe_lite.layers"]),
    ("kernels, data", ["pycaffe_lite.ops", "pycaffe_lite.data"]),
    ("core", ["pycaffe_lite.backend", "pycaffe_lite.syncedmem", "pycaffe_lite.blob",
              "pycaffe_lite.frozen", "pycaffe_lite.switches",
              "pycaffe_lite.layer", "pycaffe_lite.registry", "pycaffe_lite.fillers",
              "pycaffe_lite.errors", "pycaffe_lite.health", "pycaffe_lite.signals",
              "pycaffe_lite.lifecycle", "pycaffe_lite.ranks", "pycaffe_lite.tools_log",
              "pycaffe_lite.profiling", "pycaffe_lite.python_layers", "pycaffe_lite.download",
              # the schema's files: protoio, wire, tolerant, fork_fields, fork_layer_fields,
              # weights_file, upgrade/
              "pycaffe_lite.proto", "pycaffe_lite.plugins"]),
    ("schema", ["pycaffe_lite.proto.caffe_pb2"]),
]
# The rules that go with the table: what some packages may import (besides the standard
# library and NumPy), and who may import some others.
MAY_IMPORT_ONLY = {
    # ops are leaves over arrays; the kernels' threads are released with everything else;
    # their on/off environment variables are read as every other one
    "pycaffe_lite.ops": ("pycaffe_lite.ops", "pycaffe_lite.backend", "pycaffe_lite.lifecycle",
                         "pycaffe_lite.switches"),
    # the schema and its files stand apart from blobs, layers and nets: they read and write
    # messages and raise the package's errors
    "pycaffe_lite.proto": ("pycaffe_lite.proto", "pycaffe_lite.errors"),
}
MAY_BE_IMPORTED_ONLY_BY = {
    "pycaffe_lite.testing": ("pycaffe_lite.testing",),
    "pycaffe_lite.parallel": ("pycaffe_lite", "pycaffe_lite.commands", "pycaffe_lite.parallel"),
    # the other converters reuse the ONNX code: pytorch/ its exporter's shapes (and compare runs
    # the export), mxnet/ its importer's pooling geometry, quantization/ the export it rewrites
    "pycaffe_lite.onnx": ("pycaffe_lite", "pycaffe_lite.commands", "pycaffe_lite.onnx",
                          "pycaffe_lite.pytorch", "pycaffe_lite.mxnet",
                          "pycaffe_lite.quantization"),
    "pycaffe_lite.quantization": ("pycaffe_lite", "pycaffe_lite.commands",
                                  "pycaffe_lite.quantization"),
}
# Darknet's converter writes a NetParameter; it never builds a Net itself.
NEVER = [("pycaffe_lite.darknet", "pycaffe_lite.net")]
# Only backend.py imports CuPy (lazily, guarded): the package imports without it.
CUPY_IMPORTER = "pycaffe_lite.backend"


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


def _imports(name, outside=None):
    """{imported module: first line} for one module, function-local imports included (and
    the names of modules outside the package it imports, into ``outside``)."""
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
        if isinstance(node, ast.ImportFrom) and node.level == 0 and outside is not None:
            outside.setdefault(node.module, node.lineno)
        for target in targets:
            if outside is not None and not target.startswith(PACKAGE):
                outside.setdefault(target, node.lineno)
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                known = _known(target)
                if known and known != name:
                    found.setdefault(known, node.lineno)
    return found


GRAPH = {name: _imports(name) for name in MODULES}


def _with_parents(graph):
    """The graph with an edge to every package whose ``__init__`` an import runs: the parents
    of the imported module below the top level, except the importer's own ancestors (already
    running)."""
    out = {}
    for name, targets in graph.items():
        edges = dict(targets)
        for target, line in targets.items():
            parts = target.split(".")
            for i in range(2, len(parts)):
                parent = ".".join(parts[:i])
                if not (name == parent or name.startswith(parent + ".")):
                    edges.setdefault(parent, line)
        out[name] = edges
    return out


def _within(name, entry):
    return name == entry or name.startswith(entry + ".")


def _row(name):
    """(index, row name) of the deepest table entry holding ``name``, or None."""
    best = None
    for index, (row, entries) in enumerate(LAYERS):
        for entry in entries:
            if _within(name, entry) and (best is None or len(entry) > len(best[2])):
                best = (index, row, entry)
    return best and best[:2]


def _entry(name, table):
    return next((e for e in table if _within(name, e)), None)


def layering_violations(graph):
    """The edges against the table and its rules, one line each."""
    wrong = []
    for name, targets in sorted(graph.items()):
        for target, line in sorted(targets.items()):
            here, there = _row(name), _row(target)
            if here and there and there[0] < here[0]:
                wrong.append("%s (%s) imports %s (%s, a row above) at line %d"
                             % (name, here[1], target, there[1], line))
            rule = _entry(name, MAY_IMPORT_ONLY)
            if rule and not any(_within(target, ok) for ok in MAY_IMPORT_ONLY[rule]):
                wrong.append("%s imports %s at line %d: %s may import only %s"
                             % (name, target, line, rule, ", ".join(MAY_IMPORT_ONLY[rule])))
            rule = _entry(target, MAY_BE_IMPORTED_ONLY_BY)
            if rule and not any(name == ok or (ok != PACKAGE and _within(name, ok))
                                for ok in MAY_BE_IMPORTED_ONLY_BY[rule]):
                wrong.append("%s imports %s at line %d: only %s may import %s"
                             % (name, target, line, ", ".join(MAY_BE_IMPORTED_ONLY_BY[rule]),
                                rule))
            for a, b in NEVER:
                if _within(name, a) and _within(target, b):
                    wrong.append("%s imports %s at line %d: %s never imports %s"
                                 % (name, target, line, a, b))
    return wrong


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


def test_every_module_has_a_row_in_the_table():
    missing = sorted(name for name in MODULES if _row(name) is None)
    assert not missing, "add these to LAYERS (and ARCHITECTURE.md's table): %s" % missing


def test_the_table_matches_architecture_md():
    # Every entry of the table is named in ARCHITECTURE.md's picture, so the two move together.
    with open(os.path.join(os.path.dirname(ROOT), "ARCHITECTURE.md"), encoding="utf-8") as f:
        text = f.read()
    picture = text.split("## The layers of the package")[1].split("Rules that go with")[0]
    for row, entries in LAYERS:
        assert row in picture
        for entry in entries[1:] if row == "command line" else entries:
            short = entry[len(PACKAGE) + 1:].replace(".", "/")
            assert short in picture, "%s (%s) is not in ARCHITECTURE.md's table" % (entry, row)


def test_imports_follow_the_layer_table():
    wrong = layering_violations(_with_parents(GRAPH))
    assert not wrong, "\n".join(wrong)


def test_the_layer_check_finds_known_violations():
    graph = {
        "pycaffe_lite.layers.data.data_layer": {"pycaffe_lite.parallel.context": 10},
        "pycaffe_lite.ops.conv": {"pycaffe_lite.blob": 3, "pycaffe_lite.backend": 4},
        "pycaffe_lite.net": {"pycaffe_lite.testing.gradient_check": 5},
        "pycaffe_lite.darknet.convert": {"pycaffe_lite.net": 6, "pycaffe_lite.proto": 7},
        "pycaffe_lite.commands.train": {"pycaffe_lite.parallel.launch": 8},
        "pycaffe_lite.proto.weights_file": {"pycaffe_lite.blob": 9, "pycaffe_lite.errors": 2},
    }
    wrong = layering_violations(_with_parents(graph))
    assert len(wrong) == 9, wrong
    text = "\n".join(wrong)
    for expected in ("data_layer (layers) imports pycaffe_lite.parallel (training",
                     "data_layer (layers) imports pycaffe_lite.parallel.context (training",
                     "imports pycaffe_lite.blob at line 3: pycaffe_lite.ops may import only",
                     "only pycaffe_lite.testing may import pycaffe_lite.testing",
                     "pycaffe_lite.darknet never imports pycaffe_lite.net",
                     "pycaffe_lite.net imports pycaffe_lite.testing.gradient_check at line 5",
                     "imports pycaffe_lite.blob at line 9: pycaffe_lite.proto may import only"):
        assert expected in text, (expected, text)


def test_only_backend_imports_cupy():
    wrong = []
    for name in sorted(MODULES):
        outside = {}
        _imports(name, outside)
        for module, line in sorted(outside.items()):
            if module and module.split(".")[0] in ("cupy", "cupyx") and name != CUPY_IMPORTER:
                wrong.append("%s imports %s at line %d" % (name, module, line))
    assert not wrong, "only %s imports CuPy:\n%s" % (CUPY_IMPORTER, "\n".join(wrong))


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
