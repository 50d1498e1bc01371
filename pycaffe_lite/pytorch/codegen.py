"""Caffe net -> the source of a PyTorch module and its state_dict.

The net's layers are walked in order. Data layers (Input, Data, ...) become the arguments of
``forward``; layers that only train (losses, Accuracy, Silence: the ONNX exporter's list) are
left out and reported; Split layers become shared variables (Python names are rebound, never
written in place, so a blob used twice needs no copy); every other layer needs a generator
(:data:`GENERATORS`), or the export fails naming it.

A generator is ``fn(layer)`` where ``layer`` is a :class:`LayerCode`: the Caffe layer, its
parameter, the static shapes of its bottoms and tops, and ``train`` (the ``--train`` form).
It returns a :class:`Module`: the expression that builds the attribute, the state_dict
entries under it, the helper classes the expression uses (their source goes into the file,
from :data:`HELPERS`) and optionally how each bottom is passed (``InnerProduct`` flattens).
"""

import keyword
import re
import textwrap

import numpy as np

from ..errors import CaffeError
from ..onnx.builder import LayerParts
from ..onnx.export import DATA_TYPES, is_dropped

GENERATORS = {}
HELPERS = {}  # helper class name -> its source, written into model.py where used

# attributes of torch.nn.Module that a layer's attribute must not hide
MODULE_NAMES = frozenset("""T_destination add_module apply bfloat16 buffers call_super_init
children compile cpu cuda double dump_patches eval extra_repr float forward get_buffer
get_extra_state get_parameter get_submodule half ipu load_state_dict modules mtia
named_buffers named_children named_modules named_parameters parameters register_buffer
register_forward_hook register_forward_pre_hook register_full_backward_hook
register_full_backward_pre_hook register_load_state_dict_post_hook register_module
register_parameter register_state_dict_pre_hook requires_grad_ set_extra_state share_memory
state_dict to to_empty train training type xpu zero_grad""".split())
# names the generated file itself uses
FILE_NAMES = frozenset(["self", "torch", "nn", "F", "os", "math", "load", "outputs",
                        "box_overlaps"])


def register_generator(*caffe_types):
    """Decorator: ``fn(layer)`` writes layers of these Caffe types as PyTorch code."""
    def wrap(fn):
        for t in caffe_types:
            GENERATORS[t] = fn
        return fn
    return wrap


def helper(name, source):
    """Declares the source of a helper class ``name`` (a small ``nn.Module``)."""
    HELPERS[name] = source.strip("\n") + "\n"
    return name


class Module:
    """What a generator returns (see the module docstring)."""

    def __init__(self, expr, weights=None, helpers=(), args=None, comment=None):
        self.expr = expr
        self.weights = dict(weights or {})
        self.helpers = tuple(helpers)
        self.args = args  # None, or one format string per bottom ("{}.flatten(1)")
        self.comment = comment


class LayerCode(LayerParts):
    """One Caffe layer being written (see the module docstring)."""

    def __init__(self, layer, name, in_shapes, out_shapes, train):
        self.layer = layer
        self.name = name
        self.type = layer.type
        self.param = layer.layer_param
        self.in_shapes = [tuple(int(d) for d in s) for s in in_shapes]
        self.out_shapes = [tuple(int(d) for d in s) for s in out_shapes]
        self.train = train


def identifier(name, taken, reserved=()):
    """``name`` as a Python identifier that is not a keyword, not in ``reserved`` and not in
    ``taken`` (``_2``, ``_3``... appended); adds it to ``taken``."""
    out = re.sub(r"\W", "_", name) or "x"
    if out[0].isdigit():
        out = "_" + out
    if keyword.iskeyword(out) or out in reserved or out in FILE_NAMES:
        out += "_"
    base, i = out, 1
    while out in taken:
        i += 1
        out = "%s_%d" % (base, i)
    taken.add(out)
    return out


def class_identifier(name):
    """A class name from the net's name (``Net`` when it has none that fits)."""
    out = re.sub(r"\W", "_", name or "")
    if not out or out[0].isdigit() or keyword.iskeyword(out) or out in FILE_NAMES \
            or out in HELPERS:
        return "Net"
    return out


def literal(value):
    """A Python literal for an int, float, bool, string or a tuple/list of them."""
    if isinstance(value, (bool, np.bool_)):
        return repr(bool(value))
    if isinstance(value, (int, np.integer)):
        return repr(int(value))
    if isinstance(value, (float, np.floating)):
        value = float(value)
        if float(np.float32(value)) == value:
            short = str(np.float32(value))  # the shortest text of a float32 (a proto field)
            if float(np.float32(float(short))) == value:
                return repr(float(short))
        return repr(value)
    if isinstance(value, (tuple, list)):
        inner = ", ".join(literal(v) for v in value)
        return "(%s,)" % inner if len(value) == 1 else "(%s)" % inner
    return repr(value)


class Plan:
    """The walk over the net: attributes, forward lines and state_dict of the module."""

    def __init__(self, net, train):
        self.net = net
        self.train = train
        self.names = list(net._blob_names)
        self.shapes = [tuple(b.shape) for b in net._blobs]
        self.attrs, self.lines, self.weights, self.helpers = [], [], {}, []
        self.inputs, self.dropped, self.layers = [], [], []
        self.var_taken, self.attr_taken = set(), set()
        self.blob_var = {}  # blob id -> the identifier that is its own variable
        self.current = {}  # blob id -> the variable that holds its value now
        self.writer = {}  # blob id -> index of the layer that last wrote it
        self.read = set()  # blob ids some exported layer reads (a Split's copy: its blob too)
        self.split_source = {}  # top of a Split -> the blob it copies (through Splits)
        self.inserted_split = {}  # top of a Split the net inserted -> the blob it copies
        self._walk()
        # an input nothing reads (a label whose loss was left out) is not an argument; one
        # that a Split passes out as it is, is
        returned = {v for _, v in self.outputs()}
        self.inputs = [(n, v) for n, v in self.inputs
                       if self.names.index(n) in self.read or v in returned]

    def _own_var(self, b):
        if b not in self.blob_var:
            # a copy made by an inserted Split (written in place by a later layer) is named
            # after the blob it copies: res2a_2 rather than res2a_res2a_0_split_1
            name = self.names[self.inserted_split.get(b, b)]
            self.blob_var[b] = identifier(name, self.var_taken, HELPERS)
        return self.blob_var[b]

    def _walk(self):
        net = self.net
        for i, rec in enumerate(net.records):
            lname, layer = rec.name, rec.layer
            if is_dropped(layer.type):
                self.dropped.append((lname, layer.type))
                continue
            if layer.type in DATA_TYPES:
                for t in rec.top_ids:
                    self.current[t] = self._own_var(t)
                    self.inputs.append((self.names[t], self.current[t]))
                continue
            bottoms = []
            if layer.type != "Split":  # a Split reads for the layers that read its copies
                self.read.update(rec.bottom_ids)
                self.read.update(self.split_source[b] for b in rec.bottom_ids
                                 if b in self.split_source)
            for b in rec.bottom_ids:
                if b not in self.current:
                    raise CaffeError("layer '%s' (type %s) reads blob '%s', which comes from a "
                                     "layer left out of the PyTorch module"
                                     % (lname, layer.type, self.names[b]))
                bottoms.append(self.current[b])
            if layer.type == "Split":
                for t in rec.top_ids:
                    self.current[t] = bottoms[0]
                    self.writer[t] = i
                    b = rec.bottom_ids[0]
                    self.split_source[t] = self.split_source.get(b, b)
                    if lname.endswith("_split"):  # inserted by the net, not the user's
                        self.inserted_split[t] = rec.bottom_ids[0]
                continue
            generator = GENERATORS.get(layer.type)
            if generator is None:
                raise CaffeError("layer '%s' of type %s has no PyTorch equivalent; it cannot be "
                                 "exported" % (lname, layer.type))
            code = LayerCode(layer, lname, [self.shapes[b] for b in rec.bottom_ids],
                             [self.shapes[t] for t in rec.top_ids], self.train)
            module = generator(code)
            attr = identifier(lname, self.attr_taken, MODULE_NAMES | set(HELPERS))
            for h in module.helpers:
                if h not in self.helpers:
                    self.helpers.append(h)
            if module.comment:
                self.attrs.append("# %s" % module.comment)
            self.attrs.append("self.%s = %s" % (attr, module.expr))
            for key, value in module.weights.items():
                self.weights["%s.%s" % (attr, key)] = np.array(value, np.float32)
            args = [b if module.args is None else module.args[k].format(b)
                    for k, b in enumerate(bottoms)]
            tops = []
            for t in rec.top_ids:
                self.current[t] = self._own_var(t)
                self.writer[t] = i
                tops.append(self.current[t])
            self.lines.append("%s = self.%s(%s)" % (", ".join(tops), attr, ", ".join(args)))
            self.layers.append((lname, attr, [self.names[t] for t in rec.top_ids]))

    def outputs(self):
        """(Caffe name, variable) of the blobs nothing reads after their last writer, in the
        order of their writers (an unread data blob, such as a label, is not an output; a
        Split's copy that only left-out layers read stands for the blob it copies, unless
        that is a data blob: the label of a left-out loss and accuracy)."""
        read, read_by_dropped = set(), set()
        for i, rec in enumerate(self.net.records):
            if not is_dropped(rec.layer.type):
                read.update(b for b in rec.bottom_ids if self.writer.get(b, i) < i)
            else:
                read_by_dropped.update(rec.bottom_ids)
        out, seen = [], set()
        for b, _ in sorted(self.writer.items(), key=lambda item: (item[1], item[0])):
            if b in read:
                continue
            if b in read_by_dropped and self.split_source.get(b, b) not in self.writer:
                continue
            b = self.inserted_split.get(b, b)
            if b in seen:
                continue
            seen.add(b)
            out.append((self.names[b], self.current[b]))
        return out


HEADER = '''"""{title}.

Written by pycaffe-lite export_pytorch from {source}. The attributes are the Caffe
layers, forward() runs them in the net's order with the Caffe blob names as variables, and
load() returns the module with weights.pt (a state_dict) loaded, in eval mode.
{notes}"""

{imports}
'''

FOOTER = '''

def load(device="cpu"):
    """The module with the weights of weights.pt (beside this file), in eval mode."""
    model = {cls}()
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "weights.pt")
    model.load_state_dict(torch.load(path, map_location=device))
    return model.to(device).eval()
'''


def source(plan, class_name, title, source_name):
    """The text of model.py."""
    helpers = "\n\n".join(HELPERS[h] for h in plan.helpers)
    params = ", ".join(var for _, var in plan.inputs)
    outputs = plan.outputs()
    if not outputs:
        raise CaffeError("the net has no output to return")
    body = ["class %s(nn.Module):" % class_name,
            '    """%s."""' % title.rstrip("."), "",
            "    def __init__(self):", "        super().__init__()"]
    body += ["        " + line for line in plan.attrs] or ["        pass"]
    body += ["", "    def forward(self, %s):" % params]
    body += ["        " + line for line in plan.lines]
    if len(outputs) == 1:
        body.append("        return %s" % outputs[0][1])
    else:
        body.append("        return {%s}" % ", ".join("%r: %s" % (n, v) for n, v in outputs))
    code = "\n".join(body) + "\n"
    imports = ["import os"]
    if "math." in helpers:
        imports.append("import math")
    imports.append("")
    imports.append("import torch")
    if "F." in helpers or "F." in code:
        imports.append("import torch.nn.functional as F")
    imports.append("from torch import nn")
    notes = ""
    if plan.dropped:
        notes = "\nLeft out (they only train): %s.\n" % ", ".join(
            "%s (%s)" % d for d in plan.dropped)
    text = HEADER.format(title=title, source=source_name, notes=notes,
                         imports="\n".join(imports))
    if helpers:
        text += "\n\n" + helpers
    text += "\n\n" + code + FOOTER.format(cls=class_name)
    return _wrap_long_lines(text)


def _wrap_long_lines(text, limit=100):
    """Lines longer than ``limit`` broken after their first opening bracket, the rest
    wrapped at spaces and indented by four more."""
    out = []
    for line in text.split("\n"):
        cut = min((i for i in (line.find("("), line.find("{")) if i >= 0), default=-1)
        if len(line) <= limit or cut < 0:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip()) + 4)
        out.append(line[:cut + 1])
        out.extend(indent + part for part in textwrap.wrap(
            line[cut + 1:], limit - len(indent), break_long_words=False,
            break_on_hyphens=False))
    return "\n".join(out)
