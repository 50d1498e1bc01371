"""``pycaffe-lite extract_features``: blobs of a trained net, batch after batch, into databases
of Datums (Caffe's ``tools/extract_features``, with its positional arguments).

    pycaffe-lite extract_features WEIGHTS NET.prototxt BLOB[,BLOB2...] DB[,DB2...]
                                  NUM_MINI_BATCHES lmdb|leveldb [CPU|GPU] [DEVICE_ID]

The net is built in the TEST phase with the weights; each of ``NUM_MINI_BATCHES`` forward
passes writes, for every named blob, one Datum per item of the batch: ``float_data`` the item's
values, ``channels``/``height``/``width`` the blob's legacy shape, under the key of its running
index as ten digits (``0000000000``, ``0000000001``, ...). Each database must not exist yet.
"""

import logging

import numpy as np

from .. import backend
from ..data import db as dbmod
from ..errors import CaffeError
from ..net import Net
from ..proto import caffe_pb2
from ..tools_log import use_glog_format
from . import add_net_flags, help_of

log = logging.getLogger("pycaffe_lite")

COMMIT_EVERY = 1000  # items per transaction, as Caffe's tool


def add_arguments(p):
    p.add_argument("pretrained_net_param", help="the trained weights (.caffemodel or .h5)")
    p.add_argument("feature_extraction_proto_file",
                   help="the net definition with its data layer (built in the TEST phase)")
    p.add_argument("extract_feature_blob_names",
                   help="the blobs to extract, separated by ','")
    p.add_argument("save_feature_dataset_names",
                   help="a new database for each blob, separated by ','")
    p.add_argument("num_mini_batches", help="the number of forward passes")
    p.add_argument("db_type", help="lmdb or leveldb")
    p.add_argument("mode", nargs="?", default="CPU", help="CPU (default) or GPU")
    p.add_argument("device_id", nargs="?", default="0", help="the GPU's device id (0)")
    add_net_flags(p)


def _legacy(shape, axis):
    """Blob::LegacyShape: the size of ``axis`` of a shape of up to four axes, 1 past its end."""
    return shape[axis] if axis < len(shape) else 1


def _parse_args(args):
    blobs = args.extract_feature_blob_names.split(",")
    datasets = args.save_feature_dataset_names.split(",")
    if len(blobs) != len(datasets):
        raise CaffeError("extract_features: %d blob names (%s) but %d dataset names (%s): the "
                         "number of blob names and dataset names must be equal"
                         % (len(blobs), args.extract_feature_blob_names, len(datasets),
                            args.save_feature_dataset_names))
    return blobs, datasets, _count(args.num_mini_batches, "num_mini_batches")


def _count(text, what):
    """``text`` as an integer >= 0; a CaffeError naming ``what`` otherwise."""
    try:
        value = int(text)
    except ValueError:
        raise CaffeError("extract_features: %s must be an integer, got '%s'"
                         % (what, text)) from None
    if value < 0:
        raise CaffeError("extract_features: %s must be >= 0, got %d" % (what, value))
    return value


def run(args):
    use_glog_format()
    blobs, datasets, batches = _parse_args(args)
    db_type = dbmod.backend_name(args.db_type)
    if args.mode == "GPU":
        device = _count(args.device_id, "DEVICE_ID")
        log.info("Using GPU")
        log.info("Using Device_id=%d", device)
        backend.set_device(device)
        backend.set_mode_gpu()
    else:
        log.info("Using CPU")
        backend.set_mode_cpu()
    net = Net(args.feature_extraction_proto_file, caffe_pb2.TEST)
    try:
        net.copy_from(args.pretrained_net_param)
        for name in blobs:
            if name not in net.blobs:
                raise CaffeError("Unknown feature blob name %s in the network %s"
                                 % (name, args.feature_extraction_proto_file))
        _extract(net, blobs, datasets, batches, db_type)
    finally:
        net.close()
    log.info("Successfully extracted the features!")
    return 0


def _extract(net, blobs, datasets, batches, db_type):
    dbs = []
    try:
        for name in datasets:
            log.info("Opening dataset %s", name)
            dbs.append(dbmod.open_db(name, db_type, dbmod.NEW))
        txns = [db.transaction() for db in dbs]
        counts = [0] * len(blobs)
        log.info("Extracting Features")
        for _ in range(batches):
            net.forward_from_to()
            for i, name in enumerate(blobs):
                blob = net.blobs[name]
                shape = tuple(blob.shape)
                if not 1 <= len(shape) <= 4:
                    raise CaffeError("feature blob %s has shape %s: a Datum holds blobs of 1 "
                                     "to 4 axes" % (name, list(shape)))
                values = np.asarray(blob.data, np.float32).reshape(shape[0], -1)
                for row in values:
                    datum = caffe_pb2.Datum(channels=_legacy(shape, 1),
                                            height=_legacy(shape, 2),
                                            width=_legacy(shape, 3))
                    datum.float_data.extend(row.tolist())
                    txns[i].put(b"%010d" % counts[i], datum.SerializeToString())
                    counts[i] += 1
                    if counts[i] % COMMIT_EVERY == 0:
                        txns[i].commit()
                        txns[i] = dbs[i].transaction()
                        log.info("Extracted features of %d query images for feature blob %s",
                                 counts[i], name)
        for i, name in enumerate(blobs):
            if counts[i] % COMMIT_EVERY:
                txns[i].commit()
            log.info("Extracted features of %d query images for feature blob %s",
                     counts[i], name)
    finally:
        for db in dbs:
            db.close()


COMMANDS = [("extract_features", help_of("extract_features"), add_arguments, run)]
