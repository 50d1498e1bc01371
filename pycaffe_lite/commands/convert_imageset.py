"""``pycaffe-lite convert_imageset [FLAGS] ROOTFOLDER/ LISTFILE DB_NAME``: images listed as
``path label`` lines to a database of Datums, with Caffe's flags."""

from ..data.imageset import convert_imageset
from .flags import add_backend_flag, add_bool_flag, add_image_flags
from . import help_of


def add_arguments(p):
    p.add_argument("root_folder", help="folder prefixed to every path of the list")
    p.add_argument("list_file", help="text file of '<path> <label>' lines")
    p.add_argument("db_name", help="the database to create")
    add_bool_flag(p, "gray", "decode the images in greyscale")
    add_bool_flag(p, "shuffle", "randomly shuffle the order of the images")
    add_backend_flag(p)
    add_image_flags(p)


def run(args):
    written, skipped = convert_imageset(
        args.root_folder, args.list_file, args.db_name, gray=args.gray, shuffle=args.shuffle,
        backend=args.backend, resize_width=args.resize_width, resize_height=args.resize_height,
        check_size=args.check_size, encoded=args.encoded, encode_type=args.encode_type)
    return 0


COMMANDS = [("convert_imageset", help_of("convert_imageset"),
             add_arguments, run)]
