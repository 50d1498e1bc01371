"""The lines a solver logs with ``debug_info: true`` (Caffe's Net debug_info).

Forward: each layer's top blobs and params as mean absolute data; backward: each bottom and
param diff, then the L1 and L2 norms of all learnable params; update: each param's data and
diff (shared params name their owner). The passes run layer by layer so that the first layer
to produce a non-finite value can be named on the spot (``check(net, culprit, what)``).
"""

import logging

import numpy as np

from .. import health

log = logging.getLogger("pycaffe_lite")


def fmt(value):
    """A number as Caffe's log prints it (ostream's default: 6 significant digits)."""
    return "%g" % float(value)


def mean_abs(blob, diff=False):
    if blob.count == 0:
        return 0.0
    return (blob.asum_diff() if diff else blob.asum_data()) / blob.count


def forward(net, check):
    """Forward ``net`` one layer at a time, logging each layer's tops and params; the loss."""
    names = net.blob_names
    loss = 0.0
    for i, rec in enumerate(net.records):
        loss += net.forward_from_to(i, i)
        lname = rec.name
        check(net, health.check_layer_forward(net, i), "Forward")
        for blob, tid in zip(rec.tops, rec.top_ids):
            log.info("    [Forward] Layer %s, top blob %s data: %s", lname, names[tid],
                     fmt(mean_abs(blob)))
        for blob, pid in zip(rec.layer.blobs, rec.param_ids):
            log.info("    [Forward] Layer %s, param blob %s data: %s", lname,
                     net.param_display_names[pid], fmt(mean_abs(blob)))
    return loss


def backward(net, check):
    """Backward ``net`` one layer at a time, logging the diffs, then the params' norms."""
    names = net.blob_names
    for i in range(len(net.records) - 1, -1, -1):
        rec = net.records[i]
        if not rec.need_backward:
            continue
        net.backward_from_to(i, i)
        lname = rec.name
        check(net, health.check_layer_backward(net, i), "Backward")
        for j, (blob, bid) in enumerate(zip(rec.bottoms, rec.bottom_ids)):
            if rec.bottom_need_backward[j]:
                log.info("    [Backward] Layer %s, bottom blob %s diff: %s", lname,
                         names[bid], fmt(mean_abs(blob, True)))
        layer = rec.layer
        for j, blob in enumerate(layer.blobs):
            if layer.param_propagate_down[j]:
                log.info("    [Backward] Layer %s, param blob %d diff: %s", lname, j,
                         fmt(mean_abs(blob, True)))
    asum_data = asum_diff = sumsq_data = sumsq_diff = 0.0
    for blob in net.learnable_params:
        asum_data += blob.asum_data()
        asum_diff += blob.asum_diff()
        sumsq_data += blob.sumsq_data()
        sumsq_diff += blob.sumsq_diff()
    log.info("    [Backward] All net params (data, diff): L1 norm = (%s, %s); L2 norm = "
             "(%s, %s)", fmt(asum_data), fmt(asum_diff), fmt(np.sqrt(sumsq_data)),
             fmt(np.sqrt(sumsq_diff)))


def update(net):
    """The [Update] lines: every param's data and diff before the solver applies it."""
    for pid, blob in enumerate(net.param_blobs):
        lname = net.records[net.param_layer_indices[pid][0]].name
        owner = net.param_owners[pid]
        if owner < 0:
            log.info("    [Update] Layer %s, param %s data: %s; diff: %s", lname,
                     net.param_display_names[pid], fmt(mean_abs(blob)),
                     fmt(mean_abs(blob, True)))
        else:
            log.info("    [Update] Layer %s, param blob %s (owned by layer %s, param %s) "
                     "diff: %s", lname, net.param_display_names[pid],
                     net.records[net.param_layer_indices[owner][0]].name,
                     net.param_display_names[owner], fmt(mean_abs(blob, True)))
