"""The dataset converters of BVLC's examples (``build/examples/...``), under their names:

    pycaffe-lite convert_cifar_data INPUT_FOLDER OUTPUT_FOLDER lmdb|leveldb
    pycaffe-lite convert_mnist_siamese_data IMAGES LABELS DB_PATH [--backend leveldb|lmdb]

so that ``examples/cifar10/create_cifar10.sh`` and ``examples/siamese/create_mnist_siamese.sh``
run with the binary's name changed."""

from ..data.cifar import convert_cifar
from ..data.mnist import convert_mnist_siamese
from . import help_of


def add_cifar_arguments(p):
    p.add_argument("input_folder", help="the folder of the binary batches (data_batch_1.bin "
                   ".. data_batch_5.bin, test_batch.bin)")
    p.add_argument("output_folder", help="where cifar10_train_<db_type> and "
                   "cifar10_test_<db_type> are created")
    p.add_argument("db_type", type=str.lower, choices=("lmdb", "leveldb"),
                   help="lmdb or leveldb")


def run_cifar(args):
    convert_cifar(args.input_folder, args.output_folder, args.db_type)
    return 0


def add_siamese_arguments(p):
    p.add_argument("input_image_file", help="IDX3 image file (e.g. train-images-idx3-ubyte)")
    p.add_argument("input_label_file", help="IDX1 label file (e.g. train-labels-idx1-ubyte)")
    p.add_argument("output_db_file", help="the database to create")
    p.add_argument("--backend", default="leveldb", choices=("lmdb", "leveldb"),
                   type=str.lower, help="the database format (default leveldb, as Caffe's "
                   "converter and the siamese example's net, which names no backend)")
    p.add_argument("--seed", type=int, default=None,
                   help="seed of the random pairing (default: a fresh one each run)")


def run_siamese(args):
    convert_mnist_siamese(args.input_image_file, args.input_label_file, args.output_db_file,
                          backend=args.backend, seed=args.seed)
    return 0


COMMANDS = [
    ("convert_cifar_data", help_of("convert_cifar_data"), add_cifar_arguments, run_cifar),
    ("convert_mnist_siamese_data", help_of("convert_mnist_siamese_data"),
     add_siamese_arguments, run_siamese),
]
