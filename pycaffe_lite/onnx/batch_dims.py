"""Which axes of an exported graph's inputs and outputs follow the batch.

A graph whose batch stays dynamic declares its inputs' axis 0 as ``N``. An output's axes are
found by shaping the net at the batch plus one and back: an axis that keeps its size is a
number, an axis that goes from the batch to the batch plus one is ``N`` (wherever a Permute
moved it), and any other axis that changes (a Flatten from axis 0, a Reshape or Concat that
folds the batch in) gets a name of its own. A net that does not reshape to the other batch
is exported with its batch static.
"""

import numpy as np

from ..errors import CaffeError


def _dims(before, after, batch, own):
    out = []
    for k, (a, b) in enumerate(zip(before, after)):
        if a == b:
            out.append(int(a))
        elif (a, b) == (batch, batch + 1):
            out.append("N")
        else:
            out.append("%s_%d" % (own, k))
    return out


def probe(net, inputs, batch):
    """``{blob id: shape at batch + 1}`` for every blob of ``net``, the ``inputs`` (blob ids)
    whose axis 0 is ``batch`` shaped at ``batch + 1``; or the reason the net refuses it. The
    net's shapes and blob values are as they were afterwards."""
    blobs = net._blobs
    saved = [(b, tuple(b.shape), np.array(b.data, copy=True)) for b in blobs]
    try:
        for t in inputs:
            shape = tuple(blobs[t].shape)
            blobs[t].reshape((batch + 1,) + shape[1:])
        net.reshape()
        return {i: tuple(b.shape) for i, b in enumerate(blobs)}, None
    except (CaffeError, ValueError) as exc:
        return None, " ".join(str(exc).split())
    finally:
        for b, shape, data in saved:
            b.reshape(shape)
        net.reshape()
        for b, shape, data in saved:  # a top its forward sized (DetectionOutput's rows)
            b.reshape(shape)
            b.data[...] = data


def batch_axes(net, input_ids, shapes):
    """``(dims_of, why_static)``: ``dims_of(blob id, name)`` gives the declared dims of a
    graph input or output with a dynamic batch; ``why_static`` is None, or why the batch
    cannot vary (the net refuses another batch)."""
    firsts = [shapes[t][0] for t in input_ids if len(shapes[t])]
    if not firsts:
        return None, "the inputs have no axes"
    batch = int(firsts[0])
    varied = [t for t in input_ids if len(shapes[t]) and shapes[t][0] == batch]
    after, why = probe(net, varied, batch)
    if after is None:
        return None, "does not reshape to batch %d: %s" % (batch + 1, why)

    def dims_of(t, name):
        return _dims(shapes[t], after[t], batch, name)
    return dims_of, None
