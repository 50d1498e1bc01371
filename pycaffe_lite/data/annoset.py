"""``convert_annoset``: a list of images with their annotation files to a database of
AnnotatedDatum records (the SSD fork's tool)."""

import logging
import os

import numpy as np

from .. import backend as _backend
from ..proto import caffe_pb2
from . import db as dbmod
from .annotation import BBOX, name_to_label, read_annotations, read_label_map
from .datum import (DataError, check_encode_type, decode_image, encode_image, image_format,
                    parse_label, read_file, resize)
from .imageset import join_root, record_encoding
from .progress import Progress
from .workers import ThreadMap

log = logging.getLogger("pycaffe_lite")

ANNO_TYPES = ("classification", "detection")
LABEL_TYPES = ("xml", "json", "txt")


def read_anno_list(path, anno_type):
    """``[(line_number, image, second)]`` from whitespace-separated pairs: ``image label``
    (classification, the label an integer that fits a Datum's 32-bit label) or
    ``image annotation_file`` (detection)."""
    try:
        with open(path, "r", encoding="utf-8", errors="surrogateescape") as f:
            text = f.read()
    except FileNotFoundError:
        raise DataError("list file '%s' not found" % path) from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise DataError("line %d of list file '%s' ('%s'): expected '<image> <%s>'"
                            % (number, path, line.strip(),
                               "label" if anno_type == "classification" else "annotation"))
        name, second = parts
        if anno_type == "classification":
            second = parse_label(second, "line %d of list file '%s'" % (number, path))
        out.append((number, name, second))
    return out


def dim_scale(height, width, min_dim, max_dim):
    """The fork's aspect-keeping factor: the short side up to ``min_dim``, then the long side
    down to ``max_dim``."""
    scale = 1.0
    small, large = min(height, width), max(height, width)
    if min_dim > 0 and small < min_dim:
        scale = np.float32(min_dim) / np.float32(small)
    if max_dim > 0 and int(np.float32(scale) * np.float32(large)) > max_dim:
        scale = np.float32(max_dim) / np.float32(large)
    return float(scale)


def image_to_datum(path, label, height, width, min_dim, max_dim, is_color, encoding):
    """``(datum, original_height, original_width)`` for an image file (the fork's
    ``ReadImageToDatum`` with min_dim/max_dim)."""
    data = read_file(path)
    img = decode_image(data, bool(is_color), "image file '%s'" % path)
    orig_h, orig_w = img.shape[:2]
    changed = False
    if min_dim > 0 or max_dim > 0:
        s = dim_scale(orig_h, orig_w, min_dim, max_dim)
        if s != 1:
            img = resize(img, int(round(orig_h * s)), int(round(orig_w * s)))
            changed = True
    elif height > 0 and width > 0:
        img = resize(img, height, width)
        changed = True
    datum = caffe_pb2.Datum()
    datum.label = int(label)
    if encoding:
        if not changed and (img.shape[2] == 3) == bool(is_color) and \
                image_format(path) == image_format(encoding):
            datum.data = data
            datum.channels, datum.height, datum.width = img.shape[2], orig_h, orig_w
        else:
            datum.data = encode_image(img, encoding)
        datum.encoded = True
    else:
        datum.channels, datum.height, datum.width = img.shape[2], img.shape[0], img.shape[1]
        datum.data = np.ascontiguousarray(img.transpose(2, 0, 1)).tobytes()
    return datum, orig_h, orig_w


def convert_annoset(root_folder, list_file, db_name, anno_type="classification",
                    label_type="xml", label_map_file="", check_label=False, gray=False,
                    shuffle=False, backend="lmdb", min_dim=0, max_dim=0, resize_width=0,
                    resize_height=0, check_size=False, encoded=False, encode_type="",
                    seed=None, progress=True, commit_every=1000, threads=None):
    """The fork's ``convert_annoset``. Each line of ``list_file`` names an image and either its
    label (``classification``) or its annotation file (``detection``, read as
    ``label_type``: VOC ``xml``, COCO-style ``json``, or ``txt``), both relative to
    ``root_folder``. Records are AnnotatedDatum under keys ``%08d_<image>``; detection
    records have type BBOX. An annotation naming a label absent from ``label_map_file`` is
    an error naming the file and the label. Images that cannot be read are reported and
    skipped. ``encode_type`` and the whole list are checked before the database is created.
    Returns ``(written, skipped)``."""
    check_encode_type(encode_type)
    if anno_type not in ANNO_TYPES:
        raise DataError("unknown anno_type '%s' (use classification or detection)" % anno_type)
    if anno_type == "detection" and label_type not in LABEL_TYPES:
        raise DataError("unknown label_type '%s' (use xml, json or txt)" % label_type)
    names = {}
    if anno_type == "detection":
        if not label_map_file and label_type != "txt":
            raise DataError("detection needs --label_map_file (a LabelMap prototxt)")
        if label_map_file:
            names = name_to_label(read_label_map(label_map_file), check_label,
                                  "label map '%s'" % label_map_file)
    lines = read_anno_list(list_file, anno_type)
    if shuffle:
        log.info("Shuffling data")
        rng = np.random.default_rng(seed) if seed is not None else _backend.rng()
        lines = [lines[i] for i in rng.permutation(len(lines))]
    log.info("A total of %d images.", len(lines))
    if encode_type and not encoded:
        log.info("encode_type specified, assuming encoded=true.")
    encoded = encoded or bool(encode_type)
    min_dim, max_dim = max(0, min_dim), max(0, max_dim)
    resize_height, resize_width = max(0, resize_height), max(0, resize_width)
    prog = Progress(len(lines), "files", sink=log.info if progress else (lambda s: None))

    def load(item):
        number, name, second = item
        enc = record_encoding(name, encoded, encode_type)
        path = join_root(root_folder, name)
        try:
            label = second if anno_type == "classification" else -1
            datum, h, w = image_to_datum(path, label, resize_height, resize_width, min_dim,
                                         max_dim, not gray, enc)
        except DataError as exc:
            return exc
        anno = caffe_pb2.AnnotatedDatum()
        anno.datum.CopyFrom(datum)
        if anno_type == "detection":
            # an unknown label or a broken annotation file stops the conversion
            read_annotations(join_root(root_folder, second), label_type, h, w, names, anno)
            anno.type = BBOX
        return anno

    written = 0
    skipped = []
    data_size = None
    workers = threads or min(4, os.cpu_count() or 1)
    with dbmod.open_db(db_name, backend, dbmod.NEW) as db, \
            ThreadMap(load, workers, "pycaffe-lite convert") as pool:
        txn = db.transaction()
        chunk = 64 * workers
        for start in range(0, len(lines), chunk):
            part = lines[start:start + chunk]
            for offset, anno in enumerate(pool.map(part)):
                number, name, _ = part[offset]
                prog.update()
                if isinstance(anno, DataError):
                    log.error("line %d of '%s': %s (skipped)", number, list_file, anno)
                    skipped.append((name, str(anno)))
                    continue
                if check_size:
                    size = len(anno.datum.data)
                    if data_size is None:
                        data_size = size
                    elif size != data_size:
                        raise DataError("image '%s' (line %d of '%s') has %d bytes of data, "
                                        "the first image has %d (check_size)"
                                        % (name, number, list_file, size, data_size))
                key = "%08d_%s" % (start + offset, name)
                txn.put(key.encode("utf-8", "surrogateescape"), anno.SerializeToString())
                written += 1
                if written % commit_every == 0:
                    txn.commit()
        txn.commit()
    prog.done()
    if skipped:
        log.warning("%d of %d images could not be read and were skipped", len(skipped),
                    len(lines))
    return written, skipped
