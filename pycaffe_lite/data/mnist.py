"""MNIST IDX files to a database of Datums (Caffe's ``convert_mnist_data``)."""

import gzip
import logging

import numpy as np

from . import db as dbmod
from .datum import DataError, read_file
from .progress import Progress

log = logging.getLogger("pycaffe_lite")

IMAGE_MAGIC = 2051
LABEL_MAGIC = 2049


def _read_bytes(path):
    data = read_file(path, "MNIST file")
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as exc:
            raise DataError("MNIST file '%s' looks gzipped but cannot be decompressed: %s"
                            % (path, exc)) from None
    return data


def read_idx_images(path):
    """(N, rows, cols) uint8 images of an IDX3 file (gzipped or not)."""
    data = _read_bytes(path)
    if len(data) < 16:
        raise DataError("MNIST image file '%s' is too short (%d bytes) for an IDX header"
                        % (path, len(data)))
    magic, n, rows, cols = np.frombuffer(data[:16], ">u4")
    if magic != IMAGE_MAGIC:
        raise DataError("Incorrect image file magic in '%s': %d (an IDX image file starts with "
                        "%d; is this the label file?)" % (path, magic, IMAGE_MAGIC))
    need = 16 + int(n) * int(rows) * int(cols)
    if len(data) < need:
        raise DataError("MNIST image file '%s' is truncated: %d images of %dx%d need %d bytes, "
                        "it has %d" % (path, n, rows, cols, need, len(data)))
    return np.frombuffer(data, np.uint8, int(n) * int(rows) * int(cols), 16).reshape(
        int(n), int(rows), int(cols))


def read_idx_labels(path):
    """(N,) uint8 labels of an IDX1 file (gzipped or not)."""
    data = _read_bytes(path)
    if len(data) < 8:
        raise DataError("MNIST label file '%s' is too short (%d bytes) for an IDX header"
                        % (path, len(data)))
    magic, n = np.frombuffer(data[:8], ">u4")
    if magic != LABEL_MAGIC:
        raise DataError("Incorrect label file magic in '%s': %d (an IDX label file starts with "
                        "%d; is this the image file?)" % (path, magic, LABEL_MAGIC))
    if len(data) < 8 + int(n):
        raise DataError("MNIST label file '%s' is truncated: %d labels need %d bytes, it has %d"
                        % (path, n, 8 + int(n), len(data)))
    return np.frombuffer(data, np.uint8, int(n), 8)


def read_idx_pair(image_file, label_file):
    """(images, labels) of an IDX image file and its label file, whose counts must match."""
    images = read_idx_images(image_file)
    labels = read_idx_labels(label_file)
    if len(images) != len(labels):
        raise DataError("'%s' holds %d images but '%s' holds %d labels; they must match"
                        % (image_file, len(images), label_file, len(labels)))
    return images, labels


def convert_mnist(image_file, label_file, db_path, backend="lmdb", limit=None, progress=True,
                  commit_every=1000):
    """Write every MNIST image with its label as a 1 x rows x cols Datum under the keys
    ``%08d`` (the item index), committing every ``commit_every`` items. ``limit`` keeps only
    the first items. Returns the number of records written."""
    images, labels = read_idx_pair(image_file, label_file)
    n = len(images) if limit is None else min(int(limit), len(images))
    rows, cols = images.shape[1:]
    log.info("A total of %d items.", n)
    log.info("Rows: %d Cols: %d", rows, cols)
    from ..proto import caffe_pb2

    prog = Progress(n, "items", sink=log.info if progress else (lambda s: None))
    with dbmod.open_db(db_path, backend, dbmod.NEW) as db:
        txn = db.transaction()
        datum = caffe_pb2.Datum(channels=1, height=int(rows), width=int(cols))
        for i in range(n):
            datum.data = images[i].tobytes()
            datum.label = int(labels[i])
            txn.put(b"%08d" % i, datum.SerializeToString())
            prog.update()
            if (i + 1) % commit_every == 0:
                txn.commit()
        txn.commit()
    prog.done()
    return n


def convert_mnist_siamese(image_file, label_file, db_path, backend="leveldb", seed=None):
    """BVLC's ``examples/siamese/convert_mnist_siamese_data``: as many records as images, each
    a pair of images drawn at random (with replacement) stacked as a 2 x rows x cols Datum,
    label 1 where their digits are the same and 0 where they differ, under the keys ``%08d``.
    Returns the number of records written."""
    images, labels = read_idx_pair(image_file, label_file)
    n = len(images)
    rows, cols = images.shape[1:]
    log.info("A total of %d items.", n)
    log.info("Rows: %d Cols: %d", rows, cols)
    from ..proto import caffe_pb2

    rng = np.random.default_rng(seed)
    with dbmod.open_db(db_path, backend, dbmod.NEW) as db:
        txn = db.transaction()
        datum = caffe_pb2.Datum(channels=2, height=int(rows), width=int(cols))
        for k in range(n):
            i, j = (int(v) for v in rng.integers(0, n, 2))
            datum.data = images[i].tobytes() + images[j].tobytes()
            datum.label = int(labels[i] == labels[j])
            txn.put(b"%08d" % k, datum.SerializeToString())
            if (k + 1) % 1000 == 0:
                txn.commit()
        txn.commit()
    return n
