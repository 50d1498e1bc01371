"""``pycaffe-lite quantize``: int8 calibration of a model on its own TEST data.

    pycaffe-lite quantize --model TRAIN_TEST.prototxt --weights W.caffemodel
                          --calibration_iterations N --output_dir DIR
                          [--method minmax|entropy|percentile] [--per_channel]
                          [--eval_iterations M] [--skip LAYER ...]

Writes ``DIR/model.int8.onnx`` (QDQ), ``DIR/quantized.prototxt`` (Intel Caffe's
``quantization_param``) and ``DIR/report.json``, and prints the float and int8 accuracy and
the layers' scales (:mod:`pycaffe_lite.quantization`, docs/int8.md).
"""

from ..errors import CaffeError
from ..quantization import METHODS, format_report, quantize
from . import add_net_flags, help_of


def add_arguments(p):
    p.add_argument("--model", default="", help="the net with its TEST data layers "
                   "(a train/test prototxt)")
    p.add_argument("--weights", default="", help="the trained weights (.caffemodel or .h5)")
    p.add_argument("--calibration_iterations", type=int, default=0,
                   help="TEST batches whose activations set the int8 scales")
    p.add_argument("--output_dir", default="", help="where the three files are written")
    p.add_argument("--method", default="entropy", choices=METHODS,
                   help="how a threshold is chosen: TensorRT's entropy (KL) calibration "
                        "(default), a percentile of |x| (--percentile), or max |x|")
    p.add_argument("--percentile", type=float, default=99.99,
                   help="the percentile of --method percentile (99.99)")
    p.add_argument("--per_channel", action="store_true",
                   help="one weight scale per output channel (Conv, Gemm) instead of one per "
                        "layer")
    p.add_argument("--activation_type", default="int8", choices=("int8", "uint8"),
                   help="int8 activations with zero point 0 (default; what TensorRT reads), or "
                        "uint8 with zero point 128: the same grid, which onnxruntime's x86 "
                        "kernels run without converting it")
    p.add_argument("--eval_iterations", type=int, default=50,
                   help="TEST batches over which float and int8 accuracy are measured (50; "
                        "0: none)")
    p.add_argument("--skip", nargs="+", action="extend", default=[], metavar="LAYER",
                   help="layers left in float (repeat the flag or list several)")
    add_net_flags(p)


def run(args):
    for flag in ("model", "weights", "output_dir"):
        if not getattr(args, flag):
            raise CaffeError("quantize needs --%s" % flag)
    if args.calibration_iterations < 1:
        raise CaffeError("quantize needs --calibration_iterations N (N >= 1)")
    report = quantize(args.model, args.weights, args.calibration_iterations, args.output_dir,
                      method=args.method, per_channel=args.per_channel,
                      eval_iterations=args.eval_iterations, skip=args.skip,
                      percentile=args.percentile, activation_type=args.activation_type)
    print(format_report(report))
    for path in report["files"].values():
        print("wrote %s" % path)
    args.report = report
    return 0


COMMANDS = [("quantize", help_of("quantize"), add_arguments, run)]
