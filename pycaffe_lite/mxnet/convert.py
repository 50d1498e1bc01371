"""An MXNet symbol + params as a Caffe NetParameter with the weights in its layers.

The nodes the outputs depend on are converted in the file's (topological) order by the
converters of :mod:`.ops_nn` and :mod:`.ops_tensor` (through :class:`.context.Converter`).
"""

from ..blob import fill_blobproto
from ..errors import CaffeError
from ..proto import caffe_pb2
from . import ops_extra, ops_nn, ops_tensor  # noqa: F401  (they register the converters)
from .context import CONVERTERS, LABEL_INPUTS, Converter


def convert_symbol(symbol, args, aux, input_shapes=None, name="net"):
    """Convert a parsed :class:`.symbol.Symbol` with its parameters. Returns ``(net, weights,
    outputs)``: the NetParameter (no blobs), the blobs of its layers (a dict layer name ->
    float32 arrays) and the Caffe blob of each head."""
    nodes = symbol.nodes
    needed = _needed(symbol)
    unknown = {}
    for node in nodes:  # (a loss's label path is not needed, nor converted)
        if node.op != "null" and node.op not in CONVERTERS and node.index in needed:
            unknown.setdefault(node.op, []).append(node.name)
    if unknown:
        raise CaffeError("%s: %d MXNet op(s) have no Caffe conversion: %s" % (
            symbol.path, len(unknown), "; ".join(
                "%s (node%s %s)" % (op, "s" if len(names) > 1 else "",
                                    ", ".join("'%s'" % n for n in names))
                for op, names in sorted(unknown.items()))))
    conv = Converter(symbol, args, aux, input_shapes)
    for given in conv.input_shapes:
        if not any(v.name == given for v in symbol.variables()):
            raise CaffeError("input_shapes names '%s', which is no variable of %s"
                             % (given, symbol.path))
    for node in nodes:
        if node.op == "null" or node.index not in needed:
            continue
        conv.node = node
        try:
            CONVERTERS[node.op](conv, node)
        except CaffeError:
            raise
        except (ArithmeticError, IndexError, KeyError, TypeError, ValueError) as exc:
            # attributes that contradict each other or the shapes (a corrupt file)
            raise conv.error("cannot convert it: %s: %s" % (type(exc).__name__, exc)) from None
    outputs = []
    for src, out in symbol.heads:
        if (src, out) not in conv.carrier:
            node = nodes[src]
            if node.op != "null":
                raise CaffeError("MXNet node '%s' (op %s): its output %d is not converted"
                                 % (node.name, node.op, out))
            conv.node = None
            conv.add_input(node)
        outputs.append(conv.carrier[(src, out)])
    net = caffe_pb2.NetParameter(name=name)
    net.layer.extend(conv.inputs + conv.layers)
    return net, conv.weights, outputs


def fill_weights(net, weights):
    """Put ``weights`` (layer name -> arrays) into ``net``'s layers as their blobs."""
    for lp in net.layer:
        for arr in weights.get(lp.name, ()):
            fill_blobproto(lp.blobs.add(), arr)
    return net


def _needed(symbol):
    """Indices of the nodes the heads depend on (a label's loss path included)."""
    seen = set()
    stack = [h[0] for h in symbol.heads]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        node = symbol.nodes[i]
        skip = LABEL_INPUTS.get(node.op)
        for slot, (src, _) in enumerate(node.inputs):
            if skip is not None and slot >= skip:
                continue
            stack.append(src)
    return seen
