"""``pycaffe-lite import_mxnet``: an MXNet model (symbol JSON + .params) as a Caffe prototxt
and caffemodel, without MXNet.

::

    pycaffe-lite import_mxnet --symbol M-symbol.json --params M-0000.params
        --output-prefix P [--input-shape data=1,3,224,224 ...]
"""

from .import_onnx import parse_shapes
from . import help_of


def add_arguments(p):
    p.add_argument("--symbol", required=True, metavar="M-symbol.json",
                   help="the MXNet symbol file")
    p.add_argument("--params", required=True, metavar="M-0000.params",
                   help="the MXNet parameters (an empty file for a net without any)")
    p.add_argument("--output-prefix", required=True, metavar="P",
                   help="writes P.prototxt and P.caffemodel")
    p.add_argument("--input-shape", action="extend", nargs="+", default=[],
                   metavar="NAME=D0,D1,...",
                   help="the shape of an input variable (needed where the symbol file does not "
                        "give it, as Gluon's exports do not); several may follow one flag, or "
                        "repeat the flag")


def run(args):
    from ..mxnet import to_caffe

    shapes = parse_shapes(args.input_shape)
    prototxt, caffemodel, outputs = to_caffe(args.symbol, args.params, args.output_prefix,
                                             input_shapes=shapes)
    print("outputs: %s" % ", ".join(outputs))
    print("wrote %s and %s" % (prototxt, caffemodel))
    return 0


COMMANDS = [("import_mxnet", help_of("import_mxnet"), add_arguments, run)]
