"""``pycaffe-lite test``: score a model over some batches, as ``caffe test`` does.

    pycaffe-lite test --model M.prototxt --weights W.caffemodel [--iterations 50] [--gpu 0]
                      [--phase TEST] [--level N] [--stage a,b]

Logs every batch's outputs (``Batch i, name = v``), the mean loss and each output's mean
(``name = v (* w = x loss)``).
"""

import logging

import numpy as np

from ..errors import CaffeError
from ..tools_log import use_glog_format
from . import help_of, weight_files
from .time import add_net_arguments, open_net

log = logging.getLogger("pycaffe_lite")


def add_arguments(p):
    add_net_arguments(p, default_phase="TEST")
    p.add_argument("--weights", default="", help="the trained weights (.caffemodel or .h5); "
                   "several separated by ','")


def _fmt(v):
    return "%g" % float(v)


def run(args):
    use_glog_format()
    if not args.model:
        raise CaffeError("need a model definition to score: --model path/to/net.prototxt")
    if not args.weights:
        raise CaffeError("need model weights to score: --weights path/to/weights.caffemodel")
    files = weight_files(args.weights)
    net = open_net(args, "TEST")
    for name in files:
        net.copy_from(name, warn_unfilled=len(files) == 1)
    log.info("Running for %d iterations.", args.iterations)
    weights = net.blob_loss_weights
    outputs = [(name, net.blobs[name], weights[name]) for name in net.outputs]
    scores = None
    loss = 0.0
    for i in range(args.iterations):
        loss += net.forward_from_to()
        values = [np.array(blob.data, np.float32).ravel() for _, blob, _ in outputs]
        for (name, _, _), vals in zip(outputs, values):
            for v in vals:
                log.info("Batch %d, %s = %s", i, name, _fmt(v))
        if scores is None:
            scores = values
        else:
            for s, v in zip(scores, values):
                s += v
    loss /= args.iterations
    log.info("Loss: %s", _fmt(loss))
    results = {}
    for (name, _, weight), s in zip(outputs, scores or []):
        for v in s:
            mean = np.float32(v / np.float32(args.iterations))
            msg = "%s = %s" % (name, _fmt(mean))
            if weight:
                msg += " (* %s = %s loss)" % (_fmt(weight), _fmt(np.float32(weight * mean)))
            log.info("%s", msg)
            results.setdefault(name, []).append(float(mean))
    args.results = results
    return 0


COMMANDS = [("test", help_of("test"), add_arguments, run)]
