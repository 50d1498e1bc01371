"""``pycaffe-lite convert_annoset [FLAGS] ROOTFOLDER/ LISTFILE DB_NAME``: images with their
labels or annotation files (VOC XML, COCO-style JSON) to a database of AnnotatedDatum, with
the SSD fork's flags."""

from ..data.annoset import ANNO_TYPES, LABEL_TYPES, convert_annoset
from .flags import add_backend_flag, add_bool_flag, add_image_flags, pixels
from . import help_of


def add_arguments(p):
    p.add_argument("root_folder", help="folder prefixed to every path of the list")
    p.add_argument("list_file", help="text file of '<image> <label or annotation file>' lines")
    p.add_argument("db_name", help="the database to create")
    add_bool_flag(p, "gray", "decode the images in greyscale")
    add_bool_flag(p, "shuffle", "randomly shuffle the order of the images")
    add_backend_flag(p)
    p.add_argument("--anno_type", default="classification", choices=ANNO_TYPES,
                   help="classification (image label) or detection (image annotation_file)")
    p.add_argument("--label_type", default="xml", choices=LABEL_TYPES,
                   help="format of the annotation files (detection)")
    p.add_argument("--label_map_file", default="",
                   help="LabelMap prototxt mapping object names to labels")
    add_bool_flag(p, "check_label", "fail when the label map lists a name twice")
    p.add_argument("--min_dim", type=pixels, default=0,
                   help="resize so that the short side is at least this (keeps the aspect)")
    p.add_argument("--max_dim", type=pixels, default=0,
                   help="resize so that the long side is at most this (keeps the aspect)")
    add_image_flags(p)


def run(args):
    convert_annoset(
        args.root_folder, args.list_file, args.db_name, anno_type=args.anno_type,
        label_type=args.label_type, label_map_file=args.label_map_file,
        check_label=args.check_label, gray=args.gray, shuffle=args.shuffle,
        backend=args.backend, min_dim=args.min_dim, max_dim=args.max_dim,
        resize_width=args.resize_width, resize_height=args.resize_height,
        check_size=args.check_size, encoded=args.encoded, encode_type=args.encode_type)
    return 0


COMMANDS = [("convert_annoset", help_of("convert_annoset"), add_arguments, run)]
