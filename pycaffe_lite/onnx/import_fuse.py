"""Subgraphs of an ONNX model that one Caffe layer computes, rewritten as that op before the
conversion: the exact GELU ``0.5 x (1 + erf(x / sqrt(2)))``, as PyTorch's ``nn.GELU`` exports
it before opset 20 (Div, Erf, Add, Mul, Mul) and ONNX's own Gelu function is written (Mul
by the half first, Sum for the Add), becomes opset 20's Gelu, which
:func:`.import_layout.gelu` converts to pycaffe-lite's GELU layer. The pattern's values must
be read by the pattern alone; an Erf outside it is an error naming the node (Caffe has no
erf layer)."""

import numpy as np

SQRT2 = float(np.sqrt(2.0))


def _scalar(consts, name):
    value = consts.get(name)
    if value is None or value.size != 1 or value.dtype.kind not in "fiu":
        return None
    return float(np.asarray(value, dtype=np.float64).reshape(-1)[0])


def _other(node, name):
    """The other input of a two-input node one of whose inputs is ``name``."""
    if len(node.input) != 2 or name not in node.input:
        return None
    return node.input[1] if node.input[0] == name else node.input[0]


def _gelu(nodes, consts, producer, readers, e):
    """(the GELU's input, its output, the indices of the nodes it replaces) around the Erf
    ``nodes[e]``, or None."""
    def only_reader(value, *ops):
        found = readers.get(value, [])
        return found[0] if len(found) == 1 and found[0] >= 0 and \
            nodes[found[0]].op_type in ops else None

    def near(name, want):
        v = _scalar(consts, name)
        return v is not None and abs(v - want) <= 1e-6 * abs(want)

    erf = nodes[e]
    s = producer.get(erf.input[0])
    if s is None or only_reader(erf.input[0], "Erf") is None:
        return None
    scaled = nodes[s]
    if scaled.op_type == "Div" and near(scaled.input[1], SQRT2):
        x = scaled.input[0]
    elif scaled.op_type == "Mul" and near(scaled.input[1], 1 / SQRT2):
        x = scaled.input[0]
    elif scaled.op_type == "Mul" and near(scaled.input[0], 1 / SQRT2):
        x = scaled.input[1]
    else:
        return None
    p = only_reader(erf.output[0], "Add", "Sum")
    if p is None or not near(_other(nodes[p], erf.output[0]), 1.0):
        return None
    plus = nodes[p].output[0]
    f = only_reader(plus, "Mul")
    if f is None:
        return None
    factor = _other(nodes[f], plus)
    found = [s, e, p, f]
    if factor == x or near(factor, 0.5):  # (x * p) * 0.5 or (p * 0.5) * x
        last = only_reader(nodes[f].output[0], "Mul")
        if last is None:
            return None
        rest = _other(nodes[last], nodes[f].output[0])
        if not (near(rest, 0.5) if factor == x else rest == x):
            return None
        found.append(last)
    else:  # (0.5 * x) * p
        h = producer.get(factor)
        if h is None or nodes[h].op_type != "Mul" or only_reader(factor, "Mul") is None or \
                not near(_other(nodes[h], x), 0.5):
            return None
        found.append(h)
        last = f
    return x, nodes[last].output[0], found


def fuse(onnx, model):
    """``model`` (its constants folded into initializers) with each GELU subgraph replaced
    by one Gelu node, in place of the last node it replaces."""
    graph = model.graph
    nodes = list(graph.node)
    if not any(n.op_type == "Erf" for n in nodes):
        return model
    consts = {i.name: onnx.numpy_helper.to_array(i) for i in graph.initializer}
    producer = {o: i for i, n in enumerate(nodes) for o in n.output}
    readers = {}
    for i, node in enumerate(nodes):
        for name in node.input:
            readers.setdefault(name, []).append(i)
    for out in graph.output:
        readers.setdefault(out.name, []).append(-1)  # read by no node: never the only one
    replaced, added = set(), {}
    for e, node in enumerate(nodes):
        if node.op_type != "Erf":
            continue
        found = _gelu(nodes, consts, producer, readers, e)
        if found is None or replaced & set(found[2]):
            continue
        x, out, used = found
        replaced.update(used)
        added[max(used)] = onnx.helper.make_node("Gelu", [x], [out], name=node.name or out)
    if not added:
        return model
    kept = [added.get(i, n) for i, n in enumerate(nodes) if i not in replaced or i in added]
    del graph.node[:]
    graph.node.extend(kept)
    return model
