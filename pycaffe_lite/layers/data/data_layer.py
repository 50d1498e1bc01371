"""Data: batches of Datum records from an LMDB or LevelDB database."""

import logging

import numpy as np

from ...data import db as dbmod
from ...data.datum import (DataError, decode_image, parse_datum, parse_datums, raw_shape,
                           raw_shapes)
from ...data.transformer import DataTransformer
from ...ranks import data_ranks
from ...registry import register_layer
from .base_data_layer import BasePrefetchingDataLayer, check_source, default_threads

log = logging.getLogger("pycaffe_lite")


def _size(shape):
    return "x".join(str(int(d)) for d in shape)


@register_layer("Data")
class DataLayer(BasePrefetchingDataLayer):
    """Reads Datum records in key order from a database, wrapping around at the end.

    Bottoms: none.
    Tops: data (batch_size x C x H x W, or crop_size x crop_size), and optionally label
    (batch_size,) holding each record's ``label``.
    Params: ``data_param { source, batch_size, backend (LEVELDB | LMDB; Caffe's default is
    LEVELDB), rand_skip (skip a random number of records in [0, rand_skip) at start),
    prefetch (batches loaded ahead by background threads, default 4; 0 loads in forward) }``
    and ``transform_param`` (see :class:`~pycaffe_lite.data.transformer.DataTransformer`).

    Records are raw uint8 CHW pixels (``data``), ``float_data``, or encoded images (JPEG, PNG,
    ... decoded to BGR, grey kept grey unless ``force_color``). The size of each batch is that
    of its first record; the other records must have that size (any size at least
    ``crop_size`` when cropping). Random crop happens in TRAIN only, mirror in both phases.
    """

    # the SSD fork's transform_param fields that this layer applies itself (none: the
    # transformer refuses them)
    transform_applied_here = ()

    def data_setup(self, top):
        p = self.layer_param.data_param
        check_source("data_param", p, "the database to read")
        for field in ("scale", "mean_file", "crop_size", "mirror"):
            if p.HasField(field):
                log.warning("layer '%s': data_param.%s is deprecated and ignored (as in Caffe); "
                            "use transform_param.%s", self.name, field, field)
        nvcaffe = [f for f in ("threads", "parser_threads", "cache", "shuffle", "precache")
                   if p.HasField(f)]
        if nvcaffe:
            log.info("layer '%s': NVCaffe's data_param %s accepted; records are read in key "
                     "order by this layer's own threads", self.name, ", ".join(nvcaffe))
        self.source = p.source
        self.batch_size = int(p.batch_size)
        self.backend = dbmod.backend_name(p.backend)
        tp = self.layer_param.transform_param
        if p.force_encoded_color and not tp.force_gray:
            tp = type(tp)()
            tp.CopyFrom(self.layer_param.transform_param)
            tp.force_color = True
        self.transformer = DataTransformer(tp, self.phase, "transform_param of layer '%s'"
                                           % self.name, self.transform_applied_here)
        self.db = dbmod.open_db(self.source, self.backend, dbmod.READ)
        self.resources.push(self.db.close)
        self.cursor = self.db.cursor()
        self.resources.push(self.cursor.close)
        return self._setup_from_first(p)

    def source_records(self):
        return self.db.count()

    def _setup_from_first(self, p):
        if not self.cursor.valid:
            raise DataError("database '%s' (%s) is empty: there are no records to read"
                            % (self.source, self.backend.upper()))
        self.position = 0
        first = parse_datum(self.cursor.value(), self._where(0, self.cursor.key()))
        self.encoded = bool(first.encoded)
        shape = self._record_shape(first, self._where(0, self.cursor.key()))
        out = self.transformer.output_shape(shape, self._where(0, self.cursor.key()))
        if p.rand_skip:
            skip = int(self.rng.integers(0, p.rand_skip))
            log.info("layer '%s': skipping first %d data points", self.name, skip)
            self._advance(skip)
        self.prefetch_count = int(p.prefetch)
        self.prefetch_threads = default_threads(self.encoded)
        log.info("layer '%s': output data size: %d,%s", self.name, self.batch_size,
                 ",".join(str(d) for d in out))
        return [(self.batch_size,) + tuple(out), (self.batch_size,)]

    def _where(self, position, key):
        return "record %d (key %r) of source '%s'" % (position, key, self.source)

    def _record_shape(self, datum, where):
        if datum.encoded:
            img = decode_image(datum.data, self.transformer.decode_color, where)
            return img.shape[2], img.shape[0], img.shape[1]
        return raw_shape(datum, where)

    # ---- position ------------------------------------------------------------------------
    def _next(self):
        self.cursor.next()
        self.position += 1
        if not self.cursor.valid:
            self._restart()

    def _restart(self):
        """Past the last record: on from the first one again."""
        log.debug("layer '%s': restarting data prefetching from start", self.name)
        self.cursor.seek_to_first()
        self.position = 0

    def _advance(self, n):
        for _ in range(int(n)):
            self._next()

    def read_state(self):
        return {"source": self.source, "position": self.position, "key": self.cursor.key(),
                "rng": self._rng_state()}

    def write_state(self, state):
        key = state.get("key")
        position = int(state.get("position", 0))
        if key is not None and self.cursor.seek(key):
            self.position = position
        else:
            self.cursor.seek_to_first()
            self.position = 0
            self._advance(position)
        if "rng" in state:
            self.rng.bit_generator.state = state["rng"]

    # ---- loading -------------------------------------------------------------------------
    def plan_batch(self):
        # Caffe's DataLayer::Skip: in TRAIN, N data-parallel solvers read the same stream
        # and rank r keeps the records r, r + N, r + 2N, ...: a batch covers N x batch_size
        # records, so the position (what a snapshot stores) is the same on every rank
        count, rank = data_ranks(self.phase)
        if count == 1:
            return self._plan_run(), self._batch_seed(self.transformer.needs_random)
        records = []
        for _ in range(self.batch_size):
            self._advance(rank)
            records.append((self.position, self.cursor.key(), self.cursor.value()))
            self._next()
            self._advance(count - 1 - rank)
        return records, self._batch_seed(self.transformer.needs_random)

    def _plan_run(self):
        """One process's batch: the next ``batch_size`` records read in runs (the same
        records and positions as record by record, starting again from the first record at
        the end)."""
        records = []
        while len(records) < self.batch_size:
            run = self.cursor.read_run(self.batch_size - len(records))
            start = self.position
            records.extend((start + i, key, value) for i, (key, value) in enumerate(run))
            self.position += len(run)
            if not self.cursor.valid:
                self._restart()
                if not self.cursor.valid:
                    raise DataError("database '%s' has no records any more" % self.source)
        return records

    def fill_batch(self, plan, blobs):
        records, seed = plan
        datums = parse_datums([v for _, _, v in records],
                              lambda i: self._where(records[i][0], records[i][1]))
        n = len(datums)
        first_where = self._where(records[0][0], records[0][1])
        tf = self.transformer
        if datums[0].encoded:
            images = []
            for (pos, key, _), d in zip(records, datums):
                if not d.encoded:
                    raise DataError("%s is not encoded but the batch's first record (%s) is"
                                    % (self._where(pos, key), first_where))
                img = decode_image(d.data, tf.decode_color, self._where(pos, key))
                images.append(img.transpose(2, 0, 1))
            shapes = [im.shape for im in images]
        else:
            shapes = raw_shapes(datums, lambda i: self._where(records[i][0], records[i][1]))
            images = None
        first = shapes[0]
        uniform = True
        for i, s in enumerate(shapes):
            if s != first:
                uniform = False
                where = self._where(records[i][0], records[i][1])
                if s[0] != first[0] or not tf.crop:
                    raise DataError("%s has size %s (CxHxW) but the batch's first record (%s) "
                                    "has %s: every record must have the same size (or set "
                                    "crop_size to at most the smallest one)"
                                    % (where, _size(s), first_where, _size(first)))
                tf.check_input(s, where)
        out_shape = tf.output_shape(first, first_where)
        data = blobs[0]
        if data.shape != (n,) + out_shape:
            data.reshape((n,) + out_shape)
        if images is None:
            if uniform and all(d.data for d in datums):
                images = np.frombuffer(b"".join(d.data for d in datums), np.uint8).reshape(
                    (n,) + tuple(first))
            elif uniform and not any(d.data for d in datums):
                images = np.array([d.float_data for d in datums], np.float32).reshape(
                    (n,) + tuple(first))
            else:
                images = [np.frombuffer(d.data, np.uint8).reshape(s) if d.data else
                          np.asarray(d.float_data, np.float32).reshape(s)
                          for d, s in zip(datums, shapes)]
        tf.transform(images, data.data, self._batch_rng(seed))
        if len(blobs) > 1:
            blobs[1].data[...] = [d.label for d in datums]
