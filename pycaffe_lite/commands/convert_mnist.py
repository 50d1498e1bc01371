"""``pycaffe-lite convert_mnist IMAGES LABELS DB_PATH [--backend lmdb|leveldb]``: MNIST IDX
files (gzipped or not) to a database of Datums, as Caffe's ``convert_mnist_data``."""

from ..data.mnist import convert_mnist
from .flags import add_backend_flag
from . import help_of


def add_arguments(p):
    p.add_argument("input_image_file", help="IDX3 image file (e.g. train-images-idx3-ubyte.gz)")
    p.add_argument("input_label_file", help="IDX1 label file (e.g. train-labels-idx1-ubyte.gz)")
    p.add_argument("output_db_file", help="the database to create")
    add_backend_flag(p)


def run(args):
    convert_mnist(args.input_image_file, args.input_label_file, args.output_db_file,
                  backend=args.backend)
    return 0


COMMANDS = [("convert_mnist", help_of("convert_mnist"), add_arguments, run),
            ("convert_mnist_data", help_of("convert_mnist_data"), add_arguments, run)]
