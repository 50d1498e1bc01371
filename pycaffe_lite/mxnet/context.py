"""What the op converters work with: the registry of converters (``@converter(op, ...)``) and
:class:`Converter`, which appends Caffe layers and knows every blob's shape: it sets up each new
layer on blobs of its bottoms' shapes (the layers' own shape rules), so a converter compares
Caffe's sizes with MXNet's where the two differ (pooling, Deconvolution) and fixes or refuses
them."""

import numpy as np

from ..blob import Blob
from ..errors import CaffeError
from ..layers import create_layer
from ..proto import caffe_pb2
from .symbol import Attrs

CONVERTERS = {}
# Ops that read a label or a second input only when training: their extra inputs are no
# Input layers of the deploy net.
LABEL_INPUTS = {"SoftmaxOutput": 1, "Softmax": 1, "LinearRegressionOutput": 1,
                "MAERegressionOutput": 1, "LogisticRegressionOutput": 1, "SVMOutput": 1}


def converter(*ops):
    def wrap(fn):
        for op in ops:
            CONVERTERS[op] = fn
        return fn
    return wrap


class Converter:
    """The state of one conversion: the Caffe layers so far, which blob carries each MXNet
    output, the blobs' shapes and the parameters."""

    def __init__(self, symbol, args, aux, input_shapes):
        self.symbol = symbol
        self.args = args
        self.aux = aux
        self.used = set()
        self.input_shapes = dict(input_shapes or {})
        self.layers = []
        self.weights = {}  # layer name -> its blobs (float32 arrays), kept out of the protos
        self.inputs = []
        self.layer_names = set()
        self.shapes = {}   # blob name -> shape
        self.carrier = {}  # (node index, output) -> blob name
        self.node = None

    # -- errors and attributes --------------------------------------------------------------
    def error(self, message, node=None):
        node = node or self.node
        return CaffeError("MXNet node '%s' (op %s): %s" % (node.name, node.op, message))

    def attrs(self, node=None):
        return Attrs(node or self.node)

    # -- blobs ----------------------------------------------------------------------------
    def out(self, node=None, index=0):
        """The blob name for output ``index`` of ``node``."""
        node = node or self.node
        return node.name if index == 0 else "%s_output%d" % (node.name, index)

    def bottom(self, slot, node=None):
        """The blob carrying the node's input ``slot`` (an Input layer for a data variable)."""
        node = node or self.node
        if slot >= len(node.inputs):
            raise self.error("it has %d inputs; input %d is missing" % (len(node.inputs), slot),
                             node)
        src, out = node.inputs[slot]
        key = (src, out)
        if key not in self.carrier:
            var = self.symbol.nodes[src]
            if var.op != "null":
                raise self.error("input %d comes from '%s', which was not converted"
                                 % (slot, var.name), node)
            if var.name in self.args or var.name in self.aux:
                raise self.error("it reads the parameter '%s' as data; only layer "
                                 "parameters (weights) can be constants in Caffe" % var.name,
                                 node)
            self.add_input(var)
        return self.carrier[key]

    def shape(self, blob):
        return self.shapes[blob]

    def in_shape(self, slot, node=None):
        return self.shapes[self.bottom(slot, node)]

    def alias(self, blob, index=0):
        """The node's output ``index`` is ``blob`` itself (Dropout, identity, ...)."""
        self.carrier[(self.node.index, index)] = blob

    def add_input(self, var):
        if any(lp.top[0] == var.name for lp in self.inputs):
            self.carrier[(var.index, 0)] = var.name  # one more node of the same variable
            return
        shape = self.input_shapes.get(var.name)
        if shape is None:
            note = var.annotations.get("__shape__", "")
            dims = Attrs(var, var.annotations).tuple("__shape__") if note else ()
            dims = tuple(dims or ())
            if not dims or any(d is None or d <= 0 for d in dims):
                raise CaffeError(
                    "MXNet variable '%s' is an input of the net, and its shape is not known%s: "
                    "give it (input_shapes={'%s': (1, 3, 224, 224)}, or --input-shape "
                    "%s=1,3,224,224)" % (var.name, " (the file gives %s)" % note if note else "",
                                         var.name, var.name))
            shape = dims
        lp = caffe_pb2.LayerParameter(name=self._unique(var.name), type="Input")
        lp.top.append(var.name)
        lp.input_param.shape.add().dim.extend(int(d) for d in shape)
        self.inputs.append(lp)
        self.shapes[var.name] = tuple(int(d) for d in shape)
        self.carrier[(var.index, 0)] = var.name

    # -- parameters ----------------------------------------------------------------------------
    def param(self, slot, node=None, optional=False, implicit=None):
        """The float32 array of the variable at input ``slot`` (from the params file).
        ``implicit``: the name to look up when the node lists no such input (files before
        MXNet 1.0 leave BatchNorm's moving statistics out of its inputs)."""
        node = node or self.node
        if slot >= len(node.inputs):
            if implicit is not None and (implicit in self.aux or implicit in self.args):
                self.used.add(implicit)
                return self.aux.get(implicit, self.args.get(implicit))
            if optional:
                return None
            raise self.error("it has no input %d (a parameter)%s" % (
                slot, "" if implicit is None else " and the params file has no '%s'"
                % implicit), node)
        var = self.symbol.nodes[node.inputs[slot][0]]
        if var.op != "null":
            raise self.error("its input %d ('%s') must be a parameter (a variable in the "
                             "params file), not a computed value" % (slot, var.name), node)
        for table in (self.args, self.aux):
            if var.name in table:
                self.used.add(var.name)
                return table[var.name]
        if optional:
            return None
        raise self.error("its parameter '%s' is not in the params file" % var.name, node)

    # -- layers -----------------------------------------------------------------------------
    def _unique(self, name):
        base, i = name, 0
        while name in self.layer_names:
            i += 1
            name = "%s_%d" % (base, i)
        self.layer_names.add(name)
        return name

    def blob_name(self, name):
        """A blob name not used so far, from ``name``."""
        base, i = name, 0
        while name in self.shapes:
            i += 1
            name = "%s_%d" % (base, i)
        return name

    def layer(self, type_, name, bottoms, tops, blobs=(), frozen=False):
        """Appends a Caffe layer reading the blobs ``bottoms`` and writing ``tops``; sets it up
        on blobs of the bottoms' shapes to learn the tops' shapes. ``frozen``: its blobs are
        constants of the conversion (lr_mult 0), not weights to train."""
        lp = caffe_pb2.LayerParameter(name=self._unique(name), type=type_)
        lp.bottom.extend(bottoms)
        lp.top.extend(tops)
        if blobs:
            self.weights[lp.name] = [np.asarray(arr, dtype=np.float32) for arr in blobs]
        if frozen:
            for _ in blobs:
                lp.param.add(lr_mult=0, decay_mult=0)
        self.layers.append(lp)
        return lp

    def configure(self, lp):
        """Set up ``lp`` (its parameters filled in after :meth:`layer`) on blobs of its
        bottoms' shapes: records its tops' shapes, and turns a layer's complaint into an error
        naming the node. Returns ``lp``."""
        probe = caffe_pb2.LayerParameter()
        probe.CopyFrom(lp)  # (the weights are kept apart, so this copies no arrays)
        try:
            layer = create_layer(probe)
            bottom = [Blob(self.shapes[b]) for b in lp.bottom]
            top = [Blob() for _ in lp.top]
            layer.SetUp(bottom, top)
            given = [a.shape for a in self.weights.get(lp.name, [])]
            want = [tuple(b.shape) for b in layer.blobs]
            if len(given) != len(want):
                raise CaffeError("%d parameter blobs given, %d expected"
                                 % (len(given), len(want)))
            for i, (g, w) in enumerate(zip(given, want)):
                if g != w:
                    raise CaffeError("parameter blob %d has shape %s, expected %s" % (i, g, w))
        except CaffeError as exc:
            raise self.error("its Caffe layer %s (%s) cannot be set up: %s"
                             % (lp.name, lp.type, exc)) from None
        for name, blob in zip(lp.top, top):
            self.shapes[name] = tuple(blob.shape)
        return lp

    def add(self, type_, name, bottoms, tops, blobs=(), frozen=False):
        """:meth:`layer` then :meth:`configure`; returns the LayerParameter."""
        return self.configure(self.layer(type_, name, bottoms, tops, blobs, frozen))

    def produce(self, blob, index=0):
        """Record ``blob`` as the node's output ``index``."""
        self.carrier[(self.node.index, index)] = blob

    # -- helpers shared by converters -------------------------------------------------------
    def take(self, blob, axis, begin, end, name, top=None):
        """``blob[..., begin:end, ...]`` along ``axis`` by a Slice layer (the cut-off parts go
        to a Silence layer); returns the kept blob."""
        size = self.shapes[blob][axis]
        if begin == 0 and end == size:
            return blob
        top = top or self.blob_name(name + "/take%d" % axis)
        points, tops, spare = [], [], []
        if begin > 0:
            points.append(begin)
            spare.append(self.blob_name("%s/before%d" % (name, axis)))
            tops.append(spare[-1])
        tops.append(top)
        if end < size:
            points.append(end)
            spare.append(self.blob_name("%s/after%d" % (name, axis)))
            tops.append(spare[-1])
        lp = self.layer("Slice", "%s/slice%d" % (name, axis), [blob], tops)
        lp.slice_param.axis = axis
        lp.slice_param.slice_point.extend(points)
        self.configure(lp)
        self.add("Silence", "%s/spare%d" % (name, axis), spare, [])
        return top

    def reshape(self, blob, shape, name, top):
        """A Reshape of ``blob`` to ``shape`` (the batch axis copied when it is the same)."""
        dims = [int(d) for d in shape]
        old = self.shapes[blob]
        if tuple(dims) == tuple(old):
            return blob
        if dims and old and dims[0] == old[0]:
            dims[0] = 0
        lp = self.layer("Reshape", name, [blob], [top])
        lp.reshape_param.shape.dim.extend(dims)
        self.configure(lp)
        return top
