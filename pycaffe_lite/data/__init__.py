"""The data pipeline: Datum databases, image decoding, transformation, prefetching and the
dataset tools (convert_mnist, convert_imageset, compute_image_mean).

Everything here is importable without the optional packages; LevelDB needs ``plyvel``, the
HDF5 layers need ``h5py`` (each says so when missing).
"""

from .datum import (DataError, array_to_datum, datum_to_array, decode_image, encode_image,
                    parse_datum, read_image, read_image_to_datum, resize)
from .db import DB, LMDB, NEW, READ, WRITE, DBError, LevelDB, backend_name, open_db
from .imageset import convert_imageset, read_list_file
from .mean import compute_image_mean, load_mean, mean_to_blobproto
from .mnist import convert_mnist, read_idx_images, read_idx_labels
from .progress import Progress
from .transformer import DataTransformer

__all__ = ["DataError", "DBError", "DB", "LMDB", "LevelDB", "READ", "WRITE", "NEW", "open_db",
           "backend_name", "array_to_datum", "datum_to_array", "decode_image", "encode_image",
           "parse_datum", "read_image", "read_image_to_datum", "resize", "convert_imageset",
           "read_list_file", "compute_image_mean", "load_mean", "mean_to_blobproto",
           "convert_mnist", "read_idx_images", "read_idx_labels", "Progress",
           "DataTransformer"]
