"""``pycaffe-lite import_onnx``: an ONNX model as a Caffe prototxt and caffemodel."""

from ..errors import CaffeError
from . import help_of


def add_arguments(p):
    p.add_argument("model", help="the ONNX model (.onnx)")
    p.add_argument("--output-prefix", required=True,
                   help="writes PREFIX.prototxt and PREFIX.caffemodel")
    p.add_argument("--input-shape", action="append", default=[], metavar="NAME=D0,D1,...",
                   help="the static shape of an input (default: its ONNX shape, with 1 for a "
                        "symbolic axis); repeat for several inputs")


def parse_shapes(items):
    shapes = {}
    for item in items:
        name, sep, dims = item.rpartition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            sep = ""
        if not sep or not name or any(d <= 0 for d in shapes.get(name, [0])):
            raise CaffeError("--input-shape %r: expected NAME=D0,D1,... with positive sizes"
                             % item)
    return shapes


def run(args):
    from ..onnx import to_caffe

    shapes = parse_shapes(args.input_shape)
    deploy, _, outputs = to_caffe(args.model, args.output_prefix, input_shapes=shapes)
    print("%d layers; outputs: %s" % (len(deploy.layer), ", ".join(
        name if blob == name else "%s (blob %s)" % (name, blob)
        for name, blob in outputs.items())))
    print("wrote %s.prototxt and %s.caffemodel" % (args.output_prefix, args.output_prefix))
    return 0


COMMANDS = [("import_onnx", help_of("import_onnx"),
             add_arguments, run)]
