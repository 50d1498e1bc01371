"""Mean images: computing one from a database (``compute_image_mean``) and reading
``.binaryproto`` mean files."""

import logging

import numpy as np

from ..proto import protoio
from ..blob import blobproto_to_array
from ..errors import ProtoError
from ..proto import caffe_pb2
from . import db as dbmod
from .datum import DataError, datum_to_array, parse_datum, raw_shape
from .progress import Progress

log = logging.getLogger("pycaffe_lite")


def load_mean(path):
    """The (C, H, W) float32 mean held by a ``.binaryproto`` BlobProto file.

    Caffe writes means as legacy 1 x C x H x W blobs; 3-axis (C, H, W) blobs are accepted too.
    """
    try:
        proto = protoio.read_binary(path, caffe_pb2.BlobProto())
    except ProtoError as exc:
        try:
            with open(path, "rb") as f:
                numpy_file = f.read(6) == b"\x93NUMPY"
        except OSError:
            numpy_file = False
        if numpy_file:  # pycaffe's Transformer takes .npy means, a prototxt does not
            raise DataError("mean_file '%s' is a NumPy .npy file; a prototxt's mean_file is a "
                            "BlobProto (.binaryproto, as compute_image_mean writes it): from a "
                            "C x H x W array, write one with open(out, 'wb').write(caffe.io."
                            "array_to_blobproto(np.load(path)[None]).SerializeToString())"
                            % path) from None
        raise DataError("cannot read mean_file: %s" % exc) from None
    try:
        arr = blobproto_to_array(proto)
    except ValueError as exc:
        raise DataError("mean_file '%s' is not a valid BlobProto: %s" % (path, exc)) from None
    if arr.ndim == 4 and arr.shape[0] == 1:
        arr = arr[0]
    if arr.ndim != 3 or arr.size == 0:
        raise DataError("mean_file '%s' holds a blob of shape %s; a mean image is 1 x C x H x W"
                        % (path, arr.shape))
    return np.ascontiguousarray(arr, dtype=np.float32)


def mean_to_blobproto(mean):
    """A BlobProto as Caffe's compute_image_mean writes it (legacy num/channels/height/width)."""
    mean = np.asarray(mean, np.float32)
    if mean.ndim == 3:
        mean = mean[np.newaxis]
    proto = caffe_pb2.BlobProto(num=mean.shape[0], channels=mean.shape[1],
                                height=mean.shape[2], width=mean.shape[3])
    proto.data.extend(mean.ravel())
    return proto


def compute_image_mean(source, backend="lmdb", output_file=None, progress=True, chunk=256):
    """The mean image of every record in a database, as a (1, C, H, W) float32 array.

    Encoded records are decoded with their own channels (Caffe's ``DecodeDatumNative``).
    Every record must have the first record's size. The sum is exact (integers in float64),
    so the mean is the correctly rounded float32 mean. With ``output_file`` the mean is
    written as a ``.binaryproto``. Logs the per-channel means, as Caffe does.
    """
    with dbmod.open_db(source, backend, dbmod.READ) as db:
        cursor = db.cursor()
        if not cursor.valid:
            raise DataError("database '%s' is empty: no records to average" % source)
        total = db.count()
        prog = Progress(total, "files", sink=log.info if progress else (lambda s: None))
        total_sum = None
        shape = None
        count = 0
        pending = []

        def flush():
            nonlocal total_sum
            if not pending:
                return
            if isinstance(pending[0], bytes):
                block = np.frombuffer(b"".join(pending), np.uint8).reshape(len(pending), -1)
                part = block.sum(axis=0, dtype=np.uint64).astype(np.float64)
            else:
                part = np.sum(np.stack(pending), axis=0, dtype=np.float64).ravel()
            total_sum = part if total_sum is None else total_sum + part
            pending.clear()

        index = 0
        for key, value in cursor:
            where = "record %d (key %r) of '%s'" % (index, key, source)
            datum = parse_datum(value, where)
            if datum.encoded:
                arr = datum_to_array(datum, None, where)
                rec_shape = arr.shape
                item = np.ascontiguousarray(arr).tobytes()
            else:
                rec_shape = raw_shape(datum, where)
                item = datum.data if datum.data else \
                    np.asarray(datum.float_data, np.float64)
            if shape is None:
                shape = rec_shape
            elif rec_shape != shape:
                raise DataError("%s has size %s but the first record has %s: every record "
                                "must have the same size to compute a mean"
                                % (where, "x".join(map(str, rec_shape)),
                                   "x".join(map(str, shape))))
            if pending and type(item) is not type(pending[0]):
                flush()
            pending.append(item)
            if len(pending) >= chunk:
                flush()
            count += 1
            index += 1
            prog.update()
        flush()
        cursor.close()
        prog.done()
    mean = (total_sum / count).astype(np.float32).reshape((1,) + tuple(shape))
    if output_file:
        protoio.write_binary(mean_to_blobproto(mean), output_file)
        log.info("Write to %s", output_file)
    if progress:
        log.info("Number of channels: %d", shape[0])
        for c in range(shape[0]):
            log.info("mean_value channel [%d]: %g", c, float(mean[0, c].mean(dtype=np.float64)))
    return mean
