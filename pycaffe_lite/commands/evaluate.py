"""``pycaffe-lite evaluate``: accuracy reports of a trained net over its TEST data.

    pycaffe-lite evaluate --model M.prototxt --weights W.caffemodel [--iterations N]
                          [--labels labels.txt] [--json out.json] [--confusion_png cm.png]
                          [--scores BLOB --label BLOB] [--ap_version Integral] [--gpu 0]

Classification nets: top-1, top-5, per-class accuracy and the confusion matrix; segmentation
nets: pixel accuracy, IoU per class and mean IoU; detection nets (DetectionEvaluate layers):
AP per class and mAP. See :mod:`pycaffe_lite.evaluate`.
"""

import json
import os

from ..errors import CaffeError
from ..evaluate import evaluate, format_report, need_matplotlib, plot_confusion
from ..layers.detection.average_precision import AP_VERSIONS
from ..proto.protoio import atomic_write
from . import add_int8_flag, add_net_flags, help_of, int8_choice, weight_files
from .time import select_single_gpu


def add_arguments(p):
    p.add_argument("--model", default="", help="the net definition with its TEST data layers")
    p.add_argument("--weights", default="", help="the trained weights (.caffemodel or .h5); "
                   "several separated by ','")
    p.add_argument("--iterations", type=int, default=None,
                   help="TEST batches to run (default: enough to cover the TEST source once, "
                        "counted by its data layer; 50 where it cannot tell)")
    p.add_argument("--labels", default="", help="class names, one per line")
    p.add_argument("--json", default="", metavar="OUT.json", help="also write the report as "
                   "JSON to this file")
    p.add_argument("--confusion_png", default="", metavar="PNG",
                   help="draw the confusion matrix into this PNG (needs matplotlib)")
    p.add_argument("--scores", default=None, help="the blob of class scores (default: the "
                   "first bottom of the first Accuracy or SoftmaxWithLoss layer)")
    p.add_argument("--label", default=None, help="the blob of labels (default: that layer's "
                   "second bottom)")
    p.add_argument("--ap_version", default="Integral", choices=AP_VERSIONS,
                   help="how detection AP is computed (Integral)")
    p.add_argument("--gpu", default="", help="run on the GPU with this device id")
    add_int8_flag(p)
    add_net_flags(p)


def check_output_folder(flag, path):
    """A CaffeError naming ``flag`` where the folder ``path`` would be written into is missing
    (checked before the run, not after it)."""
    folder = os.path.dirname(path)
    if path and folder and not os.path.isdir(folder):
        raise CaffeError("%s %s: the folder '%s' does not exist; create it or write elsewhere"
                         % (flag, path, folder))
    if path and os.path.isdir(path):
        raise CaffeError("%s %s: is a directory; give the name of a file to write" % (flag, path))


def run(args):
    if not args.model:
        raise CaffeError("need a model definition to evaluate: --model path/to/net.prototxt")
    if not args.weights:
        raise CaffeError("need model weights to evaluate: --weights path/to/weights.caffemodel")
    weight_files(args.weights)
    if args.confusion_png:
        need_matplotlib("--confusion_png")  # before the run, not after it
    for flag, path in (("--json", args.json), ("--confusion_png", args.confusion_png)):
        check_output_folder(flag, path)
    select_single_gpu(args.gpu)
    report = evaluate(args.model, args.weights, args.iterations, args.labels or None,
                      args.scores, args.label, args.ap_version, int8=int8_choice(args))
    print(format_report(report))
    if args.json:
        atomic_write(args.json, json.dumps(report, indent=1).encode("utf-8"), "the JSON report")
        print("wrote %s" % args.json)
    if args.confusion_png:
        if report["kind"] == "detection":
            raise CaffeError("--confusion_png: a detection net has no confusion matrix")
        plot_confusion(report, args.confusion_png)
        print("wrote %s" % args.confusion_png)
    return 0


COMMANDS = [("evaluate", help_of("evaluate"),
             add_arguments, run)]
