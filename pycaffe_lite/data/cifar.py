"""The CIFAR-10 binary batches to databases of Datums (BVLC's
``examples/cifar10/convert_cifar_data``)."""

import logging
import os

import numpy as np

from . import db as dbmod
from .datum import DataError, read_file

log = logging.getLogger("pycaffe_lite")

SIZE = 32
IMAGE_BYTES = 3 * SIZE * SIZE
RECORD_BYTES = 1 + IMAGE_BYTES  # a label byte, then the 3 x 32 x 32 image (R, G, B planes)
TRAIN_BATCHES = 5


def read_batch(path):
    """(labels, images) of one CIFAR-10 binary batch file: int labels and (N, 3, 32, 32)
    uint8 images."""
    data = read_file(path, "CIFAR-10 batch file")
    if not data or len(data) % RECORD_BYTES:
        raise DataError("CIFAR-10 batch file '%s' has %d bytes, not a whole number of "
                        "%d-byte records (a label byte and a 3x32x32 image)"
                        % (path, len(data), RECORD_BYTES))
    records = np.frombuffer(data, np.uint8).reshape(-1, RECORD_BYTES)
    # the label byte is read as a C char, as Caffe's converter does
    return records[:, 0].view(np.int8).astype(int), records[:, 1:].reshape(-1, 3, SIZE, SIZE)


def _write(db_path, backend, files):
    from ..proto import caffe_pb2

    n = 0
    with dbmod.open_db(db_path, backend, dbmod.NEW) as db:
        txn = db.transaction()
        datum = caffe_pb2.Datum(channels=3, height=SIZE, width=SIZE)
        for path in files:
            labels, images = read_batch(path)
            for label, image in zip(labels, images):
                datum.label = int(label)
                datum.data = image.tobytes()
                txn.put(b"%05d" % n, datum.SerializeToString())
                n += 1
        txn.commit()
    return n


def convert_cifar(input_folder, output_folder, backend="lmdb"):
    """Write ``data_batch_1.bin`` .. ``data_batch_5.bin`` of ``input_folder`` into
    ``output_folder/cifar10_train_<backend>`` and ``test_batch.bin`` into
    ``cifar10_test_<backend>``: one 3 x 32 x 32 Datum per image, keyed by its index as five
    digits (``%05d``), counted across the training batches. Returns the two counts."""
    backend = dbmod.backend_name(backend)
    train = [os.path.join(input_folder, "data_batch_%d.bin" % (i + 1))
             for i in range(TRAIN_BATCHES)]
    test = [os.path.join(input_folder, "test_batch.bin")]
    for path in train + test:
        if not os.path.isfile(path):
            raise DataError("CIFAR-10 batch file '%s' not found: the input folder must hold "
                            "data_batch_1.bin .. data_batch_5.bin and test_batch.bin (the "
                            "binary version, gunzipped and untarred)" % path)
    log.info("Writing Training data")
    n_train = _write(os.path.join(output_folder, "cifar10_train_" + backend), backend, train)
    log.info("Writing Testing data")
    n_test = _write(os.path.join(output_folder, "cifar10_test_" + backend), backend, test)
    log.info("Wrote %d training and %d test images", n_train, n_test)
    return n_train, n_test
