"""``pycaffe-lite darknet2caffe``: convert a Darknet model (.cfg + .weights) to a Caffe
prototxt + .caffemodel, and its training settings to a solver.

::

    pycaffe-lite darknet2caffe MODEL.cfg [MODEL.weights] OUT.prototxt [OUT.caffemodel]
        [--solver OUT_solver.prototxt] [--batch N] [--bn-variant pjreddie|alexeyab]

Positional files are told apart by their names: the first is the .cfg; a ``.weights`` file is
the Darknet parameters, a ``.caffemodel`` the output parameters (named after the prototxt when
weights are given without it), and the remaining one the output prototxt. Warnings (keys the
conversion ignores) name the .cfg line; exit code 0 on success, 1 on an error.
"""

import logging
import os
import warnings

from ..darknet import BN_VARIANTS, DarknetError, DarknetWarning, darknet2caffe
from . import help_of

log = logging.getLogger("pycaffe_lite")


def add_arguments(p):
    p.add_argument("files", nargs="+", metavar="FILE",
                   help="MODEL.cfg [MODEL.weights] OUT.prototxt [OUT.caffemodel]")
    p.add_argument("--solver", metavar="OUT_solver.prototxt",
                   help="also write [net]'s training settings as a Caffe solver")
    p.add_argument("--batch", type=int, default=1, metavar="N",
                   help="first dimension of the converted net's input (default 1)")
    p.add_argument("--bn-variant", "--bn_variant", dest="bn_variant", default="pjreddie",
                   choices=BN_VARIANTS,
                   help="batch normalisation as pjreddie's Darknet (sqrt(var) + 1e-6; "
                        "[batchnorm] weights: scales, mean, variance; the default) or "
                        "AlexeyAB's fork (sqrt(var + 1e-5); [batchnorm] weights: biases, "
                        "scales, mean, variance)")


def split_files(files):
    """``(cfg, weights, prototxt, caffemodel)`` from the positional file names."""
    if not 2 <= len(files) <= 4:
        raise DarknetError("expected MODEL.cfg [MODEL.weights] OUT.prototxt [OUT.caffemodel], "
                           "got %d file names" % len(files))
    cfg, rest = files[0], files[1:]
    weights = [f for f in rest if f.lower().endswith(".weights")]
    models = [f for f in rest if f.lower().endswith(".caffemodel")]
    protos = [f for f in rest if f not in weights and f not in models]
    if len(weights) > 1 or len(models) > 1 or len(protos) != 1:
        raise DarknetError("cannot tell the files apart in %s: give one .weights, one output "
                           "prototxt and one .caffemodel at most" % " ".join(rest))
    weights = weights[0] if weights else None
    model = models[0] if models else None
    if weights and model is None:
        model = os.path.splitext(protos[0])[0] + ".caffemodel"
    return cfg, weights, protos[0], model


def run(args):
    cfg, weights, prototxt, model = split_files(args.files)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DarknetWarning)
        result = darknet2caffe(cfg, weights, prototxt, model, solver=args.solver,
                               batch_size=args.batch, bn_variant=args.bn_variant)
    for w in caught:
        if issubclass(w.category, DarknetWarning):
            log.warning("%s", w.message)
        else:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for note in result.notes:
        log.info("%s", note)
    log.info("Wrote %s (%d layers; outputs: %s)", prototxt, len(result.net_param.layer),
             ", ".join(result.outputs))
    if model:
        h = result.header
        log.info("Wrote %s (Darknet weights version %d.%d.%d, %d images seen)", model,
                 h["major"], h["minor"], h["revision"], h["seen"])
    if args.solver:
        log.info("Wrote %s", args.solver)
    return 0


COMMANDS = [("darknet2caffe", help_of("darknet2caffe"), add_arguments, run)]
