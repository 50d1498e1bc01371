"""The ONNX graph under construction, and the registry of converters keyed by Caffe type.

A converter is ``fn(call)`` where ``call`` is a :class:`Call`: the Caffe layer, its
parameter, the ONNX value names of its bottoms and of the tops it must produce, the static
shapes our net gave every bottom and top, and the :class:`GraphBuilder` to add nodes and
constants to. Shapes are those of the built net; the batch axis stays dynamic, so converters
write ``0`` ("copy this axis") for the batch dimension where ONNX allows it. A converter
whose tops' shapes vary at run time (DetectionOutput's number of rows) sets
``call.out_dims``, and graph outputs are declared with those dims.
"""

import numpy as np

from ..errors import CaffeError
from ._lib import require_onnx

CONVERTERS = {}


def register_converter(*caffe_types):
    """Decorator: ``fn(call)`` exports layers of these Caffe types. A fork's layer module
    registers its own converter with this, and ``export`` picks it up."""
    def wrap(fn):
        for t in caffe_types:
            CONVERTERS[t] = fn
        return fn
    return wrap


class GraphBuilder:
    """Nodes, initializers and unique value names of one ONNX graph."""

    def __init__(self, opset):
        self.onnx = require_onnx()
        self.opset = opset
        self.batch_fixed = []  # (layer, why): nodes that hold the batch size
        self.nodes = []
        self.initializers = []
        self.used = set()
        self.node_names = set()

    def reserve(self, name):
        self.used.add(name)

    def fresh(self, name, taken=None):
        """``name``, or ``name_1``, ``name_2``... if it is taken; marks it taken. Values
        and nodes have separate namespaces."""
        taken = self.used if taken is None else taken
        out, i = name, 0
        while out in taken:
            i += 1
            out = "%s_%d" % (name, i)
        taken.add(out)
        return out

    def const(self, name, array, dtype=np.float32):
        array = np.asarray(array, dtype=dtype)
        name = self.fresh(name)
        self.initializers.append(self.onnx.numpy_helper.from_array(array, name))
        return name

    def ints(self, name, values):
        return self.const(name, np.asarray(values, dtype=np.int64).reshape(-1), np.int64)

    def node(self, op, inputs, outputs=None, name=None, **attrs):
        """Adds one node; ``outputs`` default to one fresh name from ``name``. Returns the
        output names (one name when there is one output)."""
        name = self.fresh(name or op, self.node_names)
        if outputs is None:
            outputs = [self.fresh(name)]
        elif isinstance(outputs, str):
            outputs = [outputs]
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), list(outputs),
                                                     name=name, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs

    def reduce(self, op, x, axes, keepdims, out=None, name=None):
        """``Reduce*`` over ``axes``: an input from opset 18 (ReduceSum from 13), an
        attribute before."""
        axes = [int(a) for a in axes]
        as_input = self.opset >= 18 or (op == "ReduceSum" and self.opset >= 13)
        if as_input:
            return self.node(op, [x, self.ints((name or op) + "/axes", axes)], out, name,
                             keepdims=int(keepdims))
        return self.node(op, [x], out, name, axes=axes, keepdims=int(keepdims))

    def reshape(self, x, shape, out=None, name=None):
        return self.node("Reshape", [x, self.ints((name or "reshape") + "/shape", shape)],
                         out, name)


class LayerParts:
    """What a converter's per-layer object reads of its layer (``self.layer``, ``self.name``,
    ``self.type``): the parameter blobs, and errors that name the layer."""

    @property
    def blobs(self):
        """The layer's parameter blobs as float32 arrays."""
        return [np.asarray(b.data, dtype=np.float32) for b in self.layer.blobs]

    def error(self, message):
        return CaffeError("layer '%s' (type %s): %s" % (self.name, self.type, message))


class Call(LayerParts):
    """One Caffe layer being exported (see the module docstring)."""

    def __init__(self, graph, layer, inputs, outputs, in_shapes, out_shapes):
        self.g = graph
        self.layer = layer
        self.param = layer.layer_param
        self.name = layer.layer_param.name
        self.type = layer.type
        self.inputs = inputs
        self.outputs = outputs
        self.in_shapes = in_shapes
        self.out_shapes = out_shapes
        # a converter whose tops' shapes vary at run time sets one list of dims per top
        # (ints, or names for the varying axes); the graph declares them for its outputs
        self.out_dims = None

    def node(self, op, inputs, out=None, suffix=None, **attrs):
        """A node named after the layer (``name`` or ``name/suffix``)."""
        name = self.name if suffix is None else "%s/%s" % (self.name, suffix)
        return self.g.node(op, inputs, out, name, **attrs)

    def const(self, suffix, array, dtype=np.float32):
        return self.g.const("%s/%s" % (self.name, suffix), array, dtype)

    def ints(self, suffix, values):
        return self.g.ints("%s/%s" % (self.name, suffix), values)

    def reshape(self, x, shape, out=None, suffix="reshape"):
        return self.node("Reshape", [x, self.ints(suffix + "/shape", shape)], out, suffix)

    def fixes_batch(self, why):
        """The layer's nodes hold the batch size (``why``): the graph's batch is static."""
        self.g.batch_fixed.append((self.name, why))


def keep_batch(shape):
    """A static shape for ONNX Reshape with the batch axis copied from the input (0)."""
    return [0] + [int(d) for d in shape[1:]]
