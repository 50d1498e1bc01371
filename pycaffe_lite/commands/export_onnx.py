"""``pycaffe-lite export_onnx``: a deploy prototxt and its weights as an ONNX model."""

from ..errors import CaffeError
from . import add_net_flags, check_weights_flags, help_of


def add_arguments(p):
    p.add_argument("--model", required=True, help="the deploy net (.prototxt)")
    p.add_argument("--weights", help="the trained weights (.caffemodel or .h5); required "
                   "unless --random_weights")
    p.add_argument("--random_weights", action="store_true",
                   help="export without trained weights: the net's fillers give them (a model "
                        "for checking shapes and converters, not for use)")
    p.add_argument("--output", required=True, help="the ONNX file to write")
    p.add_argument("--opset", type=int, default=None,
                   help="ONNX opset to target (default: the exporter's, 21)")
    p.add_argument("--static-batch", action="store_true",
                   help="keep the prototxt's batch size instead of a dynamic batch axis")
    add_net_flags(p)


def run(args):
    from ..onnx import export_files

    check_weights_flags(args, "the model")
    if args.opset is not None and args.opset <= 0:
        raise CaffeError("--opset must be positive, got %d" % args.opset)
    _, report = export_files(args.model, args.weights, args.output, opset=args.opset,
                             static_batch=args.static_batch)
    for name, type_ in report["dropped"]:
        print("dropped layer '%s' (type %s): not part of a deploy net" % (name, type_))
    print("inputs: %s" % ", ".join(report["inputs"]))
    print("outputs: %s" % ", ".join(report["outputs"]))
    print("wrote %s" % args.output)
    return 0


COMMANDS = [("export_onnx", help_of("export_onnx"), add_arguments, run)]
