"""``pycaffe-lite download_model``: fetch a zoo model's weights, as Caffe's
``scripts/download_model_binary.py`` does.

    pycaffe-lite download_model DIR [--mirror URL ...] [--timeout 30]

Reads ``DIR/readme.md``'s front matter (``caffemodel``, ``caffemodel_url``, ``sha1``), lists
the Python modules the folder's nets would import, downloads (resuming with HTTP Range),
checks the SHA-1 and writes ``DIR/<caffemodel>`` only then. See :mod:`pycaffe_lite.download`.
"""

from ..download import download_model
from ..errors import CaffeError
from . import help_of


def add_arguments(p):
    p.add_argument("dirname", help="the model folder, holding readme.md")
    p.add_argument("--mirror", action="append", default=[], metavar="URL",
                   help="another URL of the file (or of a folder holding it, ending with '/'), "
                        "tried after caffemodel_url, in the order given; repeatable")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait for a server before trying the next URL (30)")


def run(args):
    if args.timeout <= 0:
        raise CaffeError("--timeout must be positive, got %g" % args.timeout)
    download_model(args.dirname, args.mirror, timeout=args.timeout)
    return 0


COMMANDS = [("download_model", help_of("download_model"),
             add_arguments, run)]
