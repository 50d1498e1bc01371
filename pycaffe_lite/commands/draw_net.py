"""``pycaffe-lite draw_net NET OUT``: draw a net definition as a graph (Caffe's draw_net.py).

The output file's ending chooses the format: ``.dot`` / ``.gv`` / ``.raw`` write Graphviz DOT
text (nothing else needed); ``.png``, ``.svg``, ``.pdf`` ... are rendered by Graphviz's ``dot``.
"""

import logging

from .. import draw
from ..proto import protoio
from ..errors import CaffeError
from ..proto import caffe_pb2
from . import help_of

log = logging.getLogger("pycaffe_lite")

PHASES = {"ALL": None, "TRAIN": caffe_pb2.TRAIN, "TEST": caffe_pb2.TEST}


def add_arguments(p):
    p.add_argument("input_net_proto_file", help="net definition (prototxt)")
    p.add_argument("output_image_file", help="output file: .dot/.gv/.raw (DOT text) or an "
                   "image format Graphviz writes (.png, .svg, .pdf, ...)")
    p.add_argument("--rankdir", default="LR", type=str.upper, choices=draw.RANKDIRS,
                   help="direction of the graph: LR (default), TB, BT or RL")
    p.add_argument("--phase", default="ALL", type=str.upper, choices=sorted(PHASES),
                   help="draw only the layers of TRAIN or TEST (default ALL: every layer)")
    p.add_argument("--display_lrm", action="store_true",
                   help="show each layer's lr_mult and decay_mult")


def run(args):
    param = protoio.read_net_param(args.input_net_proto_file, upgrade=False)
    if len(param.layers) and not len(param.layer):
        from ..proto import upgrade
        upgrade.upgrade_net_as_needed(param, args.input_net_proto_file)
    if not len(param.layer):
        raise CaffeError("%s defines no layers to draw" % args.input_net_proto_file)
    print("Drawing net to %s" % args.output_image_file)
    draw.draw_net_to_file(param, args.output_image_file, args.rankdir, PHASES[args.phase],
                          args.display_lrm)
    return 0


COMMANDS = [("draw_net", help_of("draw_net"), add_arguments, run)]
