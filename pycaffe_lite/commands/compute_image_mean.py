"""``pycaffe-lite compute_image_mean [--backend lmdb|leveldb] INPUT_DB [OUTPUT_FILE]``: the
mean image of a database, written as a ``.binaryproto`` (Caffe's tool)."""

from ..data.mean import compute_image_mean
from .flags import add_backend_flag
from . import help_of


def add_arguments(p):
    p.add_argument("input_db", help="the database of Datums")
    p.add_argument("output_file", nargs="?", default=None,
                   help="the mean .binaryproto to write (omitted: only print the channel means)")
    add_backend_flag(p)


def run(args):
    compute_image_mean(args.input_db, args.backend, args.output_file)
    return 0


COMMANDS = [("compute_image_mean", help_of("compute_image_mean"),
             add_arguments, run)]
