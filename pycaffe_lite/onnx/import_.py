"""ONNX model -> Caffe ``.prototxt`` + ``.caffemodel``.

The graph's inputs become Input layers of static shapes (a symbolic axis becomes 1, or the
size given in ``input_shapes``); initializers and Constant nodes are weights; a node whose
inputs are all known constants (and Shape of a static shape) is folded to a constant, and the
shapes are inferred again until nothing more folds; a constant that a layer reads becomes a
Parameter layer; every other node becomes Caffe layers through the importers of
:mod:`.import_ops`. A node with no Caffe equivalent is an error naming the node and its op.
"""

import logging
import os

import numpy as np

from ..blob import fill_blobproto
from ..errors import CaffeError
from ..proto import caffe_pb2
from ._lib import require_onnx
from . import import_gates, import_layout, import_math  # noqa: F401 (their importers)
from . import import_extrema, import_pad, import_pools  # noqa: F401 (after import_ops)
from . import import_composite, import_logic, import_windows  # noqa: F401 (after those)
from . import import_fuse, import_ops

log = logging.getLogger(__name__)


class ImportContext:
    """What is known while the graph is walked: constants, static shapes, the Caffe blob
    that carries each ONNX value, and the layers written so far."""

    def __init__(self, onnx, model, arrays=None):
        """``arrays``: the values of initializers of ``model`` read already (by the context of
        a previous round of folding, whose initializers this model keeps)."""
        graph = model.graph
        self.onnx = onnx
        self.consts = {}
        self.shapes = {}
        self.alias = {}
        self.net = caffe_pb2.NetParameter()  # the weights: the layers, written in place
        self.layers = self.net.layer
        self.layer_names = set()
        self.padded = {}  # a Pad's output -> (input, begin pads, end pads, the Pad node)
        self.opset = max([o.version for o in model.opset_import
                          if o.domain in ("", "ai.onnx")] + [1])
        self.scales = {}  # an ONNX value -> the Scale layer (from a Mul) that writes it
        self.consumers = {}  # an ONNX value -> how many nodes (and outputs) read it
        self.readers = {}  # an ONNX value -> the nodes that read it
        self.types = {}  # an ONNX value -> its element type (TensorProto's), where declared
        # every ONNX value's name: a blob a converter makes up must not take one of them
        self.values = {v.name for v in graph.input} | set(self.consts) \
            | {name for node in graph.node for name in node.output}
        self.written = set()  # every top written so far
        self.node = None  # the node being converted
        self.renamed = {}  # its made-up blob names that were taken -> the names used instead
        for node in graph.node:
            for name in node.input:
                self.consumers[name] = self.consumers.get(name, 0) + 1
                self.readers.setdefault(name, []).append(node)
        for out in graph.output:
            self.consumers[out.name] = self.consumers.get(out.name, 0) + 1
        arrays = arrays or {}
        for init in graph.initializer:
            value = arrays.get(init.name)
            self.consts[init.name] = onnx.numpy_helper.to_array(init) if value is None else value
        self.arrays = dict(self.consts)  # the initializers' values
        for info in list(graph.input) + list(graph.value_info) + list(graph.output):
            t = info.type.tensor_type
            if t.elem_type:
                self.types[info.name] = t.elem_type
            if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
                self.shapes[info.name] = tuple(int(d.dim_value) for d in t.shape.dim)

    # -- values -------------------------------------------------------------------------
    def blob(self, name):
        """The Caffe blob carrying ONNX value ``name``."""
        if name in self.renamed:
            return self.renamed[name]
        return self.alias.get(name, name)

    def _own_top(self, top, bottoms):
        """``top``, or where the node being converted made up a name that another ONNX value
        has (a graph this package exported names its values after the blobs an import made
        up), a fresh one, used for that name for the rest of the node's conversion."""
        node = self.node
        if top in self.renamed:
            return self.renamed[top]
        if node is None or top in node.output or top in bottoms \
                or (top not in self.values and top not in self.written):
            return top
        i = 1
        while "%s_%d" % (top, i) in self.values or "%s_%d" % (top, i) in self.written:
            i += 1
        self.renamed[top] = "%s_%d" % (top, i)
        return self.renamed[top]

    def shape(self, name, node):
        if name in self.consts:
            return tuple(self.consts[name].shape)
        if name not in self.shapes:
            raise self.error(node, "the shape of '%s' is unknown (shape inference could not "
                                   "work it out)" % name)
        return self.shapes[name]

    def const(self, name, node, what="input"):
        if name not in self.consts:
            raise self.error(node, "its %s '%s' must be a constant (an initializer) to "
                                   "convert to Caffe" % (what, name))
        return np.asarray(self.consts[name])

    def error(self, node, message):
        return CaffeError("ONNX node '%s' (op %s): %s" % (node.name or node.output[0],
                                                         node.op_type, message))

    # -- layers -------------------------------------------------------------------------
    def layer(self, type_, name, bottoms, tops, blobs=()):
        """Appends a Caffe layer (``bottoms`` as ONNX value names, ``tops`` as the Caffe
        blob names to write) and returns its LayerParameter."""
        base, i = name, 0
        while name in self.layer_names:
            i += 1
            name = "%s_%d" % (base, i)
        self.layer_names.add(name)
        for b in bottoms:
            if b in self.padded:
                raise self.error(self.padded[b][3], "its output '%s', the pad of an AveragePool, "
                                 "is read by Caffe layer '%s' (%s)" % (b, name, type_))
            if b in self.consts and b not in self.alias:
                self._constant_blob(b)
        lp = self.layers.add(name=name, type=type_)
        lp.bottom.extend(self.blob(b) for b in bottoms)
        tops = [self._own_top(t, bottoms) for t in tops]
        self.written.update(tops)
        lp.top.extend(tops)
        for arr in blobs:
            fill_blobproto(lp.blobs.add(), np.asarray(arr, dtype=np.float32))
        return lp

    def _constant_blob(self, name):
        """A constant read as a layer's bottom: a Parameter layer holding it (not learnt)."""
        value = np.asarray(self.consts[name], dtype=np.float32)
        self.alias[name] = name
        lp = self.layer("Parameter", name, [], [name], [value])
        lp.parameter_param.shape.dim.extend(value.shape)
        lp.param.add(lr_mult=0, decay_mult=0)


# FLOAT, FLOAT16, DOUBLE, BFLOAT16: a graph input of these types is fed as float32
_FLOAT_TYPES = (1, 10, 11, 16)
BOOL = 9  # fed as 0 and 1 where only logical ops and the moving ones read it
# UINT8, INT8, UINT16, INT16, INT32, INT64, UINT32, UINT64: fed as float32 where only ops that
# move or compare values read them (float32 holds every integer up to 2^24 in magnitude exactly)
_INTEGER_TYPES = (2, 3, 4, 5, 6, 7, 12, 13)
# the ops that move or compare their data inputs' values, without arithmetic (the input
# positions; None: all): integers go through them exactly as floats. Gather's indices (slot
# 1) are an Embed's, exact as floats, where its data is a constant table
_MOVING_OPS = {"Pad": (0,), "Identity": (0,), "Reshape": (0,), "Flatten": (0,),
               "Squeeze": (0,), "Unsqueeze": (0,), "Transpose": (0,), "Slice": (0,),
               "Split": (0,), "Tile": (0,), "Expand": (0,), "Gather": (0,), "Concat": None,
               "Max": None, "Min": None, "Clip": (0,), "MaxPool": (0,), "Trilu": (0,),
               "Cast": (0,), "CastLike": (0, 1), "ReduceMax": (0,), "ReduceMin": (0,),
               "Where": (1, 2)}
# comparisons read integers exactly (their outputs are booleans: the walk ends there)
_COMPARING = ("Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Equal")
# what reads a boolean (0 or 1 in a float blob) exactly, besides the moving ops
_LOGICAL = {"And": None, "Or": None, "Xor": None, "Not": None, "Where": (0, 1, 2),
            "Equal": None}


# integer arithmetic that float32 blobs compute as ONNX does: Add and Mul of 32- and 64-bit
# integers, Sub of signed ones (exact while the values stay within 2^24 in magnitude, as
# every integer the blobs carry; 8- and 16-bit sums wrap within that range, an unsigned
# difference below 0)
_WIDE_ARITHMETIC = {"Add": (6, 7, 12, 13), "Mul": (6, 7, 12, 13), "Sub": (6, 7)}
# the ops that compute with integers as a float blob does where ONNX truncates or wraps
_TRUNCATING = {"Div": "integer division truncates the quotient, which no Caffe layer does",
               "Mod": "the remainder of an integer division, which no Caffe layer computes",
               "Pow": "an integer power truncates and wraps, which Caffe's Power does not"}


def _integer_reader(graph, name, elem):
    """(the first node that computes with integer (or boolean) value ``name`` of type
    ``elem`` (or with a value moved from it) otherwise than ONNX does on integers, why) or
    None where only ops that move or compare it, or compute with it exactly
    (:data:`_WIDE_ARITHMETIC`; for a boolean :data:`_LOGICAL`), read it (a Cast to a float
    type ends the walk: the computation after it is a float one)."""
    constants = {i.name for i in graph.initializer} | \
        {o for node in graph.node if node.op_type == "Constant" for o in node.output}
    todo, seen = [(name, elem)], set()
    while todo:
        value, elem = todo.pop()
        if value in seen:
            continue
        seen.add(value)
        for node in graph.node:
            slots = [i for i, n in enumerate(node.input) if n == value]
            if not slots:
                continue
            if node.op_type == "Gather" and slots == [1] and node.input[0] in constants:
                continue  # the indices of a constant table's rows (Embed): its values out
            ours = node.domain in ("", "ai.onnx")
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            if ours and (node.op_type == "Cast" and to in _FLOAT_TYPES or
                         elem != BOOL and node.op_type in _COMPARING):
                continue
            moving = _MOVING_OPS.get(node.op_type, ()) if ours else ()
            if ours and elem in _WIDE_ARITHMETIC.get(node.op_type, ()):
                moving = None
            if ours and elem == BOOL and node.op_type in _LOGICAL:
                moving = _LOGICAL[node.op_type]
            if moving is not None and any(i not in moving for i in slots):
                return node, _TRUNCATING.get(node.op_type) if ours else None
            todo.extend((n, to if node.op_type == "Cast" else elem) for n in node.output if n)
    return None


def _static_inputs(onnx, model, input_shapes):
    graph = model.graph
    inits = {i.name for i in graph.initializer}
    names = [v.name for v in graph.input if v.name not in inits]
    unknown = sorted(set(input_shapes or {}) - set(names))
    if unknown:
        raise CaffeError("an input shape is given for %s, not an input of the ONNX model "
                         "(its inputs: %s)" % (", ".join("'%s'" % n for n in unknown),
                                               ", ".join(names) or "none"))
    for value in graph.input:
        if value.name in inits:
            continue
        elem = value.type.tensor_type.elem_type
        found = _integer_reader(graph, value.name, elem) if elem in _INTEGER_TYPES + (BOOL,) \
            else None
        if found is not None and elem == BOOL:
            reader = found[0]
            raise CaffeError("ONNX input '%s' is of type bool; a Caffe blob holds floats, which "
                             "carry booleans as 0 and 1 through the logical ops (%s) and the "
                             "ops that move them, and node '%s' (op %s) computes with it "
                             "otherwise" % (value.name, ", ".join(sorted(_LOGICAL)),
                                            reader.name or reader.output[0], reader.op_type))
        if found is not None:
            reader, why = found
            kind = onnx.helper.tensor_dtype_to_np_dtype(elem).name
            if why is None and reader.op_type in _WIDE_ARITHMETIC:
                why = "%s arithmetic wraps at %s's bounds, where float32 does not" % (
                    kind, kind) if elem not in (12, 13) else \
                    "an unsigned difference wraps below 0"
            raise CaffeError("ONNX input '%s' is of type %s; a Caffe blob holds floats, which "
                             "carry integers exactly only through ops that move or compare "
                             "them (%s) and the Add, Sub and Mul of 32- and 64-bit integers, "
                             "and node '%s' (op %s) computes with it (%s)"
                             % (value.name, kind, ", ".join(sorted(_MOVING_OPS)),
                                reader.name or reader.output[0], reader.op_type,
                                why or "the graph's integer arithmetic, wrapping and "
                                       "truncating, does not convert"))
        if elem in _INTEGER_TYPES and elem in (6, 7, 12, 13):
            log.info("ONNX import: input '%s' (%s) is carried as float32, which holds its "
                     "integers exactly up to 2^24 in magnitude", value.name,
                     onnx.helper.tensor_dtype_to_np_dtype(elem).name)
        if elem not in _FLOAT_TYPES + _INTEGER_TYPES + (BOOL,):
            raise CaffeError("ONNX input '%s' is of type %s; a Caffe blob holds floats (the "
                             "graph's integer or boolean arithmetic, wrapping and truncating, "
                             "does not convert)"
                             % (value.name, onnx.helper.tensor_dtype_to_np_dtype(elem).name
                                if elem else "none (not a tensor)"))
        dims = value.type.tensor_type.shape.dim
        given = (input_shapes or {}).get(value.name)
        if given is not None:
            if len(given) != len(dims):
                raise CaffeError("input_shapes['%s'] has %d axes; the ONNX input has %d"
                                 % (value.name, len(given), len(dims)))
            for d, size in zip(dims, given):
                d.Clear()
                d.dim_value = int(size)
        if any(d.HasField("dim_value") and d.dim_value == 0 for d in dims):
            raise CaffeError("ONNX input '%s' has an axis of size 0 (shape %s); a Caffe blob "
                             "cannot be empty" % (value.name, [d.dim_value if d.HasField(
                                 "dim_value") else d.dim_param for d in dims]))
        for d in dims:
            if not d.HasField("dim_value") or d.dim_value < 0:
                d.Clear()
                d.dim_value = 1
    return model


def _fold(ctx, node):
    """Whether the node was evaluated on its constant inputs (onnx's reference evaluator, at
    the model's opset), its outputs then being constants."""
    if node.domain not in ("", "ai.onnx"):
        return False
    if node.op_type == "Shape" and node.input[0] in ctx.shapes:
        # opset 15's start and end: Python's slice of the dims (negatives count from the end,
        # both clamped to the rank)
        a = {x.name: x.i for x in node.attribute}
        dims = ctx.shapes[node.input[0]][a.get("start", 0):a.get("end", None)]
        ctx.consts[node.output[0]] = np.asarray(dims, dtype=np.int64)
        return True
    if node.op_type == "CastLike" and node.input[0] in ctx.consts and \
            node.input[1] in ctx.types:  # a constant cast to a computed value's type
        from onnx import helper
        ctx.consts[node.output[0]] = np.asarray(ctx.consts[node.input[0]]).astype(
            helper.tensor_dtype_to_np_dtype(ctx.types[node.input[1]]))
        return True
    names = [n for n in node.input if n]
    # an If's or a Loop's branches read values of the enclosing graph by name: those count
    # as its inputs (a branch reading a tensor that is no constant keeps the node unfolded)
    names += [n for n in sorted(_outer_names(node)) if n not in names]
    if node.op_type != "Constant" and (not names or not all(n in ctx.consts for n in names)):
        return False
    from onnx import helper
    from onnx.reference import ReferenceEvaluator
    outputs = [n for n in node.output if n]
    graph = helper.make_graph([node], "fold",
                              [helper.make_empty_tensor_value_info(n) for n in names],
                              [helper.make_empty_tensor_value_info(n) for n in outputs])
    try:
        values = ReferenceEvaluator(graph, opsets={"": ctx.opset}).run(
            None, {n: ctx.consts[n] for n in names})
    except Exception as exc:  # the reference evaluator raises its own and NumPy's errors
        raise ctx.error(node, "evaluating it on its constant inputs failed (%s: %s)"
                        % (type(exc).__name__, exc)) from None
    for name, value in zip(outputs, values):
        ctx.consts[name] = np.asarray(value)
    return True


def _outer_names(node):
    """The names that the node's subgraphs (an If's branches, a Loop's or a Scan's body) read
    from the enclosing graph: inputs of their nodes that the subgraph itself does not define."""
    from onnx import AttributeProto
    names = set()
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == AttributeProto.GRAPH else \
            list(attr.graphs) if attr.type == AttributeProto.GRAPHS else []
        for graph in graphs:
            defined = {v.name for v in graph.input} | {i.name for i in graph.initializer}
            for inner in graph.node:
                names |= {n for n in inner.input if n and n not in defined}
                names |= _outer_names(inner) - defined
                defined |= set(inner.output)
    return names


# an initializer of more elements than this is a weight that no shape computation reads (a
# shape, axes, pads, repeats or scales have an element per axis at most)
LARGE_INITIALIZER = 1 << 12


def _infer_shapes(onnx, model):
    """``onnx.shape_inference.infer_shapes(model, data_prop=True)``. The large initializers
    are declared to it as graph inputs of their types and shapes instead of being copied to
    it and back (twice per round of folding: most of the import of a net of 200 MB of
    weights); the model returned holds them again, and is the one ONNX infers from the
    whole model."""
    graph = model.graph
    large = [t for t in graph.initializer if int(np.prod(t.dims)) > LARGE_INITIALIZER]
    light = model
    if large:
        light = onnx.ModelProto()
        light.CopyFrom(model)
        names = {t.name for t in large}
        small = [t for t in graph.initializer if t.name not in names]
        del light.graph.initializer[:]
        light.graph.initializer.extend(small)
        declared = {v.name for v in graph.input}
        light.graph.input.extend(onnx.helper.make_tensor_value_info(t.name, t.data_type, t.dims)
                                 for t in large if t.name not in declared)
    try:
        inferred = onnx.shape_inference.infer_shapes(light, data_prop=True)
    except Exception as exc:  # onnx raises its own error types here
        raise CaffeError("ONNX shape inference failed on the model: %s" % exc) from None
    if not large:
        return inferred
    whole = onnx.ModelProto()
    whole.CopyFrom(model)
    for field in ("node", "output", "value_info"):  # what inference adds to (subgraphs too)
        del getattr(whole.graph, field)[:]
        getattr(whole.graph, field).extend(getattr(inferred.graph, field))
    return whole


def _fold_constants(onnx, model):
    """The model, shapes inferred, with every node computable from constants replaced by
    initializers; shapes are inferred again after each round of folding (a folded Shape can
    fix the shape of a later Reshape, and so let a Shape after it fold), until nothing more
    folds. Returns it and its initializers' values."""
    arrays = {}
    while True:
        inferred = _infer_shapes(onnx, model)
        ctx = ImportContext(onnx, inferred, arrays)
        arrays = ctx.arrays
        keep = [i for i, node in enumerate(inferred.graph.node) if not _fold(ctx, node)]
        if len(keep) == len(model.graph.node):
            return inferred, arrays
        nodes = [model.graph.node[i] for i in keep]
        needed = {n for node in nodes for n in node.input} | {o.name for o in
                                                               model.graph.output}
        inits = {i.name for i in model.graph.initializer}
        for name in sorted(needed & set(ctx.consts) - inits):
            tensor = onnx.numpy_helper.from_array(np.asarray(ctx.consts[name]), name)
            model.graph.initializer.append(tensor)
            if model.ir_version < 4:  # initializers were graph inputs too then
                model.graph.input.append(onnx.helper.make_tensor_value_info(
                    name, tensor.data_type, list(tensor.dims)))
        del model.graph.node[:]
        model.graph.node.extend(nodes)


def _without_blobs(net):
    """A copy of ``net`` whose layers hold no blobs (field by field: the blobs, all the
    weights, are not copied)."""
    deploy = caffe_pb2.NetParameter(name=net.name)
    for layer in net.layer:
        target = deploy.layer.add()
        for field, value in layer.ListFields():
            if field.name == "blobs":
                continue
            if hasattr(value, "extend"):  # a repeated field
                getattr(target, field.name).extend(value)
            elif hasattr(value, "CopyFrom"):  # a message
                getattr(target, field.name).CopyFrom(value)
            else:
                setattr(target, field.name, value)
    return deploy


def to_caffe(model, output_prefix=None, input_shapes=None, name=None):
    """Convert an ONNX model (a path or a ``ModelProto``) to Caffe. Writes
    ``output_prefix.prototxt`` and ``output_prefix.caffemodel`` when a prefix is given.
    Returns ``(net_param, weights, outputs)``: the deploy NetParameter, the NetParameter
    holding the weights (what the ``.caffemodel`` contains), and a dict from each ONNX
    output's name to the Caffe blob that carries it (the same name unless an Identity or
    Dropout was folded away)."""
    onnx = require_onnx()
    if not hasattr(model, "graph"):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise CaffeError("%s: no such ONNX file" % path)
        try:
            model = onnx.load(path)
        except Exception as exc:  # protobuf's DecodeError, or an unreadable file
            raise CaffeError("%s: cannot read as an ONNX model (%s: %s)"
                             % (path, type(exc).__name__, exc)) from None
        if not model.ir_version or not model.HasField("graph"):
            # protobuf reads an empty file, and many other binary files, as a ModelProto
            # with nothing set: every ONNX file states its IR version and holds a graph
            raise CaffeError("%s: not an ONNX model (%s)" % (
                path, "the file is empty" if not os.path.getsize(path)
                else "no IR version or graph in it: is it another kind of file?"))
    else:
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        model = copy
    model, arrays = _fold_constants(onnx, _static_inputs(onnx, model, input_shapes))
    model = import_fuse.fuse(onnx, model)  # GELU's erf subgraph: one Gelu
    graph = model.graph
    ctx = ImportContext(onnx, model, arrays)
    inits = {i.name for i in graph.initializer}
    for value in graph.input:
        if value.name in inits:
            continue
        shape = ctx.shapes[value.name]
        lp = ctx.layer("Input", value.name, [], [value.name])
        lp.input_param.shape.add().dim.extend(shape)
    for node in graph.node:  # every node computable from constants is folded already
        handler = import_ops.IMPORTERS.get(node.op_type)
        if handler is None or node.domain not in ("", "ai.onnx"):
            raise ctx.error(node, "this op has no Caffe equivalent")
        empty = [n for n in node.output if 0 in ctx.shapes.get(n, (1,))]
        if empty:
            raise ctx.error(node, "its output '%s' has an axis of size 0 (shape %s); a Caffe "
                                  "blob cannot be empty" % (empty[0], ctx.shapes[empty[0]]))
        ctx.node, ctx.renamed = node, {}
        handler(ctx, node)
    ctx.node, ctx.renamed = None, {}
    for value, (_, _, _, pad_node) in ctx.padded.items():
        raise ctx.error(pad_node, "its output '%s', the pad of an AveragePool, is read by "
                                  "no AveragePool" % value)
    for out in graph.output:
        if out.name in ctx.consts:
            raise CaffeError("ONNX output '%s' is a constant; a Caffe net cannot output a "
                             "constant" % out.name)
    weights = ctx.net
    weights.name = name or graph.name or "net"
    deploy = _without_blobs(weights)
    if output_prefix is not None:
        from ..proto.protoio import atomic_write_all, binary_bytes, text_bytes
        atomic_write_all([(str(output_prefix) + ".prototxt", text_bytes(deploy), "the prototxt"),
                          (str(output_prefix) + ".caffemodel", binary_bytes(weights),
                           "the caffemodel")])
    return deploy, weights, {out.name: ctx.blob(out.name) for out in graph.output}
