"""``pycaffe-lite summary``: parameters, multiply-accumulates and activation memory per layer.

    pycaffe-lite summary --model M.prototxt [--phase TRAIN] [--level N] [--stage a,b] [--json]

The net is built in the TEST phase unless ``--phase`` says otherwise, as ``summarize()`` does.

At the prototxt's own input shape (the whole batch); see :mod:`pycaffe_lite.summary` for what
each figure counts. ``--json`` prints ``{"params", "macs", "element_ops", "activation_bytes",
"layers": [...]}`` instead of the table.
"""

import json

from ..errors import CaffeError
from ..summary import format_table, summarize
from . import add_net_flags, help_of
from .time import parse_phase
from .train import parse_stages


def add_arguments(p):
    p.add_argument("--model", default="", help="the net definition (prototxt)")
    p.add_argument("--phase", default="", help="TRAIN or TEST (default TEST, as summarize() "
                   "from Python: the net as deployed)")
    p.add_argument("--level", type=int, default=0, help="the net level (NetState)")
    p.add_argument("--stage", default="", help="net stages, separated by ','")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    add_net_flags(p)


def run(args):
    if not args.model:
        raise CaffeError("need a model definition to summarize: --model path/to/net.prototxt")
    summary = summarize(args.model, parse_phase(args.phase, "TEST"), level=args.level,
                        stages=parse_stages(args.stage))
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print(format_table(summary))
    return 0


COMMANDS = [("summary", help_of("summary"),
             add_arguments, run)]
