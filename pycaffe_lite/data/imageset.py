"""Image list files and ``convert_imageset`` (a list of images to a database of Datums)."""

import logging
import os

import numpy as np

from .. import backend as _backend
from . import db as dbmod
from .datum import DataError, check_encode_type, parse_label, read_image_to_datum
from .progress import Progress
from .workers import ThreadMap

log = logging.getLogger("pycaffe_lite")


def read_list_file(path, numbered=False):
    """``[(name, label), ...]`` from a list file of ``name label`` lines, split at the last
    space as Caffe does (names may contain spaces). Blank lines are skipped. A label that is
    not an integer, or does not fit a Datum's 32-bit label, is an error naming the line.
    With ``numbered``, items are ``(line_number, name, label)``."""
    try:
        with open(path, "r", encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except FileNotFoundError:
        raise DataError("list file '%s' not found" % path) from None
    except OSError as exc:
        raise DataError("cannot read list file '%s': %s" % (path, exc.strerror or exc)) from None
    lines = []
    for number, line in enumerate(text.splitlines(), 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        pos = line.rfind(" ")
        if pos < 0:
            raise DataError("line %d of list file '%s' ('%s') has no label: each line is "
                            "'<path> <integer label>'" % (number, path, line))
        name = line[:pos]
        label = parse_label(line[pos + 1:], "line %d of list file '%s'" % (number, path))
        lines.append((number, name, label) if numbered else (name, label))
    return lines


def record_encoding(name, encoded, encode_type):
    """How the tools store image ``name``: ``encode_type``, else with ``encoded`` the format
    its extension names (Caffe's guess), else "" (raw pixels)."""
    if encode_type or not encoded:
        return encode_type
    dot = name.rfind(".")
    if dot < 0:
        log.warning("Failed to guess the encoding of '%s'", name)
        return ""
    return name[dot + 1:].lower()


def join_root(root_folder, name):
    """``root_folder + name`` as Caffe forms it, with a separator added when missing."""
    if not root_folder or root_folder.endswith(("/", os.sep)):
        return root_folder + name
    return os.path.join(root_folder, name)


def convert_imageset(root_folder, list_file, db_name, gray=False, shuffle=False,
                     backend="lmdb", resize_width=0, resize_height=0, check_size=False,
                     encoded=False, encode_type="", seed=None, progress=True,
                     commit_every=1000, threads=None):
    """Caffe's ``convert_imageset``: every image of ``list_file`` (read from ``root_folder``)
    with its label as a Datum, under keys ``%08d_<name>``.

    Images are decoded in colour (or grey with ``gray``) and resized to
    ``resize_height`` x ``resize_width`` when both are set. With ``encoded`` (implied by
    ``encode_type``) records hold compressed images (``encode_type``, else the file's own
    format); otherwise raw CHW pixels. ``check_size`` requires every record to have the first
    one's size. Images that cannot be read are reported and skipped, as Caffe does. The order
    is shuffled with ``shuffle`` (``seed``, else the framework's random generator). Images are
    decoded by ``threads`` threads (default: up to 4, one per core); the output order is the
    list order. Returns ``(written, skipped)`` where ``skipped`` lists ``(name, message)``
    pairs.

    The whole list is read and checked (every label an integer that fits a Datum) and
    ``encode_type`` checked before the database is created: a bad line or encoding leaves
    no database behind.
    """
    check_encode_type(encode_type)
    lines = read_list_file(list_file, numbered=True)
    if shuffle:
        log.info("Shuffling data")
        rng = np.random.default_rng(seed) if seed is not None else _backend.rng()
        order = rng.permutation(len(lines))
        lines = [lines[i] for i in order]
    log.info("A total of %d images.", len(lines))
    if encode_type and not encoded:
        log.info("encode_type specified, assuming encoded=true.")
    encoded = encoded or bool(encode_type)
    if (resize_height > 0) != (resize_width > 0) and (resize_height or resize_width):
        log.warning("resize_height and resize_width must be set together; images are not "
                    "resized")
    if check_size and encoded:
        log.warning("check_size compares raw pixel sizes; it is ignored for encoded records")
        check_size = False
    is_color = not gray
    data_size = None
    written = 0
    skipped = []
    prog = Progress(len(lines), "files", sink=log.info if progress else (lambda s: None))

    def load(item):
        _, name, label = item
        enc = record_encoding(name, encoded, encode_type)
        path = join_root(root_folder, name)
        try:
            return path, read_image_to_datum(path, label, resize_height, resize_width,
                                             is_color, enc)
        except DataError as exc:
            return path, exc

    workers = threads or min(4, os.cpu_count() or 1)
    with dbmod.open_db(db_name, backend, dbmod.NEW) as db, \
            ThreadMap(load, workers, "pycaffe-lite convert") as pool:
        txn = db.transaction()
        chunk = 64 * workers
        for start in range(0, len(lines), chunk):
            part = lines[start:start + chunk]
            for offset, (path, datum) in enumerate(pool.map(part)):
                line_id = start + offset
                number, name, _ = part[offset]
                if isinstance(datum, DataError):
                    log.error("line %d of '%s': %s (skipped)", number, list_file, datum)
                    skipped.append((name, str(datum)))
                    prog.update()
                    continue
                if check_size:
                    size = datum.channels * datum.height * datum.width
                    if data_size is None:
                        data_size = size
                    elif len(datum.data) != data_size:
                        raise DataError("image '%s' (line %d of '%s') has %d bytes of data, "
                                        "the first image has %d (check_size): resize the "
                                        "images or drop --check_size"
                                        % (path, number, list_file, len(datum.data),
                                           data_size))
                key = "%08d_%s" % (line_id, name)
                txn.put(key.encode("utf-8", "surrogateescape"), datum.SerializeToString())
                written += 1
                prog.update()
                if written % commit_every == 0:
                    txn.commit()
        txn.commit()
    prog.done()
    if skipped:
        log.warning("%d of %d images could not be read and were skipped", len(skipped),
                    len(lines))
    return written, skipped
