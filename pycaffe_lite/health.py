"""Numeric health of training: the first NaN or Inf, and losses stuck at 87.3365.

The solver checks cheaply and looks closely only when something is wrong:

- every iteration, the loss (a number it has anyway) must be finite;
- at each display iteration (and with ``debug_info``), the sum of the parameter gradients,
  accumulated in float64, must be finite (one read of the gradients);
- when a check fails, :func:`locate` runs the net again layer by layer with a full check after
  each one and names the first layer and blob that turned finite inputs into NaN or Inf
  (forward first: params, then tops; then backward: bottom and param diffs). With
  ``debug_info`` the per-layer pass the solver makes anyway records the culprit directly.

:func:`diagnose` asks layers with a ``numeric_diagnosis()`` method (SoftmaxWithLoss) for
warnings about values that are finite but tell of a diverged net, such as the clipped
probabilities behind Caffe's famous loss of 87.3365.
"""

import math

import numpy as np

from .backend import get_array_module
from .errors import NumericError

#: What usually makes training produce NaN or Inf (or the 87.3365 loss), and what to do.
USUAL_CAUSES = (
    "Usual causes: a learning rate too high (lower base_lr, e.g. by 10x, or set "
    "clip_gradients), labels out of range, input data that is not scaled (e.g. "
    "transform_param { scale: 0.00390625 } for 0-255 pixels) or holds NaN, and a missing or "
    "too wide weight_filler. Run with debug_info: true to log every layer's values")


__all__ = ["NumericError", "Culprit", "USUAL_CAUSES", "nonfinite_kind", "gradients_finite",
           "check_layer_forward", "check_layer_backward", "locate", "nonfinite_error",
           "diagnose"]


class Culprit:
    """Where the first non-finite value appeared: ``layer`` (index), ``kind`` ("param",
    "top", "bottom diff", "param diff"), ``blob`` (a blob name or a param index) and
    ``what`` ("NaN" or "Inf")."""

    def __init__(self, net, layer_index, kind, blob, what):
        self.layer_index = layer_index
        self.layer = net.records[layer_index].name
        self.layer_type = net.records[layer_index].layer.type
        self.kind = kind
        self.blob = blob
        self.what = what
        self.bottoms = [net.blob_names[b] for b in net.records[layer_index].bottom_ids]

    def describe(self):
        where = "layer '%s' (type %s)" % (self.layer, self.layer_type)
        if self.kind == "param":
            return ("param blob %s of %s holds %s: the weights diverged in an earlier update"
                    % (self.blob, where, self.what))
        if self.kind == "top" and not self.bottoms:
            return ("%s produced %s in top blob '%s': the input data holds NaN or Inf; check "
                    "the dataset and the transform" % (where, self.what, self.blob))
        if self.kind == "top":
            return ("%s produced %s in top blob '%s' from finite bottoms (%s) and finite "
                    "params: values too large for its operation (overflow) or outside its "
                    "domain" % (where, self.what, self.blob,
                                ", ".join("'%s'" % b for b in self.bottoms)))
        if self.kind == "bottom diff":
            return ("the backward pass of %s produced %s in the diff of bottom blob '%s' from "
                    "finite top diffs" % (where, self.what, self.blob))
        return ("the backward pass of %s produced %s in the diff of its param blob %s from "
                "finite top diffs" % (where, self.what, self.blob))

    def __repr__(self):
        return "<Culprit %s>" % self.describe()


# ---- checks ----------------------------------------------------------------------------------
def nonfinite_kind(arr):
    """None when every value of ``arr`` is finite, else "NaN" (if any) or "Inf"."""
    if arr.size == 0:
        return None
    xp = get_array_module(arr)
    if bool(xp.isfinite(arr).all()):
        return None
    return "NaN" if bool(xp.isnan(arr).any()) else "Inf"


def gradients_finite(net):
    """The cheap check: whether the sum of all learnable parameter gradients is finite
    (accumulated in float64, so that large finite gradients do not overflow it)."""
    total = None
    for blob in net.learnable_params:
        diff = blob.read_diff()
        if diff.size:
            part = diff.sum(dtype=np.float64)
            total = part if total is None else total + part
    return total is None or math.isfinite(float(total))  # (one scalar read from a device)


def check_layer_forward(net, i):
    """The first non-finite param or top of layer ``i`` (after its forward), or None."""
    rec = net.records[i]
    for j, blob in enumerate(rec.layer.blobs):
        what = nonfinite_kind(blob.read_data())
        if what:
            return Culprit(net, i, "param", j, what)
    for blob, tid in zip(rec.tops, rec.top_ids):
        what = nonfinite_kind(blob.read_data())
        if what:
            return Culprit(net, i, "top", net.blob_names[tid], what)
    return None


def check_layer_backward(net, i):
    """The first non-finite bottom diff or param diff that layer ``i``'s backward wrote."""
    rec = net.records[i]
    layer = rec.layer
    for j, (blob, bid) in enumerate(zip(rec.bottoms, rec.bottom_ids)):
        if rec.bottom_need_backward[j]:
            what = nonfinite_kind(blob.read_diff())
            if what:
                return Culprit(net, i, "bottom diff", net.blob_names[bid], what)
    for j, blob in enumerate(layer.blobs):
        if j < len(layer.param_propagate_down) and layer.param_propagate_down[j]:
            what = nonfinite_kind(blob.read_diff())
            if what:
                return Culprit(net, i, "param diff", j, what)
    return None


def locate(net):
    """Run ``net`` again layer by layer, checking after each one; the first :class:`Culprit`
    or None.

    Layers without bottoms (data, Input) are not run again: their tops still hold the batch
    that failed. The other layers run forward (then, if forward stays finite, backward) on it
    as the failed iteration did. This changes layer state that the check does not restore
    (random numbers of Dropout, BatchNorm's running averages, accumulated param diffs): call
    it only when training is about to stop, or has gone wrong anyway.
    """
    for i, rec in enumerate(net.records):
        if rec.bottoms:
            rec.layer.Forward(rec.bottoms, rec.tops)
        culprit = check_layer_forward(net, i)
        if culprit is not None:
            return culprit
    net.clear_param_diffs()
    for i in range(len(net.records) - 1, -1, -1):
        rec = net.records[i]
        if not rec.need_backward:
            continue
        net.backward_from_to(i, i)
        culprit = check_layer_backward(net, i)
        if culprit is not None:
            return culprit
    return None


def nonfinite_error(iteration, loss, culprit, last_snapshot=None):
    """The :class:`NumericError` for a failed check at ``iteration``."""
    if culprit is not None:
        found = "the first non-finite value: " + culprit.describe()
    else:
        found = ("no layer produced a non-finite value when the net was run again on the last "
                 "batch, so an earlier pass of this iteration (iter_size) or its random numbers "
                 "produced it")
    head = "Iteration %d: " % iteration
    if math.isfinite(loss):
        head += "the parameter gradients hold NaN or Inf (the loss is %g); " % loss
    else:
        head += "the loss is %s; " % ("NaN" if math.isnan(loss) else "Inf")
    message = head + found + ". " + USUAL_CAUSES + "."
    if last_snapshot:
        message += " The last snapshot is %s: to continue after a fix, resume from it " \
                   "(--snapshot %s)." % (last_snapshot, last_snapshot)
    return NumericError(message, iteration, culprit)


def diagnose(net):
    """[(layer name, message)] from the layers that can tell of a diverged net from their last
    forward pass (see ``SoftmaxWithLossLayer.numeric_diagnosis``)."""
    found = []
    for name, layer in zip(net.layer_names, net.layers):
        diagnosis = getattr(layer, "numeric_diagnosis", None)
        if diagnosis is None:
            continue
        message = diagnosis()
        if message:
            found.append((name, message))
    return found
