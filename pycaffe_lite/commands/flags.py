"""gflags-style boolean flags for the dataset tools: ``-gray``, ``--gray=true``,
``--gray=false``, ``--nogray``."""

import argparse


def add_bool_flag(parser, name, help_text, default=False):
    parser.add_argument("--" + name, "--%s=true" % name, "--%s=1" % name, dest=name,
                        action="store_true", default=default, help=help_text)
    parser.add_argument("--%s=false" % name, "--%s=0" % name, "--no" + name, dest=name,
                        action="store_false", help=argparse.SUPPRESS)


def add_backend_flag(parser):
    parser.add_argument("--backend", default="lmdb", choices=("lmdb", "leveldb"),
                        type=str.lower, help="the database format (default lmdb)")


def pixels(value):
    """An argparse type: a size in pixels, 0 or more (0: the flag is off)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError("a size in pixels >= 0 (0: off), got %r" % value)
    return number


def add_image_flags(parser):
    """The image flags shared by convert_imageset and convert_annoset: resize, size check,
    encoding."""
    parser.add_argument("--resize_width", type=pixels, default=0,
                        help="width images are resized to (with --resize_height)")
    parser.add_argument("--resize_height", type=pixels, default=0,
                        help="height images are resized to (with --resize_width)")
    add_bool_flag(parser, "check_size", "check that all the datums have the same size")
    add_bool_flag(parser, "encoded", "store the images encoded (compressed) in the datums")
    parser.add_argument("--encode_type", default="",
                        help="encoding of the stored images (png, jpg, jpeg, bmp, tif, ...); "
                             "implies --encoded")
