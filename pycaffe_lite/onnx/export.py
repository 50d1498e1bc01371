"""Caffe net -> ONNX model.

The exported graph follows the net's layers in order. Data layers (Input, Data, ImageData,
...) become graph inputs of their tops' shapes, with the batch axis dynamic unless asked
otherwise; losses, Accuracy and Silence are left out, as a deploy conversion expects (the
returned report lists them); any other layer without a converter is an error naming it.
Nodes and initializers are named after the Caffe layers, values after the Caffe blobs: the
last value of each blob carries the blob's own name, earlier values of an in-place blob are
``layer/blob``.
"""

import logging

from ..errors import CaffeError
from ._lib import require_onnx
from .batch_dims import batch_axes
from .builder import CONVERTERS, Call, GraphBuilder
# imported for their register_converter side effect
from . import ops_common, ops_detection, ops_forks, ops_neuron, ops_vision  # noqa: F401

log = logging.getLogger(__name__)

DEFAULT_OPSET = 21
MIN_OPSET = 13
DATA_TYPES = {"Input", "Data", "ImageData", "HDF5Data", "MemoryData", "WindowData",
              "DummyData", "AnnotatedData"}
DROPPED_TYPES = {"Accuracy", "Silence", "HDF5Output", "DetectionEvaluate"}


def is_dropped(layer_type):
    return layer_type.endswith("Loss") or layer_type in DROPPED_TYPES


def _value_info(onnx, name, shape, dims=None):
    if dims is None:
        dims = [int(d) for d in shape]
    return onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, dims)


def export(net, path=None, opset=None, static_batch=False, check=True):
    """Write ``net`` (a :class:`pycaffe_lite.Net`, usually built in the TEST phase) as an
    ONNX model to ``path`` (when given). Returns ``(model, report)``: the ``onnx.ModelProto``
    and a dict with the graph's ``inputs`` and ``outputs``, the ``dropped`` layers as
    ``(name, type)`` pairs, the ``values``: ``(layer, top blob, ONNX value)`` for each top
    of each exported layer, the value the blob holds after that layer, and ``static_batch``:
    ``(layer, why)`` for each layer whose nodes hold the batch size (a slice along the batch
    axis, ...), which makes the graph's batch axis static even without ``static_batch``."""
    onnx = require_onnx()
    opset = DEFAULT_OPSET if opset is None else int(opset)
    if not MIN_OPSET <= opset <= onnx.defs.onnx_opset_version():
        raise CaffeError("ONNX opset %d is not supported: choose %d..%d"
                         % (opset, MIN_OPSET, onnx.defs.onnx_opset_version()))
    g = GraphBuilder(opset)
    names = list(net._blob_names)  # by blob id, as a record's bottom_ids / top_ids index them
    shapes = [tuple(b.shape) for b in net._blobs]
    for n in names:
        g.reserve(n)
    last_writer, fed = {}, set()
    for i, rec in enumerate(net.records):
        if is_dropped(rec.layer.type):
            continue
        if rec.layer.type in DATA_TYPES:
            fed.update(rec.top_ids)  # graph inputs: their names stay the inputs'
        for t in rec.top_ids:
            last_writer[t] = i
    batch = None if static_batch else "N"
    current, inputs, dropped, available, order = {}, [], [], [], {}
    values = []  # (layer, top blob, the ONNX value it has after that layer)
    split_source = {}  # top of a Split that the net inserted -> the blob it copies
    declared = {}  # blob -> the dims a converter declared for it (shapes that vary)
    for i, rec in enumerate(net.records):
        lname, layer = rec.name, rec.layer
        if is_dropped(layer.type):
            dropped.append((lname, layer.type))
            log.info("ONNX export: dropped layer '%s' (type %s), not part of a deploy net",
                     lname, layer.type)
            continue
        if layer.type in DATA_TYPES:
            for t in rec.top_ids:
                current[t] = names[t]
                inputs.append(t)
                available.append(t)
            continue
        converter = CONVERTERS.get(layer.type)
        if converter is None:
            raise CaffeError("layer '%s' of type %s has no ONNX equivalent; it cannot be "
                             "exported" % (lname, layer.type))
        bottoms = []
        for b in rec.bottom_ids:
            if b not in current:
                raise CaffeError("layer '%s' (type %s) reads blob '%s', which comes from a "
                                 "layer left out of the ONNX graph" % (lname, layer.type,
                                                                       names[b]))
            bottoms.append(current[b])
            if b in available:
                available.remove(b)
        # a layer rewriting an input's blob in place gives a value of its own (SSA)
        tops = [names[t] if last_writer.get(t) == i and t not in fed
                else g.fresh("%s/%s" % (lname, names[t])) for t in rec.top_ids]
        call = Call(g, layer, bottoms, tops, [shapes[b] for b in rec.bottom_ids],
                    [shapes[t] for t in rec.top_ids])
        call.name = lname
        if layer.type == "Split" and lname.endswith("_split"):
            for t in rec.top_ids:
                split_source[t] = rec.bottom_ids[0]
        produced = converter(call) or tops
        values.extend((lname, names[t], v) for t, v in zip(rec.top_ids, produced))
        dims = call.out_dims or [None] * len(tops)
        for t, d in zip(rec.top_ids, dims):
            declared[t] = d
        for t, value in zip(rec.top_ids, produced):
            current[t] = value
            if t not in available:
                available.append(t)
            order[t] = i
    dims_of = None
    if batch and not g.batch_fixed:
        dims_of, why = batch_axes(net, inputs, shapes)
        if why:
            g.batch_fixed.append((net.name or "net", why))
    if g.batch_fixed and batch:
        log.info("ONNX export: the batch axis is static, as the net's: %s",
                 "; ".join("layer '%s' %s" % lw for lw in g.batch_fixed))

    def declare(t, name, dims=None):
        if dims is None and dims_of is not None:
            dims = dims_of(t, name)
        return _value_info(onnx, name, shapes[t], dims)
    inputs = [declare(t, names[t]) for t in inputs]
    outputs, seen = [], set()
    for t in available:
        # an inserted Split's copy that only dropped layers read stands for its source
        t = split_source.get(t, t)
        if t not in order or t in seen:
            continue  # a data layer's blob that nothing reads (a label): not an output
        seen.add(t)
        out_name = names[t]
        if t in fed:
            out_name = current[t]  # the input has the blob's name: the output keeps the value's
        elif current[t] != names[t]:
            g.node("Identity", [current[t]], [names[t]], name=names[t] + "/output")
        outputs.append(declare(t, out_name, declared.get(t)))
    used = {name for node in g.nodes for name in node.input}
    inputs = [v for v in inputs if v.name in used]
    graph = onnx.helper.make_graph(g.nodes, net.name or "net", inputs,
                                   outputs, initializer=g.initializers)
    opsets = [onnx.helper.make_opsetid("", opset)]
    model = onnx.helper.make_model(graph, opset_imports=opsets, producer_name="pycaffe-lite")
    model.ir_version = onnx.helper.find_min_ir_version_for(opsets)
    if check:
        try:
            onnx.checker.check_model(model, full_check=True)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError) as exc:
            raise CaffeError("the ONNX graph written for net '%s' fails onnx.checker (its "
                             "nodes are named after the Caffe layers): %s"
                             % (net.name or "net", str(exc).strip())) from None
    if path is not None:
        # through a temporary and a rename: a failed write leaves a previous file whole
        from ..proto.protoio import atomic_write
        atomic_write(str(path), model.SerializeToString(), "the ONNX model")
    report = {"inputs": [v.name for v in inputs], "outputs": [v.name for v in outputs],
              "dropped": dropped, "values": values, "static_batch": list(g.batch_fixed)}
    return model, report


def export_files(model_path, weights_path, output, opset=None, static_batch=False):
    """Build the net of a deploy prototxt (TEST phase) with its weights, and export it."""
    from ..net import Net
    from ..proto import caffe_pb2

    net = Net(str(model_path), caffe_pb2.TEST,
              weights=str(weights_path) if weights_path else None)
    return export(net, output, opset=opset, static_batch=static_batch)

